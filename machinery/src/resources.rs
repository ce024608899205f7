//! Pod resources: what a pod requests and is limited to, as upstream
//! `k8s.io/component-helpers/resource` (`PodRequests`, `PodLimits`) computes them, and the rules
//! upstream validation (`ValidateResourceRequirements`, `validateContainerResourceName`) puts
//! on a container's `resources`.
//!
//! One calculation for everything that counts a pod: quota admission (namespace and tenant
//! quotas), the quota controller, LimitRanger's per-pod bounds. Per resource, a pod takes
//! the larger of
//! - the sum of its app containers and of its restartable init containers (sidecars,
//!   `restartPolicy: Always`, which run alongside the app containers), and
//! - any init container's amount plus the sidecars started before it,
//!
//! plus the pod overhead. A sidecar is never "hidden" behind the init-container maximum.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity::Quantity;
use crate::validation::{self, FieldError};

/// Amounts by resource name (`cpu`, `memory`, `nvidia.com/gpu`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// The largest quantity (2^63-1 units): sums that would go past it stay there, so that an
/// overflow can never make usage look smaller than it is.
pub fn max_quantity() -> Quantity {
    Quantity::MAX
}

/// Zero.
pub fn zero() -> Quantity {
    Quantity::ZERO
}

/// `a + b`, saturating at [`max_quantity`] (or its negative).
pub fn saturating_add(a: &Quantity, b: &Quantity) -> Quantity {
    match a.checked_add(b) {
        Some(q) => q,
        None if a.nanos().saturating_add(b.nanos()) < 0 => {
            Quantity::from_nanos(-Quantity::MAX.nanos(), a.format()).unwrap_or(Quantity::ZERO)
        }
        None => max_quantity(),
    }
}

/// Adds `from` into `into`, resource by resource.
pub fn add_list(into: &mut ResourceList, from: &ResourceList) {
    for (k, q) in from {
        let next = match into.get(k) {
            Some(cur) => saturating_add(cur, q),
            None => *q,
        };
        into.insert(k.clone(), next);
    }
}

/// Raises `into` to `from` wherever `from` is larger (or `into` has nothing).
pub fn max_list(into: &mut ResourceList, from: &ResourceList) {
    for (k, q) in from {
        if into.get(k).is_none_or(|cur| q > cur) {
            into.insert(k.clone(), *q);
        }
    }
}

/// The quantities of a `ResourceList` JSON object (unparsable entries left out: validation
/// refuses them before anything is stored).
pub fn list_of(v: &Value) -> ResourceList {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Quantity::from_json(v).ok().map(|q| (k.clone(), q)))
        .collect()
}

/// The amounts of a pod's `ResourceList`: like [`list_of`], negative entries left out (they
/// are refused by validation; never let one lower what a pod counts).
fn amounts(v: &Value) -> ResourceList {
    let mut out = list_of(v);
    out.retain(|_, q| !q.is_negative());
    out
}

/// A container's requests (`field` = `requests`: each missing request is its limit, as the
/// API server defaults it) or limits.
fn container_list(c: &Value, field: &str) -> ResourceList {
    let mut out = amounts(&c["resources"][field]);
    if field == "requests" {
        for (k, q) in amounts(&c["resources"]["limits"]) {
            out.entry(k).or_insert(q);
        }
    }
    out
}

/// Whether an init container is a sidecar (`restartPolicy: Always`).
pub fn is_restartable_init_container(c: &Value) -> bool {
    c["restartPolicy"].as_str() == Some("Always")
}

/// Upstream `AggregateContainerRequests` / `AggregateContainerLimits`.
fn aggregate(spec: &Value, field: &str) -> ResourceList {
    let mut total = ResourceList::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        add_list(&mut total, &container_list(c, field));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = container_list(c, field);
        let while_running = if is_restartable_init_container(c) {
            // Runs from here on, alongside every later init container and the app containers.
            add_list(&mut total, &own);
            add_list(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut tmp = own;
            add_list(&mut tmp, &sidecars);
            tmp
        };
        max_list(&mut init_max, &while_running);
    }
    max_list(&mut total, &init_max);
    total
}

/// Resources that pod-level `spec.resources` may set (upstream's supported pod-level ones).
const POD_LEVEL_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// Upstream `PodRequests`: the containers' aggregate (pod-level requests replace it for cpu
/// and memory), plus the overhead.
pub fn pod_requests(pod: &Value) -> ResourceList {
    let spec = &pod["spec"];
    let mut reqs = aggregate(spec, "requests");
    let pod_level = container_list(spec, "requests");
    for (k, q) in pod_level {
        if POD_LEVEL_RESOURCES.contains(&k.as_str()) {
            reqs.insert(k, q);
        }
    }
    add_list(&mut reqs, &amounts(&spec["overhead"]));
    reqs
}

