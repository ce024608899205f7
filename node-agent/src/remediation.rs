//! Remediation: what to do to the node and its pods given the GPU health verdicts. Pure; the
//! agent carries the actions out (taint, cordon, evictions through the Eviction API so that
//! PodDisruptionBudgets are respected) and records an Event for each.
//!
//! Flow: a GPU goes bad → evict the pods assigned to it (its MIG devices included), again on
//! every pass until they are gone (a PDB may refuse for a while). The bad GPU has already left
//! allocatable and the ResourceSlice, so the node's other GPUs stay in service. Only a
//! node-level fault ([`node_level`]: an NVLink error, which the GPUs of an island share, or at
//! least half of the GPUs bad) also taints the node `fabrik.dev/gpu-unhealthy:NoSchedule` and
//! cordons it (marked as done by the agent). Once the fault is no longer node-level → remove
//! the taint and uncordon, but only a cordon the agent itself made.

use std::collections::{BTreeMap, BTreeSet};

/// What the agent knows of its Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// The agent's cordon annotation is present.
    pub cordoned_by_agent: bool,
    /// The unhealthy taint is present.
    pub tainted: bool,
}

/// A pod on the node and the GPUs it is assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// GPU indexes its devices belong to.
    pub gpus: BTreeSet<u32>,
}

/// One remediation action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Add the unhealthy taint.
    Taint,
    /// Remove the unhealthy taint.
    Untaint,
    /// Cordon the node.
    Cordon,
    /// Uncordon the node.
    Uncordon,
    /// Evict a pod.
    Evict {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The bad GPU it uses.
        gpu: u32,
    },
}

/// Whether the unhealthy GPUs (of `total`) take the whole node out of service: an NVLink
/// fault (XID 74) or at least half of its GPUs bad.
pub fn node_level(unhealthy: &BTreeMap<u32, String>, total: usize) -> bool {
    !unhealthy.is_empty()
        && (unhealthy.values().any(|r| r == "XID 74") || unhealthy.len() * 2 >= total.max(1))
}

/// The actions for this pass; the node has `total` GPUs.
pub fn plan(
    unhealthy: &BTreeMap<u32, String>,
    total: usize,
    node: &NodeFacts,
    pods: &[PodRef],
) -> Vec<Action> {
    let mut out = Vec::new();
    if node_level(unhealthy, total) {
        if !node.tainted {
            out.push(Action::Taint);
        }
        if !node.unschedulable {
            out.push(Action::Cordon);
        }
    } else {
        if node.tainted {
            out.push(Action::Untaint);
        }
        if node.unschedulable && node.cordoned_by_agent {
            out.push(Action::Uncordon);
        }
    }
    for p in pods {
        if let Some(gpu) = p.gpus.iter().find(|g| unhealthy.contains_key(g)) {
            out.push(Action::Evict {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                gpu: *gpu,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, gpus: &[u32]) -> PodRef {
        PodRef {
            namespace: "t".into(),
            name: name.into(),
            gpus: gpus.iter().copied().collect(),
        }
    }

    #[test]
    fn bad_gpu_taints_cordons_and_evicts_only_its_pods() {
        let bad = BTreeMap::from([(2, "XID 79".to_string())]);
        let pods = [pod("a", &[1]), pod("b", &[2, 3]), pod("c", &[])];
        let actions = plan(&bad, 2, &NodeFacts::default(), &pods);
        assert_eq!(
            actions,
            vec![
                Action::Taint,
                Action::Cordon,
                Action::Evict {
                    namespace: "t".into(),
                    name: "b".into(),
                    gpu: 2
                }
            ]
        );
        let done = NodeFacts {
            unschedulable: true,
            cordoned_by_agent: true,
            tainted: true,
        };
        assert!(plan(&bad, 2, &done, &[pod("a", &[1])]).is_empty());
    }

    #[test]
    fn one_bad_gpu_of_eight_leaves_the_node_in_service() {
        let bad = BTreeMap::from([(0, "XID 79".to_string())]);
        let pods = [pod("a", &[0]), pod("b", &[5])];
        assert_eq!(
            plan(&bad, 8, &NodeFacts::default(), &pods),
            vec![Action::Evict {
                namespace: "t".into(),
                name: "a".into(),
                gpu: 0
            }]
        );
        // A cordon the agent made for an earlier, node-level fault is lifted.
        let ours = NodeFacts {
            unschedulable: true,
            cordoned_by_agent: true,
            tainted: true,
        };
        assert_eq!(
            plan(&bad, 8, &ours, &[]),
            vec![Action::Untaint, Action::Uncordon]
        );
        // An NVLink fault is the node's, whatever the count.
        let nvlink = BTreeMap::from([(3, "XID 74".to_string())]);
        assert!(node_level(&nvlink, 8));
        let half: BTreeMap<u32, String> = (0..4).map(|g| (g, "XID 79".to_string())).collect();
        assert!(node_level(&half, 8));
        assert!(!node_level(&BTreeMap::new(), 8));
    }

    #[test]
    fn healthy_again_returns_only_its_own_cordon() {
        let none = BTreeMap::new();
        let ours = NodeFacts {
            unschedulable: true,
            cordoned_by_agent: true,
            tainted: true,
        };
        assert_eq!(
            plan(&none, 2, &ours, &[]),
            vec![Action::Untaint, Action::Uncordon]
        );
        let admins = NodeFacts {
            unschedulable: true,
            cordoned_by_agent: false,
            tainted: false,
        };
        assert!(plan(&none, 2, &admins, &[]).is_empty());
    }
}
