//! Where the admission webhooks of tenant clusters (and of `fabrik up`'s own host) are served:
//! the control plane's [`Backends`].
//!
//! A tenant's `service` reference names the tenant's Service; the call goes to its copy on the
//! host (`fabrik-<tenant>/<host name>`), at the copy's cluster IP — the address the host gave
//! the tenant's own pods, never one the tenant wrote. The pods behind it are those its selector
//! picks (Ready ones; a Service without a selector: its EndpointSlices). When every one runs
//! on a simulated node (`fabrik.dev/simulated=true`) nothing listens there: the simulation
//! answers as a webhook that admits without changes, as the simulated pods are reported
//! running. A Service with no ready endpoint is an error (the webhook's `failurePolicy` says
//! what follows), as on a real cluster while the webhook's pods start.
//!
//! Where a host Service is served is remembered for [`LOCATED_FOR`] (a Service's cluster IP
//! does not move while it exists; whether its pods are simulated changes only when they are
//! replaced), so a busy webhook costs no host API requests per call; failures are never
//! remembered, so a webhook whose Service appears is called as soon as it does.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fabrik_apiserver::webhook::backends::{cluster_ip_backend, service_name};
use fabrik_apiserver::webhook::{Backend, Backends, LocalPorts};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// The label simulated nodes carry.
const SIMULATED_NODE_LABEL: &str = "fabrik.dev/simulated";

/// How long where a host Service is served is remembered.
pub const LOCATED_FOR: Duration = Duration::from_secs(5);

/// At most this many Services are remembered (the oldest half is dropped past it).
const REMEMBERED: usize = 4096;

/// A host Service's port: namespace, name, port.
type ServicePort = (String, String, u16);

/// Services of the host cluster, read through its client.
#[derive(Default)]
pub struct HostServices {
    host: OnceLock<kube::Client>,
    /// Where each Service port was found to be served, and when.
    located: Mutex<HashMap<ServicePort, (Instant, Backend)>>,
}

impl HostServices {
    /// Over `host`.
    pub fn new(host: kube::Client) -> HostServices {
        let s = HostServices::default();
        let _ = s.host.set(host);
        s
    }

    /// Sets the client once it exists (`fabrik up`'s host serves its own webhooks, and its
    /// client needs the server these backends are given to).
    pub fn set_client(&self, host: kube::Client) {
        let _ = self.host.set(host);
    }

    /// Where `port` of the host Service `namespace/name` is served.
    async fn locate_host(&self, namespace: &str, name: &str, port: u16) -> Result<Backend, String> {
        let key = (namespace.to_string(), name.to_string(), port);
        if let Some((at, backend)) = self.located.lock().ok().and_then(|l| l.get(&key).copied()) {
            if at.elapsed() < LOCATED_FOR {
                return Ok(backend);
            }
        }
        let backend = self.read_host(namespace, name, port).await?;
        if let Ok(mut l) = self.located.lock() {
            if l.len() >= REMEMBERED {
                let mut ages: Vec<Instant> = l.values().map(|(at, _)| *at).collect();
                ages.sort();
                let cut = ages[ages.len() / 2];
                l.retain(|_, (at, _)| *at > cut);
            }
            l.insert(key, (Instant::now(), backend));
        }
        Ok(backend)
    }

    /// Reads the Service, its endpoints and their nodes from the host.
    async fn read_host(&self, namespace: &str, name: &str, port: u16) -> Result<Backend, String> {
        let host = self
            .host
            .get()
            .ok_or_else(|| "the control plane is still starting".to_string())?;
        let services: Api<Service> = Api::namespaced(host.clone(), namespace);
        let svc = services
            .get_opt(name)
            .await
            .map_err(|e| format!("cannot read service {namespace}/{name} on the host: {e}"))?
            .ok_or_else(|| format!("service {namespace}/{name} does not exist on the host yet"))?;
        let selector: Vec<String> = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let svc = serde_json::to_value(&svc).map_err(|e| e.to_string())?;
        let (ready, nodes) = if selector.is_empty() {
            ready_endpoints(host, namespace, name).await?
        } else {
            ready_pods(host, namespace, &selector.join(",")).await?
        };
        if ready == 0 {
            return Err(format!(
                "no endpoints available for service \"{}\"",
                service_name(&svc)
            ));
        }
        if nodes.len() == ready && all_simulated(host, &nodes).await {
            return Ok(Backend::Simulated);
        }
        cluster_ip_backend(&svc, port)
    }
}

