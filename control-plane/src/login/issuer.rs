//! The OpenID Provider as `fabrik login` sees it: discovery, the HTTPS client that trusts
//! `--ca-file`, token requests and ID token verification.
//!
//! Every token that leaves this module has been verified: signature against the issuer's JWKS,
//! `iss`, `aud` (the client id), expiry, and the nonce where the flow has one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use openidconnect::core::{
    CoreAuthDisplay, CoreClaimName, CoreClaimType, CoreClient, CoreClientAuthMethod, CoreGrantType,
    CoreIdToken, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm,
    CoreJwsSigningAlgorithm, CoreResponseMode, CoreResponseType, CoreSubjectIdentifierType,
    CoreTokenResponse,
};
use openidconnect::{
    AdditionalProviderMetadata, ClientId, ClientSecret, DeviceAuthorizationUrl, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, IssuerUrl, Nonce, OAuth2TokenResponse, ProviderMetadata,
    RefreshToken, TokenResponse,
};
use serde::{Deserialize, Serialize};

/// ID token signature algorithms accepted: the asymmetric ones (RS256, Keycloak's default,
/// and the realm-configurable others); never `none` or HMAC with the client secret.
const SIGNING_ALGS: [CoreJwsSigningAlgorithm; 10] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::RsaSsaPssSha512,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EcdsaP521Sha512,
    CoreJwsSigningAlgorithm::EdDsa,
];

/// How long one HTTP request to the issuer may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors talking to the issuer or checking what it returned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--issuer-url` is not a URL.
    #[error("invalid --issuer-url {url:?}: {source}")]
    IssuerUrl {
        /// What was given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: openidconnect::url::ParseError,
    },
    /// `--ca-file` cannot be read.
    #[error("cannot read --ca-file {}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `--ca-file` holds no PEM certificate.
    #[error("--ca-file {} holds no usable PEM certificate", path.display())]
    CaPem {
        /// The file.
        path: PathBuf,
        /// The parse error, if any.
        #[source]
        source: Option<reqwest::Error>,
    },
    /// The HTTPS client cannot be built.
    #[error("cannot set up the HTTPS client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// Discovery failed: the issuer is unreachable, untrusted, or serves no OpenID configuration.
    #[error(
        "cannot fetch the OpenID configuration of {issuer} \
         ({issuer}/.well-known/openid-configuration): check --issuer-url and that the issuer \
         is reachable; if its certificate is signed by a private CA, pass that CA with --ca-file"
    )]
    Discovery {
        /// The issuer URL.
        issuer: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The discovery document lacks an endpoint a flow needs.
    #[error("the issuer {issuer} publishes no {endpoint} in its OpenID configuration{hint}")]
    MissingEndpoint {
        /// The issuer URL.
        issuer: String,
        /// e.g. "token_endpoint".
        endpoint: &'static str,
        /// What to do instead, or empty.
        hint: &'static str,
    },
    /// A token endpoint (or device authorization endpoint) request failed.
    #[error("{what} failed: {detail}{hint}")]
    TokenRequest {
        /// The request, e.g. "the authorization code exchange".
        what: &'static str,
        /// What the issuer said, or why no answer came.
        detail: String,
        /// What the user can do about it, or empty.
        hint: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The token response carries no ID token.
    #[error(
        "the issuer returned no ID token: is `openid` among --scopes, and is {issuer} an \
         OpenID Connect issuer?"
    )]
    NoIdToken {
        /// The issuer URL.
        issuer: String,
    },
    /// The ID token failed verification.
    #[error("the ID token from {issuer} failed verification: {source}")]
    IdToken {
        /// The issuer URL.
        issuer: String,
        /// Which check failed.
        #[source]
        source: openidconnect::ClaimsVerificationError,
    },
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The device authorization endpoint, which core discovery metadata does not carry.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct DeviceEndpoint {
    /// RFC 8628 `device_authorization_endpoint`, when the issuer offers the device grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}

impl AdditionalProviderMetadata for DeviceEndpoint {}

/// Discovery metadata with the device authorization endpoint.
type Metadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// A client built from discovery: authorization endpoint set, token endpoint maybe.
pub type DiscoveredClient = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What the ID token's nonce must be.
#[derive(Clone, Debug)]
pub enum NonceCheck {
    /// Exactly this value (the authorization code flow).
    Exact(Nonce),
    /// This value if the token carries one (a refresh repeats the original nonce, if any).
    IfPresent(Option<String>),
    /// None is expected (the device grant has no nonce).
    Absent,
}

/// A verified login: what the cache keeps and the ExecCredential carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// The ID token (a JWT), verified.
    pub id_token: String,
    /// Its `exp`.
    pub expiry: DateTime<Utc>,
    /// A refresh token, if the issuer gave one.
    pub refresh_token: Option<String>,
    /// The nonce the ID token carried, for checking refreshed tokens.
    pub nonce: Option<String>,
}

