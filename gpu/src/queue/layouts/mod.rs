//! GPU layouts that follow the queue's demand, GPU by GPU: when workloads wait for a kind of
//! GPU (whole, a MIG profile, time-sliced, a capped shared slice) of which too little is free,
//! idle GPUs of kinds nobody waits for are laid out for it — a MIG GPU made whole for a
//! training job, one whole GPU cut into seven `1g.18gb` instances for inference — by writing
//! the node's layout annotation ([`fabrik_api::ANNOTATION_GPU_LAYOUT`]) as a `mode: mixed`
//! layout that keeps every other GPU as it was, which the node agent applies (see
//! `docs/node-agent.md`, "Layouts"). Whole, MIG and shared GPUs mix on one node.
//!
//! When no GPU can be spared and a workload has waited past the starvation bound — for a kind
//! that no node has enough of to run its largest pod at all, however long it waited; or below
//! its tenant's guarantee of a kind the tenants are guaranteed more of than the nodes offer,
//! then from GPUs of kinds offered beyond their guarantees only — busy GPUs are laid out for
//! it and drain: the node agent stops offering a GPU whose change waits for its pods (as it
//! does an unhealthy one), so no new work goes there, its runs end, and the change applies.
//! The GPUs chosen are those freed soonest (fewest devices in use, runs that declare the
//! earliest end), on one node; one drain at a time ([`plan`]).
//!
//! A GPU that waits only for runs that may be preempted is not left waiting ([`in_the_way`]):
//! backfill (runs admitted on GPUs nothing else could use then), and — when the GPU is laid
//! out for a kind a tenant waits for below its guarantee — runs of tenants holding more of
//! their own kind than they are guaranteed (reclaim across kinds), unless a
//! PodDisruptionBudget protects them or they declare an end within [`SOON`]. Other runs
//! admitted in queue order are never preempted for a layout: the GPU waits for them to end.
//!
//! A GPU re-laid out here is left alone for the policy's layout hold ([`HOLD`] unless the
//! platform sets another), so that two demands cannot toss it between them; after a write the
//! queue waits for the node to show it before planning more.
//! A node whose GPUs the queue cannot see one by one (a host without DRA, where no
//! ResourceSlice names them) is laid out as one: all its GPUs alike, when none is in use (or,
//! draining, as above), and takes no new work while its agent reports the layout `pending`.
//! Nodes of an unknown model or with a MIG layout of NVIDIA's single strategy are not laid out
//! here.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::GpuInfo;
use crate::layout::{self, GpuLayout, Layout, SharedSlice};
use crate::placement::model::NodeView;
use crate::profiles::GpuModel;
use crate::queue::{Admitted, Input, Policy, Preemption};
use k8s_openapi::api::core::v1::Node;

mod plan;

pub use plan::plan;

/// How long a GPU re-laid out here is not re-laid out again unless the policy says otherwise
/// ([`Policy::layout_hold`]), in nanoseconds.
pub const HOLD: i128 = 60 * 1_000_000_000;

/// The longest layout hold a policy may set, in nanoseconds: what [`Recent`] remembers.
pub const MAX_HOLD: i128 = 3_600 * 1_000_000_000;

/// A backfill run declared to end within this is left to end rather than preempted for a
/// layout, in nanoseconds.
pub const SOON: i128 = 60 * 1_000_000_000;

/// After a layout is written, how long the queue waits for the node to show it before it
/// plans again (so that one demand is not served twice), in nanoseconds.
const SETTLE: i128 = 2 * 1_000_000_000;

/// The most GPUs a node's `fabrik.dev/gpu-count` label may say for the queue to trust it.
const MAX_GPUS_PER_NODE: u32 = 256;

/// How many GPUs a node's agent says it has (its `fabrik.dev/gpu-count` label), where that is a
/// count a node agent writes: a label saying none or hundreds is not trusted.
pub fn labelled_gpu_count(labels: &BTreeMap<String, String>) -> Option<u32> {
    let count: u32 = labels.get(fabrik_api::LABEL_GPU_COUNT)?.parse().ok()?;
    (1..=MAX_GPUS_PER_NODE).contains(&count).then_some(count)
}

/// Units of each GPU resource.
type Units = BTreeMap<String, i64>;

fn units(m: &Units, r: &str) -> i64 {
    m.get(r).copied().unwrap_or(0)
}

/// A node's GPUs as the queue can lay them out.
pub struct NodeGpus {
    /// Whether its GPUs are seen one by one (the node agent's ResourceSlice names them);
    /// otherwise what they offer is taken from the layout, all of them changing while the
    /// agent reports it `pending`.
    pub seen: bool,
    model: &'static GpuModel,
    /// Per GPU index: its layout as the node's annotation wants it.
    desired: BTreeMap<u32, GpuLayout>,
    /// Per GPU index: what the desired layout offers.
    offers: BTreeMap<u32, Units>,
    /// Per GPU index: what its devices offer now (the node agent's ResourceSlice).
    have: BTreeMap<u32, Units>,
    /// The GPUs whose devices are not (yet) what the desired layout offers: being changed.
    pub changing: BTreeSet<u32>,
}

impl NodeGpus {
    /// How many of `resource` one unit the plan lays out makes: one GPU where they are seen
    /// one by one, else all of them.
    fn per_unit(&self, resource: &str) -> Option<i64> {
        let (_, per_gpu) = gpu_layout_for(resource, self.model)?;
        let gpus = if self.seen { 1 } else { self.desired.len() };
        Some(per_gpu * i64::try_from(gpus).ok()?)
    }
}