/// Upstream `PodLimits`: the containers' aggregate (pod-level limits replace it for cpu and
/// memory), plus the overhead for the resources that have a limit.
pub fn pod_limits(pod: &Value) -> ResourceList {
    let spec = &pod["spec"];
    let mut limits = aggregate(spec, "limits");
    for (k, q) in amounts(&spec["resources"]["limits"]) {
        if POD_LEVEL_RESOURCES.contains(&k.as_str()) {
            limits.insert(k, q);
        }
    }
    for (k, q) in amounts(&spec["overhead"]) {
        if let Some(cur) = limits.get(&k) {
            let sum = saturating_add(cur, &q);
            limits.insert(k, sum);
        }
    }
    limits
}

/// Upstream `IsHugePageResourceName`.
pub fn is_huge_page(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Upstream `IsNativeResource`: no domain, or a `kubernetes.io/` one.
pub fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Upstream `IsExtendedResourceName`: a fully qualified name outside `kubernetes.io`, which
/// is also valid as `requests.<name>` (e.g. `nvidia.com/gpu`).
pub fn is_extended(name: &str) -> bool {
    if is_native(name) || name.starts_with("requests.") {
        return false;
    }
    validation::qualified_name(&format!("requests.{name}")).is_empty()
}

/// Upstream `IsOvercommitAllowed`: requests may be below limits (cpu, memory, ...); extended
/// resources and huge pages must be requested exactly at their limit.
pub fn is_overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_huge_page(name)
}

/// Upstream `IsIntegerResourceName` as far as containers go: extended resources are counted
/// in whole units (a device is not divisible).
pub fn is_integer(name: &str) -> bool {
    is_extended(name)
}

const STANDARD_CONTAINER_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// Upstream's standard resource names that have no domain (`IsStandardResourceName`).
const STANDARD_RESOURCES: [&str; 19] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
];

fn is_standard_resource(name: &str) -> bool {
    STANDARD_RESOURCES.contains(&name)
        || name == "services.loadbalancers"
        || is_huge_page(name)
        || name.starts_with("requests.hugepages-")
}