/// Connection settings for one issuer.
#[derive(Clone, Debug)]
pub struct Settings<'a> {
    /// `--issuer-url`.
    pub issuer_url: &'a str,
    /// `--client-id`.
    pub client_id: &'a str,
    /// `--client-secret`, if the client is confidential.
    pub client_secret: Option<&'a str>,
    /// `--ca-file`, extra trust roots.
    pub ca_file: Option<&'a Path>,
}

/// A discovered issuer and the HTTPS client to talk to it.
pub struct Issuer {
    issuer: String,
    client: DiscoveredClient,
    device_endpoint: Option<DeviceAuthorizationUrl>,
    http: reqwest::Client,
}

/// The HTTPS client: system and web PKI roots plus `--ca-file`, no redirects (the token
/// endpoint must not be redirected elsewhere), bounded time.
pub fn http_client(ca_file: Option<&Path>) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("fabrik-login/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|source| Error::CaFile {
            path: path.to_path_buf(),
            source,
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| Error::CaPem {
            path: path.to_path_buf(),
            source: Some(e),
        })?;
        if certs.is_empty() {
            return Err(Error::CaPem {
                path: path.to_path_buf(),
                source: None,
            });
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(Error::HttpClient)
}

impl Issuer {
    /// Fetches the issuer's OpenID configuration and JWKS.
    pub async fn discover(settings: &Settings<'_>) -> Result<Issuer> {
        let issuer_url =
            IssuerUrl::new(settings.issuer_url.to_string()).map_err(|source| Error::IssuerUrl {
                url: settings.issuer_url.to_string(),
                source,
            })?;
        let http = http_client(settings.ca_file)?;
        let issuer = settings.issuer_url.trim_end_matches('/').to_string();
        let metadata = Metadata::discover_async(issuer_url, &http)
            .await
            .map_err(|e| Error::Discovery {
                issuer: issuer.clone(),
                source: Box::new(e),
            })?;
        let device_endpoint = metadata
            .additional_metadata()
            .device_authorization_endpoint
            .clone();
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(settings.client_id.to_string()),
            settings
                .client_secret
                .map(|s| ClientSecret::new(s.to_string())),
        );
        Ok(Issuer {
            issuer,
            client,
            device_endpoint,
            http,
        })
    }

    /// The issuer URL (without a trailing slash).
    pub fn url(&self) -> &str {
        &self.issuer
    }

    /// The client built from discovery.
    pub fn client(&self) -> &DiscoveredClient {
        &self.client
    }

    /// The HTTPS client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The device authorization endpoint, if the issuer has one.
    pub fn device_endpoint(&self) -> Result<DeviceAuthorizationUrl> {
        self.device_endpoint
            .clone()
            .ok_or_else(|| Error::MissingEndpoint {
                issuer: self.issuer.clone(),
                endpoint: "device_authorization_endpoint",
                hint: " (the device grant is not enabled there): use --flow auth-code, or enable \
                       the OAuth 2.0 Device Authorization Grant for the client",
            })
    }

    /// The error for a missing token endpoint.
    pub fn no_token_endpoint(&self) -> Error {
        Error::MissingEndpoint {
            issuer: self.issuer.clone(),
            endpoint: "token_endpoint",
            hint: "",
        }
    }

    /// Uses a refresh token; the new ID token is verified like a first one.
    pub async fn refresh(&self, refresh_token: &str, nonce: Option<String>) -> Result<Tokens> {
        let token = RefreshToken::new(refresh_token.to_string());
        let response = self
            .client
            .exchange_refresh_token(&token)
            .map_err(|_| self.no_token_endpoint())?
            .request_async(&self.http)
            .await
            .map_err(|e| token_error("the refresh token request", e))?;
        let mut tokens = self.verify(&response, NonceCheck::IfPresent(nonce))?;
        // Issuers that do not rotate refresh tokens return none: the old one stays good.
        if tokens.refresh_token.is_none() {
            tokens.refresh_token = Some(refresh_token.to_string());
        }
        Ok(tokens)
    }

    /// Verifies the ID token of a token response and collects what the cache keeps.
    pub fn verify(&self, response: &CoreTokenResponse, nonce: NonceCheck) -> Result<Tokens> {
        let id_token: &CoreIdToken = response.id_token().ok_or_else(|| Error::NoIdToken {
            issuer: self.issuer.clone(),
        })?;
        let verifier = self
            .client
            .id_token_verifier()
            .set_allowed_algs(SIGNING_ALGS);
        let claims = id_token
            .claims(&verifier, |found: Option<&Nonce>| {
                check_nonce(&nonce, found)
            })
            .map_err(|source| Error::IdToken {
                issuer: self.issuer.clone(),
                source,
            })?;
        Ok(Tokens {
            id_token: id_token.to_string(),
            expiry: claims.expiration(),
            refresh_token: response.refresh_token().map(|r| r.secret().clone()),
            nonce: claims.nonce().map(|n| n.secret().clone()),
        })
    }
}

