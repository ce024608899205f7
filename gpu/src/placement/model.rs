//! What the scheduler sees: nodes with what is free on them (resources and GPU devices) and
//! pending pods with what they ask for, built from API objects. Pure.
//!
//! Free resources are the Node's `allocatable` minus the requests of every pod bound to it that
//! has not finished (terminating pods still hold theirs, as on a real cluster). GPU devices come
//! from the node's DRA ResourceSlice; a device is in use when a bound pod's
//! `fabrik.dev/gpu-ids` annotation names it (a time-sliced GPU has one slot per replica).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::api::resource::v1::{DeviceAttribute, ResourceSlice};

use crate::quantity;

/// One schedulable GPU device of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuDevice {
    /// DRA device name (`gpu-3`, `gpu-1-mig-4`, `gpu-2-shared-0`).
    pub name: String,
    /// Device UUID (a MIG UUID, or the GPU's for whole and shared devices).
    pub uuid: String,
    /// The extended resource it counts as.
    pub resource: String,
    /// Index of the physical GPU.
    pub gpu: i64,
    /// NUMA node of the GPU (0 when unknown).
    pub numa: i64,
    /// NVLink island of the GPU (its own index when unknown: no links).
    pub island: i64,
    /// How many pods may hold it at once (time-slicing replicas, else 1).
    pub slots: i64,
    /// How many hold it now.
    pub used: i64,
}

impl GpuDevice {
    /// Whether another pod may take it.
    pub fn free(&self) -> bool {
        self.used < self.slots
    }
}

/// A node as the scheduler sees it.
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// Ready and not cordoned.
    pub schedulable: bool,
    /// Free amount per resource (`cpu` in millicores).
    pub free: BTreeMap<String, i64>,
    /// GPU devices.
    pub devices: Vec<GpuDevice>,
    /// The pods on it that hold resources (and those placed on it this round), for pod
    /// affinity.
    pub pods: Vec<super::affinity::Placed>,
}

/// A pending pod as the scheduler sees it.
#[derive(Clone, Debug, Default)]
pub struct PodRequest {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (binding precondition).
    pub uid: String,
    /// Requested amount per resource, `pods: 1` included.
    pub requests: BTreeMap<String, i64>,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// Required node affinity (`requiredDuringSchedulingIgnoredDuringExecution`, as JSON; Null
    /// when there is none): label terms and `metadata.name` pins (a daemon pod's).
    pub node_affinity: serde_json::Value,
    /// Gang name and size, when the pod declares one.
    pub gang: Option<(String, usize)>,
    /// What its ResourceClaims need (see [`super::claims`]).
    pub claims: Vec<super::claims::ClaimNeed>,
    /// The devices of each kind its claims take ([`super::claims::Needs::devices_by_kind`]):
    /// what the GPU queue counts them as, beside `requests` (placement goes by `claims`).
    pub claimed: BTreeMap<String, i64>,
    /// Its labels.
    pub labels: serde_json::Map<String, serde_json::Value>,
    /// Its required pod affinity and anti-affinity.
    pub pod_affinity: super::affinity::Required,
}

/// Whether `resource` is a GPU resource placed on devices.
pub fn is_gpu_resource(resource: &str) -> bool {
    resource == "nvidia.com/gpu"
        || resource == fabrik_api::RESOURCE_GPU_SHARED
        || resource.starts_with("nvidia.com/mig-")
        || resource.starts_with("fabrik.dev/shared-gpu-")
}

/// Requests of a pod as upstream's scheduler counts them (`PodRequests`, the one calculation
/// in `fabrik_machinery::resources`): app containers and sidecars (`restartPolicy: Always`
/// init containers) summed, other init containers as a maximum (with the sidecars started
/// before them), plus the overhead; requests default to limits; `pods: 1`. A quantity that
/// does not parse is an error.
pub fn requests(pod: &Pod) -> Result<BTreeMap<String, i64>, quantity::Error> {
    let Some(spec) = &pod.spec else {
        return Ok(BTreeMap::from([("pods".to_string(), 1)]));
    };
    // Every quantity must parse (the pod is refused otherwise).
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        if let Some(r) = &c.resources {
            for map in [&r.limits, &r.requests].into_iter().flatten() {
                for (k, q) in map {
                    quantity::amount(k, &q.0)?;
                }
            }
        }
    }
    let value = serde_json::to_value(pod).unwrap_or_default();
    let mut out = BTreeMap::new();
    for (k, q) in fabrik_machinery::resources::pod_requests(&value) {
        let n = quantity::amount(&k, &q.to_string())?;
        out.insert(k, n);
    }
    out.insert("pods".into(), 1);
    Ok(out)
}

