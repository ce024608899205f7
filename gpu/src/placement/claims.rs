//! Dynamic resource allocation (`resource.k8s.io/v1`, structured parameters) for the embedded
//! host's scheduler: when a pending pod is placed, the ResourceClaims it uses get devices from
//! the chosen node's ResourceSlice, as kube-scheduler's DRA plugin allocates them.
//!
//! * A pod's claims come from `spec.resourceClaims`: `resourceClaimName`, or, for a template,
//!   the claim `status.resourceClaimStatuses` names (the claim controller creates it); until
//!   it exists the pod waits.
//! * An allocated claim pins its pods to its node. A claim not allocated yet gets, on the node
//!   the pod goes to, for each request `count` free devices (`allocationMode: ExactCount`,
//!   count 1 by default) or every device that matches (`All`), among the devices its
//!   DeviceClass's selectors and its own accept; `firstAvailable` takes the first subrequest
//!   that fits.
//! * Selectors are CEL over `device` — `driver`, `attributes` and `capacity` (by domain, a
//!   name without one is in the driver's), `allowMultipleAllocations` — with upstream's
//!   quantity functions (`quantity("40Gi")`, `compareTo`, `isGreaterThan`, `isLessThan`,
//!   `asInteger`; a capacity is its value in base units). The API server refuses selectors
//!   that do not compile or cost too much; here an expression is at most
//!   [`MAX_EXPRESSION_BYTES`], and one that fails on a device does not select it.
//! * Not implemented, and said so: `constraints`, `adminAccess`, request tolerations and
//!   capacity requests; a claim using them stays unallocated with that reason.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    Device, DeviceClass, DeviceSelector, ResourceClaim, ResourceSlice,
};
use serde_json::{json, Map, Value};

use super::model::NodeView;
use crate::quantity;

/// The longest selector expression evaluated (upstream's `CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;

/// How many devices one request may ask for (upstream's `AllocationResultsMaxSize`).
const MAX_COUNT: i64 = 32;

/// A claim the pod uses: `namespace/name`.
pub type ClaimKey = String;

/// How many devices a request takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// Exactly this many.
    Exactly(usize),
    /// Every matching device on the node (at least one).
    All,
}

/// One way to satisfy a request: the request itself, or one of its `firstAvailable`
/// subrequests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alternative {
    /// The name results carry (`req`, or `req/sub` for a subrequest).
    pub name: String,
    /// How many.
    pub count: Count,
    /// The devices its class and selectors accept: `(node, device)`.
    pub matching: BTreeSet<(String, String)>,
}

/// One request of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestNeed {
    /// Its alternatives, in order of preference.
    pub alternatives: Vec<Alternative>,
}

/// What one of a pod's claims needs from the node the pod goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimNeed {
    /// Allocated already: the pod must go where its devices are (`None`: anywhere).
    Allocated {
        /// The claim.
        claim: ClaimKey,
        /// The node its devices are on.
        node: Option<String>,
    },
    /// To allocate on the chosen node.
    Pending {
        /// The claim.
        claim: ClaimKey,
        /// Its requests.
        requests: Vec<RequestNeed>,
    },
}

impl ClaimNeed {
    /// The claim.
    pub fn claim(&self) -> &str {
        match self {
            ClaimNeed::Allocated { claim, .. } | ClaimNeed::Pending { claim, .. } => claim,
        }
    }
}

/// The devices chosen for a claim: `(result request name, device index on the node)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimAllocation {
    /// The claim.
    pub claim: ClaimKey,
    /// Request name and device index, per device.
    pub results: Vec<(String, usize)>,
}

/// The claim names a pod uses, `(name in the pod, claim object name)`, or why it must wait.
pub fn pod_claims(pod: &Pod) -> Result<Vec<(String, String)>, String> {
    let Some(spec) = &pod.spec else {
        return Ok(Vec::new());
    };
    let statuses: BTreeMap<&str, Option<&str>> = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.as_str(), s.resource_claim_name.as_deref()))
        .collect();
    let mut out = Vec::new();
    for c in spec.resource_claims.iter().flatten() {
        if let Some(name) = &c.resource_claim_name {
            out.push((c.name.clone(), name.clone()));
        } else if let Some(template) = &c.resource_claim_template_name {
            match statuses.get(c.name.as_str()) {
                Some(Some(name)) => out.push((c.name.clone(), (*name).to_string())),
                // The controller decided that no claim is needed.
                Some(None) => {}
                None => {
                    return Err(format!(
                        "waiting for the ResourceClaim of template {template:?} (claim {:?}) to be created",
                        c.name
                    ))
                }
            }
        } else {
            return Err(format!(
                "resource claim {:?} names neither a claim nor a template",
                c.name
            ));
        }
    }
    Ok(out)
}

