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
//!   discovery;
//! - the proxy itself is a stage of the request pipeline (`handler/aggregated.rs`).
//!
//! Services are reached as admission webhooks' are ([`crate::webhook::Caller`]: the
//! cluster's backends, so a tenant's APIService calls only its own Service); an APIService
//! whose pods run on simulated nodes is unavailable (nothing serves it).

pub mod apiservice;
pub mod authentication;
pub mod available;

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

/// The aggregation layer of one cluster.
pub struct Aggregator {
    settings: WebhookSettings,
    caller: RwLock<Arc<Caller>>,
    /// The last discovery document of each available group version (`group/version`).
    discovery: Mutex<HashMap<String, Value>>,
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
    pub fn new(settings: WebhookSettings) -> Aggregator {
        let caller = Caller::new(settings.targets.clone(), settings.backends.clone());
        Aggregator {
            settings,
            caller: RwLock::new(Arc::new(caller)),
            discovery: Mutex::default(),
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
        let Some(def) = registry.resource(GROUP, "v1", "apiservices") else {
            return Vec::new();
        };
        let Ok(list) = registry.list(&def, None, &ListParams::default()).await else {
            return Vec::new();
        };
        let mut out: Vec<Registration> = list
            .items
            .into_iter()
            .filter_map(Registration::of)
            .collect();
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

    /// Where the backend of `reg` is, as an HTTPS base URL and client.
    pub async fn target(
        &self,
        registry: &Registry,
        reg: &Registration,
    ) -> Result<(reqwest::Url, reqwest::Client), ApiError> {
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
        match target {
            ServiceTarget::Http { base, client } => Ok((base, client)),
            ServiceTarget::Simulated => Err(unavailable(
                "its Service's pods run on simulated nodes, where nothing serves it".into(),
            )),
        }
    }

    /// A slot of the cluster's calls in flight.
    pub async fn slot(&self, wait: Duration) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.caller()?.slot(wait).await
    }

    /// The cached discovery document (`APIResourceList`) of `group/version`.
    pub fn resources(&self, group_version: &str) -> Option<Value> {
        self.discovery
            .lock()
            .ok()
            .and_then(|d| d.get(group_version).cloned())
    }

    fn remember(&self, group_version: &str, doc: Option<Value>) {
        if let Ok(mut d) = self.discovery.lock() {
            match doc {
                Some(doc) => d.insert(group_version.to_string(), doc),
                None => d.remove(group_version),
            };
        }
    }
}
