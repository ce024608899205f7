//! What an object counts against a ResourceQuota, as upstream's quota evaluators
//! (`k8s.io/kubernetes/pkg/quota/v1/evaluator/core`) count it, and which quotas an object is
//! in (scopes and `scopeSelector`). One implementation for quota admission (namespace quotas
//! and a tenant's whole-cluster quota) and for the quota controller's `status.used`, so that
//! what is admitted and what is reported can never disagree.
//!
//! - every object: `count/<resource>[.<group>]`;
//! - pods: `pods`, `requests.<r>` / `limits.cpu|memory|ephemeral-storage` and the bare
//!   `cpu`, `memory`, `ephemeral-storage` (requests), from [`crate::resources`]'s pod
//!   calculation (sidecars included); a pod that has finished counts `count/pods` only;
//! - services: `services`, `services.loadbalancers` (a `LoadBalancer`) and
//!   `services.nodeports` (one per port of a `NodePort` or `LoadBalancer` Service; with
//!   `allocateLoadBalancerNodePorts: false`, the ports that name a `nodePort`);
//! - claims: `persistentvolumeclaims`, `requests.storage`, and both per storage class
//!   (`<class>.storageclass.storage.k8s.io/...`);
//! - configmaps, secrets, replicationcontrollers, resourcequotas: their legacy names;
//! - DRA ResourceClaims (`resource.k8s.io`): `<class>.deviceclass.resource.k8s.io/devices`
//!   per device class (a request's count; `All` as the most a request can get, 32; a
//!   `firstAvailable` request as its largest subrequest per class), and, for the classes of
//!   GPU drivers (`gpu.nvidia.com`, `mig.nvidia.com`: [`GPU_CLASS_KINDS`]), `requests.nvidia.com/gpu` as well — so that a
//!   GPU quota counts devices claimed as it counts devices requested by pods
//!   ([`counted_by`] names the kinds that share a resource).
//!
//! Scopes apply to pods only (a quota with scopes counts no other kind): `Terminating`,
//! `NotTerminating`, `BestEffort`, `NotBestEffort`, `PriorityClass` (with its operators) and
//! `CrossNamespacePodAffinity`; an unknown scope matches nothing.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity::{Format, Quantity};
use crate::resources::{self, saturating_add};

/// Usage (or limits) by quota resource name.
pub type Usage = BTreeMap<String, Quantity>;

/// A resource over its limit: name, requested, used, limit.
pub type Excess = (String, Quantity, Quantity, Quantity);

fn units(n: i64) -> Quantity {
    Quantity::from_nanos(i128::from(n) * 1_000_000_000, Format::DecimalSI).unwrap_or(Quantity::MAX)
}

/// Adds `q` to `usage[key]` (saturating).
pub fn add(usage: &mut Usage, key: &str, q: &Quantity) {
    let next = match usage.get(key) {
        Some(cur) => saturating_add(cur, q),
        None => *q,
    };
    usage.insert(key.to_string(), next);
}

/// Adds all of `from` into `into`.
pub fn add_all(into: &mut Usage, from: &Usage) {
    for (k, q) in from {
        add(into, k, q);
    }
}

/// What `new` uses beyond `old`, resource by resource (never negative), zeros left out: the
/// charge of an update (upstream `SubtractWithNonNegativeResult` then `RemoveZeros`).
pub fn increase(new: &Usage, old: &Usage) -> Usage {
    new.iter()
        .filter_map(|(k, q)| {
            let before = old.get(k).map_or(0, Quantity::nanos);
            let more = q.nanos().saturating_sub(before);
            (more > 0)
                .then(|| Quantity::from_nanos(more, q.format()).ok())
                .flatten()
                .map(|d| (k.clone(), d))
        })
        .collect()
}