/// The node an allocation is on: the `metadata.name` its node selector names.
fn allocation_node(claim: &ResourceClaim) -> Option<String> {
    let selector = claim
        .status
        .as_ref()?
        .allocation
        .as_ref()?
        .node_selector
        .as_ref()?;
    selector.node_selector_terms.iter().find_map(|t| {
        t.match_fields.iter().flatten().find_map(|f| {
            (f.key == "metadata.name" && f.operator == "In")
                .then(|| f.values.iter().flatten().next().cloned())
                .flatten()
        })
    })
}

/// Whether a claim has an allocation.
pub fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

/// Whether a ResourceSlice is one a Fabrik node agent published (of whatever driver name it
/// is configured with): the devices this scheduler hands out.
pub fn is_node_agent_slice(s: &ResourceSlice) -> bool {
    s.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(fabrik_api::LABEL_NODE_AGENT_SLICE))
}

/// The drivers of the node agents' slices.
pub fn node_agent_drivers(slices: &[ResourceSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .filter(|s| is_node_agent_slice(s))
        .map(|s| s.spec.driver.clone())
        .collect()
}

/// The devices of `drivers` that allocated claims hold, `(pool, device)`: in use by them.
pub fn allocated_devices<'c>(
    claims: impl IntoIterator<Item = &'c ResourceClaim>,
    drivers: &BTreeSet<String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in claims {
        let results = c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default();
        for r in results {
            if drivers.contains(&r.driver) {
                out.push((r.pool.clone(), r.device.clone()));
            }
        }
    }
    out
}

/// A device as CEL selectors see it.
fn device_value(driver: &str, d: &Device) -> Value {
    let mut attributes: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (k, a) in d.attributes.iter().flatten() {
        let (domain, name) = qualified(driver, k);
        let v = if let Some(b) = a.bool {
            json!(b)
        } else if let Some(i) = a.int {
            json!(i)
        } else if let Some(s) = &a.string {
            json!(s)
        } else if let Some(v) = &a.version {
            json!(v)
        } else {
            continue;
        };
        attributes.entry(domain).or_default().insert(name, v);
    }
    let mut capacity: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (k, c) in d.capacity.iter().flatten() {
        let (domain, name) = qualified(driver, k);
        if let Ok(n) = quantity::units(&c.value.0) {
            capacity.entry(domain).or_default().insert(name, json!(n));
        }
    }
    json!({
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": d.allow_multiple_allocations.unwrap_or(false),
    })
}

/// `domain/name` split; a name without a domain is in the driver's.
fn qualified(driver: &str, key: &str) -> (String, String) {
    match key.split_once('/') {
        Some((domain, name)) => (domain.to_string(), name.to_string()),
        None => (driver.to_string(), key.to_string()),
    }
}

/// Compiled selector expressions, by text (a compile error is kept as the message).
#[derive(Default)]
pub struct Selectors {
    programs: HashMap<String, Result<cel::Program, String>>,
}

impl Selectors {
    fn program(&mut self, expr: &str) -> Result<&cel::Program, String> {
        let compiled = self.programs.entry(expr.to_string()).or_insert_with(|| {
            if expr.len() > MAX_EXPRESSION_BYTES {
                return Err(format!(
                    "selector expression longer than {MAX_EXPRESSION_BYTES} bytes"
                ));
            }
            catch_unwind(|| cel::Program::compile(expr))
                .map_err(|_| "selector did not compile".to_string())?
                .map_err(|e| format!("selector did not compile: {e}"))
        });
        compiled.as_ref().map_err(Clone::clone)
    }

