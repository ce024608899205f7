//! API aggregation (`apiregistration.k8s.io/v1` APIService), in the host and in every tenant:
//! requests for a group and version an APIService names are proxied to its Service, with the
//! caller's identity in front-proxy headers (`X-Remote-User`, `X-Remote-Group`,
//! `X-Remote-Extra-*`) under the cluster's front-proxy client certificate — upstream's
//! request-header authentication, published for backends in
//! `kube-system/extension-apiserver-authentication` ([`authentication`]).
//!
//! - [`apiservice`]: the kind's validation;
//! - [`available`]: the controller that probes each backend's discovery, keeps the
//!   `Available` condition current and caches the backend's resources for aggregated
//!   discovery; in the same loop (one watch of APIServices per cluster),
//! - [`local`]: the Local APIServices (no `service`) of the group versions the cluster serves
//!   itself, built in or through CRDs, as upstream's autoregister and crdRegistration
//!   controllers keep them; never probed, never proxied to;
//! - the proxy itself is a stage of the request pipeline (`handler/aggregated.rs`).
//!
//! Services are reached as admission webhooks' are ([`crate::webhook::Caller`]: the
//! cluster's backends, so a tenant's APIService calls only its own Service).
//!
//! An APIService whose Service's pods all run on simulated nodes ([`Backend::Simulated`]) is
//! answered by the simulation, as simulated pods answer admission webhooks: a group and version
//! the cluster implements itself (the resource metrics API — so installing metrics-server on
//! `fabrik up` behaves as on a real cluster, `kubectl top` included) is served by that
//! implementation; any other group is an available API with no resources (a metrics adapter
//! with nothing to report). Nothing is ever proxied to a simulated pod.

pub mod apiservice;
pub mod authentication;
pub mod available;
pub mod local;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::error::ApiError;
use crate::registry::{ListParams, Registry};
use crate::webhook::call::{CallError, Caller, ServiceRef, ServiceTarget};
use crate::webhook::WebhookSettings;

/// The API group of APIService.
pub const GROUP: &str = "apiregistration.k8s.io";

/// The common name of the front proxy's client certificate (upstream's), the one name
/// `requestheader-allowed-names` lists.
pub const FRONT_PROXY_NAME: &str = "front-proxy-client";

/// Where an APIService's requests go.
pub enum Backend {
    /// A server at `base`, called with `client`.
    Http {
        /// The backend's base URL.
        base: reqwest::Url,
        /// The client (the APIService's CA, the front-proxy identity).
        client: reqwest::Client,
    },
    /// Pods on simulated nodes: the simulation answers (see the module docs).
    Simulated,
}

/// The aggregation layer of one cluster.
pub struct Aggregator {
    settings: WebhookSettings,
    /// The discovery documents of the group versions this cluster implements itself (what
    /// a simulated backend of the same group version serves).
    builtin: HashMap<String, Value>,
    caller: RwLock<Arc<Caller>>,
    /// What the last check of each available group version (`group/version`) found.
    found: Mutex<HashMap<String, Found>>,
}

/// What a check found for one group version.
struct Found {
    discovery: Value,
    /// The backend's OpenAPI v3 document and its hash.
    openapi: Option<(Value, String)>,
    /// Its part of the OpenAPI v2 document (see `available::v2_part`).
    openapi_v2: Option<Value>,
}

/// The group, version and Service of an APIService that names a Service.
pub struct Registration {
    /// The object.
    pub object: Value,
    /// `spec.group`.
    pub group: String,
    /// `spec.version`.
    pub version: String,
}

impl Registration {
    fn of(object: Value) -> Option<Registration> {
        if !object["spec"]["service"].is_object() {
            return None;
        }
        Some(Registration {
            group: object["spec"]["group"].as_str()?.to_string(),
            version: object["spec"]["version"].as_str()?.to_string(),
            object,
        })
    }

    /// `group/version`.
    pub fn group_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }

    /// Whether its `Available` condition is true.
    pub fn available(&self) -> bool {
        self.object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True")
    }
}

