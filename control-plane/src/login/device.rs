//! The device authorization grant (RFC 8628), for machines without a browser: print where to
//! go and which code to enter, then poll the token endpoint until the user has approved.

use std::time::Duration;

use openidconnect::core::CoreDeviceAuthorizationResponse;

use super::browser;
use super::flow::extra_scopes;
use super::issuer::{self, token_error, Issuer, NonceCheck, Tokens};

/// Errors of the device grant.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The issuer request or the ID token failed.
    #[error(transparent)]
    Issuer(#[from] issuer::Error),
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the device grant; returns verified tokens.
pub async fn login(
    issuer: &Issuer,
    scopes: &[String],
    no_browser: bool,
    timeout: Duration,
) -> Result<Tokens> {
    let client = issuer
        .client()
        .clone()
        .set_device_authorization_url(issuer.device_endpoint()?);
    let details: CoreDeviceAuthorizationResponse = client
        .exchange_device_code()
        .add_scopes(extra_scopes(scopes))
        .request_async(issuer.http())
        .await
        .map_err(|e| token_error("the device authorization request", e))?;
    let uri = details.verification_uri().to_string();
    let code = details.user_code().secret().to_string();
    eprintln!("fabrik login: to log in, visit {uri}");
    eprintln!("fabrik login: and enter the code: {code}");
    let complete = details
        .verification_uri_complete()
        .map(|u| u.secret().to_string());
    if let Some(c) = &complete {
        eprintln!("fabrik login: (or open {c})");
    }
    if !no_browser {
        browser::open(complete.as_deref().unwrap_or(&uri));
    }
    eprintln!("fabrik login: waiting for the login to be approved…");
    let response = client
        .exchange_device_access_token(&details)
        .map_err(|_| issuer.no_token_endpoint())?
        .request_async(issuer.http(), tokio::time::sleep, Some(timeout))
        .await
        .map_err(|e| token_error("waiting for the device login", e))?;
    Ok(issuer.verify(&response, NonceCheck::Absent)?)
}