    /// Whether every selector accepts the device; an error says why one could not decide.
    pub fn accept(&mut self, selectors: &[DeviceSelector], device: &Value) -> Result<bool, String> {
        for s in selectors {
            let Some(cel) = &s.cel else {
                return Err("a selector without `cel` is not supported".into());
            };
            let program = self.program(&cel.expression)?;
            let outcome = catch_unwind(AssertUnwindSafe(|| evaluate(program, device)))
                .unwrap_or_else(|_| Err("selector evaluation failed".into()))?;
            if !outcome {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn evaluate(program: &cel::Program, device: &Value) -> Result<bool, String> {
    let mut ctx = cel::Context::default();
    let v = cel::to_value(device).map_err(|e| e.to_string())?;
    ctx.add_variable_from_value("device", v);
    add_quantity_functions(&mut ctx)?;
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("selector returned {other:?}, not a bool")),
        Err(e) => Err(format!("selector failed: {e}")),
    }
}

/// A capacity or quantity as a number (JSON numbers become CEL `int` or `uint`).
fn number(v: &cel::Value) -> Result<i128, cel::ExecutionError> {
    match v {
        cel::Value::Int(n) => Ok(i128::from(*n)),
        cel::Value::UInt(n) => Ok(i128::from(*n)),
        other => Err(cel::ExecutionError::function_error(
            "quantity",
            format!("not a quantity: {other:?}"),
        )),
    }
}

/// Upstream's Kubernetes quantity library over capacities held as integers.
fn add_quantity_functions(ctx: &mut cel::Context<'_, '_>) -> Result<(), String> {
    use cel::extractors::This;
    type R<T> = Result<T, cel::ExecutionError>;
    let declare = |r: Result<(), cel::DeclarationError>| r.map_err(|e| format!("{e:?}"));
    declare(
        ctx.add_function("quantity", |s: std::sync::Arc<String>| -> R<i64> {
            quantity::units(&s)
                .map_err(|e| cel::ExecutionError::function_error("quantity", e.to_string()))
        }),
    )?;
    declare(ctx.add_function(
        "compareTo",
        |This(a): This<cel::Value>, b: cel::Value| -> R<i64> {
            Ok(match number(&a)?.cmp(&number(&b)?) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })
        },
    ))?;
    declare(ctx.add_function(
        "isGreaterThan",
        |This(a): This<cel::Value>, b: cel::Value| -> R<bool> { Ok(number(&a)? > number(&b)?) },
    ))?;
    declare(ctx.add_function(
        "isLessThan",
        |This(a): This<cel::Value>, b: cel::Value| -> R<bool> { Ok(number(&a)? < number(&b)?) },
    ))?;
    declare(
        ctx.add_function("asInteger", |This(a): This<cel::Value>| -> R<i64> {
            i64::try_from(number(&a)?).map_err(|_| {
                cel::ExecutionError::function_error("asInteger", "out of the int range")
            })
        }),
    )?;
    Ok(())
}

/// The devices of the node agents' slices, per node: `(node, pool, device)` with its CEL
/// value.
pub fn slice_devices(slices: &[ResourceSlice]) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for s in slices {
        if !is_node_agent_slice(s) {
            continue;
        }
        let Some(node) = s.spec.node_name.as_deref() else {
            continue;
        };
        for d in s.spec.devices.iter().flatten() {
            out.push((
                node.to_string(),
                d.name.clone(),
                device_value(&s.spec.driver, d),
            ));
        }
    }
    out
}

/// What a claim needs, or why it cannot be allocated at all.
pub fn need(
    claim: &ResourceClaim,
    classes: &BTreeMap<String, &DeviceClass>,
    devices: &[(String, String, Value)],
    selectors: &mut Selectors,
) -> Result<ClaimNeed, String> {
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    );
    if is_allocated(claim) {
        return Ok(ClaimNeed::Allocated {
            node: allocation_node(claim),
            claim: key,
        });
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!("resource claim {key} is being deleted"));
    }
    let devices_spec = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
    if let Some(d) = devices_spec {
        if d.constraints.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(format!(
                "resource claim {key}: device constraints are not supported by this scheduler"
            ));
        }
    }
    let mut requests = Vec::new();
    for r in devices_spec
        .iter()
        .flat_map(|d| d.requests.iter().flatten())
    {
        let mut alternatives = Vec::new();
        if let Some(e) = &r.exactly {
            if e.admin_access == Some(true) {
                return Err(format!(
                    "resource claim {key}: adminAccess is not supported by this scheduler"
                ));
            }
            if e.capacity.is_some() || e.tolerations.as_ref().is_some_and(|t| !t.is_empty()) {
                return Err(format!("resource claim {key}: request {:?}: capacity requests and tolerations are not supported by this scheduler", r.name));
            }
            alternatives.push(alternative(
                &key,
                r.name.clone(),
                &e.device_class_name,
                e.selectors.as_deref().unwrap_or_default(),
                e.allocation_mode.as_deref(),
                e.count,
                classes,
                devices,
                selectors,
            )?);
        } else {
            for sub in r.first_available.iter().flatten() {
                alternatives.push(alternative(
                    &key,
                    format!("{}/{}", r.name, sub.name),
                    &sub.device_class_name,
                    sub.selectors.as_deref().unwrap_or_default(),
                    sub.allocation_mode.as_deref(),
                    sub.count,
                    classes,
                    devices,
                    selectors,
                )?);
            }
        }
        if alternatives.is_empty() {
            return Err(format!(
                "resource claim {key}: request {:?} asks for nothing",
                r.name
            ));
        }
        requests.push(RequestNeed { alternatives });
    }
    Ok(ClaimNeed::Pending {
        claim: key,
        requests,
    })
}