/// Upstream `validateContainerResourceName`.
fn validate_container_resource_name(name: &str, at: &str, errs: &mut Vec<FieldError>) {
    let qualified = validation::qualified_name(name);
    if !qualified.is_empty() {
        for msg in qualified {
            errs.push(FieldError::invalid(at, name, msg));
        }
        return;
    }
    if !name.contains('/') {
        if !is_standard_resource(name) {
            errs.push(FieldError::invalid(
                at,
                name,
                "must be a standard resource type or fully qualified",
            ));
        }
        if !STANDARD_CONTAINER_RESOURCES.contains(&name) && !is_huge_page(name) {
            errs.push(FieldError::invalid(
                at,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native(name) && !is_extended(name) {
        errs.push(FieldError::invalid(
            at,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// The page size of a `hugepages-<size>` resource.
fn huge_page_size(name: &str) -> Option<Quantity> {
    name.strip_prefix("hugepages-")?.parse().ok()
}

/// Text of a JSON quantity as written.
fn raw_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Upstream `ValidateResourceQuantityValue` and the huge page rule, for one entry.
fn validate_quantity(
    name: &str,
    v: &Value,
    at: &str,
    errs: &mut Vec<FieldError>,
) -> Option<Quantity> {
    let q = match Quantity::from_json(v) {
        Ok(q) => q,
        Err(_) => {
            errs.push(FieldError::invalid(
                at,
                &raw_text(v),
                "must match the regex ^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
            ));
            return None;
        }
    };
    if q.is_negative() {
        errs.push(FieldError::invalid(
            at,
            &q.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    if is_integer(name) && q.nanos() % 1_000_000_000 != 0 {
        errs.push(FieldError::invalid(
            at,
            &q.to_string(),
            "must be an integer",
        ));
    }
    if is_huge_page(name) {
        match huge_page_size(name) {
            Some(page) if page.nanos() > 0 && q.nanos() % page.nanos() == 0 => {}
            _ => errs.push(FieldError::invalid(
                at,
                &q.to_string(),
                format!(
                    "{} is not positive integer multiple of {}",
                    q,
                    name.trim_start_matches("hugepages-")
                ),
            )),
        }
    }
    Some(q)
}

/// Upstream `ValidateContainerResourceRequirements` for `resources` at `path` (e.g.
/// `spec.containers[0].resources`): resource names, non-negative quantities, whole extended
/// resources, requests at most the limits (exactly the limits for extended resources and huge
/// pages, which must have a limit), huge pages only with cpu or memory.
pub fn validate_container_resources(resources: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_null() {
        return errs;
    }
    if !resources.is_object() {
        errs.push(FieldError::invalid(
            path,
            &raw_text(resources),
            "must be an object",
        ));
        return errs;
    }
    let mut lists: [(ResourceList, bool, bool); 2] = Default::default();
    for (i, field) in ["limits", "requests"].into_iter().enumerate() {
        let v = &resources[field];
        let at = format!("{path}.{field}");
        if v.is_null() {
            continue;
        }
        let Some(map) = v.as_object() else {
            errs.push(FieldError::invalid(&at, &raw_text(v), "must be an object"));
            continue;
        };
        for (name, q) in map {
            let key_at = format!("{at}[{name}]");
            validate_container_resource_name(name, &key_at, &mut errs);
            if let Some(q) = validate_quantity(name, q, &key_at, &mut errs) {
                lists[i].0.insert(name.clone(), q);
            }
            lists[i].1 |= is_huge_page(name);
            lists[i].2 |= name == "cpu" || name == "memory";
        }
    }
    let [(limits, lim_huge, lim_compute), (requests, req_huge, req_compute)] = &lists;
    let req_path = format!("{path}.requests");
    let lim_path = format!("{path}.limits");
    for (name, q) in requests {
        match limits.get(name) {
            Some(limit) if !is_overcommit_allowed(name) && q != limit => {
                errs.push(FieldError::invalid(
                    &req_path,
                    &q.to_string(),
                    format!("must be equal to {name} limit of {limit}"),
                ));
            }
            Some(limit) if q > limit => {
                errs.push(FieldError::invalid(
                    &req_path,
                    &q.to_string(),
                    format!("must be less than or equal to {name} limit of {limit}"),
                ));
            }
            Some(_) => {}
            None if !is_overcommit_allowed(name) => errs.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
    // Entries whose quantity did not parse are already reported; the name still counts.
    if (*lim_huge || *req_huge) && !*lim_compute && !*req_compute {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
    errs
}

/// Upstream's `spec.overhead` rules (`validateOverhead`): valid resource names and
/// quantities, none negative, extended resources whole.
pub fn validate_overhead(overhead: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if overhead.is_null() {
        return errs;
    }
    let Some(map) = overhead.as_object() else {
        errs.push(FieldError::invalid(
            path,
            &raw_text(overhead),
            "must be an object",
        ));
        return errs;
    };
    for (name, q) in map {
        let at = format!("{path}[{name}]");
        let qualified = validation::qualified_name(name);
        for msg in qualified {
            errs.push(FieldError::invalid(&at, name, msg));
        }
        validate_quantity(name, q, &at, &mut errs);
    }
    errs
}

/// Upstream's pod-level `spec.resources` rules: only cpu and memory, non-negative, requests at
/// most the limits.
pub fn validate_pod_resources(resources: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_null() {
        return errs;
    }
    for field in ["limits", "requests"] {
        for (name, _) in resources[field].as_object().into_iter().flatten() {
            if !POD_LEVEL_RESOURCES.contains(&name.as_str()) {
                errs.push(FieldError {
                    kind: validation::FieldErrorKind::FieldValueNotSupported,
                    field: format!("{path}.{field}[{name}]"),
                    message: "supported values: \"cpu\", \"memory\"".into(),
                    value: Some(name.clone()),
                });
            }
        }
    }
    errs.extend(validate_container_resources(resources, path));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Quantity {
        s.parse().expect("quantity")
    }

    fn gpus(n: &str) -> Value {
        json!({"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}})
    }

    #[test]
    fn sidecars_add_to_the_app_containers() {
        let pod = json!({"spec": {
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": gpus("1")},
            ],
            "containers": [{"name": "main", "resources": gpus("1")}],
        }});
        assert_eq!(pod_requests(&pod)["nvidia.com/gpu"], q("2"));
        assert_eq!(pod_limits(&pod)["nvidia.com/gpu"], q("2"));
    }

    #[test]
    fn upstream_examples() {
        // An init container runs alongside the sidecars started before it.
        let pod = json!({"spec": {
            "initContainers": [
                {"name": "s1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "i1", "resources": {"requests": {"cpu": "3"}}},
                {"name": "s2", "restartPolicy": "Always", "resources": {"requests": {"cpu": "2"}}},
                {"name": "i2", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "containers": [{"name": "m", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}],
            "overhead": {"cpu": "100m", "memory": "10Mi"},
        }});
        let r = pod_requests(&pod);
        // max(s1+s2+m = 3.5, s1+i1 = 4, s1+s2+i2 = 4) + 0.1
        assert_eq!(r["cpu"], q("4100m"));
        // max(64Mi, 1Gi) + 10Mi
        assert_eq!(r["memory"], q("1034Mi"));
        // A plain init container still counts as a maximum, not a sum.
        let plain = json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        }});
        assert_eq!(pod_requests(&plain)["nvidia.com/gpu"], q("2"));
        // Overhead is added to limits only where there is one.
        let l = pod_limits(&pod);
        assert!(!l.contains_key("cpu"));
        let pod_level = json!({"spec": {"resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "9"}},
            "containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(pod_requests(&pod_level)["cpu"], q("8"));
        assert!(!pod_requests(&pod_level).contains_key("nvidia.com/gpu"));
    }

    #[test]
    fn negative_amounts_never_lower_a_pod() {
        let pod = json!({"spec": {"overhead": {"nvidia.com/gpu": "-1"}, "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "-4"}}},
        ]}});
        assert_eq!(pod_requests(&pod)["nvidia.com/gpu"], q("2"));
        assert!(!pod_requests(&pod).contains_key("cpu"));
        let errs = validate_overhead(
            &json!({"nvidia.com/gpu": "-1", "cpu": "1"}),
            "spec.overhead",
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.overhead[nvidia.com/gpu]");
    }

    #[test]
    fn sums_saturate() {
        let huge = "9223372036854775807";
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": gpus(huge)},
            {"name": "b", "resources": gpus(huge)},
        ]}});
        assert_eq!(pod_requests(&pod)["nvidia.com/gpu"], max_quantity());
    }

    fn fields(resources: Value) -> Vec<String> {
        validate_container_resources(&resources, "r")
            .into_iter()
            .map(|e| e.message_string())
            .collect()
    }

    #[test]
    fn validation_follows_upstream() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}), vec![]),
            (gpus("1"), vec![]),
            (json!({"limits": {"nvidia.com/gpu": "-3"}, "requests": {"nvidia.com/gpu": "-3"}}), vec![
                "r.limits[nvidia.com/gpu]: Invalid value: \"-3\": must be greater than or equal to 0",
                "r.requests[nvidia.com/gpu]: Invalid value: \"-3\": must be greater than or equal to 0",
            ]),
            (json!({"requests": {"cpu": "-1"}}), vec![
                "r.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            ]),
            (gpus("500m"), vec![
                "r.limits[nvidia.com/gpu]: Invalid value: \"500m\": must be an integer",
                "r.requests[nvidia.com/gpu]: Invalid value: \"500m\": must be an integer",
            ]),
            (json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}), vec![
                "r.requests: Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2",
            ]),
            (json!({"requests": {"nvidia.com/gpu": "1"}}), vec![
                "r.limits: Required value: Limit must be set for non overcommitable resources",
            ]),
            (json!({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}), vec![
                "r.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            ]),
            (json!({"limits": {"pods": "1"}}), vec![
                "r.limits[pods]: Invalid value: \"pods\": must be a standard resource for containers",
            ]),
            (json!({"limits": {"gpu": "1"}}), vec![
                "r.limits[gpu]: Invalid value: \"gpu\": must be a standard resource type or fully qualified",
                "r.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
            ]),
            (json!({"limits": {"requests.nvidia.com/gpu": "1"}}), vec![
                "r.limits[requests.nvidia.com/gpu]: Invalid value: \"requests.nvidia.com/gpu\": doesn't follow extended resource name standard",
            ]),
            (json!({"limits": {"hugepages-2Mi": "3Mi"}}), vec![
                "r.limits[hugepages-2Mi]: Invalid value: \"3Mi\": 3Mi is not positive integer multiple of 2Mi",
                "r: Forbidden: HugePages require cpu or memory",
            ]),
            (json!({"limits": []}), vec!["r.limits: Invalid value: \"[]\": must be an object"]),
        ];
        for (resources, want) in cases {
            assert_eq!(fields(resources.clone()), want, "{resources}");
        }
        let pod_level = validate_pod_resources(
            &json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}),
            "spec.resources",
        );
        assert!(pod_level
            .iter()
            .any(|e| e.field == "spec.resources.requests[nvidia.com/gpu]"));
    }
}
