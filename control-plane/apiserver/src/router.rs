//! One listener, many clusters: the host cluster at `/`, each tenant at `/clusters/<name>/`.
//!
//! The tenant is parsed from the path in exactly this layer and the request handed, with the
//! prefix stripped, to that tenant's API server; an unknown tenant is a 404 and never reaches
//! another cluster. Client certificates are verified at the TLS handshake against every
//! cluster's CA (a [`ClientCas`] verifier whose roots change as tenants come and go), then
//! here against the CA of the cluster the request addresses: a certificate issued by tenant
//! B's CA is anonymous on `/clusters/a` (each CA has a unique subject).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use http::{Request, Response, Uri};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use serde_json::json;

use crate::error::ApiError;
use crate::handler::{Body, RequestBody, UserInfo};
use crate::pki;
use crate::server::ApiServer;

/// A cluster the router serves: its API server and the subject of its CA.
#[derive(Clone)]
struct Target {
    server: Arc<ApiServer>,
    ca_der: CertificateDer<'static>,
    ca_subject: Vec<u8>,
}

impl Target {
    fn new(server: Arc<ApiServer>, ca_pem: &str) -> Result<Target, RouterError> {
        let der = rustls_pemfile::certs(&mut ca_pem.as_bytes())
            .next()
            .ok_or(RouterError::NoCa)?
            .map_err(|e| RouterError::Pem(e.to_string()))?;
        let subject = pki::subject(&der).ok_or(RouterError::NoCa)?;
        Ok(Target {
            server,
            ca_der: der,
            ca_subject: subject,
        })
    }
}

/// Errors configuring the router.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The CA PEM holds no certificate.
    #[error("the CA has no certificate")]
    NoCa,
    /// The CA PEM is malformed.
    #[error("invalid CA PEM: {0}")]
    Pem(String),
    /// The client verifier could not be built from the CAs.
    #[error("cannot build the client verifier: {0}")]
    Verifier(String),
}

/// The clusters behind one listener.
pub struct Router {
    host: Target,
    tenants: RwLock<HashMap<String, Target>>,
    verifier: Arc<ClientCas>,
}

impl Router {
    /// A router serving `host` at `/`.
    pub fn new(host: Arc<ApiServer>, host_ca_pem: &str) -> Result<Arc<Router>, RouterError> {
        let host = Target::new(host, host_ca_pem)?;
        let verifier = Arc::new(ClientCas::new(vec![host.ca_der.clone()])?);
        Ok(Arc::new(Router {
            host,
            tenants: RwLock::new(HashMap::new()),
            verifier,
        }))
    }

    /// The verifier the TLS configuration must use.
    pub fn client_verifier(&self) -> Arc<ClientCas> {
        self.verifier.clone()
    }

    fn refresh_roots(&self) -> Result<(), RouterError> {
        let mut roots = vec![self.host.ca_der.clone()];
        if let Ok(t) = self.tenants.read() {
            roots.extend(t.values().map(|t| t.ca_der.clone()));
        }
        self.verifier.set_roots(roots)
    }

    /// Serves `server` at `/clusters/<name>/`, trusting client certificates of `ca_pem`.
    pub fn add_tenant(
        &self,
        name: &str,
        server: Arc<ApiServer>,
        ca_pem: &str,
    ) -> Result<(), RouterError> {
        let target = Target::new(server, ca_pem)?;
        if let Ok(mut t) = self.tenants.write() {
            t.insert(name.to_string(), target);
        }
        self.refresh_roots()
    }

    /// Stops serving a tenant; returns its API server if it was served.
    pub fn remove_tenant(&self, name: &str) -> Option<Arc<ApiServer>> {
        let removed = self.tenants.write().ok().and_then(|mut t| t.remove(name));
        let _ = self.refresh_roots();
        removed.map(|t| t.server)
    }

    /// Names of the tenants served.
    pub fn tenant_names(&self) -> Vec<String> {
        self.tenants
            .read()
            .map(|t| t.keys().cloned().collect())
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
            let user = identity_for(&self.host, peer_cert.as_ref());
            return self.host.server.clone().handle(req, user).await;
        };
        let (name, tail) = match rest.split_once('/') {
            Some((n, t)) => (n.to_string(), format!("/{t}")),
            None => (rest.to_string(), "/".to_string()),
        };
        let target = self.tenants.read().ok().and_then(|t| t.get(&name).cloned());
        let Some(target) = target else {
            return not_found(&name);
        };
        let (mut parts, body) = req.into_parts();
        let pq = match parts.uri.query() {
            Some(q) => format!("{tail}?{q}"),
            None => tail,
        };
        match pq.parse::<Uri>() {
            Ok(uri) => parts.uri = uri,
            Err(_) => return not_found(&name),
        }
        let user = identity_for(&target, peer_cert.as_ref());
        target
            .server
            .clone()
            .handle(Request::from_parts(parts, body), user)
            .await
    }
}

/// The identity of a client certificate, if `target`'s CA issued it.
fn identity_for(target: &Target, cert: Option<&CertificateDer<'static>>) -> Option<UserInfo> {
    let cert = cert?;
    let id = pki::identity(cert)?;
    (id.issuer == target.ca_subject).then_some(UserInfo {
        name: id.user,
        groups: id.groups,
    })
}

fn not_found(name: &str) -> Response<Body> {
    let status = ApiError::NotFound {
        resource: crate::error::GroupResource::new("", "clusters"),
        name: name.to_string(),
    }
    .to_status();
    let body = serde_json::to_vec(&status).unwrap_or_else(|_| json!({}).to_string().into_bytes());
    let mut resp = Response::new(http_body_util::BodyExt::boxed_unsync(
        http_body_util::Full::new(bytes::Bytes::from(body)),
    ));
    *resp.status_mut() = http::StatusCode::NOT_FOUND;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A client-certificate verifier over a changing set of CAs (the host's and every tenant's).
/// Certificates are optional: requests without one are anonymous.
#[derive(Debug)]
pub struct ClientCas {
    inner: RwLock<Arc<dyn ClientCertVerifier>>,
}

fn build(roots: Vec<CertificateDer<'static>>) -> Result<Arc<dyn ClientCertVerifier>, RouterError> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store
            .add(r)
            .map_err(|e| RouterError::Verifier(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| RouterError::Verifier(e.to_string()))
}

impl ClientCas {
    fn new(roots: Vec<CertificateDer<'static>>) -> Result<ClientCas, RouterError> {
        Ok(ClientCas {
            inner: RwLock::new(build(roots)?),
        })
    }

    fn set_roots(&self, roots: Vec<CertificateDer<'static>>) -> Result<(), RouterError> {
        let v = build(roots)?;
        if let Ok(mut i) = self.inner.write() {
            *i = v;
        }
        Ok(())
    }

    fn current(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.inner.read().ok().map(|i| i.clone())
    }
}

impl ClientCertVerifier for ClientCas {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints: with many tenant CAs the list would be long, and clients with one
        // certificate present it when the server names no acceptable CAs.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self.current() {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::General("client verifier unavailable".into())),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.current() {
            Some(v) => v.verify_tls12_signature(message, cert, dss),
            None => Err(rustls::Error::General("client verifier unavailable".into())),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self.current() {
            Some(v) => v.verify_tls13_signature(message, cert, dss),
            None => Err(rustls::Error::General("client verifier unavailable".into())),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current()
            .map(|v| v.supported_verify_schemes())
            .unwrap_or_default()
    }
}
