//! Calling a webhook: resolve its `clientConfig` (a `service` through the cluster's
//! [`Backends`], a `url` under its [`Targets`]), POST the review over TLS verified with the
//! configuration's `caBundle`, and read the answer — with the webhook's timeout, no redirects,
//! no proxy, no credentials of the cluster, a bounded answer size, and a bounded number of
//! calls in flight per cluster (one tenant's slow webhooks wait for its own slots only).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use super::backends::{Backend, Backends};
use super::targets::Targets;
use crate::admission::Objects;

/// Calls one cluster may have in flight at once.
pub const CALLS_IN_FLIGHT: usize = 32;

/// The largest answer read from a webhook.
pub const MAX_ANSWER_BYTES: usize = 3 * 1024 * 1024;

/// Clients kept (one per CA bundle and pinned address; each keeps its connections).
const MAX_CLIENTS: usize = 256;

/// What a call returned.
#[derive(Debug)]
pub enum Answer {
    /// The webhook's JSON answer.
    Json(Value),
    /// The Service runs on simulated nodes: no process answered.
    Simulated,
}

/// Why a call failed (the message names the URL where there is one).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CallError(pub String);

#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    ca: Vec<u8>,
    pin: Option<(String, SocketAddr)>,
    insecure: bool,
}

/// Where a Service's calls go: an HTTPS base URL (`https://<name>.<namespace>.svc:<port>`)
/// with the client pinned to the Service's address, or nowhere (simulated pods).
pub enum ServiceTarget {
    /// Call `base` (extend its path) with `client`.
    Http {
        /// The Service's URL, path `/`.
        base: reqwest::Url,
        /// The client, pinned to the address that serves it.
        client: reqwest::Client,
    },
    /// The Service runs on simulated nodes.
    Simulated,
}

/// How to reach one Service.
pub struct ServiceRef<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The Service port.
    pub port: u16,
    /// PEM CAs the server is verified with (empty: system roots).
    pub ca: Vec<u8>,
    /// Skip the server's verification (an APIService's `insecureSkipTLSVerify`).
    pub insecure: bool,
}

/// The caller of one cluster's webhooks (and of its aggregated APIs, with a client identity).
pub struct Caller {
    targets: Arc<Targets>,
    backends: Arc<dyn Backends>,
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
    slots: Arc<Semaphore>,
    identity: Option<reqwest::Identity>,
}

