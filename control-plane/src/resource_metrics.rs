//! Where the built-in `metrics.k8s.io` of each cluster gets its figures
//! ([`fabrik_apiserver::resource_metrics`]):
//!
//! - [`SimulatedUsage`], `fabrik up`'s host: its simulated nodes run no process, so a running
//!   container is reported using what it requests (CPU and memory; 1m and 8 MiB without a
//!   request) — or what the pod's annotations [`CPU_USAGE_ANNOTATION`] and
//!   [`MEMORY_USAGE_ANNOTATION`] say each of its containers uses, so a test (or a user trying
//!   an autoscaler) can drive the figures; tenants' pods keep them on their host copies — and
//!   each simulated node its pods plus [`NODE_BASE_CPU_NANOCORES`] and
//!   [`NODE_BASE_MEMORY_BYTES`] for the system. Pods on nodes that are not simulated are not
//!   reported (a real kubelet would).
//! - [`HostMetrics`], a tenant: the host's own metrics API (the built-in one above on
//!   `fabrik up`, metrics-server on a real host) for the tenant's host namespace, the host pods
//!   named back as the tenant's, and the nodes' figures as the host has them.

use std::sync::OnceLock;

use fabrik_apiserver::resource_metrics::{
    parse_cpu, parse_gpu, parse_memory, ContainerUsage, NodeUsage, PodUsage, ResourceMetrics,
    GPU_RESOURCE,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Map, Value};

/// The CPU a simulated node's system is reported to use.
pub const NODE_BASE_CPU_NANOCORES: u64 = 100_000_000;
/// The memory a simulated node's system is reported to use.
pub const NODE_BASE_MEMORY_BYTES: u64 = 512 * 1024 * 1024;
/// A container without a CPU request is reported using this.
const IDLE_CPU_NANOCORES: u64 = 1_000_000;
/// A container without a memory request is reported using this.
const IDLE_MEMORY_BYTES: u64 = 8 * 1024 * 1024;

const SIMULATED_NODE_LABEL: &str = "fabrik.dev/simulated";

/// A pod annotation: the CPU each of its containers is reported to use (a quantity).
pub const CPU_USAGE_ANNOTATION: &str = fabrik_api::sim::CPU_USAGE;
/// A pod annotation: the memory each of its containers is reported to use (a quantity).
pub const MEMORY_USAGE_ANNOTATION: &str = fabrik_api::sim::MEMORY_USAGE;

fn labels_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Map<String, Value> {
    meta.labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// The simulated usage of a running pod's containers.
fn simulated_containers(pod: &Pod) -> Vec<ContainerUsage> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let annotated = |key: &str| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let (cpu, memory) = (
        annotated(CPU_USAGE_ANNOTATION).and_then(|q| parse_cpu(&q)),
        annotated(MEMORY_USAGE_ANNOTATION).and_then(|q| parse_memory(&q)),
    );
    let gpu_percent =
        fabrik_api::sim::gpu_utilization(pod.metadata.annotations.as_ref()).unwrap_or(100);
    spec.containers
        .iter()
        .map(|c| {
            let request = |key: &str| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get(key))
                    .map(|q| q.0.clone())
            };
            ContainerUsage {
                name: c.name.clone(),
                cpu_nanocores: cpu
                    .or_else(|| request("cpu").and_then(|q| parse_cpu(&q)))
                    .unwrap_or(IDLE_CPU_NANOCORES),
                memory_bytes: memory
                    .or_else(|| request("memory").and_then(|q| parse_memory(&q)))
                    .unwrap_or(IDLE_MEMORY_BYTES),
                gpu_millis: request(GPU_RESOURCE)
                    .and_then(|q| parse_gpu(&q))
                    .filter(|g| *g > 0)
                    .map(|g| g * gpu_percent / 100),
            }
        })
        .collect()
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// `fabrik up`'s host: the usage its simulated nodes report (see the module).
#[derive(Default)]
pub struct SimulatedUsage {
    host: OnceLock<kube::Client>,
}

impl std::fmt::Debug for SimulatedUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedUsage").finish_non_exhaustive()
    }
}

impl SimulatedUsage {
    /// Reads the host through `host` from now on (set once the host serves).
    pub fn set_client(&self, host: kube::Client) {
        let _ = self.host.set(host);
    }

    fn client(&self) -> Result<kube::Client, String> {
        self.host
            .get()
            .cloned()
            .ok_or_else(|| "the host is still starting".to_string())
    }

    async fn simulated_nodes(&self, client: &kube::Client) -> Result<Vec<Node>, String> {
        let nodes: Api<Node> = Api::all(client.clone());
        Ok(nodes
            .list(&ListParams::default().labels(&format!("{SIMULATED_NODE_LABEL}=true")))
            .await
            .map_err(|e| e.to_string())?
            .items)
    }
}