fn meta_value<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    let m = &pod.metadata;
    m.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .or_else(|| m.annotations.as_ref().and_then(|a| a.get(key)))
        .map(String::as_str)
}

/// The gang a pod declares (`fabrik.dev/gang` and `fabrik.dev/gang-size`, as labels or
/// annotations). A size that is missing or not a positive number is an error message.
pub fn gang(pod: &Pod) -> Result<Option<(String, usize)>, String> {
    let Some(name) = meta_value(pod, fabrik_api::GANG) else {
        return Ok(None);
    };
    let size = meta_value(pod, fabrik_api::GANG_SIZE)
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!(
                "gang {name:?}: {} must be a positive number",
                fabrik_api::GANG_SIZE
            )
        })?;
    Ok(Some((name.to_string(), size)))
}

/// The pod as a request, or why it cannot be scheduled at all.
pub fn pod_request(pod: &Pod) -> Result<PodRequest, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let affinity_json = spec
        .affinity
        .as_ref()
        .and_then(|a| serde_json::to_value(a).ok())
        .unwrap_or_default();
    let mut pod_affinity = super::affinity::required(&affinity_json, &namespace)?;
    let spread = serde_json::to_value(&spec.topology_spread_constraints).unwrap_or_default();
    pod_affinity.spread = super::affinity::spread(&spread)?;
    Ok(PodRequest {
        labels: placed(pod).labels,
        pod_affinity,
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        requests: requests(pod).map_err(|e| e.to_string())?,
        node_selector: spec.node_selector.unwrap_or_default(),
        tolerations: spec.tolerations.unwrap_or_default(),
        node_affinity: spec
            .affinity
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or_default(),
        gang: gang(pod)?,
        claims: Vec::new(),
        claimed: BTreeMap::new(),
    })
}

/// A pod as pod affinity sees it: namespace and labels.
pub fn placed(pod: &Pod) -> super::affinity::Placed {
    super::affinity::Placed {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        labels: pod
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    }
}

/// Whether a pod is bound, not finished, so that it holds resources on its node.
pub fn holds_resources(pod: &Pod) -> Option<&str> {
    let node = pod.spec.as_ref()?.node_name.as_deref()?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) || node.is_empty() {
        return None;
    }
    Some(node)
}

/// The device names a pod holds (its `fabrik.dev/gpu-ids` annotation).
pub fn held_devices(pod: &Pod) -> Vec<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_IDS))
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn attr_str<'a>(a: &'a BTreeMap<String, DeviceAttribute>, k: &str) -> Option<&'a str> {
    a.get(k).and_then(|v| v.string.as_deref())
}

fn attr_int(a: &BTreeMap<String, DeviceAttribute>, k: &str) -> Option<i64> {
    a.get(k).and_then(|v| v.int)
}

/// The schedulable devices of a ResourceSlice.
pub fn devices(slice: &ResourceSlice) -> Vec<GpuDevice> {
    let mut out = Vec::new();
    for d in slice.spec.devices.iter().flatten() {
        let Some(a) = &d.attributes else { continue };
        let gpu = attr_int(a, "index").unwrap_or(0);
        let resource = match attr_str(a, "type") {
            Some("gpu") => "nvidia.com/gpu".to_string(),
            Some("timeslice") => fabrik_api::RESOURCE_GPU_SHARED.to_string(),
            Some("mig") => match attr_str(a, "migProfile") {
                Some(p) => format!("nvidia.com/mig-{p}"),
                None => continue,
            },
            Some("shared") => {
                let mib = d
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("memory"))
                    .and_then(|q| quantity::units(&q.value.0).ok())
                    .map(|b| b / (1024 * 1024));
                match (mib, attr_int(a, "computePercent")) {
                    (Some(mib), Some(pct)) => format!("fabrik.dev/shared-gpu-{mib}mib-{pct}pct"),
                    _ => continue,
                }
            }
            _ => continue,
        };
        out.push(GpuDevice {
            name: d.name.clone(),
            uuid: attr_str(a, "uuid").unwrap_or_default().to_string(),
            resource,
            gpu,
            numa: attr_int(a, "numaNode").unwrap_or(0),
            island: attr_int(a, "nvlinkIsland").unwrap_or(1000 + gpu),
            slots: attr_int(a, "timeSlicingReplicas").unwrap_or(1).max(1),
            used: 0,
        });
    }
    out
}

