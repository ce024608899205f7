//! A real aggregated API server for tests: group [`GROUP`] version `v1` with one namespaced
//! resource, `flavors` (kind `Flavor`), served over HTTPS on this machine. It requires a client
//! certificate of the CA it is given ([`TestApiServer::trust`], the cluster's
//! `requestheader-client-ca-file`), records each request's path, front-proxy headers and
//! client certificate name, and answers:
//!
//! - `GET /apis/<GROUP>/v1`: its `APIResourceList`;
//! - `GET /apis/<GROUP>/v1/namespaces/<ns>/flavors`: a `FlavorList` with one Flavor whose
//!   `spec.requestedBy` and `spec.groups` are the `X-Remote-User` and `X-Remote-Group` it got;
//! - `GET /openapi/v3/apis/<GROUP>/v1`: an OpenAPI v3 document with the `Flavor` schema
//!   (`spec.requestedBy` described as [`FLAVOR_FIELD_DOC`]);
//! - `GET /openapi/v2`: the same as a Swagger 2.0 document (with a path of another group, which
//!   a cluster must not take from it).

use std::net::TcpListener;
use std::sync::{Arc, Mutex, RwLock};

use anyhow::Result;
use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use serde_json::{json, Value};

use crate::https::{Peer, ServerPki, TlsSource};

/// The API group served.
pub const GROUP: &str = "flavors.test.fabrik.dev";

/// The description of `Flavor.spec.requestedBy` in the server's OpenAPI document.
pub const FLAVOR_FIELD_DOC: &str = "Who asked for this flavor, as the front proxy said.";

/// The server's OpenAPI v2 document.
fn swagger(gv: &str) -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "flavors", "version": "v1"},
        "paths": {
            format!("/apis/{gv}/namespaces/{{namespace}}/flavors/{{name}}"): {
                "get": {"responses": {"200": {"description": "OK",
                    "schema": {"$ref": "#/definitions/dev.fabrik.test.flavors.v1.Flavor"}}}},
            },
            "/apis/apps/v1/not-mine": {"get": {"responses": {"200": {"description": "OK"}}}},
        },
        "definitions": {
            "dev.fabrik.test.flavors.v1.Flavor": {
                "type": "object",
                "description": "A flavor.",
                "x-kubernetes-group-version-kind": [{"group": GROUP, "version": "v1", "kind": "Flavor"}],
                "properties": {"spec": {"type": "object", "properties": {
                    "requestedBy": {"type": "string", "description": FLAVOR_FIELD_DOC}}}},
            },
        },
    })
}

/// The server's OpenAPI v3 document of `<GROUP>/v1`.
fn openapi(gv: &str) -> Value {
    let kind = json!([{"group": GROUP, "version": "v1", "kind": "Flavor"}]);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "flavors", "version": "v1"},
        "paths": {
            format!("/apis/{gv}/namespaces/{{namespace}}/flavors/{{name}}"): {
                "get": {
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": {"group": GROUP, "version": "v1", "kind": "Flavor"},
                    "responses": {"200": {"description": "OK", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/dev.fabrik.test.flavors.v1.Flavor"},
                    }}}},
                },
            },
        },
        "components": {"schemas": {
            "dev.fabrik.test.flavors.v1.Flavor": {
                "type": "object",
                "description": "A flavor.",
                "x-kubernetes-group-version-kind": kind,
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "description": "What the flavor is.", "properties": {
                        "requestedBy": {"type": "string", "description": FLAVOR_FIELD_DOC},
                        "groups": {"type": "array", "items": {"type": "string"}},
                    }},
                },
            },
        }},
    })
}

/// One request received.
#[derive(Clone, Debug)]
pub struct Call {
    /// The path.
    pub path: String,
    /// `X-Remote-User`.
    pub user: Option<String>,
    /// `X-Remote-Group` values.
    pub groups: Vec<String>,
    /// The client certificate's common name.
    pub client_cn: Option<String>,
}

/// The running server (stopped when dropped).
pub struct TestApiServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    pki: ServerPki,
    tls: TlsSource,
    calls: Arc<Mutex<Vec<Call>>>,
    _served: crate::https::Served,
}

impl TestApiServer {
    /// Starts the server with a certificate for `names`; until [`Self::trust`] is called it
    /// takes connections without client certificates.
    pub fn start(names: &[&str]) -> Result<TestApiServer> {
        let pki = ServerPki::new(names)?;
        let tls: TlsSource = Arc::new(RwLock::new(pki.config(None)?));
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let record = calls.clone();
        let served = crate::https::serve(listener, tls.clone(), move |req, peer| {
            std::future::ready(answer(req, peer, &record))
        })?;
        Ok(TestApiServer {
            port,
            pki,
            tls,
            calls,
            _served: served,
        })
    }

    /// From now on, requires client certificates issued by `client_ca_pem`.
    pub fn trust(&self, client_ca_pem: &str) -> Result<()> {
        let config = self.pki.config(Some(client_ca_pem))?;
        if let Ok(mut t) = self.tls.write() {
            *t = config;
        }
        Ok(())
    }

    /// The `caBundle` of an APIService that calls it.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.pki.ca_pem)
    }

    /// The CA of its serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

fn answer(
    req: Request<hyper::body::Incoming>,
    peer: Peer,
    calls: &Mutex<Vec<Call>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let header = |name: &str| -> Vec<String> {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let call = Call {
        path: path.clone(),
        user: header("X-Remote-User").into_iter().next(),
        groups: header("X-Remote-Group"),
        client_cn: peer.client_cn,
    };
    if let Ok(mut c) = calls.lock() {
        c.push(call.clone());
    }
    let gv = format!("{GROUP}/v1");
    let base = format!("/apis/{gv}");
    let body: Option<Value> = if path == format!("/openapi/v3{base}") {
        Some(openapi(&gv))
    } else if path == "/openapi/v2" {
        Some(swagger(&gv))
    } else if path == base {
        Some(json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": "flavors", "singularName": "flavor", "namespaced": true,
                           "kind": "Flavor", "verbs": ["get", "list"], "shortNames": ["flv"]}],
        }))
    } else {
        path.strip_prefix(&format!("{base}/namespaces/"))
            .and_then(|rest| rest.strip_suffix("/flavors"))
            .map(|ns| {
                json!({
                    "kind": "FlavorList", "apiVersion": gv, "metadata": {"resourceVersion": "1"},
                    "items": [{
                        "kind": "Flavor", "apiVersion": gv,
                        "metadata": {"name": "vanilla", "namespace": ns,
                                     "creationTimestamp": "2026-01-01T00:00:00Z"},
                        "spec": {"requestedBy": call.user, "groups": call.groups},
                    }],
                })
            })
    };
    match body {
        Some(b) => Response::builder()
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(b.to_string())))
            .unwrap_or_default(),
        None => Response::builder()
            .status(404)
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404, "message": "not found"})
                .to_string(),
            )))
            .unwrap_or_default(),
    }
}