#[async_trait::async_trait]
impl ResourceMetrics for SimulatedUsage {
    async fn nodes(&self) -> Result<Vec<NodeUsage>, String> {
        let client = self.client()?;
        let nodes = self.simulated_nodes(&client).await?;
        let pods: Api<Pod> = Api::all(client);
        let pods = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        Ok(nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let on_node = pods.iter().filter(|p| {
                    running(p)
                        && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)
                });
                let (mut cpu, mut memory) = (NODE_BASE_CPU_NANOCORES, NODE_BASE_MEMORY_BYTES);
                let mut gpu: Option<u64> = None;
                for c in on_node.flat_map(simulated_containers) {
                    cpu = cpu.saturating_add(c.cpu_nanocores);
                    memory = memory.saturating_add(c.memory_bytes);
                    if let Some(g) = c.gpu_millis {
                        gpu = Some(gpu.unwrap_or(0).saturating_add(g));
                    }
                }
                NodeUsage {
                    name,
                    labels: labels_of(&n.metadata),
                    cpu_nanocores: cpu,
                    memory_bytes: memory,
                    gpu_millis: gpu,
                }
            })
            .collect())
    }

    async fn pods(&self, namespace: Option<&str>) -> Result<Vec<PodUsage>, String> {
        let client = self.client()?;
        let simulated: Vec<String> = self
            .simulated_nodes(&client)
            .await?
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let api: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let pods = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        Ok(pods
            .iter()
            .filter(|p| running(p))
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| simulated.contains(n))
            })
            .map(|p| PodUsage {
                namespace: p.metadata.namespace.clone().unwrap_or_default(),
                name: p.metadata.name.clone().unwrap_or_default(),
                labels: labels_of(&p.metadata),
                containers: simulated_containers(p),
            })
            .collect())
    }
}

/// A tenant's figures: its host's metrics API, the host pods named back (see the module).
pub struct HostMetrics {
    host: kube::Client,
    tenant: String,
}

impl std::fmt::Debug for HostMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMetrics")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl HostMetrics {
    /// The figures of `tenant` from `host`.
    pub fn new(host: kube::Client, tenant: &str) -> HostMetrics {
        HostMetrics {
            host,
            tenant: tenant.to_string(),
        }
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.host
            .request::<Value>(req)
            .await
            .map_err(|e| format!("the host's metrics API: {e}"))
    }
}

fn usage_of(v: &Value) -> (u64, u64, Option<u64>) {
    (
        v["cpu"].as_str().and_then(parse_cpu).unwrap_or(0),
        v["memory"].as_str().and_then(parse_memory).unwrap_or(0),
        v[GPU_RESOURCE].as_str().and_then(parse_gpu),
    )
}

#[async_trait::async_trait]
impl ResourceMetrics for HostMetrics {
    async fn nodes(&self) -> Result<Vec<NodeUsage>, String> {
        let list = self.get("/apis/metrics.k8s.io/v1beta1/nodes").await?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let (cpu, memory, gpu) = usage_of(&n["usage"]);
                NodeUsage {
                    name: n["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    labels: n["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    cpu_nanocores: cpu,
                    memory_bytes: memory,
                    gpu_millis: gpu,
                }
            })
            .collect())
    }

    async fn pods(&self, namespace: Option<&str>) -> Result<Vec<PodUsage>, String> {
        let host_ns = fabrik_api::naming::host_namespace(&self.tenant);
        let metrics = self
            .get(&format!(
                "/apis/metrics.k8s.io/v1beta1/namespaces/{host_ns}/pods"
            ))
            .await?;
        // The host pods, for their names in the tenant and their tenant labels.
        let pods: Api<Pod> = Api::namespaced(self.host.clone(), &host_ns);
        let pods = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let mut out = Vec::new();
        for m in metrics["items"].as_array().into_iter().flatten() {
            let host_name = m["metadata"]["name"].as_str().unwrap_or("");
            let Some(pod) = pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(host_name))
            else {
                continue;
            };
            let Ok(host_obj) = serde_json::to_value(pod) else {
                continue;
            };
            let Some(origin) = syncer::naming::origin(&host_obj) else {
                continue;
            };
            if origin.tenant != self.tenant || namespace.is_some_and(|ns| ns != origin.namespace) {
                continue;
            }
            let containers = m["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let (cpu, memory, gpu) = usage_of(&c["usage"]);
                    ContainerUsage {
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        cpu_nanocores: cpu,
                        memory_bytes: memory,
                        gpu_millis: gpu,
                    }
                })
                .collect();
            out.push(PodUsage {
                namespace: origin.namespace.clone(),
                name: origin.name.clone(),
                labels: syncer::naming::tenant_labels(&host_obj)
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect(),
                containers,
            });
        }
        Ok(out)
    }
}
