//! What the queue decides on, read off the host's objects: tenants' queue settings, the nodes'
//! GPUs (with the devices the node agents publish, or counted from `allocatable` where no
//! ResourceSlice names them), the workloads waiting at the queue's gate and those holding GPUs.

use std::collections::{BTreeMap, BTreeSet};

use fabrik_api::tenant::Tenant;
use fabrik_gpu::placement::claims;
use fabrik_gpu::placement::fit;
use fabrik_gpu::placement::model::{self, GpuDevice, NodeView};
use k8s_openapi::api::core::v1::{Node, Pod, PodResourceClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use fabrik_gpu::queue::{layouts, Admitted, Gpus, HeldPod, Input, TenantQueue, Waiting, HOSTNAME};

/// A tenant's queue settings from its spec; `resources` are the host resources of its kinds.
pub fn tenant_queue(tenant: &Tenant, resources: Vec<String>) -> TenantQueue {
    let queue = tenant.spec.queue.clone().unwrap_or_default();
    TenantQueue {
        name: tenant.metadata.name.clone().unwrap_or_default(),
        resources,
        guarantee: tenant.spec.gpu_guarantee(),
        borrowing_limit: match tenant.spec.gpu_guarantee() {
            None => i64::MAX,
            Some(_) => queue.borrowing_limit.unwrap_or(0).max(0),
        },
        lending_limit: queue.lending_limit.map(|l| l.max(0)),
        weight: queue.weight.unwrap_or(1).clamp(1, 1000),
        parent: queue.parent.clone(),
    }
}

/// Whether the queue's gate holds `pod`.
pub fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == fabrik_api::QUEUE_GATE))
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn gpus_of(pod: &Pod) -> Gpus {
    model::requests(pod)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| fabrik_api::is_host_gpu_resource(k) && *v > 0)
        .collect()
}

/// Nanoseconds since the epoch of a pod's arrival: the syncer's precise stamp, else its
/// creation time.
fn arrival(pod: &Pod) -> i128 {
    annotation(pod, fabrik_api::ANNOTATION_QUEUE_ARRIVAL)
        .and_then(|a| a.parse::<i128>().ok())
        .or_else(|| {
            pod.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_nanosecond())
        })
        .unwrap_or(0)
}

/// The admission time the queue stamped on a pod.
fn admitted_at(pod: &Pod) -> Option<i128> {
    let a = annotation(pod, fabrik_api::ANNOTATION_QUEUE_ADMITTED)?;
    a.split_whitespace().next()?.parse::<i128>().ok()
}

/// Whether the queue admitted a pod as backfill.
fn backfill(pod: &Pod) -> bool {
    annotation(pod, fabrik_api::ANNOTATION_QUEUE_ADMITTED)
        .is_some_and(|a| a.split_whitespace().nth(1) == Some("backfill"))
}

/// Whether the queue admitted a pod as its tenant's turn past its fair share
/// ([`fabrik_gpu::queue::Admission::turn`]): `<time> borrowed turn`.
fn turn(pod: &Pod) -> bool {
    annotation(pod, fabrik_api::ANNOTATION_QUEUE_ADMITTED)
        .is_some_and(|a| a.split_whitespace().nth(2) == Some("turn"))
}

/// The workload a tenant pod belongs to: `namespace/gang` and its size, or `namespace/pod`.
fn workload(pod: &Pod) -> (String, usize) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    match model::gang(pod) {
        Ok(Some((gang, size))) => (format!("{ns}/gang/{gang}"), size),
        _ => (
            format!("{ns}/{}", pod.metadata.name.as_deref().unwrap_or("")),
            1,
        ),
    }
}

/// A pod's priority within its tenant: the one its tenant resolved (the syncer's annotation),
/// else the host's.
fn priority(pod: &Pod) -> i32 {
    annotation(pod, fabrik_api::ANNOTATION_QUEUE_PRIORITY)
        .and_then(|p| p.parse::<i32>().ok())
        .or_else(|| pod.spec.as_ref().and_then(|s| s.priority))
        .unwrap_or(0)
}

