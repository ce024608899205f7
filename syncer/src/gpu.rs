//! GPU requests and capacity across the tenant boundary.
//!
//! Tenants always speak `nvidia.com/gpu`. On the host, one requested GPU is the resource of the
//! tenant's sharing mode: a whole GPU (`nvidia.com/gpu`), a MIG instance
//! (`nvidia.com/mig-<profile>`), or a capped share that the node agent publishes and enforces
//! (`fabrik.dev/shared-gpu-<MiB>mib-<pct>pct`, the name `node-agent`'s `SharedSlice` uses).
//! Node capacity goes the other way: the tenant sees, as `nvidia.com/gpu`, the count of the
//! host resource its mode uses, and no other accelerator resource.

use fabrik_api::RESOURCE_GPU;
use serde_json::{Map, Value};

use crate::policy::GpuSharing;

/// The host resource that serves one tenant GPU.
pub fn host_resource(sharing: &GpuSharing) -> String {
    match sharing {
        GpuSharing::Whole => RESOURCE_GPU.to_string(),
        GpuSharing::Mig(profile) => format!("nvidia.com/mig-{profile}"),
        GpuSharing::Shared {
            memory_mib,
            compute_pct,
        } => format!("fabrik.dev/shared-gpu-{memory_mib}mib-{compute_pct}pct"),
    }
}

/// Whether a resource name is one a tenant container may request (before mapping).
pub fn is_allowed_request(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || name == RESOURCE_GPU
}

/// Whether a resource name is an accelerator resource only Fabrik hands out.
pub fn is_accelerator(name: &str) -> bool {
    name.starts_with("nvidia.com/") || name.starts_with(fabrik_api::RESERVED_PREFIX)
}

/// Maps a container's `requests` or `limits` to the host: allowed resources kept, the GPU
/// request renamed by sharing mode, anything else dropped.
pub fn map_resource_list(list: &Value, sharing: &GpuSharing) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(list) = list.as_object() else {
        return out;
    };
    for (name, quantity) in list {
        if !is_allowed_request(name) {
            continue;
        }
        if name == RESOURCE_GPU {
            out.insert(host_resource(sharing), quantity.clone());
        } else {
            out.insert(name.clone(), quantity.clone());
        }
    }
    out
}

/// A host node's `capacity` or `allocatable` as the tenant sees it: cpu, memory, pods,
/// ephemeral storage and hugepages as they are, and the tenant's GPU resource as
/// `nvidia.com/gpu`.
pub fn tenant_node_resources(host: &Value, sharing: &GpuSharing) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(list) = host.as_object() else {
        return out;
    };
    let gpu = host_resource(sharing);
    for (name, quantity) in list {
        if matches!(
            name.as_str(),
            "cpu" | "memory" | "pods" | "ephemeral-storage"
        ) || name.starts_with("hugepages-")
        {
            out.insert(name.clone(), quantity.clone());
        }
    }
    if let Some(q) = list.get(&gpu) {
        out.insert(RESOURCE_GPU.to_string(), q.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shared() -> GpuSharing {
        GpuSharing::Shared {
            memory_mib: 20480,
            compute_pct: 25,
        }
    }

    #[test]
    fn requests_map_by_mode() {
        let req = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"});
        let whole = map_resource_list(&req, &GpuSharing::Whole);
        assert_eq!(whole["nvidia.com/gpu"], "2");
        let mig = map_resource_list(&req, &GpuSharing::Mig("1g.18gb".into()));
        assert_eq!(mig["nvidia.com/mig-1g.18gb"], "2");
        assert!(!mig.contains_key("nvidia.com/gpu"));
        let s = map_resource_list(&req, &shared());
        assert_eq!(s["fabrik.dev/shared-gpu-20480mib-25pct"], "2");
        assert_eq!(s["cpu"], "1");
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn foreign_resources_never_reach_the_host() {
        let req = json!({"nvidia.com/mig-7g.141gb": "1", "fabrik.dev/shared-gpu-1mib-1pct": "1",
            "example.com/fpga": "1", "memory": "1Gi"});
        let out = map_resource_list(&req, &GpuSharing::Whole);
        assert_eq!(out.len(), 1);
        assert_eq!(out["memory"], "1Gi");
    }

    #[test]
    fn node_capacity_is_the_tenant_share() {
        let cap = json!({"cpu": "64", "memory": "1Ti", "pods": "110",
            "nvidia.com/gpu": "4", "nvidia.com/mig-1g.18gb": "7",
            "fabrik.dev/shared-gpu-20480mib-25pct": "12", "example.com/x": "1"});
        let whole = tenant_node_resources(&cap, &GpuSharing::Whole);
        assert_eq!(whole["nvidia.com/gpu"], "4");
        assert_eq!(whole.len(), 4);
        let mig = tenant_node_resources(&cap, &GpuSharing::Mig("1g.18gb".into()));
        assert_eq!(mig["nvidia.com/gpu"], "7");
        assert!(!mig.contains_key("nvidia.com/mig-1g.18gb"));
        let s = tenant_node_resources(&cap, &shared());
        assert_eq!(s["nvidia.com/gpu"], "12");
        let none = tenant_node_resources(&json!({"cpu": "1"}), &GpuSharing::Whole);
        assert!(!none.contains_key("nvidia.com/gpu"));
    }
}