impl Aggregator {
    /// The aggregation layer of a cluster whose Services are reached as `settings` say.
    /// `builtin`: `group/version` → discovery document of the APIs it implements itself.
    pub fn new(settings: WebhookSettings, builtin: HashMap<String, Value>) -> Aggregator {
        let caller = Caller::new(settings.targets.clone(), settings.backends.clone());
        Aggregator {
            settings,
            builtin,
            caller: RwLock::new(Arc::new(caller)),
            found: Mutex::default(),
        }
    }

    /// Presents the client certificate and key in `pem` to backends (the cluster's front-proxy
    /// identity, issued by its client CA).
    pub fn set_identity(&self, pem: &[u8]) -> Result<(), CallError> {
        let caller = Caller::new(
            self.settings.targets.clone(),
            self.settings.backends.clone(),
        )
        .with_identity(pem)?;
        if let Ok(mut c) = self.caller.write() {
            *c = Arc::new(caller);
        }
        Ok(())
    }

    /// Issues the front proxy's client certificate from the cluster's client CA `ca` and
    /// presents it to backends. Every server of a cluster (owner or follower) issues its own;
    /// backends trust any of them, since they trust the CA and the name.
    pub fn issue_identity(&self, ca: &crate::pki::Ca) -> Result<(), CallError> {
        let proxy = ca
            .issue_client(FRONT_PROXY_NAME, None)
            .map_err(|e| CallError(format!("cannot issue the front-proxy certificate: {e}")))?;
        self.set_identity(format!("{}{}", proxy.cert_pem, proxy.key_pem).as_bytes())
    }

    /// Whether backends are called with the front-proxy certificate.
    pub fn has_identity(&self) -> bool {
        self.caller().is_some_and(|c| c.has_identity())
    }

    fn caller(&self) -> Option<Arc<Caller>> {
        self.caller.read().ok().map(|c| c.clone())
    }

    /// The APIService that serves `group`/`version` from a Service, if any.
    pub async fn find(
        &self,
        registry: &Registry,
        group: &str,
        version: &str,
    ) -> Option<Registration> {
        let def = registry.resource(GROUP, "v1", "apiservices")?;
        let obj = registry
            .get(&def, None, &format!("{version}.{group}"))
            .await
            .ok()?;
        Registration::of(obj)
    }

    /// Every APIService that names a Service, by group priority then version priority
    /// (highest first), as upstream orders them in discovery.
    pub async fn registrations(&self, registry: &Registry) -> Vec<Registration> {
        match list_all(registry).await {
            Ok(items) => registrations_in(items),
            Err(_) => Vec::new(),
        }
    }
}

/// Every APIService of the cluster.
pub async fn list_all(registry: &Registry) -> Result<Vec<Value>, ApiError> {
    let Some(def) = registry.resource(GROUP, "v1", "apiservices") else {
        return Ok(Vec::new());
    };
    Ok(registry
        .list(&def, None, &ListParams::default())
        .await?
        .items)
}

/// The APIServices of `items` that name a Service, by group priority then version priority
/// (highest first), as upstream orders them in discovery.
pub fn registrations_in(items: Vec<Value>) -> Vec<Registration> {
    let mut out: Vec<Registration> = items.into_iter().filter_map(Registration::of).collect();
    let prio = |r: &Registration, f: &str| r.object["spec"][f].as_i64().unwrap_or(0);
    out.sort_by(|a, b| {
        prio(b, "groupPriorityMinimum")
            .cmp(&prio(a, "groupPriorityMinimum"))
            .then(a.group.cmp(&b.group))
            .then(prio(b, "versionPriority").cmp(&prio(a, "versionPriority")))
            .then(a.version.cmp(&b.version))
    });
    out
}

impl Aggregator {
    /// Whether the cluster implements `group_version` itself.
    pub fn implements(&self, group_version: &str) -> bool {
        self.builtin.contains_key(group_version)
    }

    /// The discovery document a simulated backend of `reg` answers with.
    pub fn simulated_discovery(&self, reg: &Registration) -> Value {
        self.builtin
            .get(&reg.group_version())
            .cloned()
            .unwrap_or_else(|| {
                serde_json::json!({
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": reg.group_version(),
                    "resources": [],
                })
            })
    }

