//! GPU layouts that follow the queue's demand: when workloads wait for a kind of GPU that no
//! node offers at all (a `mig:1g.18gb` tenant on a pool of whole GPUs, whole-GPU training on a
//! pool partitioned into MIG), an idle node is repartitioned for it by writing its layout
//! annotation ([`fabrik_api::ANNOTATION_GPU_LAYOUT`]), which its node agent applies (see
//! `docs/node-agent.md`, "Layouts").
//!
//! An idle node is taken first (no pod holds or is admitted to any of its GPUs). When none is
//! and the demand has waited past the starvation bound, a busy node is laid out — the one with
//! the fewest devices in use — and drains: while its node agent reports the layout `pending`
//! the queue admits nothing new there ([`super::input::build`]), its runs end, and the agent
//! applies the layout (nothing is preempted for it). One node per decision, one draining at a
//! time, and a node repartitioned here is left alone for [`HOLD`] afterwards, so that two
//! demands cannot toss a node between them. A node whose GPU model lacks the MIG profile asked
//! for is not chosen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fabrik_gpu::queue::Input;
use k8s_openapi::api::core::v1::Node;

/// How long a node repartitioned here is not repartitioned again.
pub const HOLD: Duration = Duration::from_secs(60);

/// How long demand must have waited before a node is repartitioned for it, in nanoseconds.
pub const WAITED: i128 = 5 * 1_000_000_000;

/// The layout (annotation text) that makes a node offer `resource`, if Fabrik's node agent
/// can lay one out for it on a node with these labels.
pub fn layout_for(resource: &str, labels: &BTreeMap<String, String>) -> Option<String> {
    if resource == fabrik_api::RESOURCE_GPU {
        return Some("mode: whole\n".into());
    }
    if resource == fabrik_api::RESOURCE_GPU_SHARED {
        return Some("mode: time-slicing\nreplicas: 4\n".into());
    }
    let profile = resource.strip_prefix("nvidia.com/mig-")?;
    let product = labels.get("nvidia.com/gpu.product")?;
    let memory = labels
        .get("nvidia.com/gpu.memory")
        .and_then(|m| m.parse::<u64>().ok())?;
    let model = fabrik_gpu::profiles::model_from_product(product, memory).ok()?;
    model.profile(profile).ok()?;
    Some(format!(
        "mode: mig\nstrategy: mixed\ngeometry: all-{profile}\n"
    ))
}

/// Remembers the nodes repartitioned here.
#[derive(Default)]
pub struct Recent(BTreeMap<String, Instant>);

impl Recent {
    fn held(&self, node: &str) -> bool {
        self.0.get(node).is_some_and(|at| at.elapsed() < HOLD)
    }

    /// Notes that `node` was repartitioned now.
    pub fn note(&mut self, node: &str) {
        self.0.retain(|_, at| at.elapsed() < HOLD);
        self.0.insert(node.to_string(), Instant::now());
    }
}

/// The node being laid out so that it offers `resource`, if any: its layout annotation is the
/// one [`layout_for`] gives for `resource` and its node agent reports it `pending` (it drains)
/// or it was written here lately (the agent has not answered yet).
pub fn laying_out<'n>(nodes: &'n [Node], resource: &str, recent: &Recent) -> Option<&'n str> {
    nodes.iter().find_map(|node| {
        let name = node.metadata.name.as_deref()?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let wanted = layout_for(resource, &labels)?;
        let written = node
            .metadata
            .annotations
            .as_ref()?
            .get(fabrik_api::ANNOTATION_GPU_LAYOUT)?;
        (written.trim() == wanted.trim()
            && (super::input::relayout_pending(node) || recent.held(name)))
        .then_some(name)
    })
}