/// `node`'s GPUs, if the queue can lay them out: the model is known (the node agent's labels),
/// and its layout is valid and not of NVIDIA's single MIG strategy.
pub fn node_gpus(node: &Node, view: &NodeView) -> Option<NodeGpus> {
    let labels = node.metadata.labels.as_ref()?;
    let model = crate::profiles::model(labels.get(fabrik_api::LABEL_GPU_MODEL)?).ok()?;
    let count = labelled_gpu_count(labels)?;
    // Devices counted from `allocatable` (no slice) carry no UUID and no real GPU index.
    let seen = view.devices.iter().all(|d| !d.uuid.is_empty());
    let text = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_LAYOUT));
    let current = match text {
        Some(t) => layout::parse(t).ok()?,
        None => Layout::Whole {},
    };
    let indexes: Vec<u32> = (0..count).collect();
    let desired = current.per_gpu(&indexes)?;
    let mut offers = BTreeMap::new();
    for (&i, l) in &desired {
        let target = layout::gpu_target(&GpuInfo::plain(i, model), l).ok()?;
        offers.insert(i, target.resources());
    }
    let mut have: BTreeMap<u32, Units> = BTreeMap::new();
    if !seen && !relayout_pending(node) {
        have = offers.clone();
    }
    for d in view.devices.iter().filter(|_| seen) {
        let Ok(i) = u32::try_from(d.gpu) else {
            continue;
        };
        *have
            .entry(i)
            .or_default()
            .entry(d.resource.clone())
            .or_insert(0) += d.slots;
    }
    let changing = indexes
        .iter()
        .copied()
        .filter(|i| have.get(i) != offers.get(i))
        .collect();
    Some(NodeGpus {
        seen,
        model,
        desired,
        offers,
        have,
        changing,
    })
}

/// Whether a node's GPU layout is being changed: its node agent reports the layout `pending`
/// (waiting for busy GPUs, or part way through its steps).
pub fn relayout_pending(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS))
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .is_some_and(|s| s["state"] == "pending")
}

/// How one GPU of `model` is laid out to offer `resource`, and how many of it that makes.
pub fn gpu_layout_for(resource: &str, model: &'static GpuModel) -> Option<(GpuLayout, i64)> {
    let layout = if resource == fabrik_api::RESOURCE_GPU {
        GpuLayout::Whole {}
    } else if resource == fabrik_api::RESOURCE_GPU_SHARED {
        GpuLayout::TimeSlicing { replicas: 4 }
    } else if let Some(profile) = resource.strip_prefix("nvidia.com/mig-") {
        GpuLayout::Mig {
            geometry: Some(format!("all-{profile}")),
            profiles: None,
        }
    } else {
        // A capped shared slice, `fabrik.dev/shared-gpu-<MiB>mib-<percent>pct`: as many as
        // the GPU's compute and memory hold.
        let rest = resource.strip_prefix("fabrik.dev/shared-gpu-")?;
        let (mib, pct) = rest.strip_suffix("pct")?.split_once("mib-")?;
        let (mib, pct): (u64, u32) = (mib.parse().ok()?, pct.parse().ok()?);
        if mib == 0 || !(1..=100).contains(&pct) {
            return None;
        }
        let count = u64::from(100 / pct).min(model.memory_mib / mib);
        GpuLayout::Shared {
            slices: vec![SharedSlice {
                memory_mib: mib,
                compute_percent: pct,
                count: u32::try_from(count).ok()?,
            }],
        }
    };
    let target = layout::gpu_target(&GpuInfo::plain(0, model), &layout).ok()?;
    let n = units(&target.resources(), resource);
    (n > 0).then_some((layout, n))
}

/// The node's layout annotation with `changes` made (GPU index → layout) and every other GPU
/// as it is: `mode: mixed`, the most common layout as the default.
fn layout_text(gpus: &NodeGpus, changes: &BTreeMap<u32, GpuLayout>) -> Option<String> {
    let mut all = gpus.desired.clone();
    all.extend(changes.iter().map(|(i, l)| (*i, l.clone())));
    let mut counts: Vec<(&GpuLayout, usize)> = Vec::new();
    for l in all.values() {
        match counts.iter_mut().find(|(c, _)| *c == l) {
            Some((_, n)) => *n += 1,
            None => counts.push((l, 1)),
        }
    }
    // The most common; the first GPU's among equals.
    let default = counts
        .iter()
        .rev()
        .max_by_key(|(_, n)| *n)
        .map(|(l, _)| (*l).clone())?;
    let per_gpu = all
        .into_iter()
        .filter(|(_, l)| *l != default)
        .map(|(i, l)| (i.to_string(), l))
        .collect();
    serde_yaml_ng::to_string(&Layout::Mixed {
        default: Some(default),
        per_gpu,
    })
    .ok()
}

/// Remembers the GPUs re-laid out here, and when the last layout was written (the queue's
/// clock: nanoseconds since the epoch, as [`Input::now`]).
#[derive(Default)]
pub struct Recent {
    gpus: BTreeMap<(String, u32), i128>,
    written: Option<i128>,
}

impl Recent {
    fn held(&self, node: &str, gpu: u32, now: i128, hold: i128) -> bool {
        self.gpus
            .get(&(node.to_string(), gpu))
            .is_some_and(|at| now - at < hold.min(MAX_HOLD))
    }

