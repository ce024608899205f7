//! The pure steps of a DaemonSet reconcile: which nodes should run a daemon pod, what to
//! create and delete on each, how many old pods a rolling update may take down, and the status.

use fabrik_machinery::scheduling;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

/// Whether a node fits a daemon pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// A new pod may be placed there.
    pub should_run: bool,
    /// A pod already there may stay.
    pub may_stay: bool,
}

/// Whether `toleration` tolerates `taint` (upstream's `ToleratesTaint`, as
/// [`fabrik_machinery::scheduling::tolerates`]).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let (Ok(toleration), Ok(taint)) = (
        serde_json::to_value(toleration),
        serde_json::to_value(taint),
    ) else {
        return false;
    };
    scheduling::tolerates(&toleration, &taint)
}

/// Whether the pod's `nodeSelector` and required node affinity (label expressions) select the
/// node.
pub fn selects(spec: &PodSpec, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|r| serde_json::to_value(r).ok())
        .unwrap_or_default();
    let affinity_ok = scheduling::required_affinity_selects(&required, &node.name_any(), &labels);
    selector_ok && affinity_ok
}

/// Whether a daemon pod with `spec` belongs on `node`: selected by it, every `NoSchedule` and
/// `NoExecute` taint tolerated, not cordoned (new pods only). Existing pods may stay through
/// `NoSchedule` taints and cordoning, not through an untolerated `NoExecute` taint.
pub fn fit(spec: &PodSpec, node: &Node) -> Fit {
    if !selects(spec, node) {
        return Fit {
            should_run: false,
            may_stay: false,
        };
    }
    let tolerations = spec.tolerations.clone().unwrap_or_default();
    let tolerated = |t: &Taint| tolerations.iter().any(|tol| tolerates(tol, t));
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let no_execute_ok = taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .all(tolerated);
    let no_schedule_ok = taints
        .iter()
        .filter(|t| t.effect == "NoSchedule")
        .all(tolerated);
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    Fit {
        should_run: no_execute_ok && no_schedule_ok && !cordoned,
        may_stay: no_execute_ok,
    }
}

/// A daemon pod as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// Its name.
    pub name: String,
    /// At the current template.
    pub updated: bool,
    /// Ready (available: `minReadySeconds` is not honoured).
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Phase Failed or Succeeded.
    pub finished: bool,
}

/// One node as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// The node's name.
    pub name: String,
    /// Whether daemon pods belong there.
    pub fit: Fit,
    /// The DaemonSet's pods on it.
    pub pods: Vec<PodState>,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create a pod on this node.
    Create(String),
    /// Delete this pod.
    Delete(String),
}

/// The number of pods a rolling update may have unavailable: `maxUnavailable` (default 1) of
/// `desired`, percentages rounded up; at least 1, since `maxSurge` is not implemented.
pub fn max_unavailable(value: Option<&IntOrString>, desired: i32) -> i32 {
    let n = match value {
        None => 1,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let pct = s.trim_end_matches('%').parse::<i64>().unwrap_or(0);
            ((pct * i64::from(desired) + 99) / 100) as i32
        }
    };
    n.max(1)
}

