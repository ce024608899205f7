//! GPU requests and capacity across the tenant boundary.
//!
//! A tenant requests GPUs by NVIDIA's device-plugin names. `nvidia.com/gpu` is the kind its
//! Tenant's `gpuSharing` names; the further kinds of `gpuTypes` are requested by their own
//! names: `nvidia.com/mig-<profile>` for a MIG instance, `nvidia.com/gpu.shared` for a
//! shared or time-sliced GPU (NVIDIA's `renameByDefault` name), `nvidia.com/gpu` for a whole
//! GPU. On the host, each is the resource of its kind: a whole GPU (`nvidia.com/gpu`), a MIG
//! instance (`nvidia.com/mig-<profile>`), a time-sliced replica (`nvidia.com/gpu.shared`), or
//! a capped share that the node agent publishes and enforces
//! (`fabrik.dev/shared-gpu-<MiB>mib-<pct>pct`, the name `node-agent`'s `SharedSlice` uses).
//! Node capacity goes the other way: the tenant sees each of its kinds under its tenant name,
//! and no other accelerator resource.

use fabrik_api::{RESOURCE_GPU, RESOURCE_GPU_SHARED};
use serde_json::{Map, Value};

use crate::policy::{GpuSharing, Policy};

/// The host resource that serves one GPU of kind `sharing`.
pub fn host_resource(sharing: &GpuSharing) -> String {
    match sharing {
        GpuSharing::Whole => RESOURCE_GPU.to_string(),
        GpuSharing::Mig(profile) => format!("nvidia.com/mig-{profile}"),
        GpuSharing::Shared {
            memory_mib,
            compute_pct,
        } => format!(
            "{}{memory_mib}mib-{compute_pct}pct",
            fabrik_api::SHARED_GPU_PREFIX
        ),
        GpuSharing::TimeSliced => RESOURCE_GPU_SHARED.to_string(),
    }
}

/// The name a tenant requests a GPU of kind `sharing` by (besides `nvidia.com/gpu` for its
/// default kind).
pub fn tenant_resource(sharing: &GpuSharing) -> String {
    match sharing {
        GpuSharing::Whole => RESOURCE_GPU.to_string(),
        GpuSharing::Mig(profile) => format!("nvidia.com/mig-{profile}"),
        GpuSharing::Shared { .. } | GpuSharing::TimeSliced => RESOURCE_GPU_SHARED.to_string(),
    }
}

/// Every kind of GPU the tenant may request, its default first.
pub fn kinds(policy: &Policy) -> impl Iterator<Item = &GpuSharing> {
    std::iter::once(&policy.gpu_sharing).chain(policy.gpu_types.iter())
}

/// The host resource a tenant's request for resource `name` is served by, if `name` is a GPU
/// kind the tenant may request.
pub fn host_for(name: &str, policy: &Policy) -> Option<String> {
    if name == RESOURCE_GPU {
        return Some(host_resource(&policy.gpu_sharing));
    }
    kinds(policy)
        .find(|k| tenant_resource(k) == name)
        .map(host_resource)
}

/// The GPU resource names the tenant may request.
pub fn tenant_names(policy: &Policy) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once(RESOURCE_GPU.to_string())
        .chain(kinds(policy).map(tenant_resource))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether a resource name is one a tenant container may request (before mapping).
pub fn is_allowed_request(name: &str, policy: &Policy) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || host_for(name, policy).is_some()
}

/// Whether a resource name is an accelerator resource only Fabrik hands out.
pub fn is_accelerator(name: &str) -> bool {
    name.starts_with("nvidia.com/") || name.starts_with(fabrik_api::RESERVED_PREFIX)
}

/// `a + b` for two integer quantities (GPU counts are integers); `a` when either is not one.
fn add_counts(a: &Value, b: &Value) -> Value {
    let n = |v: &Value| v.as_str().and_then(|s| s.trim().parse::<i64>().ok());
    match (n(a), n(b)) {
        (Some(x), Some(y)) => Value::String(x.saturating_add(y).to_string()),
        _ => a.clone(),
    }
}

/// Maps a container's `requests` or `limits` to the host: allowed resources kept, each GPU
/// request renamed to its kind's host resource (two names of one kind summed), anything else
/// dropped.
pub fn map_resource_list(list: &Value, policy: &Policy) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(list) = list.as_object() else {
        return out;
    };
    for (name, quantity) in list {
        if !is_allowed_request(name, policy) {
            continue;
        }
        let host = host_for(name, policy).unwrap_or_else(|| name.clone());
        let sum = match out.get(&host) {
            Some(before) => add_counts(before, quantity),
            None => quantity.clone(),
        };
        out.insert(host, sum);
    }
    out
}