/// A pod's `activeDeadlineSeconds` in nanoseconds: the longest it runs once started (the
/// kubelet enforces it).
fn deadline(pod: &Pod) -> Option<i128> {
    pod.spec
        .as_ref()?
        .active_deadline_seconds
        .filter(|s| *s > 0)
        .map(|s| i128::from(s).saturating_mul(1_000_000_000))
}

/// When a pod holding GPUs will have ended at the latest: its start (now, when it has not
/// started yet) plus its `activeDeadlineSeconds`, which the kubelet counts from the start.
fn ends_by(pod: &Pod, now: i128) -> Option<i128> {
    let start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now, |t| t.0.as_nanosecond());
    Some(start.saturating_add(deadline(pod)?))
}

/// The later of two bounds of a workload's pods, unknown when either is.
fn later(a: Option<i128>, b: Option<i128>) -> Option<i128> {
    Some(a?.max(b?))
}

/// Whether a pod is being removed (deleted, or preempted by the queue).
fn leaving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.status == "True"
                        && c.reason.as_deref() == Some(fabrik_api::REASON_QUEUE_RECLAIM)
                })
            })
}

/// Devices counted from `allocatable` on the nodes' views where no slice names them.
fn count_allocatable(views: &mut [NodeView], nodes: &[Node]) {
    for (view, node) in views.iter_mut().zip(nodes) {
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .cloned()
            .unwrap_or_default();
        for (resource, q) in &allocatable {
            if !fabrik_api::is_host_gpu_resource(resource)
                || view.devices.iter().any(|d| &d.resource == resource)
            {
                continue;
            }
            let total = fabrik_gpu::quantity::amount(resource, &q.0)
                .unwrap_or(0)
                .max(0);
            let free = view
                .free
                .get(resource)
                .copied()
                .unwrap_or(0)
                .clamp(0, total);
            for i in 0..total {
                view.devices.push(GpuDevice {
                    name: format!("{resource}-{i}"),
                    uuid: String::new(),
                    resource: resource.clone(),
                    gpu: i,
                    numa: 0,
                    island: 0,
                    slots: 1,
                    used: i64::from(i >= free),
                });
            }
        }
    }
}

/// Devices of each GPU resource on the nodes that take pods.
pub fn capacity(nodes: &[Node], views: &[NodeView]) -> Gpus {
    let mut out = Gpus::new();
    for (node, view) in nodes.iter().zip(views) {
        if !view.schedulable {
            continue;
        }
        for (resource, q) in node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .into_iter()
            .flatten()
        {
            if !fabrik_api::is_host_gpu_resource(resource) {
                continue;
            }
            if let Ok(n) = fabrik_gpu::quantity::amount(resource, &q.0) {
                *out.entry(resource.clone()).or_insert(0) += n.max(0);
            }
        }
    }
    out
}

/// How many pods a PodDisruptionBudget lets go now: its status where a disruption controller
/// keeps it (a real host), else counted as the eviction subresource of Fabrik's own host
/// counts it — from its `minAvailable` / `maxUnavailable` and the Ready pods it selects of
/// `all` (the host's pods).
fn disruptions_allowed(pdb: &PodDisruptionBudget, selector: &LabelSelector, all: &[Pod]) -> i64 {
    if let Some(allowed) = pdb.status.as_ref().and_then(|s| s.disruptions_allowed) {
        return i64::from(allowed);
    }
    let ns = pdb.metadata.namespace.as_deref();
    let selected: Vec<&Pod> = all
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns && selects(selector, p))
        .collect();
    let expected = selected.len() as i64;
    let healthy = selected
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count() as i64;
    let resolve = |v: &IntOrString| match v {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
            .map_or(0, |p| (p * expected + 99) / 100),
    };
    let spec = pdb.spec.as_ref();
    match (
        spec.and_then(|s| s.min_available.as_ref()),
        spec.and_then(|s| s.max_unavailable.as_ref()),
    ) {
        (Some(min), _) => healthy - resolve(min),
        (None, Some(max)) => resolve(max) - (expected - healthy),
        (None, None) => healthy - 1,
    }
}

/// Whether `selector` selects `pod` by its labels.
fn selects(selector: &LabelSelector, pod: &Pod) -> bool {
    let none = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&none);
    fabrik_controllers::selector_matches(selector, labels)
}

