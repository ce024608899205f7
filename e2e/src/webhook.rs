//! A real admission webhook for tests: an HTTPS server on this machine (its own CA, a serving
//! certificate for the Service names it stands behind) that records every AdmissionReview it
//! receives and answers by path:
//!
//! - `/allow`: admits;
//! - `/deny`: refuses with 403 and the message [`DENIAL`];
//! - `/label`: admits with a JSONPatch adding the label [`MUTATED_LABEL`]`=true`;
//! - `/count`: admits with a JSONPatch setting [`COUNT_LABEL`] to one more than the object has
//!   (a reinvoked webhook is seen twice);
//! - `/warn`: admits with the warning [`WARNING`];
//! - `/slow`: admits after [`SLOW`] (longer than a one-second timeout).
//!
//! Anything else is a 404. Started with `--local-backends` covering its port, a Service
//! annotated `sim.fabrik.dev/local-port: <port>` is served by it.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Result};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};

/// The message of `/deny`.
pub const DENIAL: &str = "denied by the test webhook";
/// The label `/label` adds.
pub const MUTATED_LABEL: &str = "webhook.test/mutated";
/// The label `/count` counts in.
pub const COUNT_LABEL: &str = "webhook.test/count";
/// The warning of `/warn`.
pub const WARNING: &str = "a warning from the test webhook";
/// How long `/slow` takes.
pub const SLOW: Duration = Duration::from_secs(10);

/// One review received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The path it was sent to.
    pub path: String,
    /// The whole AdmissionReview.
    pub review: Value,
    /// How long the webhook took to answer it (body read to answer built).
    pub took: Duration,
}

impl Received {
    /// `request.operation`.
    pub fn operation(&self) -> &str {
        self.review["request"]["operation"].as_str().unwrap_or("")
    }

    /// The name of the object (request.name, or the object's).
    pub fn name(&self) -> &str {
        self.review["request"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .or_else(|| self.review["request"]["object"]["metadata"]["name"].as_str())
            .unwrap_or("")
    }
}

/// The running server (stopped when dropped).
pub struct TestWebhook {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The CA that signed its serving certificate (PEM).
    pub ca_pem: String,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestWebhook {
    /// Starts a server whose certificate names `names` (e.g. `hook.default.svc`).
    pub fn start(names: &[&str]) -> Result<TestWebhook> {
        crate::init_crypto();
        let (ca_pem, tls) = tls_config(names)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let record = received.clone();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(serve(listener, tls, record, stopped));
        });
        Ok(TestWebhook {
            port,
            ca_pem,
            received,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The `caBundle` of a configuration that calls it (base64 of the CA).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// Every review received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How long each answer took the webhook, in the order received.
    pub fn handling_times(&self) -> Vec<Duration> {
        self.received().iter().map(|r| r.took).collect()
    }

    /// The reviews received at `path`.
    pub fn received_at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn tls_config(names: &[&str]) -> Result<(String, Arc<rustls::ServerConfig>)> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "fabrik e2e webhook CA");
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
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
    );
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key_der)?;
    Ok((ca_cert.pem(), Arc::new(config)))
}

async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    received: Arc<Mutex<Vec<Received>>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let conn = tokio::select! {
            _ = &mut stopped => return,
            c = listener.accept() => c,
        };
        let Ok((stream, _)) = conn else { continue };
        let acceptor = acceptor.clone();
        let received = received.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| answer(req, received.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    received: Arc<Mutex<Vec<Received>>>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await?.to_bytes();
    let start = std::time::Instant::now();
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let decided = decide(&path, &review).await;
    if let Ok(mut r) = received.lock() {
        r.push(Received {
            path: path.clone(),
            review: review.clone(),
            took: start.elapsed(),
        });
    }
    let reply = match decided {
        Ok(response) => json!({
            "apiVersion": review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": response,
        }),
        Err(e) => {
            return Ok(Response::builder()
                .status(404)
                .body(Full::new(Bytes::from(e.to_string())))
                .unwrap_or_default())
        }
    };
    Ok(Response::builder()
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .unwrap_or_default())
}

/// A JSONPatch that sets label `key` to `value` on `object`.
fn set_label(object: &Value, key: &str, value: &str) -> Value {
    let escaped = key.replace('~', "~0").replace('/', "~1");
    let patch = if object["metadata"]["labels"].is_object() {
        json!([{"op": "add", "path": format!("/metadata/labels/{escaped}"), "value": value}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {key: value}}])
    };
    json!({
        "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
    })
}

async fn decide(path: &str, review: &Value) -> Result<Value> {
    let uid = review["request"]["uid"].clone();
    let object = &review["request"]["object"];
    let mut response = json!({"uid": uid, "allowed": true});
    let mut merge = |extra: Value| {
        if let (Some(r), Some(e)) = (response.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                r.insert(k.clone(), v.clone());
            }
        }
    };
    match path {
        "/allow" => {}
        "/deny" => merge(json!({"allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": DENIAL}})),
        "/label" => merge(set_label(object, MUTATED_LABEL, "true")),
        "/count" => {
            let n: u64 = object["metadata"]["labels"][COUNT_LABEL]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            merge(set_label(object, COUNT_LABEL, &(n + 1).to_string()));
        }
        "/warn" => merge(json!({"warnings": [WARNING]})),
        "/slow" => tokio::time::sleep(SLOW).await,
        other => return Err(anyhow!("no such webhook path {other}")),
    }
    Ok(response)
}