/// A resolver that refuses DNS answers the cluster's [`Targets`] forbid, so the address
/// connected to is the address checked.
struct CheckedResolver(Arc<Targets>);

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let targets = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut allowed = Vec::new();
            let mut refusal = None;
            for addr in found {
                match targets.check_ip(addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(e) => refusal = Some(e),
                }
            }
            if allowed.is_empty() {
                let why = refusal.unwrap_or_else(|| "no addresses".into());
                return Err(format!("{host} resolves to no allowed address: {why}").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

impl Caller {
    /// A caller under `targets`, resolving Services with `backends`.
    pub fn new(targets: Arc<Targets>, backends: Arc<dyn Backends>) -> Caller {
        Caller {
            targets,
            backends,
            clients: Mutex::default(),
            slots: Arc::new(Semaphore::new(CALLS_IN_FLIGHT)),
            identity: None,
        }
    }

    /// The caller presenting the client certificate and key of `pem` (both in PEM) to every
    /// server (the front proxy's identity of API aggregation).
    pub fn with_identity(mut self, pem: &[u8]) -> Result<Caller, CallError> {
        let identity = reqwest::Identity::from_pem(pem)
            .map_err(|e| CallError(format!("bad client identity: {e}")))?;
        self.identity = Some(identity);
        Ok(self)
    }

    /// Whether the caller presents a client certificate.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The address rules.
    pub fn targets(&self) -> &Arc<Targets> {
        &self.targets
    }

    fn client(&self, key: ClientKey) -> Result<reqwest::Client, CallError> {
        if let Ok(clients) = self.clients.lock() {
            if let Some(c) = clients.get(&key) {
                return Ok(c.clone());
            }
        }
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .tls_built_in_root_certs(key.ca.is_empty())
            .danger_accept_invalid_certs(key.insecure)
            .dns_resolver(Arc::new(CheckedResolver(self.targets.clone())));
        if let Some(id) = &self.identity {
            b = b.identity(id.clone());
        }
        if !key.ca.is_empty() {
            let certs = reqwest::Certificate::from_pem_bundle(&key.ca)
                .map_err(|e| CallError(format!("caBundle is not a PEM bundle: {e}")))?;
            if certs.is_empty() {
                return Err(CallError("caBundle holds no certificate".into()));
            }
            for cert in certs {
                b = b.add_root_certificate(cert);
            }
        }
        if let Some((host, addr)) = &key.pin {
            b = b.resolve(host, *addr);
        }
        let client = b
            .build()
            .map_err(|e| CallError(format!("failed to build the webhook client: {e}")))?;
        if let Ok(mut clients) = self.clients.lock() {
            if clients.len() >= MAX_CLIENTS {
                clients.clear();
            }
            clients.insert(key, client.clone());
        }
        Ok(client)
    }

    /// Where `client_config` points: the URL to POST to and the client pinned for it, or
    /// [`Answer::Simulated`] when nothing listens.
    async fn resolve(
        &self,
        registry: &dyn Objects,
        cc: &Value,
        timeout: Duration,
    ) -> Result<Result<(reqwest::Url, reqwest::Client), Answer>, CallError> {
        let ca = match cc["caBundle"].as_str() {
            Some(b64) if !b64.is_empty() => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| CallError(format!("caBundle is not base64: {e}")))?
            }
            _ => Vec::new(),
        };
        let query = format!("timeout={}s", timeout.as_secs().max(1));
        if let Some(url) = cc["url"].as_str() {
            let mut url = super::config::check_url(url).map_err(CallError)?;
            self.targets.check_url(&url).map_err(CallError)?;
            url.set_query(Some(&query));
            let client = self.client(ClientKey {
                ca,
                pin: None,
                insecure: false,
            })?;
            return Ok(Ok((url, client)));
        }
        let svc = &cc["service"];
        let port = svc["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(443);
        let target = self
            .service(
                registry,
                &ServiceRef {
                    namespace: svc["namespace"].as_str().unwrap_or(""),
                    name: svc["name"].as_str().unwrap_or(""),
                    port,
                    ca,
                    insecure: false,
                },
            )
            .await?;
        let (mut url, client) = match target {
            ServiceTarget::Simulated => return Ok(Err(Answer::Simulated)),
            ServiceTarget::Http { base, client } => (base, client),
        };
        url.set_path(svc["path"].as_str().unwrap_or("/"));
        url.set_query(Some(&query));
        Ok(Ok((url, client)))
    }

    /// Where calls to a Service of the cluster go (resolved by the cluster's [`Backends`]).
    pub async fn service(
        &self,
        registry: &dyn Objects,
        svc: &ServiceRef<'_>,
    ) -> Result<ServiceTarget, CallError> {
        let (ns, name) = (svc.namespace, svc.name);
        let def = registry
            .resource("", "v1", "services")
            .ok_or_else(|| CallError("this cluster serves no Services".into()))?;
        let service = registry.get(&def, Some(ns), name).await.map_err(|_| {
            CallError(format!(
                "service \"{name}\" not found in namespace \"{ns}\""
            ))
        })?;
        let addr = match self
            .backends
            .locate(&service, svc.port)
            .await
            .map_err(CallError)?
        {
            Backend::Simulated => return Ok(ServiceTarget::Simulated),
            Backend::Address(a) => a,
        };
        // The certificate names the Service (`name.namespace.svc`), wherever it is served.
        let host = format!("{name}.{ns}.svc");
        let base = reqwest::Url::parse(&format!("https://{host}:{}/", addr.port()))
            .map_err(|e| CallError(format!("bad service reference: {e}")))?;
        let client = self.client(ClientKey {
            ca: svc.ca.clone(),
            pin: Some((host, addr)),
            insecure: svc.insecure,
        })?;
        Ok(ServiceTarget::Http { base, client })
    }

    /// A slot of the cluster's calls in flight, waited for at most `timeout`.
    pub async fn slot(&self, timeout: Duration) -> Option<tokio::sync::OwnedSemaphorePermit> {
        tokio::time::timeout(timeout, self.slots.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// POSTs `body` to the webhook of `client_config` and returns its answer.
    pub async fn post(
        &self,
        registry: &dyn Objects,
        client_config: &Value,
        body: &Value,
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let (url, client) = match self.resolve(registry, client_config, timeout).await? {
            Ok(target) => target,
            Err(answer) => return Ok(answer),
        };
        let shown = url.to_string();
        let failed = |e: String| CallError(format!("Post \"{shown}\": {e}"));
        let _slot = self
            .slot(timeout)
            .await
            .ok_or_else(|| failed("too many webhook calls in flight for this cluster".into()))?;
        let call = async {
            let mut resp = client
                .post(url.clone())
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .body(serde_json::to_vec(body).map_err(|e| e.to_string())?)
                .send()
                .await
                .map_err(describe)?;
            let status = resp.status();
            let bytes = read_bounded(&mut resp, MAX_ANSWER_BYTES).await?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes);
                let text: String = text.chars().take(200).collect();
                return Err(format!("the server answered {status}: {text}"));
            }
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| format!("the answer is not JSON: {e}"))
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(v)) => Ok(Answer::Json(v)),
            Ok(Err(e)) => Err(failed(e)),
            Err(_) => Err(failed(format!(
                "context deadline exceeded (timeout {}s)",
                timeout.as_secs()
            ))),
        }
    }
}

/// An error and its causes on one line (reqwest's top level says only "error sending request").
pub fn describe(e: reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The body of `resp`, refused past `limit` bytes (a backend cannot make the control plane
/// hold an answer of any size).
pub async fn read_bounded(resp: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(describe)? {
        if bytes.len() + chunk.len() > limit {
            return Err(format!("answer larger than {limit} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