/// Whether taking `pods` (of one workload, in one namespace) now would break a
/// PodDisruptionBudget of theirs: one that selects more of them than it lets go (policy/v1: a
/// PDB without a selector selects nothing, an empty one every pod). `allowed` keeps what each
/// budget (by index) lets go, counted once per decision.
fn budget_refuses(
    pods: &[&Pod],
    pdbs: &[PodDisruptionBudget],
    all: &[Pod],
    allowed: &mut BTreeMap<usize, i64>,
) -> bool {
    let Some(ns) = pods.first().and_then(|p| p.metadata.namespace.as_deref()) else {
        return false;
    };
    pdbs.iter()
        .enumerate()
        .filter(|(_, b)| b.metadata.namespace.as_deref() == Some(ns))
        .any(|(i, b)| {
            let Some(selector) = b.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                return false;
            };
            let selected = pods.iter().filter(|p| selects(selector, p)).count() as i64;
            selected > 0
                && selected
                    > *allowed
                        .entry(i)
                        .or_insert_with(|| disruptions_allowed(b, selector, all))
        })
}

/// What the queue reads off the host for one decision, beside the objects themselves.
pub struct Host<'a> {
    /// Nodes.
    pub nodes: &'a [Node],
    /// The node agents' ResourceSlices (devices and topology).
    pub slices: &'a [ResourceSlice],
    /// Every pod.
    pub pods: &'a [Pod],
    /// PodDisruptionBudgets.
    pub pdbs: &'a [PodDisruptionBudget],
    /// ResourceClaims (their devices count as the GPUs of the pods that use them).
    pub claims: &'a [ResourceClaim],
    /// DeviceClasses (what a claim's request may match).
    pub classes: &'a [DeviceClass],
}

/// The queue's input, and what it does not queue.
pub struct Built {
    /// What the decision looks at.
    pub input: Input,
    /// Gated pods that take no GPU (their claims are for other devices): they go at once,
    /// `namespace/name`.
    pub release: Vec<String>,
    /// Gated pods whose claims cannot be read yet (`namespace/name` → why): they wait.
    pub unreadable: BTreeMap<String, String>,
}

