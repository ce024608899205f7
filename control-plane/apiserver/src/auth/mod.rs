//! Authentication: who a request comes from. One chain, first success wins, as upstream:
//!
//! 1. a client certificate issued by the addressed cluster's CA (CN = user, O = groups) —
//!    verified here per request against that cluster's CA (the TLS layer only checks that the
//!    client holds the certificate's key), so a certificate of another tenant, an expired one or
//!    a self-signed one is a `401`, not a handshake failure;
//! 2. a bearer token: this cluster's service-account JWTs ([`serviceaccount`]) or an OIDC ID
//!    token of a configured issuer ([`oidc`]).
//!
//! Anonymous requests are refused (401) except on the public paths (health, version, the
//! service-account issuer's discovery documents). Every authenticated user is in
//! `system:authenticated`. Impersonation ([`impersonation`]) is applied afterwards by the
//! handler, gated by the authorizer.

pub mod impersonation;
pub mod jwt;
pub mod oidc;
pub mod serviceaccount;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use http::HeaderMap;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use crate::registry::Registry;

pub use jwt::SigningKey;
pub use oidc::OidcAuthenticator;
pub use serviceaccount::TokenAuthority;

/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group that bypasses authorization (the bootstrap admin, in-process controllers).
pub const MASTERS: &str = "system:masters";

/// The authenticated caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (certificate CN, token subject).
    pub name: String,
    /// UID, when the credential names one.
    pub uid: String,
    /// Groups (certificate O, token claims).
    pub groups: Vec<String>,
    /// Extra attributes (pod name of a bound service-account token, ...).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    /// Whether the user is in `system:masters`.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// Adds `system:authenticated` (once).
    pub fn authenticated(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_string());
        }
        self
    }
}

/// How a request reached a server.
#[derive(Clone, Debug)]
pub enum Caller {
    /// From inside the process (controllers, the syncer): already authenticated.
    Trusted(UserInfo),
    /// From the network, with the client certificate of its connection if any.
    Network(Option<CertificateDer<'static>>),
}

/// The authentication settings of one cluster.
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// The CA whose client certificates are identities (PEM).
    pub client_ca_pem: Option<String>,
    /// The key service-account tokens are signed with (None: a fresh key per start).
    pub service_account_key: Option<Arc<SigningKey>>,
    /// The `iss` of service-account tokens.
    pub service_account_issuer: String,
    /// OIDC issuers (shared by every cluster of the process).
    pub oidc: Option<Arc<OidcAuthenticator>>,
}

/// The issuer service-account tokens name when nothing else is configured (upstream's usual).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Certificates verified recently, so that a connection's many requests verify its chain once.
const CERT_CACHE_ENTRIES: usize = 4096;
/// Bearer tokens whose signature was verified recently (the signature check is the expensive
/// part: tens of microseconds for ECDSA, more for RSA). What depends on current state is checked
/// on every request all the same: expiry, and that a service account still exists.
const TOKEN_CACHE_ENTRIES: usize = 4096;
/// How long a verified token is remembered (upstream's token cache: 10 s).
const TOKEN_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// A verified token's identity.
#[derive(Clone)]
enum Verified {
    ServiceAccount(serviceaccount::ServiceAccountClaims),
    User(UserInfo),
}

/// A cluster's authenticator.
pub struct Authenticator {
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
    cert_cache: Mutex<HashMap<Vec<u8>, (UserInfo, UnixTime)>>,
    token_cache: Mutex<HashMap<String, (Verified, std::time::Instant)>>,
    tokens: TokenAuthority,
    oidc: Option<Arc<OidcAuthenticator>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("issuer", &self.tokens.issuer())
            .field("oidc", &self.oidc)
            .finish()
    }
}

/// Why authentication failed (logged; the client sees a plain 401, as upstream).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The client certificate was not issued by this cluster's CA, or is expired.
    #[error("client certificate refused: {0}")]
    Certificate(String),
    /// A bearer token that no authenticator accepts.
    #[error("invalid bearer token: {0}")]
    Token(String),
    /// The `Authorization` header is not `Bearer <token>`.
    #[error("unsupported Authorization header")]
    Header,
    /// Settings.
    #[error("invalid authentication settings: {0}")]
    Settings(String),
}

impl Authenticator {
    /// An authenticator for `settings`.
    pub fn new(settings: &AuthSettings) -> Result<Authenticator, AuthError> {
        let client_ca = match &settings.client_ca_pem {
            Some(pem) => Some(client_verifier(pem)?),
            None => None,
        };
        let key = match &settings.service_account_key {
            Some(k) => k.clone(),
            None => {
                Arc::new(SigningKey::generate().map_err(|e| AuthError::Settings(e.to_string()))?)
            }
        };
        let issuer = if settings.service_account_issuer.is_empty() {
            DEFAULT_ISSUER
        } else {
            &settings.service_account_issuer
        };
        Ok(Authenticator {
            client_ca,
            cert_cache: Mutex::new(HashMap::new()),
            token_cache: Mutex::new(HashMap::new()),
            tokens: TokenAuthority::new(key, issuer),
            oidc: settings.oidc.clone(),
        })
    }

    /// The service-account token authority.
    pub fn tokens(&self) -> &TokenAuthority {
        &self.tokens
    }