#[allow(clippy::too_many_arguments)]
fn alternative(
    key: &str,
    name: String,
    class: &str,
    own: &[DeviceSelector],
    mode: Option<&str>,
    count: Option<i64>,
    classes: &BTreeMap<String, &DeviceClass>,
    devices: &[(String, String, Value)],
    selectors: &mut Selectors,
) -> Result<Alternative, String> {
    let Some(class_obj) = classes.get(class) else {
        return Err(format!(
            "resource claim {key}: device class {class:?} does not exist"
        ));
    };
    let count = match mode.unwrap_or("ExactCount") {
        "All" => Count::All,
        "ExactCount" => {
            let n = count.unwrap_or(1);
            if !(1..=MAX_COUNT).contains(&n) {
                return Err(format!(
                    "resource claim {key}: request {name:?}: count must be between 1 and {MAX_COUNT}"
                ));
            }
            Count::Exactly(usize::try_from(n).unwrap_or(1))
        }
        other => {
            return Err(format!(
                "resource claim {key}: request {name:?}: unknown allocationMode {other:?}"
            ))
        }
    };
    let class_selectors = class_obj
        .spec
        .as_ref()
        .and_then(|s| s.selectors.as_deref())
        .unwrap_or_default();
    let mut matching = BTreeSet::new();
    let mut first_error = None;
    for (node, device, value) in devices {
        let verdict = selectors.accept(class_selectors, value).and_then(|ok| {
            if ok {
                selectors.accept(own, value)
            } else {
                Ok(false)
            }
        });
        match verdict {
            Ok(true) => {
                matching.insert((node.clone(), device.clone()));
            }
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if matching.is_empty() {
        if let Some(e) = first_error {
            return Err(format!("resource claim {key}: request {name:?}: {e}"));
        }
    }
    Ok(Alternative {
        name,
        count,
        matching,
    })
}

/// Claims by `namespace/name`, as [`Needs`] looks them up.
pub fn claim_index(claims: &[ResourceClaim]) -> BTreeMap<String, &ResourceClaim> {
    claims
        .iter()
        .map(|c| {
            let ns = c.metadata.namespace.as_deref().unwrap_or("");
            let name = c.metadata.name.as_deref().unwrap_or("");
            (format!("{ns}/{name}"), c)
        })
        .collect()
}

/// DeviceClasses by name, as [`Needs`] looks them up.
pub fn class_index(classes: &[DeviceClass]) -> BTreeMap<String, &DeviceClass> {
    classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, c)))
        .collect()
}

/// What a placement round knows for working out pods' claims: the claims by `namespace/name`,
/// the DeviceClasses by name, the slices' devices ([`slice_devices`]); the scheduler's and the
/// GPU queue's.
pub struct Needs<'a> {
    claims: &'a BTreeMap<String, &'a ResourceClaim>,
    classes: &'a BTreeMap<String, &'a DeviceClass>,
    devices: &'a [(String, String, Value)],
    selectors: Selectors,
    /// Pending claims an earlier pod of the round takes.
    allocating: BTreeSet<String>,
    /// The requests of pending claims worked out in this round, by claim spec: the claims of
    /// one template (a pod each) are alike, and their selectors are evaluated once.
    worked_out: HashMap<String, Vec<RequestNeed>>,
}