/// A host node's `capacity` or `allocatable` as the tenant sees it: cpu, memory, pods,
/// ephemeral storage and hugepages as they are, and each of the tenant's GPU kinds under its
/// tenant name (`nvidia.com/gpu` its default kind).
pub fn tenant_node_resources(host: &Value, policy: &Policy) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(list) = host.as_object() else {
        return out;
    };
    for (name, quantity) in list {
        if matches!(
            name.as_str(),
            "cpu" | "memory" | "pods" | "ephemeral-storage"
        ) || name.starts_with("hugepages-")
        {
            out.insert(name.clone(), quantity.clone());
        }
    }
    for kind in kinds(policy) {
        if let Some(q) = list.get(&host_resource(kind)) {
            out.insert(tenant_resource(kind), q.clone());
        }
    }
    if let Some(q) = list.get(&host_resource(&policy.gpu_sharing)) {
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

    fn only(sharing: GpuSharing) -> Policy {
        Policy {
            gpu_sharing: sharing,
            ..Default::default()
        }
    }

    #[test]
    fn requests_map_by_mode() {
        let req = json!({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"});
        let whole = map_resource_list(&req, &only(GpuSharing::Whole));
        assert_eq!(whole["nvidia.com/gpu"], "2");
        let mig = map_resource_list(&req, &only(GpuSharing::Mig("1g.18gb".into())));
        assert_eq!(mig["nvidia.com/mig-1g.18gb"], "2");
        assert!(!mig.contains_key("nvidia.com/gpu"));
        let s = map_resource_list(&req, &only(shared()));
        assert_eq!(s["fabrik.dev/shared-gpu-20480mib-25pct"], "2");
        assert_eq!(s["cpu"], "1");
        assert_eq!(s.len(), 3);
        let t = map_resource_list(&req, &only(GpuSharing::TimeSliced));
        assert_eq!(t["nvidia.com/gpu.shared"], "2");
        assert!(!t.contains_key("nvidia.com/gpu"), "never a whole GPU");
    }

    #[test]
    fn a_tenant_with_several_kinds_requests_each_by_nvidias_name() {
        let p = Policy {
            gpu_sharing: GpuSharing::Whole,
            gpu_types: vec![
                GpuSharing::Mig("1g.18gb".into()),
                GpuSharing::Mig("3g.71gb".into()),
                GpuSharing::TimeSliced,
            ],
            ..Default::default()
        };
        let req = json!({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.18gb": "2",
            "nvidia.com/gpu.shared": "1", "nvidia.com/mig-7g.141gb": "1"});
        let out = map_resource_list(&req, &p);
        assert_eq!(out["nvidia.com/gpu"], "1");
        assert_eq!(out["nvidia.com/mig-1g.18gb"], "2");
        assert_eq!(out["nvidia.com/gpu.shared"], "1");
        assert!(
            !out.contains_key("nvidia.com/mig-7g.141gb"),
            "not one of its kinds"
        );
        assert_eq!(
            tenant_names(&p),
            [
                "nvidia.com/gpu",
                "nvidia.com/gpu.shared",
                "nvidia.com/mig-1g.18gb",
                "nvidia.com/mig-3g.71gb"
            ]
        );
        // Its default requested by both names: one host request, summed.
        let mig = Policy {
            gpu_sharing: GpuSharing::Mig("1g.18gb".into()),
            ..Default::default()
        };
        let both = json!({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.18gb": "2"});
        let out = map_resource_list(&both, &mig);
        assert_eq!(out.len(), 1);
        assert_eq!(out["nvidia.com/mig-1g.18gb"], "3");
    }

    #[test]
    fn foreign_resources_never_reach_the_host() {
        let req = json!({"nvidia.com/mig-7g.141gb": "1", "fabrik.dev/shared-gpu-1mib-1pct": "1",
            "nvidia.com/gpu.shared": "1", "example.com/fpga": "1", "memory": "1Gi"});
        let out = map_resource_list(&req, &only(GpuSharing::Whole));
        assert_eq!(out.len(), 1);
        assert_eq!(out["memory"], "1Gi");
    }

    #[test]
    fn node_capacity_is_the_tenant_share() {
        let cap = json!({"cpu": "64", "memory": "1Ti", "pods": "110",
            "nvidia.com/gpu": "4", "nvidia.com/mig-1g.18gb": "7", "nvidia.com/gpu.shared": "8",
            "fabrik.dev/shared-gpu-20480mib-25pct": "12", "example.com/x": "1"});
        let whole = tenant_node_resources(&cap, &only(GpuSharing::Whole));
        assert_eq!(whole["nvidia.com/gpu"], "4");
        assert_eq!(whole.len(), 4);
        let mig = tenant_node_resources(&cap, &only(GpuSharing::Mig("1g.18gb".into())));
        assert_eq!(mig["nvidia.com/gpu"], "7");
        assert_eq!(mig["nvidia.com/mig-1g.18gb"], "7");
        let s = tenant_node_resources(&cap, &only(shared()));
        assert_eq!(s["nvidia.com/gpu"], "12");
        assert_eq!(s["nvidia.com/gpu.shared"], "12");
        let none = tenant_node_resources(&json!({"cpu": "1"}), &only(GpuSharing::Whole));
        assert!(!none.contains_key("nvidia.com/gpu"));
        let several = Policy {
            gpu_sharing: GpuSharing::Whole,
            gpu_types: vec![GpuSharing::Mig("1g.18gb".into()), GpuSharing::TimeSliced],
            ..Default::default()
        };
        let n = tenant_node_resources(&cap, &several);
        assert_eq!(n["nvidia.com/gpu"], "4");
        assert_eq!(n["nvidia.com/mig-1g.18gb"], "7");
        assert_eq!(n["nvidia.com/gpu.shared"], "8");
        assert!(!n.contains_key("fabrik.dev/shared-gpu-20480mib-25pct"));
    }
}