/// The steps for all nodes. `rolling` with `max_unavailable`: old pods are deleted (and come
/// back at the current template) while fewer than that many desired nodes are unavailable.
pub fn next_steps(nodes: &[NodeState], rolling: bool, max_unavailable: i32) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut unavailable = 0;
    let mut old_ready: Vec<&str> = Vec::new();
    for node in nodes {
        let live: Vec<&PodState> = node
            .pods
            .iter()
            .filter(|p| !p.terminating && !p.finished)
            .collect();
        for p in node.pods.iter().filter(|p| p.finished && !p.terminating) {
            steps.push(Step::Delete(p.name.clone()));
        }
        if node.fit.may_stay || node.fit.should_run {
            if live.is_empty() {
                if node.fit.should_run {
                    unavailable += 1;
                    if !node.pods.iter().any(|p| p.terminating) {
                        steps.push(Step::Create(node.name.clone()));
                    }
                }
                continue;
            }
            // Keep one pod: the updated ready one if any, else the first.
            let keep = live
                .iter()
                .position(|p| p.updated && p.ready)
                .or_else(|| live.iter().position(|p| p.updated))
                .unwrap_or(0);
            for (i, p) in live.iter().enumerate() {
                if i != keep {
                    steps.push(Step::Delete(p.name.clone()));
                }
            }
            let kept = live[keep];
            if !kept.ready {
                unavailable += 1;
            } else if !kept.updated {
                old_ready.push(&kept.name);
            }
            if !kept.updated && !kept.ready && rolling {
                // An old pod that is not ready anyway: replace it at once.
                steps.push(Step::Delete(kept.name.clone()));
            }
        } else {
            for p in live {
                steps.push(Step::Delete(p.name.clone()));
            }
        }
    }
    if rolling {
        let budget = (max_unavailable - unavailable).max(0) as usize;
        for name in old_ready.into_iter().take(budget) {
            steps.push(Step::Delete(name.to_string()));
        }
    }
    steps
}

/// The status of `ds` over `nodes`.
pub fn status(ds: &DaemonSet, nodes: &[NodeState]) -> DaemonSetStatus {
    let mut s = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
        ..DaemonSetStatus::default()
    };
    let (mut updated, mut available) = (0, 0);
    for node in nodes {
        let live: Vec<&PodState> = node
            .pods
            .iter()
            .filter(|p| !p.terminating && !p.finished)
            .collect();
        let wanted = node.fit.should_run || (node.fit.may_stay && !live.is_empty());
        if wanted {
            s.desired_number_scheduled += 1;
        }
        if live.is_empty() {
            continue;
        }
        if !wanted {
            s.number_misscheduled += 1;
            continue;
        }
        s.current_number_scheduled += 1;
        if live.iter().any(|p| p.ready) {
            s.number_ready += 1;
            available += 1;
        }
        if live.iter().any(|p| p.updated) {
            updated += 1;
        }
    }
    s.updated_number_scheduled = Some(updated);
    s.number_available = Some(available);
    s.number_unavailable = Some(s.desired_number_scheduled - available);
    s
}

/// Whether `pod` is placed on `node`.
pub fn on_node(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(node_of).as_deref() == Some(node)
}

