//! Remediation: what to do to the node and its pods given the GPU health verdicts. Pure; the
//! agent carries the actions out (taint, cordon, evictions through the Eviction API so that
//! PodDisruptionBudgets are respected) and records an Event for each.
//!
//! Flow: a GPU goes bad → taint `fabrik.dev/gpu-unhealthy:NoSchedule`, cordon (marked as done by
//! the agent), evict the pods assigned to a bad GPU (its MIG devices included), again on every
//! pass until they are gone (a PDB may refuse for a while). All GPUs healthy → remove the taint
//! and uncordon, but only a cordon the agent itself made.

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

/// The actions for this pass.
pub fn plan(unhealthy: &BTreeMap<u32, String>, node: &NodeFacts, pods: &[PodRef]) -> Vec<Action> {
    let mut out = Vec::new();
    if unhealthy.is_empty() {
        if node.tainted {
            out.push(Action::Untaint);
        }
        if node.unschedulable && node.cordoned_by_agent {
            out.push(Action::Uncordon);
        }
        return out;
    }
    if !node.tainted {
        out.push(Action::Taint);
    }
    if !node.unschedulable {
        out.push(Action::Cordon);
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
        let actions = plan(&bad, &NodeFacts::default(), &pods);
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
        assert!(plan(&bad, &done, &[pod("a", &[1])]).is_empty());
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
            plan(&none, &ours, &[]),
            vec![Action::Untaint, Action::Uncordon]
        );
        let admins = NodeFacts {
            unschedulable: true,
            cordoned_by_agent: false,
            tainted: false,
        };
        assert!(plan(&none, &admins, &[]).is_empty());
    }
}