    /// Where the backend of `reg` is.
    pub async fn target(
        &self,
        registry: &Registry,
        reg: &Registration,
    ) -> Result<Backend, ApiError> {
        let unavailable = |why: String| {
            ApiError::Unavailable(format!(
                "the aggregated API {} is not available: {why}",
                reg.group_version()
            ))
        };
        let spec = &reg.object["spec"];
        let svc = &spec["service"];
        let ca = match spec["caBundle"].as_str() {
            Some(b64) if !b64.is_empty() => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| unavailable(format!("caBundle is not base64: {e}")))?
            }
            _ => Vec::new(),
        };
        let caller = self
            .caller()
            .ok_or_else(|| unavailable("the cluster is shutting down".into()))?;
        let target = caller
            .service(
                registry,
                &ServiceRef {
                    namespace: svc["namespace"].as_str().unwrap_or(""),
                    name: svc["name"].as_str().unwrap_or(""),
                    port: svc["port"]
                        .as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(443),
                    ca,
                    insecure: spec["insecureSkipTLSVerify"].as_bool() == Some(true),
                },
            )
            .await
            .map_err(|e| unavailable(e.0))?;
        Ok(match target {
            ServiceTarget::Http { base, client } => Backend::Http { base, client },
            ServiceTarget::Simulated => Backend::Simulated,
        })
    }

    /// A slot of the cluster's calls in flight.
    pub async fn slot(&self, wait: Duration) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.caller()?.slot(wait).await
    }

    /// The cached discovery document (`APIResourceList`) of `group/version`.
    pub fn resources(&self, group_version: &str) -> Option<Value> {
        self.found
            .lock()
            .ok()
            .and_then(|d| d.get(group_version).map(|f| f.discovery.clone()))
    }

    /// The backend's OpenAPI v3 document of `group/version`, when it serves one.
    pub fn openapi_v3(&self, group_version: &str) -> Option<Value> {
        self.found.lock().ok().and_then(|d| {
            d.get(group_version)
                .and_then(|f| f.openapi.as_ref().map(|(doc, _)| doc.clone()))
        })
    }

    /// The cluster's OpenAPI v2 document `own` with every aggregated API's paths and the
    /// definitions they use added (the cluster's own definitions win a name clash); None when
    /// no backend serves an OpenAPI v2 document.
    pub fn merged_openapi_v2(&self, own: &Value) -> Option<Value> {
        let found = self.found.lock().ok()?;
        let parts: Vec<&Value> = found
            .values()
            .filter_map(|f| f.openapi_v2.as_ref())
            .collect();
        if parts.is_empty() {
            return None;
        }
        let mut doc = own.clone();
        for part in parts {
            for (field, entries) in [
                ("paths", &part["paths"]),
                ("definitions", &part["definitions"]),
            ] {
                let (Some(target), Some(entries)) =
                    (doc[field].as_object_mut(), entries.as_object())
                else {
                    continue;
                };
                for (k, v) in entries {
                    target.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        Some(doc)
    }

    /// `(group/version, hash)` of every aggregated OpenAPI v3 document (for the index).
    pub fn openapi_v3_hashes(&self) -> Vec<(String, String)> {
        self.found
            .lock()
            .map(|d| {
                d.iter()
                    .filter_map(|(gv, f)| f.openapi.as_ref().map(|(_, h)| (gv.clone(), h.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn remember(&self, group_version: &str, checked: Option<available::Checked>) {
        if let Ok(mut d) = self.found.lock() {
            match checked {
                Some(c) => {
                    let openapi = c.openapi.map(|doc| {
                        let hash = crate::openapi::hash(&doc);
                        (doc, hash)
                    });
                    d.insert(
                        group_version.to_string(),
                        Found {
                            discovery: c.discovery,
                            openapi,
                            openapi_v2: c.openapi_v2,
                        },
                    )
                }
                None => d.remove(group_version),
            };
        }
    }

    /// Drops what was found for group versions no APIService names any more.
    fn forget_all_but(&self, regs: &[Registration]) {
        if let Ok(mut d) = self.found.lock() {
            d.retain(|gv, _| regs.iter().any(|r| &r.group_version() == gv));
        }
    }
}