/// The queue's input: `tenants` with their resources and the host's objects at `now`. GPUs
/// whose layout is being changed count in the capacity but take no new work, so that they
/// drain and the node agent can lay them out (the whole node, where its GPUs cannot be told
/// apart). A pod's GPUs are those its containers
/// request and those its ResourceClaims take (the devices of an allocated claim, what a pending
/// one asks for).
pub fn build(tenants: Vec<TenantQueue>, host: Host<'_>, now: i128) -> Built {
    let Host {
        nodes,
        slices,
        pods,
        pdbs,
        claims: all_claims,
        classes,
    } = host;
    // An allocated claim none of whose pods is there any more (deleted, the claim not yet
    // collected) gives its devices back: counted as held by nobody, reclaim would preempt again
    // for GPUs already on their way back.
    let present: BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let holding = all_claims.iter().filter(|c| {
        c.status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .is_some_and(|r| r.iter().any(|r| present.contains(r.uid.as_str())))
    });
    let allocated = claims::allocated_devices(holding, &claims::node_agent_drivers(slices));
    let mut views = model::nodes(nodes, slices, pods, &allocated);
    count_allocatable(&mut views, nodes);
    let capacity = capacity(nodes, &views);
    for (view, node) in views.iter_mut().zip(nodes) {
        match layouts::node_gpus(node, view) {
            // GPUs being laid out anew take no new work (their node agent stops offering one
            // that waits for its pods; this covers the moment before it answers).
            Some(gpus) if gpus.seen => {
                for d in &mut view.devices {
                    if u32::try_from(d.gpu).is_ok_and(|g| gpus.changing.contains(&g)) {
                        d.used = d.slots;
                    }
                }
            }
            // A node not seen GPU by GPU takes nothing new while its layout changes.
            _ if layouts::relayout_pending(node) => view.schedulable = false,
            _ => {}
        }
    }
    let claim_index = claims::claim_index(all_claims);
    let class_index = claims::class_index(classes);
    let uses_claims = pods.iter().any(|p| !claim_names(p).is_empty());
    let devices = if uses_claims {
        claims::slice_devices(slices)
    } else {
        Vec::new()
    };
    let mut needs = claims::Needs::new(&claim_index, &class_index, &devices);
    let mut counted: BTreeSet<String> = BTreeSet::new();
    let known: BTreeMap<&str, &TenantQueue> =
        tenants.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut waiting: BTreeMap<String, Waiting> = BTreeMap::new();
    let mut admitted: BTreeMap<String, Admitted> = BTreeMap::new();
    let mut admitted_members: BTreeMap<String, usize> = BTreeMap::new();
    let mut admitted_pods: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    let mut release = Vec::new();
    let mut unreadable = BTreeMap::new();
    for pod in pods {
        let Some(tenant) = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(fabrik_api::LABEL_TENANT))
        else {
            continue;
        };
        if !known.contains_key(tenant.as_str()) || finished(pod) {
            continue;
        }
        let key_of_pod = || {
            format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            )
        };
        let Ok(mut request) = model::pod_request(pod) else {
            continue;
        };
        if uses_claims && !claim_names(pod).is_empty() {
            match needs.of(pod) {
                Ok(Some(need)) => {
                    // An allocated claim several pods share is counted once, with the first.
                    let fresh: Vec<claims::ClaimNeed> = need
                        .iter()
                        .filter(|n| match n {
                            claims::ClaimNeed::Allocated { claim, .. } => {
                                counted.insert(claim.clone())
                            }
                            claims::ClaimNeed::Pending { .. } => true,
                        })
                        .cloned()
                        .collect();
                    request.claimed = needs
                        .devices_by_kind(&fresh, &views)
                        .into_iter()
                        .filter(|(k, n)| fabrik_api::is_host_gpu_resource(k) && *n > 0)
                        .collect();
                    request.claims = need;
                }
                // Shares a claim with a pod before it: counted there.
                Ok(None) => {}
                Err(why) => {
                    // A claim not there yet: it waits, saying so. One this queue cannot count
                    // (a feature the embedded scheduler lacks, such as constraints): the host's
                    // scheduler judges it, as without the queue.
                    if gated(pod) && claims_missing(pod, &claim_index) {
                        unreadable.insert(key_of_pod(), format!("its resource claims: {why}"));
                    } else if gated(pod) && pod.metadata.deletion_timestamp.is_none() {
                        release.push(key_of_pod());
                    }
                    continue;
                }
            }
        }
        let mut gpus = gpus_of(pod);
        for (k, n) in &request.claimed {
            *gpus.entry(k.clone()).or_insert(0) += n;
        }
        if gpus.is_empty() {
            if gated(pod) && pod.metadata.deletion_timestamp.is_none() {
                release.push(key_of_pod());
            }
            continue;
        }
        let (key, size) = workload(pod);
        if gated(pod) {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let w = waiting.entry(key.clone()).or_insert_with(|| Waiting {
                tenant: tenant.clone(),
                key,
                pods: Vec::new(),
                needs: size,
                priority: priority(pod),
                arrival: arrival(pod),
                runtime: deadline(pod),
            });
            w.runtime = later(w.runtime, deadline(pod));
            w.priority = w.priority.max(priority(pod));
            w.arrival = w.arrival.min(arrival(pod));
            w.pods.push(request);
            continue;
        }
        // Holding GPUs: bound, or admitted by the queue and on its way to its node.
        let bound = model::holds_resources(pod).map(str::to_string);
        let node = match bound {
            Some(node) => node,
            None => match request.node_selector.get(HOSTNAME) {
                Some(node) if admitted_at(pod).is_some() => node.clone(),
                _ => continue,
            },
        };
        let mut devices = model::held_devices(pod);
        devices.extend(allocated_on(&request.claims, &claim_index, &node));
        if model::holds_resources(pod).is_none() {
            // Not bound yet: take its room on its node as the scheduler will.
            if let Some(at) = views.iter().position(|v| v.name == node) {
                if let Ok(p) = fit::choose(std::slice::from_ref(&views[at]), &request) {
                    let claimed = p
                        .claims
                        .iter()
                        .flat_map(|c| c.results.iter().map(|(_, i)| *i));
                    devices = p
                        .devices
                        .iter()
                        .copied()
                        .chain(claimed)
                        .filter_map(|d| views[at].devices.get(d).map(|d| d.name.clone()))
                        .collect();
                    fit::commit(&mut views[at..=at], &request, &p);
                }
            }
        }
        *admitted_members.entry(key.clone()).or_insert(0) += 1;
        admitted_pods.entry(key.clone()).or_default().push(pod);
        let a = admitted.entry(key.clone()).or_insert_with(|| Admitted {
            tenant: tenant.clone(),
            key,
            pods: Vec::new(),
            priority: priority(pod),
            admitted_at: admitted_at(pod).unwrap_or(0),
            arrival: arrival(pod),
            leaving: false,
            backfill: false,
            ends_by: ends_by(pod, now),
            protected: false,
            turn: false,
        });
        a.ends_by = later(a.ends_by, ends_by(pod, now));
        a.leaving |= leaving(pod);
        a.backfill |= backfill(pod);
        a.turn |= turn(pod);
        a.priority = a.priority.max(priority(pod));
        a.admitted_at = a.admitted_at.max(admitted_at(pod).unwrap_or(0));
        a.arrival = a.arrival.min(arrival(pod));
        a.pods.push(HeldPod {
            request,
            node,
            devices,
        });
    }
    for w in waiting.values_mut() {
        let already = admitted_members.get(&w.key).copied().unwrap_or(0);
        w.needs = w.needs.saturating_sub(already);
    }
    let mut allowed = BTreeMap::new();
    for (key, a) in admitted.iter_mut() {
        if let Some(of) = admitted_pods.get(key) {
            a.protected = budget_refuses(of, pdbs, pods, &mut allowed);
        }
    }
    Built {
        input: Input {
            tenants,
            capacity,
            nodes: views,
            admitted: admitted.into_values().collect(),
            waiting: waiting.into_values().collect(),
            reservations: Vec::new(),
            lead: BTreeMap::new(),
            now,
        },
        release,
        unreadable,
    }
}