/// Checks an ID token's nonce against what the flow expects.
fn check_nonce(expected: &NonceCheck, found: Option<&Nonce>) -> Result<(), String> {
    let found = found.map(|n| n.secret().as_str());
    match expected {
        NonceCheck::Exact(want) if found == Some(want.secret().as_str()) => Ok(()),
        NonceCheck::Exact(_) => Err(
            "nonce mismatch: the ID token was not issued for this login \
                                     request"
                .into(),
        ),
        NonceCheck::IfPresent(want) => match (want.as_deref(), found) {
            (Some(w), Some(f)) if w != f => Err("nonce mismatch after refresh".into()),
            _ => Ok(()),
        },
        NonceCheck::Absent => Ok(()),
    }
}

/// Describes a failed token request with what the user can do about it.
pub fn token_error<RE, T>(what: &'static str, e: openidconnect::RequestTokenError<RE, T>) -> Error
where
    RE: std::error::Error + Send + Sync + 'static,
    T: openidconnect::ErrorResponse + Send + Sync + 'static,
{
    use openidconnect::RequestTokenError as E;
    let (detail, hint) = match &e {
        E::ServerResponse(resp) => {
            let body = serde_json::to_value(resp).unwrap_or_default();
            let code = body["error"].as_str().unwrap_or("error").to_string();
            let desc = body["error_description"].as_str().unwrap_or("");
            let detail = if desc.is_empty() {
                format!("the issuer answered {code}")
            } else {
                format!("the issuer answered {code}: {desc}")
            };
            let hint = match code.as_str() {
                "invalid_client" | "unauthorized_client" => {
                    " (check --client-id and --client-secret against the client registered at \
                     the issuer)"
                }
                "invalid_grant" => " (the code or refresh token is expired or was revoked)",
                "invalid_scope" => " (check --scopes against what the client may request)",
                "expired_token" => " (the device code expired before the login was approved)",
                "access_denied" => " (the login was denied)",
                _ => "",
            };
            (detail, hint)
        }
        E::Request(inner) => (
            format!("cannot reach the issuer: {inner}"),
            " (is the issuer up and reachable?)",
        ),
        E::Parse(inner, _) => (
            format!("the issuer's answer is not a token response: {inner}"),
            "",
        ),
        E::Other(msg) => (msg.clone(), ""),
    };
    Error::TokenRequest {
        what,
        detail,
        hint,
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_nonce_must_match() {
        let want = NonceCheck::Exact(Nonce::new("n1".into()));
        assert!(check_nonce(&want, Some(&Nonce::new("n1".into()))).is_ok());
        assert!(check_nonce(&want, Some(&Nonce::new("n2".into()))).is_err());
        assert!(check_nonce(&want, None).is_err());
    }

    #[test]
    fn refreshed_nonce_must_match_when_both_present() {
        let want = NonceCheck::IfPresent(Some("n1".into()));
        assert!(check_nonce(&want, None).is_ok());
        assert!(check_nonce(&want, Some(&Nonce::new("n1".into()))).is_ok());
        assert!(check_nonce(&want, Some(&Nonce::new("n2".into()))).is_err());
        let none = NonceCheck::IfPresent(None);
        assert!(check_nonce(&none, Some(&Nonce::new("n2".into()))).is_ok());
    }

    #[test]
    fn ca_file_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("fabrik-login-ca-{}", std::process::id()));
        let missing = dir.join("missing.pem");
        let err = http_client(Some(&missing)).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("missing.pem")));
    }
}
