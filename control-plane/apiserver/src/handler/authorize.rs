//! Authorization stage: RBAC, through the cluster's authorizer, on the request's attributes as
//! upstream forms them — `namespaces/<name>` is checked in that namespace, and a stream into a
//! pod (`exec`, `attach`, `portforward`) needs `create` as well as `get`, as upstream has
//! required since 1.31. Public paths (health, version, discovery of a host) need nothing.

use super::*;

impl ApiServer {
    /// Admits `user`'s request for `route` (a non-resource request by `method`, lower case, and
    /// `path`), or refuses it with upstream's 403 message naming what is missing.
    pub(super) fn authorize(
        &self,
        user: &UserInfo,
        route: &Route,
        method: &str,
        path: &str,
    ) -> Result<()> {
        if route.is_public() {
            return Ok(());
        }
        let attrs = match route {
            Route::Resource(r) => Attributes::resource(
                r.verb.as_str(),
                &r.group,
                &r.resource,
                r.subresource.as_deref().unwrap_or(""),
                r.namespace.as_deref().unwrap_or(""),
                r.name.as_deref().unwrap_or(""),
            ),
            _ => Attributes::non_resource(method, path),
        };
        let attrs = match route {
            // `namespaces/<name>` is the namespace itself: RBAC sees it in that namespace.
            Route::Resource(r)
                if r.group.is_empty() && r.resource == "namespaces" && r.name.is_some() =>
            {
                Attributes {
                    namespace: r.name.clone().unwrap_or_default(),
                    ..attrs
                }
            }
            _ => attrs,
        };
        // A stream into a pod (a WebSocket upgrade is a GET) also needs `create`, as
        // upstream has required since 1.31: `get` alone must not open a shell.
        let streams = matches!(
            route,
            Route::Resource(r) if r.group.is_empty() && r.resource == "pods"
                && matches!(r.subresource.as_deref(), Some("exec" | "attach" | "portforward"))
        );
        let create = Attributes {
            verb: "create".into(),
            ..attrs.clone()
        };
        for attrs in std::iter::once(&attrs).chain(streams.then_some(&create)) {
            if !self.authz.authorize(user, attrs).allowed() {
                return Err(ApiError::Forbidden(crate::rbac::forbidden_message(
                    user, attrs,
                )));
            }
        }
        Ok(())
    }
}