    fn settling(&self, now: i128) -> bool {
        self.written.is_some_and(|at| now - at < SETTLE)
    }

    /// Notes that `gpus` of `node` were re-laid out at `now`.
    pub fn note(&mut self, node: &str, gpus: impl IntoIterator<Item = u32>, now: i128) {
        self.gpus.retain(|_, at| now - *at < MAX_HOLD);
        for g in gpus {
            self.gpus.insert((node.to_string(), g), now);
        }
        self.written = Some(now);
    }
}

/// A layout to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The node.
    pub node: String,
    /// Its new layout annotation.
    pub layout: String,
    /// The GPUs re-laid out, and for which resource.
    pub gpus: BTreeMap<u32, String>,
    /// Whether some of them are in use (they drain).
    pub drains: bool,
}

/// The node being laid out so that it offers `resource`, if any, and its GPUs being changed
/// for it.
pub fn laying_out<'n>(
    nodes: &'n [Node],
    views: &[NodeView],
    resource: &str,
) -> Option<(&'n str, Vec<u32>)> {
    nodes.iter().zip(views).find_map(|(node, view)| {
        let gpus = node_gpus(node, view)?;
        let changing: Vec<u32> = gpus
            .changing
            .iter()
            .copied()
            .filter(|g| gpus.offers.get(g).is_some_and(|o| o.contains_key(resource)))
            .collect();
        (!changing.is_empty()).then_some((node.metadata.name.as_deref()?, changing))
    })
}