/// The claims a pod's spec names.
fn claim_names(pod: &Pod) -> &[PodResourceClaim] {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
}

/// Whether a claim of the pod does not exist yet (a template's, not made; a named one, not
/// synced).
fn claims_missing(pod: &Pod, claim_index: &BTreeMap<String, &ResourceClaim>) -> bool {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    match claims::pod_claims(pod) {
        Err(_) => true,
        Ok(names) => names
            .iter()
            .any(|(_, name)| !claim_index.contains_key(&format!("{ns}/{name}"))),
    }
}

/// The devices on `node` that the allocated claims among `needs` hold (device names).
fn allocated_on(
    needs: &[claims::ClaimNeed],
    claim_index: &BTreeMap<String, &ResourceClaim>,
    node: &str,
) -> Vec<String> {
    needs
        .iter()
        .filter(|n| matches!(n, claims::ClaimNeed::Allocated { .. }))
        .filter_map(|n| claim_index.get(n.claim()))
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref())
        .flat_map(|d| d.results.iter().flatten())
        .filter(|r| r.pool == node)
        .map(|r| r.device.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_api::tenant::{TenantQueue as QueueSpec, TenantQuota, TenantSpec};

    /// The input from pods and budgets alone (no nodes, slices or claims).
    fn on(
        tenants: Vec<TenantQueue>,
        pods: &[Pod],
        pdbs: &[PodDisruptionBudget],
        now: i128,
    ) -> Input {
        let host = Host {
            nodes: &[],
            slices: &[],
            pods,
            pdbs,
            claims: &[],
            classes: &[],
        };
        build(tenants, host, now).input
    }

    #[test]
    fn a_tenant_s_queue_comes_from_its_spec() {
        let spec = TenantSpec {
            quota: Some(TenantQuota {
                gpus: Some(4),
                ..Default::default()
            }),
            queue: Some(QueueSpec {
                borrowing_limit: Some(2),
                lending_limit: Some(1),
                weight: Some(3),
                parent: Some("research".into()),
            }),
            ..Default::default()
        };
        let q = tenant_queue(&Tenant::new("team-a", spec), vec!["nvidia.com/gpu".into()]);
        assert_eq!(q.name, "team-a");
        assert_eq!(q.guaranteed("nvidia.com/gpu"), 4);
        assert_eq!(q.cap("nvidia.com/gpu"), 6);
        assert_eq!(q.lending_limit, Some(1));
        assert_eq!(q.weight, 3);
        assert_eq!(q.parent.as_deref(), Some("research"));
        // No GPU quota: nothing guaranteed, borrowing unbounded, no group.
        let q = tenant_queue(&Tenant::new("free", TenantSpec::default()), Vec::new());
        assert_eq!(q.guarantee, None);
        assert_eq!(q.parent, None);
        assert_eq!(q.weight, 1);
    }

    fn gpu_pod(name: &str, gated: bool, deadline: Option<i64>, started: Option<&str>) -> Pod {
        let mut pod = serde_json::json!({
            "metadata": {"name": name, "namespace": "fabrik-a",
                "labels": {(fabrik_api::LABEL_TENANT): "a"},
                "annotations": {(fabrik_api::GANG): "g", (fabrik_api::GANG_SIZE): "2",
                    (fabrik_api::ANNOTATION_QUEUE_ADMITTED): "5 backfill"}},
            "spec": {"containers": [{"name": "main", "resources":
                {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        });
        if gated {
            pod["spec"]["schedulingGates"] = serde_json::json!([{"name": fabrik_api::QUEUE_GATE}]);
        } else {
            pod["spec"]["nodeName"] = serde_json::json!("n1");
        }
        if let Some(d) = deadline {
            pod["spec"]["activeDeadlineSeconds"] = serde_json::json!(d);
        }
        if let Some(t) = started {
            pod["status"] = serde_json::json!({"phase": "Running", "startTime": t});
        }
        serde_json::from_value(pod).expect("a pod")
    }

    #[test]
    fn declared_run_times_come_from_active_deadline_seconds() {
        let s = 1_000_000_000i128;
        let tenants = || {
            vec![TenantQueue {
                name: "a".into(),
                ..Default::default()
            }]
        };
        let now = 1_000 * s;
        // A waiting gang: its run time is its longest pod's deadline, unknown when one has none.
        let i = on(
            tenants(),
            &[
                gpu_pod("p0", true, Some(60), None),
                gpu_pod("p1", true, Some(90), None),
            ],
            &[],
            now,
        );
        assert_eq!(i.waiting[0].runtime, Some(90 * s));
        let i = on(
            tenants(),
            &[
                gpu_pod("p0", true, Some(60), None),
                gpu_pod("p1", true, None, None),
            ],
            &[],
            now,
        );
        assert_eq!(i.waiting[0].runtime, None);
        // Holding GPUs: it ends by its start plus its deadline (now, not started yet).
        let i = on(
            tenants(),
            &[
                gpu_pod("p0", false, Some(60), Some("1970-01-01T00:15:00Z")),
                gpu_pod("p1", false, Some(60), None),
            ],
            &[],
            now,
        );
        assert_eq!(i.admitted[0].ends_by, Some(now + 60 * s));
        assert!(i.admitted[0].backfill);
        assert!(!i.admitted[0].turn);
        // Admitted as its tenant's turn past its fair share: so marked, and so read back.
        let mut turn = gpu_pod("p0", false, None, Some("1970-01-01T00:15:00Z"));
        turn.metadata.annotations.get_or_insert_default().insert(
            fabrik_api::ANNOTATION_QUEUE_ADMITTED.to_string(),
            "5 borrowed turn".to_string(),
        );
        let i = on(tenants(), &[turn], &[], now);
        assert!(i.admitted[0].turn && !i.admitted[0].backfill);
        let i = on(
            tenants(),
            &[gpu_pod("p0", false, Some(60), Some("1970-01-01T00:15:00Z"))],
            &[],
            now,
        );
        assert_eq!(i.admitted[0].ends_by, Some(900 * s + 60 * s));
    }

    #[test]
    fn a_workload_its_disruption_budget_protects_is_marked_so() {
        let pdb = |allowed: i32, selector: serde_json::Value| -> PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "keep", "namespace": "fabrik-a"},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 2,
                    "desiredHealthy": 2, "expectedPods": 2},
            }))
            .expect("a PDB")
        };
        let mut p0 = gpu_pod("p0", false, None, None);
        let mut p1 = gpu_pod("p1", false, None, None);
        for p in [&mut p0, &mut p1] {
            p.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("app".into(), "keep".into());
        }
        let protected = |p0: &Pod, p1: &Pod, pdbs: &[PodDisruptionBudget]| {
            let tenants = vec![TenantQueue {
                name: "a".into(),
                ..Default::default()
            }];
            let i = on(tenants, &[p0.clone(), p1.clone()], pdbs, 0);
            i.admitted[0].protected
        };
        let app = serde_json::json!({"matchLabels": {"app": "keep"}});
        // No budget, or one that allows both to go: fair game.
        assert!(!protected(&p0, &p1, &[]));
        assert!(!protected(&p0, &p1, &[pdb(2, app.clone())]));
        // The gang's two pods, one disruption allowed: taking the gang would break it.
        assert!(protected(&p0, &p1, &[pdb(1, app.clone())]));
        assert!(
            protected(&p0, &p1, &[pdb(0, serde_json::json!({}))]),
            "an empty selector selects all"
        );
        // A budget of other pods, or of another namespace, does not count.
        assert!(!protected(
            &p0,
            &p1,
            &[pdb(0, serde_json::json!({"matchLabels": {"app": "other"}}))]
        ));
        let mut elsewhere = pdb(0, app.clone());
        elsewhere.metadata.namespace = Some("fabrik-b".into());
        assert!(!protected(&p0, &p1, &[elsewhere]));
        // No status (a host without a disruption controller): counted from the spec and the
        // pods. Neither pod is Ready: `maxUnavailable: 2` is used up already.
        let counted = |spec: serde_json::Value| -> PodDisruptionBudget {
            let mut spec = spec;
            spec["selector"] = app.clone();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "keep", "namespace": "fabrik-a"}, "spec": spec}))
            .expect("a PDB")
        };
        assert!(protected(
            &p0,
            &p1,
            &[counted(serde_json::json!({"maxUnavailable": 2}))]
        ));
        for p in [&mut p0, &mut p1] {
            p.status = Some(
                serde_json::from_value(serde_json::json!({
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}))
                .expect("a status"),
            );
        }
        assert!(!protected(
            &p0,
            &p1,
            &[counted(serde_json::json!({"maxUnavailable": 2}))]
        ));
        assert!(protected(
            &p0,
            &p1,
            &[counted(serde_json::json!({"maxUnavailable": 1}))]
        ));
        assert!(protected(
            &p0,
            &p1,
            &[counted(serde_json::json!({"minAvailable": "50%"}))]
        ));
        assert!(!protected(
            &p0,
            &p1,
            &[counted(serde_json::json!({"minAvailable": 0}))]
        ));
    }

    #[test]
    fn a_pod_s_claims_count_as_its_gpus() {
        use serde_json::json;
        let driver = fabrik_api::DRA_DRIVER;
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {(HOSTNAME): "n1"}},
            "status": {"allocatable": {"nvidia.com/gpu": "2", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a node");
        let devices: Vec<serde_json::Value> = (0..2)
            .map(|i| {
                json!({"name": format!("gpu-{i}"),
                    "attributes": {"type": {"string": "gpu"}, "index": {"int": i}}})
            })
            .collect();
        let slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "n1-gpus", "labels": {(fabrik_api::LABEL_NODE_AGENT_SLICE): "true"}},
            "spec": {"driver": driver, "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": devices},
        }))
        .expect("a slice");
        let class = |name: &str, d: &str| -> DeviceClass {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"selectors": [
                {"cel": {"expression": format!("device.driver == '{d}'")}}]}}))
            .expect("a class")
        };
        let classes = [
            class("gpu.nvidia.com", driver),
            class("nic.example.com", "nic.example.com"),
        ];
        // `allocated`: (device, the uid of the pod it is reserved for).
        let claim = |name: &str, class: &str, allocated: Option<(&str, &str)>| -> ResourceClaim {
            let mut c = json!({"metadata": {"name": name, "namespace": "fabrik-a"},
                "spec": {"devices": {"requests": [{"name": "r",
                    "exactly": {"deviceClassName": class, "count": 2}}]}}});
            if let Some((device, pod)) = allocated {
                c["status"] = json!({"allocation": {"devices": {"results": [
                    {"request": "r", "driver": driver, "pool": "n1", "device": device}]}},
                    "reservedFor": [{"resource": "pods", "name": pod, "uid": pod}]});
            }
            serde_json::from_value(c).expect("a claim")
        };
        let mut constrained = claim("constrained", "gpu.nvidia.com", None);
        if let Some(d) = constrained.spec.as_mut().and_then(|s| s.devices.as_mut()) {
            d.constraints = Some(vec![serde_json::from_value(
                json!({"matchAttribute": "gpu.nvidia.com/nvlinkIsland"}),
            )
            .expect("a constraint")]);
        }
        let claims = [
            claim("two", "gpu.nvidia.com", None),
            claim("nics", "nic.example.com", None),
            claim("held", "gpu.nvidia.com", Some(("gpu-1", "holds-one"))),
            // Its pod is gone (the claim not collected yet): its device is free again.
            claim("left-over", "gpu.nvidia.com", Some(("gpu-0", "gone"))),
            constrained,
        ];
        let pod = |name: &str, claim: &str, gated: bool| -> Pod {
            let mut p = json!({
                "metadata": {"name": name, "namespace": "fabrik-a", "uid": name,
                    "labels": {(fabrik_api::LABEL_TENANT): "a"}},
                "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": claim}],
                    "containers": [{"name": "main", "resources": {"claims": [{"name": "c"}]}}]},
            });
            if gated {
                p["spec"]["schedulingGates"] = json!([{"name": fabrik_api::QUEUE_GATE}]);
            } else {
                p["spec"]["nodeName"] = json!("n1");
            }
            serde_json::from_value(p).expect("a pod")
        };
        let pods = [
            pod("wants-two", "two", true),
            pod("wants-nics", "nics", true),
            pod("wants-nothing-known", "missing", true),
            pod("wants-constrained", "constrained", true),
            pod("holds-one", "held", false),
            // Shares the allocated claim: its device is not counted twice.
            pod("shares-it", "held", false),
        ];
        let host = Host {
            nodes: std::slice::from_ref(&node),
            slices: std::slice::from_ref(&slice),
            pods: &pods,
            pdbs: &[],
            claims: &claims,
            classes: &classes,
        };
        let tenants = vec![TenantQueue {
            name: "a".into(),
            ..Default::default()
        }];
        let built = build(tenants, host, 0);
        // A pending claim: the GPUs its request asks for.
        let [w] = built.input.waiting.as_slice() else {
            panic!("one waiting workload: {:?}", built.input.waiting)
        };
        assert_eq!(w.key, "fabrik-a/wants-two");
        assert_eq!(w.gpus(), Gpus::from([("nvidia.com/gpu".to_string(), 2)]));
        // An allocated claim: its device, held on its node.
        let [a] = built.input.admitted.as_slice() else {
            panic!("one admitted workload: {:?}", built.input.admitted)
        };
        assert_eq!(a.pods[0].devices, vec!["gpu-1".to_string()]);
        assert_eq!(a.pods[0].request.claimed["nvidia.com/gpu"], 1);
        let n1 = &built.input.nodes[0];
        assert_eq!(n1.devices.iter().filter(|d| d.used > 0).count(), 1);
        // No GPU among its claims, or claims this queue cannot count (the host's scheduler
        // judges them): let go; a claim not there yet: it waits, saying so.
        assert_eq!(
            built.release,
            vec![
                "fabrik-a/wants-nics".to_string(),
                "fabrik-a/wants-constrained".to_string()
            ]
        );
        assert!(
            built.unreadable["fabrik-a/wants-nothing-known"].contains("not found"),
            "{:?}",
            built.unreadable
        );
    }
}