impl<'a> Needs<'a> {
    /// A round over these claims, classes and devices.
    pub fn new(
        claims: &'a BTreeMap<String, &'a ResourceClaim>,
        classes: &'a BTreeMap<String, &'a DeviceClass>,
        devices: &'a [(String, String, Value)],
    ) -> Needs<'a> {
        Needs {
            claims,
            classes,
            devices,
            selectors: Selectors::default(),
            allocating: BTreeSet::new(),
            worked_out: HashMap::new(),
        }
    }

    /// What a pod's claims need; `None` when a claim is pending for an earlier pod of the
    /// round (they share it: it is allocated once, with that pod).
    pub fn of(&mut self, pod: &Pod) -> Result<Option<Vec<ClaimNeed>>, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let mut out = Vec::new();
        for (in_pod, name) in pod_claims(pod)? {
            let key = format!("{ns}/{name}");
            let Some(claim) = self.claims.get(&key) else {
                return Err(format!(
                    "resource claim {name:?} (claim {in_pod:?} of the pod) not found"
                ));
            };
            let need = self.need(claim, &key)?;
            if matches!(need, ClaimNeed::Pending { .. }) && !self.allocating.insert(key) {
                return Ok(None);
            }
            out.push(need);
        }
        Ok(Some(out))
    }

    /// What one claim needs, its selectors evaluated once per spec in the round.
    fn need(&mut self, claim: &ResourceClaim, key: &str) -> Result<ClaimNeed, String> {
        let pending = !is_allocated(claim) && claim.metadata.deletion_timestamp.is_none();
        let spec = serde_json::to_string(&claim.spec).unwrap_or_default();
        if let Some(requests) = self.worked_out.get(&spec).filter(|_| pending) {
            return Ok(ClaimNeed::Pending {
                claim: key.to_string(),
                requests: requests.clone(),
            });
        }
        let need = need(claim, self.classes, self.devices, &mut self.selectors)?;
        if let ClaimNeed::Pending { requests, .. } = &need {
            self.worked_out.insert(spec, requests.clone());
        }
        Ok(need)
    }

    /// The devices of each kind (a node view's device `resource`: `nvidia.com/gpu`, a MIG
    /// profile, a shared slice) that `needs` take: an allocated claim, its allocated devices; a
    /// pending one, for each request, as many devices as its first alternative asks for (every
    /// match on the node with the most, for `All`) of the kind most of its matches are. The
    /// GPU queue counts a pod's claims as these.
    pub fn devices_by_kind(
        &self,
        needs: &[ClaimNeed],
        views: &[NodeView],
    ) -> BTreeMap<String, i64> {
        let kind = |node: &str, device: &str| {
            views
                .iter()
                .find(|v| v.name == node)
                .and_then(|v| v.devices.iter().find(|d| d.name == device))
                .map(|d| d.resource.clone())
        };
        let mut out = BTreeMap::new();
        for n in needs {
            match n {
                ClaimNeed::Allocated { claim, .. } => {
                    let results = self
                        .claims
                        .get(claim)
                        .and_then(|c| c.status.as_ref())
                        .and_then(|s| s.allocation.as_ref())
                        .and_then(|a| a.devices.as_ref())
                        .and_then(|d| d.results.as_deref())
                        .unwrap_or_default();
                    for r in results {
                        if let Some(k) = kind(&r.pool, &r.device) {
                            *out.entry(k).or_insert(0) += 1;
                        }
                    }
                }
                ClaimNeed::Pending { requests, .. } => {
                    for alt in requests.iter().filter_map(|r| r.alternatives.first()) {
                        // Kind → node → matching devices.
                        let mut by: BTreeMap<String, BTreeMap<&str, i64>> = BTreeMap::new();
                        for (node, device) in &alt.matching {
                            if let Some(k) = kind(node, device) {
                                *by.entry(k).or_default().entry(node).or_insert(0) += 1;
                            }
                        }
                        let Some((k, nodes)) = by.into_iter().max_by_key(|(k, nodes)| {
                            (nodes.values().sum::<i64>(), std::cmp::Reverse(k.clone()))
                        }) else {
                            continue;
                        };
                        let n = match alt.count {
                            Count::Exactly(n) => i64::try_from(n).unwrap_or(MAX_COUNT),
                            Count::All => nodes.values().copied().max().unwrap_or(0),
                        };
                        *out.entry(k).or_insert(0) += n;
                    }
                }
            }
        }
        out
    }
}

