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
//! - `/move`: admits with a JSONPatch moving the object to `kube-system` (which must fail);
//! - `/slow`: admits after [`SLOW`] (longer than a one-second timeout);
//! - `/convert`: a CRD conversion webhook (ConversionReview) between `v1`, whose
//!   `spec.size` is `v1beta1`'s `spec.count` (adding a `spec.stray` no schema knows).
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
    _served: crate::https::Served,
}

impl TestWebhook {
    /// Starts a server whose certificate names `names` (e.g. `hook.default.svc`).
    pub fn start(names: &[&str]) -> Result<TestWebhook> {
        let pki = crate::https::ServerPki::new(names)?;
        let tls = Arc::new(std::sync::RwLock::new(pki.config(None)?));
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let record = received.clone();
        let served =
            crate::https::serve(listener, tls, move |req, _peer| answer(req, record.clone()))?;
        Ok(TestWebhook {
            port,
            ca_pem: pki.ca_pem,
            received,
            _served: served,
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

async fn answer(
    req: Request<hyper::body::Incoming>,
    received: Arc<Mutex<Vec<Received>>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
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
    if path == "/convert" {
        return Response::builder()
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(convert(&review).to_string())))
            .unwrap_or_default();
    }
    let reply = match decided {
        Ok(response) => json!({
            "apiVersion": review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": response,
        }),
        Err(e) => {
            return Response::builder()
                .status(404)
                .body(Full::new(Bytes::from(e.to_string())))
                .unwrap_or_default()
        }
    };
    Response::builder()
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())))
        .unwrap_or_default()
}

/// Answers a ConversionReview: `spec.size` (v1) ⇄ `spec.count` (v1beta1).
fn convert(review: &Value) -> Value {
    let req = &review["request"];
    let desired = req["desiredAPIVersion"].as_str().unwrap_or("");
    let to_beta = desired.ends_with("/v1beta1");
    let converted: Vec<Value> = req["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let mut o = o.clone();
            let (from, to) = if to_beta {
                ("size", "count")
            } else {
                ("count", "size")
            };
            if let Some(spec) = o["spec"].as_object_mut() {
                if let Some(v) = spec.remove(from) {
                    spec.insert(to.to_string(), v);
                }
                // A field neither version's schema knows: the server must prune it.
                spec.insert("stray".to_string(), json!("from the converter"));
            }
            o["apiVersion"] = json!(desired);
            o
        })
        .collect();
    json!({
        "apiVersion": review["apiVersion"],
        "kind": "ConversionReview",
        "response": {"uid": req["uid"], "result": {"status": "Success"},
                     "convertedObjects": converted},
    })
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
        "/move" => {
            let patch =
                json!([{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]);
            merge(json!({
                "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
            }));
        }
        "/slow" => tokio::time::sleep(SLOW).await,
        "/convert" => {}
        other => return Err(anyhow!("no such webhook path {other}")),
    }
    Ok(response)
}