/// The node a daemon pod is for: where it is bound, else the node its required node affinity
/// pins it to (a pod waiting for the scheduler).
pub fn node_of(spec: &PodSpec) -> Option<String> {
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    match terms.as_slice() {
        [term] => match term.match_fields.as_deref() {
            Some([r]) if r.key == "metadata.name" && r.operator == "In" => {
                match r.values.as_deref() {
                    Some([node]) => Some(node.clone()),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// Pins a daemon pod to `node` as upstream's controller has since 1.12: its required node
/// affinity becomes the one term `metadata.name In [node]` (its label requirements chose the
/// node already; preferred terms and other affinity stay), and the scheduler binds it — so
/// that the scheduler accounts its resources, and a tenant's pod is placed by the host.
pub fn pin_to_node(spec: &mut PodSpec, node: &str) {
    let affinity = spec.affinity.get_or_insert_with(Default::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(Default::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: None,
        }
    }

    fn node(labels: &[(&str, &str)], taints: Vec<Taint>, cordoned: bool) -> Node {
        Node {
            metadata: ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                unschedulable: Some(cordoned),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn fits() {
        let tol = Toleration {
            key: Some("gpu".into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        };
        let plain = PodSpec::default();
        let selective = PodSpec {
            node_selector: Some([("role".to_string(), "gpu".to_string())].into()),
            tolerations: Some(vec![tol]),
            ..PodSpec::default()
        };
        let yes = Fit {
            should_run: true,
            may_stay: true,
        };
        let stay = Fit {
            should_run: false,
            may_stay: true,
        };
        let no = Fit {
            should_run: false,
            may_stay: false,
        };
        let cases = [
            (&plain, node(&[], vec![], false), yes),
            (&plain, node(&[], vec![], true), stay),
            (
                &plain,
                node(&[], vec![taint("x", "NoSchedule")], false),
                stay,
            ),
            (&plain, node(&[], vec![taint("x", "NoExecute")], false), no),
            (
                &plain,
                node(&[], vec![taint("x", "PreferNoSchedule")], false),
                yes,
            ),
            (&selective, node(&[], vec![], false), no),
            (
                &selective,
                node(&[("role", "gpu")], vec![taint("gpu", "NoExecute")], false),
                yes,
            ),
            (
                &selective,
                node(
                    &[("role", "gpu")],
                    vec![taint("other", "NoSchedule")],
                    false,
                ),
                stay,
            ),
        ];
        for (i, (spec, node, want)) in cases.into_iter().enumerate() {
            assert_eq!(fit(spec, &node), want, "case {i}");
        }
    }

    fn pod(name: &str, updated: bool, ready: bool) -> PodState {
        PodState {
            name: name.into(),
            updated,
            ready,
            terminating: false,
            finished: false,
        }
    }

    fn state(name: &str, fit: Fit, pods: Vec<PodState>) -> NodeState {
        NodeState {
            name: name.into(),
            fit,
            pods,
        }
    }

    #[test]
    fn steps() {
        let yes = Fit {
            should_run: true,
            may_stay: true,
        };
        let no = Fit {
            should_run: false,
            may_stay: false,
        };
        let create = |n: &str| Step::Create(n.into());
        let delete = |n: &str| Step::Delete(n.into());
        let cases = [
            (
                vec![state("a", yes, vec![]), state("b", no, vec![])],
                vec![create("a")],
            ),
            (
                vec![state("a", no, vec![pod("p", true, true)])],
                vec![delete("p")],
            ),
            (
                vec![state(
                    "a",
                    yes,
                    vec![pod("p", true, true), pod("q", true, false)],
                )],
                vec![delete("q")],
            ),
            // Rolling update, maxUnavailable 1: one old ready pod at a time.
            (
                vec![
                    state("a", yes, vec![pod("p", false, true)]),
                    state("b", yes, vec![pod("q", false, true)]),
                ],
                vec![delete("p")],
            ),
            // Budget used by an unavailable node.
            (
                vec![
                    state("a", yes, vec![pod("p", true, false)]),
                    state("b", yes, vec![pod("q", false, true)]),
                ],
                vec![],
            ),
        ];
        for (i, (nodes, want)) in cases.into_iter().enumerate() {
            assert_eq!(next_steps(&nodes, true, 1), want, "case {i}");
        }
        assert_eq!(max_unavailable(None, 10), 1);
        assert_eq!(
            max_unavailable(Some(&IntOrString::String("25%".into())), 10),
            3
        );
        assert_eq!(max_unavailable(Some(&IntOrString::Int(2)), 10), 2);
    }

    #[test]
    fn a_daemon_pod_is_pinned_by_affinity_and_found_by_it() {
        let mut spec = PodSpec {
            affinity: Some(k8s_openapi::api::core::v1::Affinity {
                pod_anti_affinity: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(node_of(&spec), None);
        pin_to_node(&mut spec, "gpu-1");
        assert_eq!(node_of(&spec).as_deref(), Some("gpu-1"));
        assert!(spec.node_name.is_none(), "the scheduler binds it");
        assert!(spec
            .affinity
            .as_ref()
            .is_some_and(|a| a.pod_anti_affinity.is_some()));
        // Bound: where it is bound.
        spec.node_name = Some("gpu-2".into());
        assert_eq!(node_of(&spec).as_deref(), Some("gpu-2"));
    }
}