/// The node to repartition and its new layout, if some demand waits for a GPU kind no node
/// offers and an idle node can offer it — or, once the demand has waited `drain_after`
/// (nanoseconds), a busy one, to drain.
pub fn plan(
    input: &Input,
    nodes: &[Node],
    recent: &Recent,
    drain_after: i128,
) -> Option<(String, String)> {
    // Kinds asked for that no schedulable node offers, by how long they have waited.
    let mut wanted: BTreeMap<String, i128> = BTreeMap::new();
    for w in &input.waiting {
        if input.now - w.arrival < WAITED {
            continue;
        }
        for r in w.gpus().keys() {
            if input.capacity.get(r).copied().unwrap_or(0) == 0 {
                let at = wanted.entry(r.clone()).or_insert(w.arrival);
                *at = (*at).min(w.arrival);
            }
        }
    }
    let mut order: Vec<(i128, String)> = wanted.into_iter().map(|(r, at)| (at, r)).collect();
    order.sort();
    let busy: BTreeSet<&str> = input
        .admitted
        .iter()
        .flat_map(|a| a.pods.iter().map(|p| p.node.as_str()))
        .collect();
    // Kinds other waiting work needs: a node offering them is taken last.
    let needed: BTreeSet<String> = input
        .waiting
        .iter()
        .flat_map(|w| w.gpus().into_keys())
        .collect();
    let draining = nodes.iter().any(super::input::relayout_pending);
    for (since, resource) in order {
        // (devices in use, devices of kinds other waiting work needs, node, layout)
        let candidates = input
            .nodes
            .iter()
            .zip(nodes)
            .filter(|(view, _)| view.schedulable && !recent.held(&view.name))
            .filter_map(|(view, node)| {
                let labels = node.metadata.labels.clone().unwrap_or_default();
                let layout = layout_for(&resource, &labels)?;
                let used: i64 = view.devices.iter().map(|d| d.used).sum();
                let in_use = if busy.contains(view.name.as_str()) {
                    used.max(1)
                } else {
                    used
                };
                let offers_needed = view
                    .devices
                    .iter()
                    .filter(|d| needed.contains(&d.resource))
                    .count();
                Some((in_use, offers_needed, view.name.clone(), layout))
            });
        let mut candidates: Vec<_> = candidates.collect();
        candidates.sort();
        let Some((in_use, _, node, layout)) = candidates.into_iter().next() else {
            continue;
        };
        let may_drain = !draining && input.now - since >= drain_after;
        if in_use == 0 || may_drain {
            return Some((node, layout));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_gpu::placement::model::{GpuDevice, NodeView, PodRequest};
    use fabrik_gpu::queue::Waiting;

    /// A host node of 8 H200s, `used` of them busy, and its view.
    fn node(name: &str, used: i64, pending: bool) -> (Node, NodeView) {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {
                "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771"}},
        }))
        .expect("a node");
        if pending {
            node.metadata.annotations = Some(BTreeMap::from([(
                fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
                r#"{"state": "pending", "reason": "waiting for GPU 0"}"#.to_string(),
            )]));
        }
        let view = NodeView {
            name: name.into(),
            schedulable: !pending,
            devices: (0..8)
                .map(|i| GpuDevice {
                    name: format!("gpu-{i}"),
                    uuid: String::new(),
                    resource: fabrik_api::RESOURCE_GPU.into(),
                    gpu: i,
                    numa: 0,
                    island: 0,
                    slots: 1,
                    used: i64::from(i < used),
                })
                .collect(),
            ..Default::default()
        };
        (node, view)
    }

    #[test]
    fn a_busy_node_drains_for_a_kind_nobody_offers_once_it_has_waited_past_the_bound() {
        let s = 1_000_000_000i128;
        let plan_at = |shapes: &[(&str, i64, bool)], now: i128| {
            let (nodes, views): (Vec<Node>, Vec<NodeView>) =
                shapes.iter().map(|(n, u, p)| node(n, *u, *p)).unzip();
            let input = Input {
                nodes: views,
                waiting: vec![Waiting {
                    tenant: "infer".into(),
                    key: "fabrik-infer/serve".into(),
                    pods: vec![PodRequest {
                        requests: BTreeMap::from([("nvidia.com/mig-1g.18gb".into(), 1)]),
                        ..Default::default()
                    }],
                    needs: 1,
                    priority: 0,
                    arrival: 0,
                    runtime: None,
                }],
                now,
                ..Default::default()
            };
            plan(&input, &nodes, &Recent::default(), 60 * s).map(|(n, _)| n)
        };
        // Every node busy: nothing before the bound, then the one with the fewest GPUs in use.
        let busy = [("n1", 3, false), ("n2", 1, false)];
        assert_eq!(plan_at(&busy, 10 * s), None);
        assert_eq!(plan_at(&busy, 61 * s).as_deref(), Some("n2"));
        // One node drains at a time.
        assert_eq!(plan_at(&[("n1", 3, false), ("n2", 1, true)], 61 * s), None);
        // An idle node is laid out at once.
        assert_eq!(
            plan_at(&[("n1", 3, false), ("n3", 0, false)], 10 * s).as_deref(),
            Some("n3")
        );
    }

    #[test]
    fn a_node_is_being_laid_out_while_its_agent_reports_it_pending_or_it_was_just_written() {
        let mig = "nvidia.com/mig-1g.18gb";
        let (mut n1, _) = node("n1", 2, true);
        let layout =
            layout_for(mig, n1.metadata.labels.as_ref().expect("labels")).expect("a layout");
        n1.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(fabrik_api::ANNOTATION_GPU_LAYOUT.into(), layout.clone());
        let recent = Recent::default();
        assert_eq!(
            laying_out(std::slice::from_ref(&n1), mig, &recent),
            Some("n1")
        );
        assert_eq!(
            laying_out(std::slice::from_ref(&n1), fabrik_api::RESOURCE_GPU, &recent),
            None,
            "not for another kind"
        );
        // Written here, not answered yet; applied (not pending, not recent): no longer.
        let (mut n2, _) = node("n2", 0, false);
        n2.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT.to_string(),
            layout,
        )]));
        assert_eq!(laying_out(std::slice::from_ref(&n2), mig, &recent), None);
        let mut recent = Recent::default();
        recent.note("n2");
        assert_eq!(
            laying_out(std::slice::from_ref(&n2), mig, &recent),
            Some("n2")
        );
    }

    #[test]
    fn layouts_name_what_the_node_agent_lays_out() {
        let h200 = BTreeMap::from([
            (
                "nvidia.com/gpu.product".to_string(),
                "NVIDIA-H200".to_string(),
            ),
            ("nvidia.com/gpu.memory".to_string(), "143771".to_string()),
        ]);
        let text = layout_for("nvidia.com/mig-1g.18gb", &h200).expect("a MIG layout");
        let parsed = fabrik_gpu::layout::parse(&text).expect("parses");
        assert_eq!(
            serde_json::to_value(&parsed).expect("json")["mode"],
            "mig",
            "{text}"
        );
        // A profile of another model is not laid out here.
        assert_eq!(layout_for("nvidia.com/mig-1g.10gb", &h200), None);
        assert!(layout_for("nvidia.com/gpu", &h200).is_some());
        assert!(fabrik_gpu::layout::parse(
            &layout_for("nvidia.com/gpu.shared", &h200).expect("ts")
        )
        .is_ok());
        assert_eq!(layout_for("fabrik.dev/shared-gpu-1mib-1pct", &h200), None);
    }
}