/// The resources of `hard` that `requested` would take past their limit given `used`.
pub fn over(used: &Usage, requested: &Usage, hard: &Usage) -> Vec<Excess> {
    let mut out = Vec::new();
    for (k, limit) in hard {
        let Some(want) = requested.get(k) else {
            continue;
        };
        if want.is_zero() {
            continue;
        }
        let now = used.get(k).copied().unwrap_or(Quantity::ZERO);
        if saturating_add(&now, want) > *limit {
            out.push((k.clone(), *want, now, *limit));
        }
    }
    out
}

/// Upstream's `requested: k=v, used: k=v, limited: k=v` for the resources over their limit.
pub fn describe(exceeded: &[Excess]) -> String {
    let list = |f: &dyn Fn(&Excess) -> String| exceeded.iter().map(f).collect::<Vec<_>>().join(",");
    format!(
        "requested: {}, used: {}, limited: {}",
        list(&|(k, w, _, _)| format!("{k}={w}")),
        list(&|(k, _, u, _)| format!("{k}={u}")),
        list(&|(k, _, _, l)| format!("{k}={l}")),
    )
}

/// A quota's `spec.hard` (unparsable entries left out).
pub fn hard_of(quota_spec: &Value) -> Usage {
    resources::list_of(&quota_spec["hard"])
}

/// Whether a pod has finished (its compute resources are no longer counted).
pub fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// Upstream `podComputeUsageHelper` plus `pods`.
pub fn pod_usage(pod: &Value) -> Usage {
    let mut usage = Usage::new();
    usage.insert("count/pods".into(), units(1));
    if is_terminal(pod) {
        return usage;
    }
    usage.insert("pods".into(), units(1));
    let requests = resources::pod_requests(pod);
    let limits = resources::pod_limits(pod);
    for k in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(k) {
            usage.insert(k.to_string(), *q);
            usage.insert(format!("requests.{k}"), *q);
        }
        if let Some(q) = limits.get(k) {
            usage.insert(format!("limits.{k}"), *q);
        }
    }
    for (k, q) in &requests {
        if resources::is_huge_page(k) {
            usage.insert(k.clone(), *q);
            usage.insert(format!("requests.{k}"), *q);
        }
        if resources::is_extended(k) {
            usage.insert(format!("requests.{k}"), *q);
        }
    }
    // Every GPU device, whatever kind it is requested as: what a Tenant's `gpus` limits.
    let mut gpus = Quantity::ZERO;
    for (k, q) in &requests {
        if is_gpu_resource(k) {
            gpus = gpus.checked_add(q).unwrap_or(Quantity::MAX);
        }
    }
    if !gpus.is_zero() {
        usage.insert(GPU_DEVICES.into(), gpus);
    }
    // Counted beyond upstream (which allows no `limits.<extended>` quota): harmless, and a
    // quota that names one is then enforced rather than ignored.
    for (k, q) in &limits {
        if resources::is_extended(k) {
            usage.insert(format!("limits.{k}"), *q);
        }
    }
    usage
}