/// Node views from the API objects. `bound` are the pods that hold resources; `claimed` the
/// devices allocated to ResourceClaims, `(pool, device)` (the pool is the node's name).
pub fn nodes(
    nodes: &[Node],
    slices: &[ResourceSlice],
    pods: &[Pod],
    claimed: &[(String, String)],
) -> Vec<NodeView> {
    let mut views: Vec<NodeView> = nodes
        .iter()
        .map(|n| {
            let spec = n.spec.clone().unwrap_or_default();
            let status = n.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let mut free = BTreeMap::new();
            for (k, q) in status.allocatable.iter().flatten() {
                if let Ok(v) = quantity::amount(k, &q.0) {
                    free.insert(k.clone(), v);
                }
            }
            NodeView {
                name: n.metadata.name.clone().unwrap_or_default(),
                labels: n.metadata.labels.clone().unwrap_or_default(),
                taints: spec.taints.unwrap_or_default(),
                schedulable: ready && !spec.unschedulable.unwrap_or(false),
                free,
                devices: Vec::new(),
                pods: Vec::new(),
            }
        })
        .collect();
    for s in slices {
        if !super::claims::is_node_agent_slice(s) {
            continue;
        }
        let Some(node) = s.spec.node_name.as_deref() else {
            continue;
        };
        if let Some(v) = views.iter_mut().find(|v| v.name == node) {
            // NVIDIA's single MIG strategy: the node's MIG devices are its `nvidia.com/gpu`.
            let single =
                v.labels.get("nvidia.com/mig.strategy").map(String::as_str) == Some("single");
            v.devices.extend(devices(s).into_iter().map(|mut d| {
                if single && d.resource.starts_with("nvidia.com/mig-") {
                    d.resource = fabrik_api::RESOURCE_GPU.to_string();
                }
                d
            }));
        }
    }
    for p in pods {
        let Some(node) = holds_resources(p) else {
            continue;
        };
        let Some(v) = views.iter_mut().find(|v| v.name == node) else {
            continue;
        };
        v.pods.push(placed(p));
        // A pod whose requests cannot be read was refused by the API server's validation;
        // count nothing for it rather than guess.
        if let Ok(req) = requests(p) {
            for (k, n) in req {
                *v.free.entry(k).or_insert(0) -= n;
            }
        }
        for name in held_devices(p) {
            if let Some(d) = v.devices.iter_mut().find(|d| d.name == name) {
                d.used += 1;
            }
        }
    }
    for (pool, device) in claimed {
        let d = views
            .iter_mut()
            .filter(|v| v.name == *pool)
            .flat_map(|v| v.devices.iter_mut())
            .find(|d| d.name == *device);
        if let Some(d) = d {
            d.used += 1;
        }
    }
    views
}

#[cfg(test)]
mod requests_tests {
    use super::*;

    #[test]
    fn sidecars_count_with_the_app_containers() {
        let gpu = serde_json::json!({"limits": {"nvidia.com/gpu": "1"}});
        let pod: Pod = serde_json::from_value(serde_json::json!({"spec": {
            "initContainers": [
                {"name": "s", "restartPolicy": "Always", "resources": gpu},
                {"name": "i", "resources": {"requests": {"cpu": "3"}}},
            ],
            "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"},
                "requests": {"cpu": "500m"}}}],
        }}))
        .expect("pod");
        let r = requests(&pod).expect("requests");
        assert_eq!(r["nvidia.com/gpu"], 2);
        assert_eq!(r["cpu"], 3000);
        assert_eq!(r["pods"], 1);
        let bad: Pod = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "m", "resources": {"limits": {"cpu": "lots"}}}]}}))
        .expect("pod");
        assert!(requests(&bad).is_err());
    }
}
