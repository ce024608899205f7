//! One listener, many clusters: the host cluster at `/`, each tenant at `/clusters/<name>/`.
//! A router built with [`Router::tenants_only`] (`fabrik serve`, where the host is a real
//! cluster elsewhere) has no cluster at `/`: it answers only the health paths there, and 404
//! for everything else outside `/clusters/`.
//!
//! The tenant is parsed from the path in exactly this layer and the request handed, with the
//! prefix stripped, to that tenant's API server; an unknown tenant is a 404 and never reaches
//! another cluster. The TLS layer asks for a client certificate and checks only that the client
//! holds its key ([`ClientCerts`]); whether the certificate names a user is decided by the API
//! server the request addresses, against that cluster's own CA — a certificate issued by tenant
//! B's CA is refused (401) on `/clusters/a`.
//!
//! A tenant is also reachable **without the prefix**, because clients that build absolute
//! paths drop it (`kubectl get --raw /readyz` with a tenant kubeconfig) and because a tenant's
//! pods use in-cluster configuration (`https://<host>:<port>/`, a bearer token). A request
//! outside `/clusters/` goes to the tenant whose CA issued its client certificate, else to the
//! tenant whose service-account issuer its bearer token names (`iss`), else to the cluster at
//! `/` as before. Both are routing hints only: the chosen tenant's API server verifies the
//! certificate against its CA and the token's signature with its key, so a forged issuer ends
//! in a 401 from the tenant it names, never in another cluster.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use http::{Request, Response, Uri};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use serde_json::json;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::fairness::{Fairness, FairnessSettings};
use crate::handler::{Body, RequestBody};
use crate::server::ApiServer;

/// A cluster the router serves.
#[derive(Clone)]
struct Target {
    server: Arc<ApiServer>,
    /// Subject (DER) of the CA that issues the tenant's client certificates.
    client_ca: Option<Vec<u8>>,
    /// The `iss` of the tenant's service-account tokens.
    issuer: String,
}

/// The tenants, with the indexes prefix-less requests are routed by.
#[derive(Default)]
struct Tenants {
    by_name: HashMap<String, Target>,
    by_client_ca: HashMap<Vec<u8>, String>,
    by_issuer: HashMap<String, String>,
}

impl Tenants {
    fn insert(&mut self, name: &str, target: Target) {
        self.remove(name);
        if let Some(ca) = &target.client_ca {
            self.by_client_ca.insert(ca.clone(), name.to_string());
        }
        if !target.issuer.is_empty() {
            self.by_issuer
                .insert(target.issuer.clone(), name.to_string());
        }
        self.by_name.insert(name.to_string(), target);
    }

    fn remove(&mut self, name: &str) -> Option<Target> {
        let target = self.by_name.remove(name)?;
        if let Some(ca) = &target.client_ca {
            if self.by_client_ca.get(ca).is_some_and(|n| n == name) {
                self.by_client_ca.remove(ca);
            }
        }
        if self
            .by_issuer
            .get(&target.issuer)
            .is_some_and(|n| n == name)
        {
            self.by_issuer.remove(&target.issuer);
        }
        Some(target)
    }

    /// The tenant a request outside `/clusters/` is meant for, if its credentials name one.
    fn of_credentials(
        &self,
        peer_cert: Option<&CertificateDer<'static>>,
        headers: &http::HeaderMap,
    ) -> Option<String> {
        if let Some(issuer) = peer_cert
            .and_then(|c| crate::pki::identity(c))
            .map(|i| i.issuer)
        {
            if let Some(name) = self.by_client_ca.get(&issuer) {
                return Some(name.clone());
            }
        }
        let iss = bearer_issuer(headers)?;
        self.by_issuer.get(&iss).cloned()
    }
}

/// The `iss` claim of a request's bearer token, read without verifying it (a routing hint).
fn bearer_issuer(headers: &http::HeaderMap) -> Option<String> {
    use base64::Engine as _;
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let payload = token.trim().split('.').nth(1)?;
    // A JWT's claims are small; anything larger is not worth decoding to route.
    if payload.len() > 16 * 1024 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["iss"].as_str().map(str::to_string)
}

/// The subject (DER) of the first certificate of a PEM bundle.
fn ca_subject(pem: &str) -> Option<Vec<u8>> {
    let mut reader = pem.as_bytes();
    let der = rustls_pemfile::certs(&mut reader).next()?.ok()?;
    crate::pki::subject(&der)
}