/// Upstream's service evaluator.
pub fn service_usage(svc: &Value) -> Usage {
    let spec = &svc["spec"];
    let ports = spec["ports"].as_array().map_or(0, Vec::len);
    let mut usage = Usage::new();
    usage.insert("count/services".into(), units(1));
    usage.insert("services".into(), units(1));
    usage.insert("services.loadbalancers".into(), Quantity::ZERO);
    usage.insert("services.nodeports".into(), Quantity::ZERO);
    let count = |n: usize| units(i64::try_from(n).unwrap_or(i64::MAX));
    match spec["type"].as_str() {
        Some("NodePort") => {
            usage.insert("services.nodeports".into(), count(ports));
        }
        Some("LoadBalancer") => {
            let node_ports = if spec["allocateLoadBalancerNodePorts"].as_bool() == Some(false) {
                spec["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["nodePort"].as_i64().is_some_and(|n| n != 0))
                    .count()
            } else {
                ports
            };
            usage.insert("services.nodeports".into(), count(node_ports));
            usage.insert("services.loadbalancers".into(), units(1));
        }
        _ => {}
    }
    usage
}

/// Upstream `GetPersistentVolumeClaimClass`: the beta annotation, else `storageClassName`.
fn claim_class(pvc: &Value) -> Option<&str> {
    pvc["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .filter(|c| !c.is_empty())
}

/// Upstream's claim evaluator (the larger of the request and the allocated size).
pub fn claim_usage(pvc: &Value) -> Usage {
    let mut usage = Usage::new();
    usage.insert("count/persistentvolumeclaims".into(), units(1));
    usage.insert("persistentvolumeclaims".into(), units(1));
    let class = claim_class(pvc);
    if let Some(class) = class {
        usage.insert(
            format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"),
            units(1),
        );
    }
    let requested = Quantity::from_json(&pvc["spec"]["resources"]["requests"]["storage"]).ok();
    let allocated = Quantity::from_json(&pvc["status"]["allocatedResources"]["storage"]).ok();
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) => Some(r.max(a)),
        (r, a) => r.or(a),
    };
    if let Some(q) = storage {
        usage.insert("requests.storage".into(), q);
        if let Some(class) = class {
            usage.insert(
                format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                q,
            );
        }
    }
    usage
}

/// The quota resource counting GPU devices of every kind a pod or claim asks for
/// (`nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-<profile>`, GPU device
/// classes): a Tenant's `gpus` when it may request more than one kind.
pub const GPU_DEVICES: &str = "requests.fabrik.dev/gpu-devices";

/// Whether an extended resource is a GPU device of some kind, as NVIDIA's device plugin names
/// them.
pub fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name == "nvidia.com/gpu.shared"
        || name.starts_with("nvidia.com/mig-")
}

/// The first labels of the names GPU drivers give their device classes: NVIDIA's
/// `gpu.nvidia.com` and `mig.nvidia.com`, and the node agent's `shared.<domain>` beside them
/// (whatever driver name it is configured with).
pub const GPU_CLASS_KINDS: [&str; 3] = ["gpu", "mig", "shared"];

/// The most devices an `allocationMode: All` request can get (upstream's
/// `AllocationResultsMaxSize`), which the quota charges it.
const ALL_DEVICES: i64 = 32;

/// Whether a device class holds GPUs: `<gpu|mig|shared>.<domain>`, with a domain of at least
/// two labels (`gpu.nvidia.com`, `mig.nvidia.com`, `gpu.example.com`).
fn is_gpu_class(class: &str) -> bool {
    class.split_once('.').is_some_and(|(kind, domain)| {
        GPU_CLASS_KINDS.contains(&kind) && domain.contains('.') && !domain.starts_with('.')
    })
}

/// Devices per class one request (or subrequest) asks for.
fn request_devices(r: &Value) -> Option<(&str, i64)> {
    let class = r["deviceClassName"].as_str()?;
    let n = match r["allocationMode"].as_str() {
        Some("All") => ALL_DEVICES,
        _ => r["count"].as_i64().unwrap_or(1).clamp(0, ALL_DEVICES),
    };
    Some((class, n))
}

/// What a DRA ResourceClaim counts (see the module's list).
pub fn resource_claim_usage(claim: &Value) -> Usage {
    let mut per_class: BTreeMap<&str, i64> = BTreeMap::new();
    for r in claim["spec"]["devices"]["requests"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut this: BTreeMap<&str, i64> = BTreeMap::new();
        let subs = r["firstAvailable"].as_array().into_iter().flatten();
        for (class, n) in request_devices(&r["exactly"])
            .into_iter()
            .chain(subs.filter_map(request_devices))
        {
            let e = this.entry(class).or_insert(0);
            *e = (*e).max(n);
        }
        for (class, n) in this {
            *per_class.entry(class).or_insert(0) += n;
        }
    }
    let mut usage = Usage::new();
    usage.insert("count/resourceclaims.resource.k8s.io".into(), units(1));
    let mut gpus = 0;
    for (class, n) in per_class {
        usage.insert(
            format!("{class}.deviceclass.resource.k8s.io/devices"),
            units(n),
        );
        if is_gpu_class(class) {
            gpus += n;
        }
    }
    if gpus > 0 {
        usage.insert("requests.nvidia.com/gpu".into(), units(gpus));
        usage.insert(GPU_DEVICES.into(), units(gpus));
    }
    usage
}