/// The driver of each node's node-agent slice, by node name.
pub fn drivers_by_node(slices: &[ResourceSlice]) -> BTreeMap<String, String> {
    slices
        .iter()
        .filter(|s| is_node_agent_slice(s))
        .filter_map(|s| Some((s.spec.node_name.clone()?, s.spec.driver.clone())))
        .collect()
}

/// The claim's status once allocated `results` (`(request, device name)`) of `driver` on
/// `node`, reserved for the pod.
pub fn allocated_status(
    driver: &str,
    node: &str,
    results: &[(String, String)],
    pod: &str,
    uid: &str,
) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|(request, device)| {
            json!({"request": request, "driver": driver, "pool": node, "device": device})
        })
        .collect();
    json!({
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            "allocationTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}],
    })
}

/// Whether the claim is reserved for the pod (by UID).
pub fn reserved_for(claim: &ResourceClaim, uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .any(|r| r.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice() -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "n1-gpu", "labels": {"fabrik.dev/node-agent": "true"}},
            "spec": {"driver": fabrik_api::DRA_DRIVER, "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                        "model": {"string": "H100"}},
                     "capacity": {"memory": {"value": "80Gi"}}},
                    {"name": "gpu-1-mig-0", "attributes": {"type": {"string": "mig"},
                        "model": {"string": "H100"}},
                     "capacity": {"memory": {"value": "10Gi"}}},
                ]}
        }))
        .expect("slice")
    }

    fn class(name: &str, expr: &str) -> DeviceClass {
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expr}}]}}))
        .expect("class")
    }

    fn claim(requests: Value) -> ResourceClaim {
        serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": requests}}}))
        .expect("claim")
    }

    fn matching(need: &ClaimNeed) -> Vec<Vec<String>> {
        let ClaimNeed::Pending { requests, .. } = need else {
            panic!("not pending: {need:?}");
        };
        requests[0]
            .alternatives
            .iter()
            .map(|a| a.matching.iter().map(|(_, d)| d.clone()).collect())
            .collect()
    }

    #[test]
    fn class_and_request_selectors_choose_devices() {
        let gpu = class(
            "gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        );
        let any = class("any.fabrik.dev", "device.driver == 'gpu.nvidia.com'");
        let classes = BTreeMap::from([
            ("gpu.nvidia.com".to_string(), &gpu),
            ("any.fabrik.dev".to_string(), &any),
        ]);
        let devices = slice_devices(&[slice()]);
        let mut sel = Selectors::default();
        let c = claim(json!([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]));
        let n = need(&c, &classes, &devices, &mut sel).expect("need");
        assert_eq!(matching(&n), vec![vec!["gpu-0".to_string()]]);
        // Capacity with upstream's quantity functions.
        let c = claim(
            json!([{"name": "g", "exactly": {"deviceClassName": "any.fabrik.dev",
            "selectors": [{"cel": {"expression":
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) < 0"}}]}}]),
        );
        let n = need(&c, &classes, &devices, &mut sel).expect("need");
        assert_eq!(matching(&n), vec![vec!["gpu-1-mig-0".to_string()]]);
        // firstAvailable keeps its order.
        let c = claim(json!([{"name": "g", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "small", "deviceClassName": "any.fabrik.dev"}]}]));
        let n = need(&c, &classes, &devices, &mut sel).expect("need");
        assert_eq!(matching(&n).len(), 2);
        let ClaimNeed::Pending { requests, .. } = &n else {
            panic!()
        };
        assert_eq!(requests[0].alternatives[0].name, "g/big");
        assert_eq!(requests[0].alternatives[0].count, Count::Exactly(2));
    }

    #[test]
    fn a_round_works_out_alike_claims_once_and_counts_their_devices_by_kind() {
        let gpu = class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'");
        let classes = BTreeMap::from([("gpu.nvidia.com".to_string(), &gpu)]);
        let s = slice();
        let devices = slice_devices(std::slice::from_ref(&s));
        let named = |name: &str| {
            let mut c = claim(
                json!([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression":
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}]),
            );
            c.metadata.name = Some(name.into());
            c
        };
        let (a, b) = (named("a"), named("b"));
        let index = BTreeMap::from([("ns/a".to_string(), &a), ("ns/b".to_string(), &b)]);
        let pod = |name: &str, claim: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"containers": [],
                    "resourceClaims": [{"name": "g", "resourceClaimName": claim}]}}))
            .expect("pod")
        };
        let mut needs = Needs::new(&index, &classes, &devices);
        let first = needs.of(&pod("p", "a")).expect("a").expect("pending");
        let second = needs.of(&pod("q", "b")).expect("b").expect("pending");
        assert_eq!(needs.worked_out.len(), 1, "one spec, worked out once");
        assert_eq!(first[0].claim(), "ns/a");
        assert_eq!(second[0].claim(), "ns/b");
        assert_eq!(matching(&second[0]), vec![vec!["gpu-0".to_string()]]);
        // A claim another pod of the round takes: counted with that pod.
        assert!(needs.of(&pod("r", "a")).expect("shared").is_none());
        // By kind, as the node views name the devices.
        let mut n1 = NodeView {
            name: "n1".into(),
            ..Default::default()
        };
        n1.devices = super::super::model::devices(&s);
        let kinds = needs.devices_by_kind(&first, &[n1]);
        assert_eq!(kinds, BTreeMap::from([("nvidia.com/gpu".to_string(), 1)]));
    }

    #[test]
    fn bad_claims_say_why() {
        let gpu = class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'");
        let classes = BTreeMap::from([("gpu.nvidia.com".to_string(), &gpu)]);
        let devices = slice_devices(&[slice()]);
        let mut sel = Selectors::default();
        let missing = claim(json!([{"name": "g", "exactly": {"deviceClassName": "nope"}}]));
        let e = need(&missing, &classes, &devices, &mut sel).expect_err("no class");
        assert!(e.contains("\"nope\" does not exist"), "{e}");
        let broken = claim(
            json!([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": "device.attributes['x'].y +"}}]}}]),
        );
        let e = need(&broken, &classes, &devices, &mut sel).expect_err("bad cel");
        assert!(e.contains("did not compile"), "{e}");
        let failing = claim(
            json!([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": "device.attributes['other.dev'].x == 1"}}]}}]),
        );
        let e = need(&failing, &classes, &devices, &mut sel).expect_err("no such domain");
        assert!(e.contains("request \"g\""), "{e}");
        let too_many = claim(
            json!([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "count": 1000}}]),
        );
        assert!(need(&too_many, &classes, &devices, &mut sel).is_err());
    }

    #[test]
    fn template_claims_wait_for_their_claim() {
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"},
                               {"name": "shared", "resourceClaimName": "s"}]}}))
        .expect("pod");
        assert!(pod_claims(&pod)
            .expect_err("waits")
            .contains("template \"t\""));
        let mut pod = pod;
        pod.status = serde_json::from_value(json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "p-gpu-x"}]}))
        .expect("status");
        assert_eq!(
            pod_claims(&pod).expect("claims"),
            vec![
                ("gpu".to_string(), "p-gpu-x".to_string()),
                ("shared".to_string(), "s".to_string())
            ]
        );
    }

    #[test]
    fn allocation_names_its_node() {
        let mut c = claim(json!([]));
        c.status = serde_json::from_value(allocated_status(
            fabrik_api::DRA_DRIVER,
            "n1",
            &[("g".into(), "gpu-0".into())],
            "p",
            "u1",
        ))
        .expect("status");
        assert!(is_allocated(&c));
        assert!(reserved_for(&c, "u1"));
        assert_eq!(allocation_node(&c).as_deref(), Some("n1"));
        let ours = node_agent_drivers(&[slice()]);
        assert_eq!(
            allocated_devices(&[c.clone()], &ours),
            vec![("n1".to_string(), "gpu-0".to_string())]
        );
        // Another driver's devices are not this scheduler's.
        assert!(allocated_devices(&[c], &BTreeSet::from(["other.example.com".into()])).is_empty());
        // Nor are the devices of a slice no node agent published.
        let mut foreign = slice();
        foreign.metadata.labels = None;
        assert!(slice_devices(&[foreign.clone()]).is_empty());
        assert!(drivers_by_node(&[foreign]).is_empty());
        assert_eq!(drivers_by_node(&[slice()])["n1"], fabrik_api::DRA_DRIVER);
    }
}
