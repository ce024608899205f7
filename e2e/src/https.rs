//! A small HTTPS server for tests that stand in for a cluster's backends (an admission webhook,
//! an aggregated API server): its own CA and serving certificate, optional client
//! certificates verified against a CA given later, one handler for every request.

use std::future::Future;
use std::net::TcpListener;
use std::sync::{Arc, RwLock};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and a serving certificate it issued.
pub struct ServerPki {
    /// The CA (PEM).
    pub ca_pem: String,
    cert: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl ServerPki {
    /// A new CA and a serving certificate for `names`.
    pub fn new(names: &[&str]) -> Result<ServerPki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DistinguishedName, DnType,
            ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "fabrik e2e backend CA");
        ca.distinguished_name = dn;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let mut server =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = server.signed_by(&key, &issuer)?;
        Ok(ServerPki {
            ca_pem: ca_cert.pem(),
            cert: cert.der().clone(),
            key_der: key.serialize_der(),
        })
    }

    /// The server's TLS settings; with `client_ca_pem`, clients must present a certificate it
    /// issued.
    pub fn config(&self, client_ca_pem: Option<&str>) -> Result<Arc<rustls::ServerConfig>> {
        crate::init_crypto();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let builder = rustls::ServerConfig::builder();
        let builder = match client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_pemfile_certs(pem)? {
                    roots.add(cert)?;
                }
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build()?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        Ok(Arc::new(
            builder.with_single_cert(vec![self.cert.clone()], key)?,
        ))
    }
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    use base64::Engine;
    let mut out = Vec::new();
    let mut inside = None::<String>;
    for line in pem.lines() {
        match (line.trim(), &mut inside) {
            ("-----BEGIN CERTIFICATE-----", None) => inside = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                out.push(CertificateDer::from(
                    base64::engine::general_purpose::STANDARD.decode(b64.as_bytes())?,
                ));
                inside = None;
            }
            (l, Some(b64)) => b64.push_str(l),
            _ => {}
        }
    }
    Ok(out)
}

/// What the server knows of the client of one request.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The common name of the client certificate, if one was presented.
    pub client_cn: Option<String>,
}

fn common_name(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The TLS settings of the next connection (they may change, e.g. once a client CA is known).
pub type TlsSource = Arc<RwLock<Arc<rustls::ServerConfig>>>;

/// A running server (stopped when dropped).
pub struct Served {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves HTTPS on `listener` (on a thread of its own) with `handler`.
pub fn serve<H, F>(listener: TcpListener, tls: TlsSource, handler: H) -> Result<Served>
where
    H: Fn(Request<hyper::body::Incoming>, Peer) -> F + Send + Sync + Clone + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    listener.set_nonblocking(true)?;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            loop {
                let conn = tokio::select! {
                    _ = &mut stopped => return,
                    c = listener.accept() => c,
                };
                let Ok((stream, _)) = conn else { continue };
                let Ok(config) = tls.read().map(|c| c.clone()) else {
                    continue;
                };
                let handler = handler.clone();
                tokio::spawn(async move {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let peer = Peer {
                        client_cn: tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(common_name),
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let reply = handler(req, peer.clone());
                        async move { Ok::<_, std::convert::Infallible>(reply.await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
    });
    Ok(Served {
        stop: Some(stop),
        thread: Some(thread),
    })
}