/// The kinds (`group`, `version`, `plural`) whose objects count toward quota resource `key`,
/// where more than one kind does: GPUs are requested by pods and claimed by ResourceClaims.
/// Empty for a resource only one kind counts.
pub fn counted_by(key: &str) -> &'static [(&'static str, &'static str, &'static str)] {
    if key == "requests.nvidia.com/gpu" || key == GPU_DEVICES {
        &[
            ("", "v1", "pods"),
            ("resource.k8s.io", "v1", "resourceclaims"),
        ]
    } else {
        &[]
    }
}

/// What one object of `plural` in API group `group` counts against quotas.
pub fn usage(group: &str, plural: &str, obj: &Value) -> Usage {
    if group == "resource.k8s.io" && plural == "resourceclaims" {
        return resource_claim_usage(obj);
    }
    if group.is_empty() {
        match plural {
            "pods" => return pod_usage(obj),
            "services" => return service_usage(obj),
            "persistentvolumeclaims" => return claim_usage(obj),
            _ => {}
        }
    }
    let mut usage = Usage::new();
    if group.is_empty() {
        usage.insert(format!("count/{plural}"), units(1));
        if matches!(
            plural,
            "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas"
        ) {
            usage.insert(plural.to_string(), units(1));
        }
    } else {
        usage.insert(format!("count/{plural}.{group}"), units(1));
    }
    usage
}

/// Whether an update of an object of this kind can change what it counts (upstream's
/// evaluators that handle UPDATE: services and claims; pods' resources cannot change).
pub fn counts_updates(group: &str, plural: &str) -> bool {
    group.is_empty() && matches!(plural, "services" | "persistentvolumeclaims")
}

/// The scope selectors of a quota spec: `scopes` as `Exists`, then `scopeSelector`'s
/// expressions (`(scope, operator, values)`).
fn selectors(quota_spec: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut out: Vec<(String, String, Vec<String>)> = quota_spec["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s.as_str().unwrap_or("").to_string(),
                "Exists".into(),
                vec![],
            )
        })
        .collect();
    for expr in quota_spec["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push((
            expr["scopeName"].as_str().unwrap_or("").to_string(),
            expr["operator"].as_str().unwrap_or("").to_string(),
            expr["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        ));
    }
    out
}

/// Whether a quota spec has any scope.
pub fn is_scoped(quota_spec: &Value) -> bool {
    !selectors(quota_spec).is_empty()
}

fn best_effort(pod: &Value) -> bool {
    resources::pod_requests(pod).is_empty() && resources::pod_limits(pod).is_empty()
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    let affinity = &pod["spec"]["affinity"];
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let a = &affinity[*kind];
        let required = a["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten();
        let preferred = a["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| &w["podAffinityTerm"]);
        required.chain(preferred).any(|term| {
            term["namespaces"].as_array().is_some_and(|n| !n.is_empty())
                || !term["namespaceSelector"].is_null()
        })
    })
}

