//! Host Node → the Node a tenant sees: the nodes of its pool ([`crate::policy::Policy::pool_includes`])
//! and those its pods run on, with allow-listed labels,
//! cpu / memory / pods as they are and GPU capacity as the tenant's share (see [`crate::gpu`]).
//! Taints, annotations and the node's other extended resources stay on the host.

use fabrik_api::LABEL_SYNCED_NODE;
use serde_json::{json, Map, Value};

use crate::gpu;
use crate::policy::Policy;

/// Node label prefixes and keys shown to tenants.
const SHOWN_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/",
    fabrik_api::LABEL_GPU_MODEL,
    fabrik_api::LABEL_GPU_MEMORY_MIB,
    fabrik_api::LABEL_GPU_ARCHITECTURE,
];

/// The tenant's Node for a host Node: `metadata` and `spec` (for create / update) and `status`
/// (for the status subresource).
pub fn tenant_node(host: &Value, policy: &Policy) -> (Value, Map<String, Value>) {
    let mut labels = Map::new();
    if let Some(l) = host["metadata"]["labels"].as_object() {
        for (k, v) in l {
            if SHOWN_LABELS
                .iter()
                .any(|s| k == s || (s.ends_with('/') && k.starts_with(s)))
            {
                labels.insert(k.clone(), v.clone());
            }
        }
    }
    labels.insert(LABEL_SYNCED_NODE.into(), json!("true"));
    let mut spec = Map::new();
    if host["spec"]["unschedulable"].as_bool() == Some(true) {
        spec.insert("unschedulable".into(), json!(true));
    }
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": host["metadata"]["name"], "labels": labels}, "spec": spec});
    let hs = &host["status"];
    let mut status = Map::new();
    status.insert(
        "capacity".into(),
        Value::Object(gpu::tenant_node_resources(&hs["capacity"], policy)),
    );
    status.insert(
        "allocatable".into(),
        Value::Object(gpu::tenant_node_resources(&hs["allocatable"], policy)),
    );
    for f in ["conditions", "addresses", "daemonEndpoints"] {
        if !hs[f].is_null() {
            status.insert(f.into(), hs[f].clone());
        }
    }
    if let Some(info) = hs["nodeInfo"].as_object() {
        let mut o = Map::new();
        for f in [
            "architecture",
            "operatingSystem",
            "osImage",
            "kernelVersion",
            "kubeletVersion",
            "kubeProxyVersion",
            "containerRuntimeVersion",
        ] {
            if let Some(v) = info.get(f) {
                o.insert(f.into(), v.clone());
            }
        }
        status.insert("nodeInfo".into(), Value::Object(o));
    }
    (node, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_shows_the_tenant_share_only() {
        let host = json!({"metadata": {"name": "gpu-1", "labels": {
                "kubernetes.io/hostname": "gpu-1", "topology.kubernetes.io/zone": "z1",
                "pool": "secret-pool", "fabrik.dev/gpu-model": "H200-141GB"},
                "annotations": {"x": "y"}},
            "spec": {"taints": [{"key": "pool", "effect": "NoSchedule"}], "providerID": "p"},
            "status": {"capacity": {"cpu": "64", "nvidia.com/gpu": "1", "nvidia.com/mig-1g.18gb": "7"},
                "allocatable": {"cpu": "63", "nvidia.com/mig-1g.18gb": "5"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.35.0", "machineID": "m", "bootID": "b"}}});
        let policy = Policy {
            gpu_sharing: crate::policy::GpuSharing::Mig("1g.18gb".into()),
            ..Default::default()
        };
        let (node, status) = tenant_node(&host, &policy);
        assert_eq!(node["metadata"]["name"], "gpu-1");
        let labels = node["metadata"]["labels"].as_object().map(|l| l.len());
        assert_eq!(labels, Some(4));
        assert!(node["metadata"].get("annotations").is_none());
        assert!(node["spec"].get("taints").is_none());
        assert_eq!(
            status["capacity"],
            json!({"cpu": "64", "nvidia.com/gpu": "7", "nvidia.com/mig-1g.18gb": "7"})
        );
        assert_eq!(
            status["allocatable"],
            json!({"cpu": "63", "nvidia.com/gpu": "5", "nvidia.com/mig-1g.18gb": "5"})
        );
        assert_eq!(status["nodeInfo"], json!({"kubeletVersion": "v1.35.0"}));
    }
}
