//! The authorization code flow with PKCE (S256) and a loopback redirect (RFC 8252): the browser
//! logs in at the issuer and comes back to [`loopback`](super::loopback) with a code, which is
//! exchanged for tokens; the ID token must carry this request's nonce.

use std::net::SocketAddr;
use std::time::Duration;

use openidconnect::core::CoreAuthenticationFlow;
use openidconnect::{AuthorizationCode, CsrfToken, Nonce, PkceCodeChallenge, RedirectUrl, Scope};

use super::issuer::{self, token_error, Issuer, NonceCheck, Tokens};
use super::{browser, loopback};

/// Errors of the authorization code flow.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The redirect listener failed or the issuer refused the login.
    #[error(transparent)]
    Redirect(#[from] loopback::Error),
    /// The redirect URI is not a URL (cannot happen for a bound socket address).
    #[error("invalid redirect URI {0}")]
    RedirectUri(String),
    /// Nobody came back in time.
    #[error(
        "no login within {0:?}: open the URL printed above in a browser on this machine \
         (or use --flow device when there is no browser here)"
    )]
    Timeout(Duration),
    /// Exchanging the code or verifying the ID token failed.
    #[error(transparent)]
    Issuer(#[from] issuer::Error),
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the flow needs besides the issuer.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    /// Scopes to request (besides `openid`, which is always requested).
    pub scopes: &'a [String],
    /// Addresses to try for the redirect listener.
    pub listen: &'a [SocketAddr],
    /// Print the URL only; do not start a browser.
    pub no_browser: bool,
    /// How long to wait for the user.
    pub timeout: Duration,
}

/// Runs the flow; returns verified tokens.
pub async fn login(issuer: &Issuer, opts: &Options<'_>) -> Result<Tokens> {
    let listener = loopback::Listener::bind(opts.listen).await?;
    let redirect = listener.redirect_uri();
    let client = issuer.client().clone().set_redirect_uri(
        RedirectUrl::new(redirect.clone()).map_err(|_| Error::RedirectUri(redirect.clone()))?,
    );
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state, nonce) = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .add_scopes(extra_scopes(opts.scopes))
        .set_pkce_challenge(challenge)
        .url();
    eprintln!("fabrik login: open this URL in a browser to log in:\n\n    {url}\n");
    if !opts.no_browser && !browser::open(url.as_str()) {
        eprintln!("fabrik login: could not start a browser; open the URL above by hand");
    }
    let callback = tokio::time::timeout(opts.timeout, listener.wait(state.secret(), issuer.url()))
        .await
        .map_err(|_| Error::Timeout(opts.timeout))??;
    let result = exchange(issuer, &client, &callback.code, verifier, nonce).await;
    match &result {
        Ok(_) => callback.finish(Ok(())).await,
        Err(e) => callback.finish(Err(e.to_string())).await,
    }
    Ok(result?)
}

async fn exchange(
    issuer: &Issuer,
    client: &issuer::DiscoveredClient,
    code: &str,
    verifier: openidconnect::PkceCodeVerifier,
    nonce: Nonce,
) -> Result<Tokens, issuer::Error> {
    let response = client
        .exchange_code(AuthorizationCode::new(code.to_string()))
        .map_err(|_| issuer.no_token_endpoint())?
        .set_pkce_verifier(verifier)
        .request_async(issuer.http())
        .await
        .map_err(|e| token_error("the authorization code exchange", e))?;
    issuer.verify(&response, NonceCheck::Exact(nonce))
}

/// The scopes to add to a request: everything but `openid`, which the client always sends.
pub fn extra_scopes(scopes: &[String]) -> impl Iterator<Item = Scope> + '_ {
    scopes
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && *s != "openid")
        .map(|s| Scope::new(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openid_is_not_repeated() {
        let scopes = vec![
            "openid".to_string(),
            "email".into(),
            " groups ".into(),
            "".into(),
        ];
        let got: Vec<String> = extra_scopes(&scopes).map(|s| s.to_string()).collect();
        assert_eq!(got, vec!["email", "groups"]);
    }
}