/// How many endpoints of a Service with a selector are ready, and their nodes: its pods
/// (read directly, so the answer does not depend on an endpoints controller — one that cannot
/// publish a pod's address still leaves the pod serving).
async fn ready_pods(
    host: &kube::Client,
    namespace: &str,
    selector: &str,
) -> Result<(usize, Vec<String>), String> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), namespace);
    let pods = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| format!("cannot read the pods of {namespace} ({selector}): {e}"))?;
    let mut ready = 0;
    let mut nodes = Vec::new();
    for p in &pods.items {
        let serving = p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if serving {
            ready += 1;
            nodes.extend(p.spec.as_ref().and_then(|s| s.node_name.clone()));
        }
    }
    Ok((ready, nodes))
}

/// How many endpoints of a Service without a selector are ready, and their nodes: its
/// EndpointSlices.
async fn ready_endpoints(
    host: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(usize, Vec<String>), String> {
    let slices: Api<EndpointSlice> = Api::namespaced(host.clone(), namespace);
    let slices = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(|e| format!("cannot read the endpoints of {namespace}/{name}: {e}"))?;
    let mut nodes = Vec::new();
    let mut ready = 0;
    for e in slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
    {
        if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
            continue;
        }
        ready += 1;
        nodes.extend(e.node_name.clone());
    }
    Ok((ready, nodes))
}

/// Whether every one of `nodes` is a simulated node.
async fn all_simulated(host: &kube::Client, nodes: &[String]) -> bool {
    let api: Api<Node> = Api::all(host.clone());
    for n in nodes {
        let simulated = api.get_opt(n).await.ok().flatten().is_some_and(|node| {
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SIMULATED_NODE_LABEL))
                .is_some_and(|v| v == "true")
        });
        if !simulated {
            return false;
        }
    }
    true
}

/// The host cluster's own Services (`fabrik up`).
pub struct OwnServices(pub Arc<HostServices>);

#[async_trait::async_trait]
impl Backends for OwnServices {
    async fn locate(&self, service: &Value, port: u16) -> Result<Backend, String> {
        let meta = &service["metadata"];
        self.0
            .locate_host(
                meta["namespace"].as_str().unwrap_or(""),
                meta["name"].as_str().unwrap_or(""),
                port,
            )
            .await
    }
}

/// A tenant's Services, served by their copies on the host.
pub struct TenantServices {
    tenant: String,
    host: Arc<HostServices>,
}

impl TenantServices {
    /// The Services of `tenant`.
    pub fn new(tenant: &str, host: Arc<HostServices>) -> TenantServices {
        TenantServices {
            tenant: tenant.to_string(),
            host,
        }
    }
}

#[async_trait::async_trait]
impl Backends for TenantServices {
    async fn locate(&self, service: &Value, port: u16) -> Result<Backend, String> {
        let meta = &service["metadata"];
        let (ns, name) = (
            meta["namespace"].as_str().unwrap_or(""),
            meta["name"].as_str().unwrap_or(""),
        );
        self.host
            .locate_host(
                &fabrik_api::naming::host_namespace(&self.tenant),
                &fabrik_api::naming::host_name(name, ns, &self.tenant),
                port,
            )
            .await
            .map_err(|e| format!("service {ns}/{name}: {e}"))
    }
}

/// `backends`, or local processes first where `--local-backends` allows them.
pub fn with_local(
    backends: Arc<dyn Backends>,
    local: Option<&RangeInclusive<u16>>,
) -> Arc<dyn Backends> {
    match local {
        Some(ports) => Arc::new(LocalPorts::new(ports.clone(), backends)),
        None => backends,
    }
}