/// The runs to preempt so that GPUs waiting for a new layout get it: on every GPU a node agent
/// reports waiting for its pods (`waitingFor` in its layout status), when every run there may
/// go — whole workloads, each once, none a PodDisruptionBudget protects now, none declared to
/// end within [`SOON`]:
///
/// * **backfill** (runs admitted on GPUs nothing else could use then, the first to be
///   preempted);
/// * **borrowed runs, across kinds**: when the GPU is being laid out for a kind that a tenant
///   waits for below its guarantee (past the policy's reclaim grace, and not refused by its
///   own limits: `limited`), a run of a tenant holding more of its kind than it is guaranteed
///   goes, as long as its tenant keeps its guarantee — reclaim as [`super::decide`] does it
///   within one kind, here for a guarantee of another kind. Not when the policy turns reclaim
///   off, and never a run of the tenant owed the kind: weighing its own kinds against each
///   other is its own queue order's business, not reclaim's.
pub fn in_the_way(
    input: &Input,
    nodes: &[Node],
    policy: &Policy,
    limited: &BTreeSet<String>,
) -> Vec<Preemption> {
    let mut by_pod: BTreeMap<(&str, &str), &Admitted> = BTreeMap::new();
    let mut held: BTreeMap<(&str, String), i64> = BTreeMap::new();
    for a in &input.admitted {
        for p in &a.pods {
            by_pod.insert((p.request.namespace.as_str(), p.request.name.as_str()), a);
        }
        // What is already leaving (preempted by an earlier pass, its pods not gone yet) is no
        // longer its tenant's: counted, the tenant would seem to hold more than its guarantee
        // and lose more of its runs in each pass until those pods are gone.
        if a.leaving {
            continue;
        }
        for (r, n) in a.gpus() {
            *held.entry((a.tenant.as_str(), r)).or_insert(0) += n;
        }
    }
    let guarantee = |tenant: &str, r: &str| {
        input
            .tenants
            .iter()
            .find(|t| t.name == tenant)
            .map_or(0, |t| t.guaranteed(r))
    };
    // The kinds some tenant waits for below its guarantee, and those tenants, first waiting first.
    let mut owed: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    if policy.reclaim {
        for w in &input.waiting {
            if limited.contains(&w.key) || input.now - w.arrival < policy.reclaim_grace {
                continue;
            }
            for (r, n) in w.gpus() {
                let has = held
                    .get(&(w.tenant.as_str(), r.clone()))
                    .copied()
                    .unwrap_or(0);
                if n > 0 && has + n <= guarantee(&w.tenant, &r) {
                    let tenants = owed.entry(r).or_default();
                    if !tenants.contains(&w.tenant.as_str()) {
                        tenants.push(w.tenant.as_str());
                    }
                }
            }
        }
    }
    let mut out: Vec<Preemption> = Vec::new();
    for (node, view) in nodes.iter().zip(&input.nodes) {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let Some(status) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS))
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        else {
            continue;
        };
        if status["state"] != "pending" {
            continue;
        }
        let Some(waiting) = status["waitingFor"].as_object() else {
            continue;
        };
        let laid = node_gpus(node, view);
        for (gpu, pods) in waiting {
            let holders: Option<Vec<&Admitted>> = pods
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let (ns, pod) = p.as_str()?.split_once('/')?;
                    by_pod.get(&(ns, pod)).copied()
                })
                .collect();
            let Some(mut holders) = holders.filter(|h| !h.is_empty()) else {
                continue;
            };
            let mut seen = BTreeSet::new();
            holders.retain(|a| !out.iter().any(|p| p.key == a.key) && seen.insert(a.key.clone()));
            // What the GPU is being laid out for, if a tenant is owed it.
            let owner = gpu
                .parse::<u32>()
                .ok()
                .and_then(|g| laid.as_ref()?.offers.get(&g))
                .and_then(|offers| offers.keys().find_map(|r| Some((r, owed.get(r)?))));
            let mut left = held.clone();
            let mut why = Vec::new();
            for a in &holders {
                if a.protected || a.leaving || a.ends_by.is_some_and(|end| end - input.now <= SOON)
                {
                    break;
                }
                if a.backfill {
                    why.push(format!(
                        "it ran as backfill on GPU {gpu} of node {name}, which is being laid out \
                         anew for waiting work"
                    ));
                    continue;
                }
                let Some((kind, tenant)) = owner.and_then(|(kind, tenants)| {
                    Some((kind, tenants.iter().find(|t| **t != a.tenant)?))
                }) else {
                    break;
                };
                let gpus = a.gpus();
                let keeps = gpus.iter().all(|(r, n)| {
                    left.get(&(a.tenant.as_str(), r.clone()))
                        .copied()
                        .unwrap_or(0)
                        - n
                        >= guarantee(&a.tenant, r)
                });
                if !keeps {
                    break;
                }
                for (r, n) in gpus {
                    *left.entry((a.tenant.as_str(), r)).or_insert(0) -= n;
                }
                why.push(format!(
                    "GPU {gpu} of node {name} is being laid out for {kind}, which tenant \
                     {tenant} waits for below its guarantee, and this workload borrowed GPUs \
                     beyond its own tenant's guarantee"
                ));
            }
            if why.len() < holders.len() {
                continue;
            }
            held = left;
            for (a, why) in holders.into_iter().zip(why) {
                out.push(Preemption {
                    key: a.key.clone(),
                    tenant: a.tenant.clone(),
                    pods: a.pods.iter().map(|p| p.request.name.clone()).collect(),
                    message: format!("preempted by Fabrik's GPU queue: {why}"),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::model::{GpuDevice, PodRequest};
    use crate::queue::Admitted;
    use crate::queue::Waiting;

    const S: i128 = 1_000_000_000;
    const MIG: &str = "nvidia.com/mig-1g.18gb";

    /// The plan with nothing laid out lately, the default policy and no tenant limited.
    fn plan_afresh(inp: &Input, nodes: &[Node]) -> Vec<Change> {
        plan(
            inp,
            nodes,
            &Recent::default(),
            &Policy::default(),
            &BTreeSet::new(),
        )
    }

    /// A host node of 8 H200s laid out as `layout` (None: no annotation, whole), the busy
    /// devices as `(gpu, used)`, and its view as the node agent would publish it.
    fn node(name: &str, layout: Option<&str>, busy: &[(u32, i64)]) -> (Node, NodeView) {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {
                fabrik_api::LABEL_GPU_MODEL: "H200-141GB",
                fabrik_api::LABEL_GPU_COUNT: "8"}},
        }))
        .expect("a node");
        if let Some(l) = layout {
            node.metadata.annotations = Some(BTreeMap::from([(
                fabrik_api::ANNOTATION_GPU_LAYOUT.to_string(),
                l.to_string(),
            )]));
        }
        let model = crate::profiles::model("H200-141GB").expect("model");
        let per_gpu = layout
            .map(|l| layout::parse(l).expect("layout"))
            .unwrap_or(Layout::Whole {})
            .per_gpu(&(0..8).collect::<Vec<_>>())
            .expect("per GPU");
        let mut devices = Vec::new();
        for (i, l) in per_gpu {
            let target = layout::gpu_target(&GpuInfo::plain(i, model), &l).expect("target");
            let mut used = busy.iter().find(|(g, _)| *g == i).map_or(0, |(_, u)| *u);
            for (resource, n) in target.resources() {
                let slots = if resource == fabrik_api::RESOURCE_GPU_SHARED {
                    n
                } else {
                    1
                };
                for k in 0..(n / slots) {
                    let u = used.min(slots);
                    used -= u;
                    devices.push(GpuDevice {
                        name: format!("gpu-{i}-{resource}-{k}"),
                        uuid: format!("GPU-{i}-{k}"),
                        resource: resource.clone(),
                        gpu: i64::from(i),
                        numa: 0,
                        island: 0,
                        slots,
                        used: u,
                    });
                }
            }
        }
        let view = NodeView {
            name: name.into(),
            schedulable: true,
            devices,
            ..Default::default()
        };
        (node, view)
    }

    fn waiting(key: &str, resource: &str, per_pod: i64, pods: usize, arrival: i128) -> Waiting {
        Waiting {
            tenant: "t".into(),
            key: key.into(),
            pods: (0..pods)
                .map(|_| PodRequest {
                    requests: BTreeMap::from([(resource.to_string(), per_pod)]),
                    ..Default::default()
                })
                .collect(),
            needs: pods,
            priority: 0,
            arrival,
            runtime: None,
        }
    }

    /// A run of `tenant` on n1 holding `n` of `resource`: workload `ns/<name>`, one pod `name`.
    fn run(tenant: &str, name: &str, resource: &str, n: i64) -> Admitted {
        Admitted {
            tenant: tenant.into(),
            key: format!("ns/{name}"),
            pods: vec![crate::queue::HeldPod {
                request: PodRequest {
                    namespace: "ns".into(),
                    name: name.into(),
                    requests: BTreeMap::from([(resource.to_string(), n)]),
                    ..Default::default()
                },
                node: "n1".into(),
                devices: Vec::new(),
            }],
            ..Default::default()
        }
    }

    fn input(
        shapes: Vec<(Node, NodeView)>,
        waiting: Vec<Waiting>,
        now: i128,
    ) -> (Input, Vec<Node>) {
        let (nodes, views): (Vec<Node>, Vec<NodeView>) = shapes.into_iter().unzip();
        let input = Input {
            nodes: views,
            waiting,
            now,
            ..Default::default()
        };
        (input, nodes)
    }

    /// The layout `change` writes, resolved: the resources each GPU offers.
    fn offers(change: &Change) -> BTreeMap<u32, Units> {
        let model = crate::profiles::model("H200-141GB").expect("model");
        let gpus: Vec<GpuInfo> = (0..8).map(|i| GpuInfo::plain(i, model)).collect();
        let target =
            layout::resolve(&layout::parse(&change.layout).expect("parses"), &gpus).expect("valid");
        target
            .gpus
            .into_iter()
            .map(|(i, t)| (i, t.resources()))
            .collect()
    }

    #[test]
    fn an_idle_gpu_is_cut_for_a_mig_profile_nobody_offers_and_the_rest_stay() {
        // Two whole GPUs busy; four 1g.18gb pods wait.
        let shapes = vec![node("n1", None, &[(0, 1), (1, 1)]), node("n2", None, &[])];
        let w: Vec<Waiting> = (0..4)
            .map(|i| waiting(&format!("ns/p{i}"), MIG, 1, 1, 0))
            .collect();
        let (inp, nodes) = input(shapes, w, 10 * S);
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1, "{changes:?}");
        let c = &changes[0];
        // One GPU makes seven instances: enough. On the node already in use (the idle one is
        // kept whole for large jobs), not a busy GPU, nothing drains.
        assert_eq!(c.node, "n1");
        assert_eq!(c.gpus.len(), 1);
        assert!(!c.drains);
        let o = offers(c);
        let cut: Vec<u32> = o
            .iter()
            .filter(|(_, u)| u.contains_key(MIG))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(cut.len(), 1);
        assert!(cut[0] >= 2, "a busy GPU was chosen: {cut:?}");
        assert_eq!(o[&cut[0]][MIG], 7);
        assert_eq!(
            o.values()
                .filter(|u| u.get(fabrik_api::RESOURCE_GPU) == Some(&1))
                .count(),
            7
        );
        // Work its tenant's limits refuse counts for nothing: no GPU is cut for it.
        let limited: BTreeSet<String> = inp.waiting.iter().map(|w| w.key.clone()).collect();
        assert!(plan(
            &inp,
            &nodes,
            &Recent::default(),
            &Policy::default(),
            &limited
        )
        .is_empty());
        // Not before the demand has waited a moment.
        let (inp, nodes) = input(
            vec![node("n1", None, &[])],
            vec![waiting("ns/p", MIG, 1, 1, 0)],
            S,
        );
        assert!(plan_afresh(&inp, &nodes).is_empty());
    }

    #[test]
    fn gpus_others_wait_for_are_not_taken_and_held_ones_are_left_alone() {
        // n1: two MIG GPUs (idle), six whole ones, all busy. Whole-GPU work waits (3 GPUs) and
        // so does MIG work (8 instances): the MIG GPUs are not made whole.
        let mig = r#"{"mode": "mixed", "perGpu": {"6": {"mode": "mig", "geometry": "all-1g.18gb"}, "7": {"mode": "mig", "geometry": "all-1g.18gb"}}}"#;
        let busy: Vec<(u32, i64)> = (0..6).map(|g| (g, 1)).collect();
        let mk = |waits: Vec<Waiting>| input(vec![node("n1", Some(mig), &busy)], waits, 10 * S);
        let (inp, nodes) = mk(vec![
            waiting("ns/train", fabrik_api::RESOURCE_GPU, 3, 1, 0),
            waiting("ns/infer", MIG, 1, 8, 0),
        ]);
        assert!(plan_afresh(&inp, &nodes).is_empty());
        // Nobody waits for MIG: a 2-GPU pod gets both MIG GPUs made whole.
        let (inp, nodes) = mk(vec![waiting("ns/train", fabrik_api::RESOURCE_GPU, 2, 1, 0)]);
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1, "{changes:?}");
        let o = offers(&changes[0]);
        assert_eq!(
            o[&6],
            Units::from([(fabrik_api::RESOURCE_GPU.to_string(), 1)])
        );
        assert_eq!(
            o[&7],
            Units::from([(fabrik_api::RESOURCE_GPU.to_string(), 1)])
        );
        // A GPU re-laid out lately is not touched again.
        let mut recent = Recent::default();
        recent.note("n1", [6, 7], 0);
        recent.written = None;
        assert!(plan(&inp, &nodes, &recent, &Policy::default(), &BTreeSet::new()).is_empty());
        // Unless the platform's policy holds a layout for less time than has passed.
        let brief = Policy {
            layout_hold: 0,
            ..Policy::default()
        };
        assert_eq!(
            plan(&inp, &nodes, &recent, &brief, &BTreeSet::new()).len(),
            changes.len()
        );
        // Nor is anything planned while a write settles.
        let mut recent = Recent::default();
        recent.note("n9", [0], inp.now - SETTLE + 1);
        assert!(plan(&inp, &nodes, &recent, &Policy::default(), &BTreeSet::new()).is_empty());
    }

    #[test]
    fn busy_gpus_drain_only_past_the_bound_for_a_pod_no_node_can_hold() {
        // Every GPU of n1 busy, all whole; a MIG pod waits.
        let busy: Vec<(u32, i64)> = (0..8).map(|g| (g, 1)).collect();
        let mut shapes = vec![node("n1", None, &busy)];
        let w = vec![waiting("ns/infer", MIG, 1, 1, 0)];
        let (inp, nodes) = input(shapes.clone(), w.clone(), 10 * S);
        assert!(plan_afresh(&inp, &nodes).is_empty());
        // Past the bound: one GPU — the one whose run ends first — drains for it.
        let (mut inp, nodes) = input(shapes.clone(), w.clone(), 61 * S);
        inp.admitted = (0..8u32)
            .map(|g| {
                let mut a = run("busy", &format!("run-{g}"), fabrik_api::RESOURCE_GPU, 1);
                a.pods[0].devices = vec![format!("gpu-{g}-nvidia.com/gpu-0")];
                a.ends_by = Some(if g == 5 { 70 * S } else { 200 * S });
                a
            })
            .collect();
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].drains);
        assert_eq!(changes[0].gpus.keys().copied().collect::<Vec<_>>(), vec![5]);
        // Whole-GPU work never drains a node: it waits its turn, the GPUs are there.
        let (inp, nodes) = input(
            shapes.clone(),
            vec![waiting("ns/train", fabrik_api::RESOURCE_GPU, 1, 1, 0)],
            600 * S,
        );
        assert!(plan_afresh(&inp, &nodes).is_empty());
        // One drain at a time.
        let mut pending = shapes.remove(0);
        pending.0.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
            r#"{"state": "pending", "reason": "waiting for GPU 0", "waitingGpus": [0]}"#.into(),
        )]));
        let (inp, nodes) = input(vec![pending], w, 61 * S);
        assert!(plan_afresh(&inp, &nodes).is_empty());
    }

    #[test]
    fn a_guarantee_of_a_kind_short_of_gpus_drains_a_gpu_of_a_kind_beyond_its_guarantees() {
        // One GPU of n1 is cut into 7 instances, all held by `infer` (guaranteed 14); the seven
        // whole GPUs run `train`'s work. infer waits for one more instance.
        let mixed =
            r#"{"mode": "mixed", "perGpu": {"7": {"mode": "mig", "geometry": "all-1g.18gb"}}}"#;
        let busy: Vec<(u32, i64)> = (0..8).map(|g| (g, if g == 7 { 7 } else { 1 })).collect();
        let tenant = |name: &str, r: &str, g: i64| crate::queue::TenantQueue {
            name: name.into(),
            resources: vec![r.to_string()],
            guarantee: Some(g),
            ..Default::default()
        };
        let admitted = vec![run("infer", "serve", MIG, 7)];
        let plan_with = |train_guarantee: i64, now: i128| {
            let (mut inp, nodes) = input(
                vec![node("n1", Some(mixed), &busy)],
                vec![Waiting {
                    tenant: "infer".into(),
                    ..waiting("ns/more", MIG, 1, 1, 0)
                }],
                now,
            );
            inp.tenants = vec![
                tenant("train", fabrik_api::RESOURCE_GPU, train_guarantee),
                tenant("infer", MIG, 14),
            ];
            inp.capacity = Units::from([
                (fabrik_api::RESOURCE_GPU.to_string(), 7),
                (MIG.to_string(), 7),
            ]);
            inp.admitted = admitted.clone();
            plan_afresh(&inp, &nodes)
        };
        // Not before the bound.
        assert!(plan_with(4, 10 * S).is_empty());
        // train is guaranteed 4 of the 7 whole GPUs: one of the other 3 drains for infer.
        let changes = plan_with(4, 61 * S);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].drains);
        assert_eq!(changes[0].gpus.len(), 1);
        assert!(changes[0].gpus.values().all(|r| r == MIG));
        // Guaranteed all 7: nothing guaranteed is taken for another tenant's guarantee.
        assert!(plan_with(7, 61 * S).is_empty());
        // A tenant with no guarantee waiting longer for the same kind and size does not hide
        // infer's claim (what found no room is remembered per tenant).
        let (mut inp, nodes) = input(
            vec![node("n1", Some(mixed), &busy)],
            vec![
                Waiting {
                    tenant: "guest".into(),
                    ..waiting("ns/guest", MIG, 1, 1, -S)
                },
                Waiting {
                    tenant: "infer".into(),
                    ..waiting("ns/more", MIG, 1, 1, 0)
                },
            ],
            61 * S,
        );
        let reference = plan_with(4, 61 * S);
        inp.tenants = vec![
            tenant("train", fabrik_api::RESOURCE_GPU, 4),
            tenant("infer", MIG, 14),
        ];
        inp.capacity = Units::from([
            (fabrik_api::RESOURCE_GPU.to_string(), 7),
            (MIG.to_string(), 7),
        ]);
        inp.admitted = admitted.clone();
        assert_eq!(plan_afresh(&inp, &nodes), reference);
    }

    #[test]
    fn an_eight_gpu_pod_gets_a_whole_node_back_from_mig() {
        // n1 all MIG and idle; an 8-GPU pod waits: all eight GPUs are made whole.
        let mig = "mode: mig\ngeometry: all-1g.18gb\n";
        let (inp, nodes) = input(
            vec![node("n1", Some(mig), &[])],
            vec![waiting("ns/train", fabrik_api::RESOURCE_GPU, 8, 1, 0)],
            10 * S,
        );
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].gpus.len(), 8);
        assert!(offers(&changes[0])
            .values()
            .all(|u| units(u, fabrik_api::RESOURCE_GPU) == 1));
        assert!(
            changes[0].layout.contains("mode: whole"),
            "{}",
            changes[0].layout
        );
    }

    #[test]
    fn the_gpus_being_changed_are_those_whose_devices_differ_from_the_layout() {
        let mixed =
            r#"{"mode": "mixed", "perGpu": {"2": {"mode": "mig", "geometry": "all-1g.18gb"}}}"#;
        // Devices as before the change (all whole): GPU 2 is being changed.
        let (mut n, view) = node("n1", None, &[]);
        n.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT.to_string(),
            mixed.to_string(),
        )]));
        let g = node_gpus(&n, &view).expect("laid out GPU by GPU");
        assert_eq!(g.changing, BTreeSet::from([2]));
        assert_eq!(
            laying_out(std::slice::from_ref(&n), std::slice::from_ref(&view), MIG),
            Some(("n1", vec![2]))
        );
        // Applied: nothing changes.
        let (n, view) = node("n1", Some(mixed), &[]);
        assert!(node_gpus(&n, &view).expect("ok").changing.is_empty());
        assert_eq!(
            laying_out(std::slice::from_ref(&n), std::slice::from_ref(&view), MIG),
            None
        );
        // Devices counted from allocatable (no slices) are not seen one by one: what the
        // layout says is taken as offered, all changing while the agent reports it pending.
        let (mut n, mut view) = node("n1", Some(mixed), &[]);
        view.devices.iter_mut().for_each(|d| d.uuid.clear());
        let g = node_gpus(&n, &view).expect("laid out as one");
        assert!(!g.seen);
        assert!(g.changing.is_empty());
        n.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
                r#"{"state": "pending", "reason": "waiting for GPU 2"}"#.into(),
            );
        assert_eq!(node_gpus(&n, &view).expect("ok").changing.len(), 8);
        assert_eq!(
            laying_out(std::slice::from_ref(&n), std::slice::from_ref(&view), MIG),
            Some(("n1", vec![2]))
        );
    }

    #[test]
    fn a_node_not_seen_gpu_by_gpu_is_laid_out_as_one() {
        let unseen = |busy: &[(u32, i64)]| {
            let (n, mut view) = node("n1", None, busy);
            view.devices.iter_mut().for_each(|d| d.uuid.clear());
            (n, view)
        };
        // Idle: all eight GPUs cut for the MIG demand.
        let (inp, nodes) = input(
            vec![unseen(&[])],
            vec![waiting("ns/p", MIG, 1, 1, 0)],
            10 * S,
        );
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].gpus.len(), 8);
        assert!(offers(&changes[0]).values().all(|u| units(u, MIG) == 7));
        // One GPU in use: nothing until the bound, then the whole node drains.
        let (inp, nodes) = input(
            vec![unseen(&[(3, 1)])],
            vec![waiting("ns/p", MIG, 1, 1, 0)],
            10 * S,
        );
        assert!(plan_afresh(&inp, &nodes).is_empty());
        let (inp, nodes) = input(
            vec![unseen(&[(3, 1)])],
            vec![waiting("ns/p", MIG, 1, 1, 0)],
            61 * S,
        );
        let changes = plan_afresh(&inp, &nodes);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].drains);
        assert_eq!(changes[0].gpus.len(), 8);
    }

    #[test]
    fn backfill_alone_in_the_way_of_a_layout_is_preempted() {
        let run = |key: &str, backfill: bool| Admitted {
            backfill,
            ..run("t", key, fabrik_api::RESOURCE_GPU, 1)
        };
        let (mut n, view) = node("n1", None, &[]);
        n.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
            serde_json::json!({"state": "pending", "reason": "waiting", "waitingGpus": [2, 3, 4],
                "waitingFor": {"2": ["ns/fill"], "3": ["ns/fill", "ns/mine"], "4": ["ns/gone"]}})
            .to_string(),
        )]));
        let mut inp = Input {
            nodes: vec![view],
            admitted: vec![run("fill", true), run("mine", false)],
            now: 100 * S,
            ..Default::default()
        };
        let keys = |inp: &Input, n: &Node| -> Vec<String> {
            in_the_way(
                inp,
                std::slice::from_ref(n),
                &Policy::default(),
                &BTreeSet::new(),
            )
            .into_iter()
            .map(|p| p.key)
            .collect()
        };
        // GPU 2 waits for backfill only: it goes (once). GPU 3 also waits for a run admitted
        // in queue order, GPU 4 for a pod the queue does not know: left alone.
        assert_eq!(keys(&inp, &n), vec!["ns/fill"]);
        let p = &in_the_way(
            &inp,
            std::slice::from_ref(&n),
            &Policy::default(),
            &BTreeSet::new(),
        )[0];
        assert!(p.message.contains("GPU 2 of node n1"), "{}", p.message);
        // Not when a budget protects it, nor when it declares an end within a minute.
        inp.admitted[0].protected = true;
        assert!(keys(&inp, &n).is_empty());
        inp.admitted[0].protected = false;
        inp.admitted[0].ends_by = Some(130 * S);
        assert!(keys(&inp, &n).is_empty());
        inp.admitted[0].ends_by = Some(400 * S);
        assert_eq!(keys(&inp, &n), vec!["ns/fill"]);
        // Nor once the layout is no longer pending.
        n.metadata.annotations = None;
        assert!(keys(&inp, &n).is_empty());
    }

    #[test]
    fn borrowers_in_the_way_of_a_kind_owed_to_a_guarantee_are_preempted_keeping_their_own() {
        use crate::queue::TenantQueue;
        let queue = |name: &str, resource: &str, guarantee: i64| TenantQueue {
            name: name.into(),
            resources: vec![resource.into()],
            guarantee: Some(guarantee),
            borrowing_limit: 100,
            weight: 1,
            ..Default::default()
        };
        // n1 is to be all whole; GPUs 2 and 3 still carry `infer`'s MIG runs. `infer` is
        // guaranteed one instance and holds two; `train` is guaranteed 4 GPUs, holds none and
        // waits for 2.
        let (mut n, view) = node("n1", None, &[]);
        n.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
            serde_json::json!({"state": "pending", "waitingGpus": [2, 3],
                "waitingFor": {"2": ["ns/a"], "3": ["ns/b"]}})
            .to_string(),
        )]));
        let mut train = waiting("ns/train", fabrik_api::RESOURCE_GPU, 2, 1, 0);
        train.tenant = "train".into();
        let mut inp = Input {
            tenants: vec![
                queue("infer", MIG, 1),
                queue("train", fabrik_api::RESOURCE_GPU, 4),
            ],
            nodes: vec![view],
            admitted: vec![run("infer", "a", MIG, 1), run("infer", "b", MIG, 1)],
            waiting: vec![train],
            now: 100 * S,
            ..Default::default()
        };
        let none = BTreeSet::new();
        let keys = |inp: &Input, policy: &Policy, limited: &BTreeSet<String>| -> Vec<String> {
            in_the_way(inp, std::slice::from_ref(&n), policy, limited)
                .into_iter()
                .map(|p| p.key)
                .collect()
        };
        let policy = Policy::default();
        // One goes; the other is `infer`'s guarantee and stays.
        assert_eq!(keys(&inp, &policy, &none), vec!["ns/a"]);
        // Also in the next pass, while `a` is leaving (its pod not gone yet): `b` is then all
        // `infer` keeps, its guarantee.
        inp.admitted[0].leaving = true;
        assert!(keys(&inp, &policy, &none).is_empty());
        inp.admitted[0].leaving = false;
        let p = &in_the_way(&inp, std::slice::from_ref(&n), &policy, &none)[0];
        assert!(
            p.message.contains("laid out for nvidia.com/gpu")
                && p.message
                    .contains("tenant train waits for below its guarantee"),
            "{}",
            p.message
        );
        // Not with reclaim off, not within the reclaim grace, not for work its own limits
        // refuse, not once `train` holds its guarantee.
        let off = Policy {
            reclaim: false,
            ..Policy::default()
        };
        assert!(keys(&inp, &off, &none).is_empty());
        let patient = Policy {
            reclaim_grace: 200 * S,
            ..Policy::default()
        };
        assert!(keys(&inp, &patient, &none).is_empty());
        let limited = BTreeSet::from(["ns/train".to_string()]);
        assert!(keys(&inp, &policy, &limited).is_empty());
        inp.admitted
            .push(run("train", "t", fabrik_api::RESOURCE_GPU, 3));
        assert!(keys(&inp, &policy, &none).is_empty());
        // Nor a run a budget protects.
        inp.admitted.pop();
        inp.admitted[0].protected = true;
        assert_eq!(keys(&inp, &policy, &none), vec!["ns/b"]);
        // Never the runs of the tenant owed the kind: `train`'s own MIG runs, beyond its MIG
        // guarantee (none), stay for `train`...
        inp.admitted[0].protected = false;
        for a in &mut inp.admitted {
            a.tenant = "train".into();
        }
        assert!(keys(&inp, &policy, &none).is_empty());
        // ...and go for another tenant waiting for whole GPUs below its guarantee.
        let mut other = waiting("ns/other", fabrik_api::RESOURCE_GPU, 2, 1, 0);
        other.tenant = "other".into();
        inp.tenants
            .push(queue("other", fabrik_api::RESOURCE_GPU, 4));
        inp.waiting.push(other);
        let gone = in_the_way(&inp, std::slice::from_ref(&n), &policy, &none);
        assert_eq!(
            gone.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
            vec!["ns/a", "ns/b"]
        );
        assert!(
            gone.iter().all(|p| p
                .message
                .contains("tenant other waits for below its guarantee")),
            "{gone:?}"
        );
    }

    #[test]
    fn each_kind_has_a_gpu_layout_on_the_models_that_offer_it() {
        let h200 = crate::profiles::model("H200-141GB").expect("model");
        assert_eq!(gpu_layout_for(MIG, h200).map(|(_, n)| n), Some(7));
        assert_eq!(
            gpu_layout_for(fabrik_api::RESOURCE_GPU, h200).map(|(_, n)| n),
            Some(1)
        );
        assert_eq!(
            gpu_layout_for(fabrik_api::RESOURCE_GPU_SHARED, h200).map(|(_, n)| n),
            Some(4)
        );
        assert_eq!(
            gpu_layout_for("fabrik.dev/shared-gpu-20480mib-25pct", h200).map(|(_, n)| n),
            Some(4)
        );
        // A profile of another model, a malformed slice: none.
        assert_eq!(gpu_layout_for("nvidia.com/mig-1g.10gb", h200), None);
        assert_eq!(
            gpu_layout_for("fabrik.dev/shared-gpu-0mib-25pct", h200),
            None
        );
        assert_eq!(
            gpu_layout_for("fabrik.dev/shared-gpu-1mib-0pct", h200),
            None
        );
        assert_eq!(gpu_layout_for("example.com/fpga", h200), None);
    }
}