/// Upstream `podMatchesScopeFunc` for one selector.
fn pod_matches(pod: &Value, scope: &str, operator: &str, values: &[String]) -> bool {
    let terminating = pod["spec"]["activeDeadlineSeconds"]
        .as_i64()
        .is_some_and(|s| s >= 0);
    match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod["spec"]["priorityClassName"].as_str().unwrap_or("");
            // Upstream matches a label set that always holds the key (empty value when the
            // pod has no class), except for `Exists`, which asks for a class.
            match operator {
                "Exists" => !class.is_empty(),
                "In" => values.iter().any(|v| v == class),
                "NotIn" => !values.iter().any(|v| v == class),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether an object of `plural` (API group `group`) is counted by a quota with this spec:
/// unscoped quotas count everything; scoped ones only the pods in all of their scopes.
pub fn in_scopes(quota_spec: &Value, group: &str, plural: &str, obj: &Value) -> bool {
    let sel = selectors(quota_spec);
    if sel.is_empty() {
        return true;
    }
    if !(group.is_empty() && plural == "pods") {
        return false;
    }
    sel.iter()
        .all(|(scope, op, values)| pod_matches(obj, scope, op, values))
}

/// `status.used` of a quota: the usage of `objects` (all of one namespace, or of a whole
/// cluster for a tenant quota; each with its group and plural) in the quota's scopes, for
/// each resource of `hard` (0 where nothing counts).
pub fn used<'a>(
    quota_spec: &Value,
    hard: &Usage,
    objects: impl IntoIterator<Item = (&'a str, &'a str, &'a Value)>,
) -> Usage {
    let mut total = Usage::new();
    for (group, plural, obj) in objects {
        if !in_scopes(quota_spec, group, plural, obj) {
            continue;
        }
        for (k, q) in usage(group, plural, obj) {
            if hard.contains_key(&k) {
                add(&mut total, &k, &q);
            }
        }
    }
    for k in hard.keys() {
        total.entry(k.clone()).or_insert(Quantity::ZERO);
    }
    total
}

#[cfg(test)]
mod dra_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpu_claims_count_as_gpus() {
        let claim = json!({"spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
            {"name": "b", "firstAvailable": [
                {"name": "x", "deviceClassName": "mig.nvidia.com", "count": 3},
                {"name": "y", "deviceClassName": "mig.nvidia.com"}]},
            {"name": "c", "exactly": {"deviceClassName": "nic.example.com",
                "allocationMode": "All"}}]}}});
        let u = usage("resource.k8s.io", "resourceclaims", &claim);
        let n = |k: &str| u.get(k).map(|q| q.nanos() / 1_000_000_000);
        assert_eq!(
            n("gpu.nvidia.com.deviceclass.resource.k8s.io/devices"),
            Some(2)
        );
        assert_eq!(
            n("mig.nvidia.com.deviceclass.resource.k8s.io/devices"),
            Some(3)
        );
        assert_eq!(
            n("nic.example.com.deviceclass.resource.k8s.io/devices"),
            Some(32)
        );
        assert_eq!(n("requests.nvidia.com/gpu"), Some(5));
        assert_eq!(n("count/resourceclaims.resource.k8s.io"), Some(1));
        assert!(!is_gpu_class("notgpu.nvidia.com"));
        assert!(!is_gpu_class("gpu.local") && !is_gpu_class("fpga.example.com"));
        assert!(is_gpu_class("shared.nvidia.com") && is_gpu_class("gpu.example.com"));
        assert_eq!(counted_by("requests.nvidia.com/gpu").len(), 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Quantity {
        s.parse().expect("quantity")
    }

    #[test]
    fn services_count_their_node_ports() {
        let cases = [
            (json!({"spec": {"ports": [{"port": 80}]}}), "0", "0"),
            (
                json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}}),
                "2",
                "0",
            ),
            (
                json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
                "1",
                "1",
            ),
            (
                json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                "ports": [{"port": 80}, {"port": 81, "nodePort": 30001}]}}),
                "1",
                "1",
            ),
        ];
        for (svc, node_ports, lbs) in cases {
            let u = service_usage(&svc);
            assert_eq!(u["services.nodeports"], q(node_ports), "{svc}");
            assert_eq!(u["services.loadbalancers"], q(lbs), "{svc}");
            assert_eq!(u["services"], q("1"));
        }
    }

    #[test]
    fn pods_count_sidecars_and_extended_resources() {
        let gpu = json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}});
        let pod = json!({"spec": {
            "initContainers": [{"name": "s", "restartPolicy": "Always", "resources": gpu}],
            "containers": [{"name": "m", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                       "limits": {"nvidia.com/gpu": "1"}}}],
        }});
        let u = pod_usage(&pod);
        assert_eq!(u["requests.nvidia.com/gpu"], q("2"));
        assert_eq!(u[GPU_DEVICES], q("2"));
        assert_eq!(u["cpu"], q("1"));
        // Every kind of GPU device counts toward the devices; each name only toward itself.
        let mixed = json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.18gb": "3"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu.shared": "1", "example.com/fpga": "2"}}}]}});
        let u = pod_usage(&mixed);
        assert_eq!(u[GPU_DEVICES], q("4"));
        assert_eq!(u["requests.nvidia.com/mig-1g.18gb"], q("3"));
        assert!(!u.contains_key("requests.nvidia.com/gpu"));
        assert_eq!(u["pods"], q("1"));
        let mut done = pod.clone();
        done["status"] = json!({"phase": "Failed"});
        assert_eq!(
            pod_usage(&done).keys().collect::<Vec<_>>(),
            vec!["count/pods"]
        );
    }

    #[test]
    fn scopes_and_selectors() {
        let best = json!({"spec": {"containers": [{"name": "a"}]}});
        let bounded = json!({"spec": {"activeDeadlineSeconds": 5, "priorityClassName": "high",
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        let spec = |v: Value| v;
        let cases = [
            (spec(json!({})), &best, true),
            (
                spec(json!({"scopes": ["BestEffort", "NotTerminating"]})),
                &best,
                true,
            ),
            (spec(json!({"scopes": ["Terminating"]})), &best, false),
            (
                spec(json!({"scopes": ["Terminating", "NotBestEffort"]})),
                &bounded,
                true,
            ),
            (spec(json!({"scopes": ["NoSuchScope"]})), &best, false),
            (
                spec(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}})),
                &bounded,
                true,
            ),
            (
                spec(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}})),
                &best,
                false,
            ),
            (
                spec(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}]}})),
                &best,
                true,
            ),
            (
                spec(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "Exists"}]}})),
                &best,
                false,
            ),
            (
                spec(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "NoSuchScope", "operator": "Exists"}]}})),
                &bounded,
                false,
            ),
        ];
        for (quota, pod, want) in cases {
            assert_eq!(in_scopes(&quota, "", "pods", pod), want, "{quota} {pod}");
        }
        // A scoped quota counts no other kind.
        let svc = json!({"spec": {"type": "NodePort"}});
        assert!(!in_scopes(
            &json!({"scopes": ["BestEffort"]}),
            "",
            "services",
            &svc
        ));
        assert!(in_scopes(&json!({}), "", "services", &svc));
    }

    #[test]
    fn over_never_wraps() {
        let hard: Usage = [("requests.nvidia.com/gpu".to_string(), q("10"))].into();
        let used: Usage = [("requests.nvidia.com/gpu".to_string(), q("1"))].into();
        let huge: Usage = [("requests.nvidia.com/gpu".to_string(), Quantity::MAX)].into();
        assert_eq!(over(&used, &huge, &hard).len(), 1);
        let delta = increase(
            &[("services.nodeports".to_string(), q("3"))].into(),
            &[("services.nodeports".to_string(), q("1"))].into(),
        );
        assert_eq!(delta["services.nodeports"], q("2"));
        assert!(increase(&used, &hard).is_empty());
    }

    #[test]
    fn used_fills_every_hard_resource() {
        let hard: Usage = [
            ("pods", "5"),
            ("services.nodeports", "2"),
            ("count/configmaps", "3"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), q(v)))
        .collect();
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 1}]}});
        let objects = [
            ("", "pods", &pod),
            ("", "pods", &pod),
            ("", "services", &svc),
        ];
        let u = used(&json!({}), &hard, objects);
        assert_eq!(u["pods"], q("2"));
        assert_eq!(u["services.nodeports"], q("1"));
        assert_eq!(u["count/configmaps"], q("0"));
    }
}