    /// Authenticates a network request: Ok(None) when it carries no credential.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        cert: Option<&CertificateDer<'static>>,
        registry: &Registry,
    ) -> Result<Option<UserInfo>, AuthError> {
        if let Some(cert) = cert {
            return self.certificate(cert).map(|u| Some(u.authenticated()));
        }
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let text = value.to_str().map_err(|_| AuthError::Header)?;
        let token = match text.split_once(' ') {
            Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
            _ => return Err(AuthError::Header),
        };
        if token.is_empty() {
            return Err(AuthError::Header);
        }
        self.authenticate_token(token, registry)
            .await
            .map(|u| Some(u.authenticated()))
    }

    fn certificate(&self, cert: &CertificateDer<'static>) -> Result<UserInfo, AuthError> {
        let now = UnixTime::now();
        if let Ok(cache) = self.cert_cache.lock() {
            if let Some((user, not_after)) = cache.get(cert.as_ref()) {
                if now.as_secs() < not_after.as_secs() {
                    return Ok(user.clone());
                }
            }
        }
        let verifier = self.client_ca.as_ref().ok_or_else(|| {
            AuthError::Certificate("this cluster accepts no client certificates".into())
        })?;
        verifier
            .verify_client_cert(cert, &[], now)
            .map_err(|e| AuthError::Certificate(e.to_string()))?;
        let id = crate::pki::identity(cert)
            .ok_or_else(|| AuthError::Certificate("no subject common name".into()))?;
        let user = UserInfo {
            name: id.user,
            groups: id.groups,
            ..UserInfo::default()
        };
        if let (Ok(mut cache), Some(not_after)) =
            (self.cert_cache.lock(), crate::pki::not_after(cert))
        {
            if cache.len() >= CERT_CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(cert.as_ref().to_vec(), (user.clone(), not_after));
        }
        Ok(user)
    }

    /// Authenticates a bearer token (service-account JWT or OIDC ID token).
    pub async fn authenticate_token(
        &self,
        token: &str,
        registry: &Registry,
    ) -> Result<UserInfo, AuthError> {
        let verified = match self.cached(token) {
            Some(v) => v,
            None => {
                let (v, exp) = self.verify_token(token).await?;
                self.remember(token, &v, exp);
                v
            }
        };
        match verified {
            Verified::ServiceAccount(claims) => {
                bound_objects_exist(registry, &claims).await?;
                Ok(claims.user())
            }
            Verified::User(u) => Ok(u),
        }
    }

    fn cached(&self, token: &str) -> Option<Verified> {
        let cache = self.token_cache.lock().ok()?;
        let (v, until) = cache.get(token)?;
        (std::time::Instant::now() < *until).then(|| v.clone())
    }

    fn remember(&self, token: &str, v: &Verified, exp: Option<i64>) {
        let now = chrono::Utc::now().timestamp();
        let left = exp.map_or(0, |e| e - now);
        if left <= 0 {
            return;
        }
        let ttl = TOKEN_CACHE_TTL.min(std::time::Duration::from_secs(left.unsigned_abs()));
        if let Ok(mut cache) = self.token_cache.lock() {
            if cache.len() >= TOKEN_CACHE_ENTRIES {
                let now = std::time::Instant::now();
                cache.retain(|_, (_, until)| *until > now);
                if cache.len() >= TOKEN_CACHE_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(
                token.to_string(),
                (v.clone(), std::time::Instant::now() + ttl),
            );
        }
    }

    /// Verifies a token's signature and claims; returns what it proves and its expiry.
    async fn verify_token(&self, token: &str) -> Result<(Verified, Option<i64>), AuthError> {
        let iss = jwt::peek_issuer(token)
            .ok_or_else(|| AuthError::Token("not a JWT with an issuer".into()))?;
        let exp = jwt::Parts::split(token)
            .ok()
            .and_then(|p| p.payload["exp"].as_i64());
        if iss == self.tokens.issuer() {
            let claims = self
                .tokens
                .verify(token)
                .map_err(|e| AuthError::Token(e.to_string()))?;
            return Ok((Verified::ServiceAccount(claims), exp));
        }
        if let Some(oidc) = &self.oidc {
            if let Some(result) = oidc.authenticate(token).await {
                return result
                    .map(|u| (Verified::User(u), exp))
                    .map_err(|e| AuthError::Token(e.to_string()));
            }
        }
        Err(AuthError::Token(format!("unknown issuer {iss:?}")))
    }
}

/// A service-account token is valid only while its service account (and the pod or secret it
/// is bound to) exists with the UID it was issued for.
async fn bound_objects_exist(
    registry: &Registry,
    claims: &serviceaccount::ServiceAccountClaims,
) -> Result<(), AuthError> {
    let check = |plural: &'static str, name: String, uid: String| async move {
        let def = registry
            .resource("", "v1", plural)
            .ok_or_else(|| AuthError::Token(format!("no {plural} resource")))?;
        let obj = registry
            .get(&def, Some(&claims.namespace), &name)
            .await
            .map_err(|_| AuthError::Token(format!("{plural} {name:?} no longer exists")))?;
        if obj["metadata"]["uid"].as_str() != Some(uid.as_str()) {
            return Err(AuthError::Token(format!("{plural} {name:?} was recreated")));
        }
        if crate::object::is_deleting(&obj) {
            return Err(AuthError::Token(format!(
                "{plural} {name:?} is being deleted"
            )));
        }
        Ok(())
    };
    check("serviceaccounts", claims.name.clone(), claims.uid.clone()).await?;
    if let Some((kind, name, uid)) = &claims.bound {
        let plural = if kind == "Pod" { "pods" } else { "secrets" };
        check(plural, name.clone(), uid.clone()).await?;
    }
    Ok(())
}

/// A verifier of client certificates issued by `ca_pem`.
fn client_verifier(ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>, AuthError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| AuthError::Settings(format!("client CA: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| AuthError::Settings(format!("client CA: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| AuthError::Settings(format!("client CA: {e}")))
}