/// The clusters behind one listener.
pub struct Router {
    /// The cluster at `/` (none for a tenants-only router).
    host: Option<Arc<ApiServer>>,
    tenants: RwLock<Tenants>,
    verifier: Arc<ClientCerts>,
    /// The seats the tenants share (see [`crate::fairness`]).
    fairness: Arc<Fairness>,
    /// Counts changes of the tenants served (see [`Router::changes`]).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Router {
    /// A router serving `host` at `/` (its CA is checked by the host's API server).
    pub fn new(host: Arc<ApiServer>) -> Arc<Router> {
        Arc::new(Router {
            host: Some(host),
            tenants: RwLock::new(Tenants::default()),
            verifier: Arc::new(ClientCerts::new()),
            fairness: Fairness::new(FairnessSettings::default()),
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A router serving tenants only: no cluster at `/`, where only `/healthz`, `/livez` and
    /// `/readyz` (and their sub-paths) are answered (`200 ok`, for probes); any other path
    /// outside `/clusters/<name>/` is a 404.
    pub fn tenants_only() -> Arc<Router> {
        Arc::new(Router {
            host: None,
            tenants: RwLock::new(Tenants::default()),
            verifier: Arc::new(ClientCerts::new()),
            fairness: Fairness::new(FairnessSettings::default()),
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The seats the tenants share.
    pub fn fairness(&self) -> &Arc<Fairness> {
        &self.fairness
    }

    /// The verifier the TLS configuration must use.
    pub fn client_verifier(&self) -> Arc<ClientCerts> {
        self.verifier.clone()
    }

    /// Serves `server` at `/clusters/<name>/`, and at `/` to clients whose certificate
    /// `ca_pem` issued or whose token the server's service-account issuer signed (the server
    /// verifies both).
    pub fn add_tenant(&self, name: &str, server: Arc<ApiServer>, ca_pem: &str) {
        // A CA that cannot be read routes nothing by certificate (and authenticates nothing).
        let client_ca = ca_subject(ca_pem);
        server.serve_as_tenant(name, self.fairness.clone());
        let issuer = server.settings.auth.service_account_issuer.clone();
        if let Ok(mut t) = self.tenants.write() {
            t.insert(
                name,
                Target {
                    server,
                    client_ca,
                    issuer,
                },
            );
        }
        self.changed();
    }

    /// Stops serving a tenant; returns its API server if it was served.
    pub fn remove_tenant(&self, name: &str) -> Option<Arc<ApiServer>> {
        let removed = self.tenants.write().ok().and_then(|mut t| t.remove(name));
        self.changed();
        removed.map(|t| t.server)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes whenever a tenant is added or removed (or its server replaced): for whatever
    /// follows the tenants this process serves ([`Router::tenant_servers`]).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The tenants served and the API server serving each.
    pub fn tenant_servers(&self) -> Vec<(String, Arc<ApiServer>)> {
        self.tenants
            .read()
            .map(|t| {
                t.by_name
                    .iter()
                    .map(|(name, target)| (name.clone(), target.server.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops serving a tenant only if `server` is what serves it (another server routed
    /// meanwhile stays); returns whether it was removed.
    pub fn remove_tenant_if(&self, name: &str, server: &Arc<ApiServer>) -> bool {
        let Ok(mut t) = self.tenants.write() else {
            return false;
        };
        if t.by_name
            .get(name)
            .is_some_and(|target| Arc::ptr_eq(&target.server, server))
        {
            t.remove(name);
            drop(t);
            self.changed();
            return true;
        }
        false
    }

    /// Names of the tenants served.
    pub fn tenant_names(&self) -> Vec<String> {
        self.tenants
            .read()
            .map(|t| t.by_name.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Serves one request, with the client certificate of its connection.
    pub async fn handle(
        &self,
        req: Request<RequestBody>,
        peer_cert: Option<CertificateDer<'static>>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let Some(rest) = path.strip_prefix("/clusters/") else {
            let tenant = self.tenants.read().ok().and_then(|t| {
                let name = t.of_credentials(peer_cert.as_ref(), req.headers())?;
                t.by_name.get(&name).map(|target| target.server.clone())
            });
            return match (tenant, &self.host) {
                (Some(server), _) => server.handle(req, Caller::Network(peer_cert)).await,
                (None, Some(host)) => host.clone().handle(req, Caller::Network(peer_cert)).await,
                (None, None) if is_health(&path) => health_ok(),
                (None, None) => no_route(),
            };
        };
        let (name, tail) = match rest.split_once('/') {
            Some((n, t)) => (n.to_string(), format!("/{t}")),
            None => (rest.to_string(), "/".to_string()),
        };
        let target = self
            .tenants
            .read()
            .ok()
            .and_then(|t| t.by_name.get(&name).cloned());
        let Some(target) = target else {
            // What a tenant answers a caller it cannot authenticate, whatever the path: no
            // caller can authenticate to a tenant that does not exist, and the answer must not
            // tell whether it exists.
            return status_response(&ApiError::Unauthorized);
        };
        let (mut parts, body) = req.into_parts();
        let pq = match parts.uri.query() {
            Some(q) => format!("{tail}?{q}"),
            None => tail,
        };
        match pq.parse::<Uri>() {
            Ok(uri) => parts.uri = uri,
            Err(_) => {
                return status_response(&ApiError::BadRequest(format!(
                    "invalid request path for cluster {name:?}"
                )))
            }
        }
        target
            .server
            .clone()
            .handle(Request::from_parts(parts, body), Caller::Network(peer_cert))
            .await
    }
}

/// A path outside `/clusters/` on a tenants-only router.
fn no_route() -> Response<Body> {
    status_response(&ApiError::NoRoute)
}

/// `/healthz`, `/livez`, `/readyz` and their sub-checks (`/readyz/ping`).
fn is_health(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

fn health_ok() -> Response<Body> {
    let mut resp = Response::new(http_body_util::BodyExt::boxed_unsync(
        http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
    ));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn status_response(err: &ApiError) -> Response<Body> {
    let status = err.to_status();
    let code = http::StatusCode::from_u16(err.code()).unwrap_or(http::StatusCode::NOT_FOUND);
    let body = serde_json::to_vec(&status).unwrap_or_else(|_| json!({}).to_string().into_bytes());
    let mut resp = Response::new(http_body_util::BodyExt::boxed_unsync(
        http_body_util::Full::new(bytes::Bytes::from(body)),
    ));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The TLS side of client certificates: optional, and any certificate is accepted as long as
/// the client proves it holds the key (the handshake signature is verified). Which CA issued it,
/// and whether it is still valid, is checked per request by the addressed cluster.
#[derive(Debug)]
pub struct ClientCerts {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCerts {
    fn new() -> ClientCerts {
        ClientCerts {
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for ClientCerts {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints: clients with one certificate present it when the server names no CAs.
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<RequestBody> {
        use http_body_util::BodyExt;
        let body = http_body_util::Empty::<bytes::Bytes>::new()
            .map_err(|never| -> Box<dyn std::error::Error + Send + Sync> { match never {} })
            .boxed();
        let mut req = Request::new(body);
        *req.uri_mut() = path.parse().unwrap_or_default();
        req
    }

    #[tokio::test]
    async fn a_tenants_only_router_answers_health_and_nothing_else_outside_clusters() {
        let router = Router::tenants_only();
        for path in ["/healthz", "/livez", "/readyz", "/readyz/ping"] {
            let resp = router.handle(get(path), None).await;
            assert_eq!(resp.status(), http::StatusCode::OK, "{path}");
        }
        for path in [
            "/",
            "/api",
            "/api/v1/namespaces",
            "/apis",
            "/version",
            "/healthzz",
            "/metrics",
        ] {
            let resp = router.handle(get(path), None).await;
            assert_eq!(resp.status(), http::StatusCode::NOT_FOUND, "{path}");
        }
        let resp = router.handle(get("/clusters/nobody/api"), None).await;
        assert_eq!(resp.status(), http::StatusCode::UNAUTHORIZED);
        assert!(router.tenant_names().is_empty());
    }

    fn bearer(value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(value) {
            h.insert(http::header::AUTHORIZATION, v);
        }
        h
    }

    #[test]
    fn the_issuer_of_a_bearer_token_is_a_hint_read_from_any_input_without_failing() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = format!(
            "{}.{}.sig",
            b64("{}"),
            b64(r#"{"iss":"https://x/clusters/a"}"#)
        );
        assert_eq!(
            bearer_issuer(&bearer(&format!("Bearer {token}"))).as_deref(),
            Some("https://x/clusters/a")
        );
        assert_eq!(
            bearer_issuer(&bearer(&format!("bearer  {token}"))).as_deref(),
            Some("https://x/clusters/a")
        );
        for hostile in [
            String::new(),
            "Basic dXNlcjpwdw==".to_string(),
            "Bearer".to_string(),
            "Bearer opaque-token".to_string(),
            "Bearer a.!!!.c".to_string(),
            format!("Bearer a.{}.c", b64("not json")),
            format!("Bearer a.{}.c", b64(r#"{"iss":7}"#)),
            format!("Bearer a.{}.c", "A".repeat(64 * 1024)),
        ] {
            assert_eq!(bearer_issuer(&bearer(&hostile)), None, "{hostile:.40}");
        }
        assert_eq!(ca_subject("not a pem"), None);
    }
}
