//! The built-in resource metrics API (`metrics.k8s.io/v1beta1`: `nodes` and `pods`), so
//! `kubectl top` and CPU/memory HorizontalPodAutoscalers work without installing
//! metrics-server. The figures come from a [`ResourceMetrics`] source the cluster is given:
//! `fabrik up`'s host reads its simulated nodes, a tenant reads its host's metrics API and
//! names the pods back. An APIService registered for `v1beta1.metrics.k8s.io` (a real
//! metrics-server) takes precedence, as upstream.
//!
//! **Extension:** a container (and node) using GPUs also reports [`GPU_RESOURCE`] in its
//! `usage`: the GPUs it keeps busy, in GPU units (`500m` = half of one GPU's time). It is the
//! quantity its request is written in, so an autoscaler's `Resource` metric on
//! `nvidia.com/gpu` with a `Utilization` target scales on GPU utilisation. `kubectl top` and
//! clients that know only `cpu` and `memory` ignore it.

use serde_json::{json, Value};

/// The group and version served.
pub const GROUP: &str = "metrics.k8s.io";
/// The version served.
pub const VERSION: &str = "v1beta1";

/// The resource name of the GPU usage extension (see the module).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// One container's usage.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// CPU in nanocores.
    pub cpu_nanocores: u64,
    /// Memory in bytes (working set).
    pub memory_bytes: u64,
    /// GPUs kept busy, in thousandths of a GPU; None for a container without GPUs.
    pub gpu_millis: Option<u64>,
}

/// One pod's usage.
#[derive(Clone, Debug, PartialEq)]
pub struct PodUsage {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The pod's labels (for label selectors).
    pub labels: serde_json::Map<String, Value>,
    /// Its containers.
    pub containers: Vec<ContainerUsage>,
}

/// One node's usage.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeUsage {
    /// Node name.
    pub name: String,
    /// The node's labels.
    pub labels: serde_json::Map<String, Value>,
    /// CPU in nanocores.
    pub cpu_nanocores: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// GPUs kept busy by its pods, in thousandths of a GPU; None when none are used.
    pub gpu_millis: Option<u64>,
}

/// Where a cluster's resource metrics come from.
#[async_trait::async_trait]
pub trait ResourceMetrics: Send + Sync + std::fmt::Debug {
    /// The usage of every node the source knows.
    async fn nodes(&self) -> Result<Vec<NodeUsage>, String>;
    /// The usage of the pods of `namespace` (all namespaces when None).
    async fn pods(&self, namespace: Option<&str>) -> Result<Vec<PodUsage>, String>;
}

/// The measuring window reported (upstream metrics-server's default resolution).
pub const WINDOW: &str = "15s";

/// `n` nanocores as a quantity (`250m`, `1500n` below a millicore).
pub fn cpu_quantity(nanocores: u64) -> String {
    if nanocores.is_multiple_of(1_000_000) {
        format!("{}m", nanocores / 1_000_000)
    } else {
        format!("{nanocores}n")
    }
}

/// `b` bytes as a quantity (`Ki` when whole).
pub fn memory_quantity(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

/// The `APIResourceList` of the group version.
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics",
             "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics",
             "verbs": ["get", "list"]},
        ],
    })
}

/// A `NodeMetrics` object.
pub fn node_metrics(n: &NodeUsage, now: &str) -> Value {
    json!({
        "kind": "NodeMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": n.name, "labels": n.labels, "creationTimestamp": now},
        "timestamp": now, "window": WINDOW,
        "usage": usage(n.cpu_nanocores, n.memory_bytes, n.gpu_millis),
    })
}

/// A `usage` ResourceList.
fn usage(cpu_nanocores: u64, memory_bytes: u64, gpu_millis: Option<u64>) -> Value {
    let mut u =
        json!({"cpu": cpu_quantity(cpu_nanocores), "memory": memory_quantity(memory_bytes)});
    if let Some(g) = gpu_millis {
        u[GPU_RESOURCE] = json!(gpu_quantity(g));
    }
    u
}

/// `m` thousandths of a GPU as a quantity (`1`, `500m`).
pub fn gpu_quantity(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Parses a GPU quantity into thousandths of a GPU.
pub fn parse_gpu(q: &str) -> Option<u64> {
    let q: fabrik_machinery::quantity::Quantity = q.parse().ok()?;
    u64::try_from(q.milli_value()).ok()
}

/// A `PodMetrics` object.
pub fn pod_metrics(p: &PodUsage, now: &str) -> Value {
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|c| {
            json!({"name": c.name, "usage": usage(c.cpu_nanocores, c.memory_bytes, c.gpu_millis)})
        })
        .collect();
    json!({
        "kind": "PodMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": p.name, "namespace": p.namespace, "labels": p.labels,
                     "creationTimestamp": now},
        "timestamp": now, "window": WINDOW, "containers": containers,
    })
}

/// Parses a CPU quantity into nanocores (`250m`, `1`, `1500n`, `2.5`); None when negative
/// or not a quantity.
pub fn parse_cpu(q: &str) -> Option<u64> {
    let q: fabrik_machinery::quantity::Quantity = q.parse().ok()?;
    u64::try_from(q.nanos()).ok()
}

/// Parses a memory quantity into bytes.
pub fn parse_memory(q: &str) -> Option<u64> {
    let q: fabrik_machinery::quantity::Quantity = q.parse().ok()?;
    u64::try_from(q.value()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip() {
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(1_500), "1500n");
        assert_eq!(memory_quantity(10 * 1024 * 1024), "10240Ki");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(parse_cpu("250m"), Some(250_000_000));
        assert_eq!(parse_cpu("2"), Some(2_000_000_000));
        assert_eq!(parse_cpu("1500n"), Some(1_500));
        assert_eq!(parse_cpu("-1"), None);
        assert_eq!(parse_memory("64Mi"), Some(64 * 1024 * 1024));
    }
}
