//! Authentication stage: who the request comes from (the in-process caller as given, a
//! network caller by its client certificate or bearer token), then impersonation if asked for
//! and allowed.

use super::*;

impl ApiServer {
    /// Who the request comes from: the in-process caller as given, a network caller by its
    /// certificate or bearer token, then impersonation if asked (and allowed).
    pub(super) async fn identify(
        &self,
        req: &Request<RequestBody>,
        caller: Caller,
    ) -> Result<Option<UserInfo>> {
        let user = match caller {
            Caller::Trusted(u) => Some(u),
            Caller::Network(cert) => match self
                .auth
                .authenticate(req.headers(), cert.as_ref(), &self.registry)
                .await
            {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "authentication failed");
                    return Err(ApiError::Unauthorized);
                }
            },
        };
        match user {
            Some(u) => crate::auth::impersonation::apply(req.headers(), u, &self.authz).map(Some),
            None => Ok(None),
        }
    }
}
