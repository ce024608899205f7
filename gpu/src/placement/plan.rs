//! One scheduling round: the pending pods in order (oldest first), each placed on the nodes as
//! the earlier placements of the round left them. Gangs are placed all or nothing: the members
//! are tried together on a copy of the nodes, and committed only when every one fits. Pure.

use std::collections::BTreeMap;

use super::fit::{self, Placement};
use super::model::{NodeView, PodRequest};

/// The outcome for one pending pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Bind it here.
    Bind(Placement),
    /// It cannot be placed now; the reason goes into its `PodScheduled` condition.
    Unschedulable(String),
}

/// Plans a round. `bound_in_gang` counts the members of each gang (`namespace/name`) that are
/// already bound. Returns one outcome per pending pod, in the same order.
pub fn plan(
    nodes: &mut [NodeView],
    pending: &[PodRequest],
    bound_in_gang: &BTreeMap<String, usize>,
) -> Vec<Outcome> {
    let mut out: Vec<Option<Outcome>> = vec![None; pending.len()];
    for i in 0..pending.len() {
        if out[i].is_some() {
            continue;
        }
        let pod = &pending[i];
        let Some((gang, size)) = &pod.gang else {
            out[i] = Some(match fit::choose(nodes, pod) {
                Ok(p) => {
                    fit::commit(nodes, pod, &p);
                    Outcome::Bind(p)
                }
                Err(reason) => Outcome::Unschedulable(reason),
            });
            continue;
        };
        let key = format!("{}/{gang}", pod.namespace);
        let members: Vec<usize> = (i..pending.len())
            .filter(|&j| {
                pending[j].namespace == pod.namespace
                    && pending[j].gang.as_ref().map(|(g, _)| g) == Some(gang)
            })
            .collect();
        let bound = bound_in_gang.get(&key).copied().unwrap_or(0);
        let needed = size.saturating_sub(bound);
        let result = if members.len() < needed {
            Err(format!(
                "waiting for gang {gang}: {} of {size} pods exist",
                members.len() + bound
            ))
        } else {
            place_gang(nodes, pending, &members, gang)
        };
        match result {
            Ok(placements) => {
                for (j, p) in members.iter().zip(placements) {
                    out[*j] = Some(Outcome::Bind(p));
                }
            }
            Err(reason) => {
                for j in &members {
                    out[*j] = Some(Outcome::Unschedulable(reason.clone()));
                }
            }
        }
    }
    out.into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Unschedulable("not planned".into())))
        .collect()
}

/// Places every member on a copy of the nodes; commits only when all fit.
fn place_gang(
    nodes: &mut [NodeView],
    pending: &[PodRequest],
    members: &[usize],
    gang: &str,
) -> Result<Vec<Placement>, String> {
    let mut trial: Vec<NodeView> = nodes.to_vec();
    let mut placements = Vec::new();
    for &j in members {
        let pod = &pending[j];
        match fit::choose(&trial, pod) {
            Ok(p) => {
                fit::commit(&mut trial, pod, &p);
                placements.push(p);
            }
            Err(reason) => {
                // (Not by name: the tenant's pod, which is told too, has another.)
                return Err(format!(
                    "gang {gang}: {} of {} pods fit; the next does not: {reason}",
                    placements.len(),
                    members.len(),
                ));
            }
        }
    }
    nodes.clone_from_slice(&trial);
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::model::GpuDevice;
    use k8s_openapi::api::core::v1::{Taint, Toleration};

    /// An HGX node: 8 whole GPUs on one NVLink island, GPUs 0–3 on NUMA 0, 4–7 on NUMA 1.
    fn node(name: &str) -> NodeView {
        let devices = (0..8)
            .map(|i| GpuDevice {
                name: format!("gpu-{i}"),
                uuid: format!("GPU-{name}-{i}"),
                resource: "nvidia.com/gpu".into(),
                gpu: i,
                numa: if i < 4 { 0 } else { 1 },
                island: 0,
                slots: 1,
                used: 0,
            })
            .collect();
        NodeView {
            name: name.into(),
            schedulable: true,
            free: BTreeMap::from([
                ("cpu".into(), 224_000),
                ("memory".into(), 1 << 40),
                ("pods".into(), 110),
                ("nvidia.com/gpu".into(), 8),
            ]),
            devices,
            ..Default::default()
        }
    }

    fn pod(name: &str, resource: &str, n: i64) -> PodRequest {
        PodRequest {
            namespace: "ns".into(),
            name: name.into(),
            requests: BTreeMap::from([
                ("pods".into(), 1),
                ("cpu".into(), 1000),
                (resource.to_string(), n),
            ]),
            ..Default::default()
        }
    }

    fn ganged(mut p: PodRequest, gang: &str, size: usize) -> PodRequest {
        p.gang = Some((gang.into(), size));
        p
    }

    fn placed(o: &Outcome) -> (String, Vec<i64>, Vec<i64>) {
        match o {
            Outcome::Bind(p) => (
                p.node.clone(),
                p.devices.iter().map(|&i| i as i64).collect(),
                vec![],
            ),
            Outcome::Unschedulable(r) => panic!("unschedulable: {r}"),
        }
    }

    #[test]
    fn multi_gpu_pods_stay_on_one_numa_node_and_pack_best_fit() {
        let mut nodes = vec![node("a"), node("b")];
        let pods = vec![
            pod("four", "nvidia.com/gpu", 4),
            pod("two", "nvidia.com/gpu", 2),
            pod("one", "nvidia.com/gpu", 1),
            pod("eight", "nvidia.com/gpu", 8),
        ];
        let out = plan(&mut nodes, &pods, &BTreeMap::new());
        assert_eq!(placed(&out[0]).0, "a");
        assert_eq!(placed(&out[0]).1, vec![0, 1, 2, 3], "one NUMA node");
        // Best fit: the partly used node, the other NUMA node.
        assert_eq!(placed(&out[1]), ("a".into(), vec![4, 5], vec![]));
        assert_eq!(placed(&out[2]), ("a".into(), vec![6], vec![]));
        // Eight GPUs span both NUMA nodes of the empty node's island.
        assert_eq!(placed(&out[3]).0, "b");
        assert_eq!(placed(&out[3]).1.len(), 8);
        assert_eq!(nodes[0].free["nvidia.com/gpu"], 1);
        assert_eq!(nodes[1].free["nvidia.com/gpu"], 0);
    }

    #[test]
    fn a_pod_never_spans_nvlink_islands() {
        let mut n = node("a");
        for d in n.devices.iter_mut() {
            d.island = d.numa; // two islands of four
        }
        let mut nodes = vec![n];
        let out = plan(
            &mut nodes,
            &[pod("five", "nvidia.com/gpu", 5)],
            &BTreeMap::new(),
        );
        match &out[0] {
            Outcome::Unschedulable(r) => {
                assert!(r.contains("no NVLink island with 5 free GPUs"), "{r}")
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn mig_devices_pack_onto_the_busiest_gpu() {
        let mut n = node("a");
        n.devices.clear();
        for gpu in 0..2 {
            for start in [0, 1, 2] {
                n.devices.push(GpuDevice {
                    name: format!("gpu-{gpu}-mig-{start}"),
                    uuid: format!("MIG-{gpu}-{start}"),
                    resource: "nvidia.com/mig-1g.18gb".into(),
                    gpu,
                    numa: 0,
                    island: 0,
                    slots: 1,
                    used: 0,
                });
            }
        }
        n.devices[4].used = 1; // gpu-1-mig-1 in use
        n.free.insert("nvidia.com/mig-1g.18gb".into(), 5);
        let mut nodes = vec![n];
        let out = plan(
            &mut nodes,
            &[
                pod("m1", "nvidia.com/mig-1g.18gb", 1),
                pod("m2", "nvidia.com/mig-1g.18gb", 2),
            ],
            &BTreeMap::new(),
        );
        let names = |o: &Outcome| -> Vec<String> {
            match o {
                Outcome::Bind(p) => p
                    .devices
                    .iter()
                    .map(|&i| nodes[0].devices[i].name.clone())
                    .collect(),
                Outcome::Unschedulable(r) => panic!("{r}"),
            }
        };
        assert_eq!(names(&out[0]), vec!["gpu-1-mig-0"]);
        // Two slices for one pod come from one GPU: GPU 1 has one left, GPU 0 three.
        assert_eq!(names(&out[1]), vec!["gpu-0-mig-0", "gpu-0-mig-1"]);
        // Two free slices left, one on each GPU: a 2-slice pod does not fit, a 1-slice one does.
        let out = plan(
            &mut nodes,
            &[
                pod("m3", "nvidia.com/mig-1g.18gb", 2),
                pod("m4", "nvidia.com/mig-1g.18gb", 1),
            ],
            &BTreeMap::new(),
        );
        assert!(matches!(out[1], Outcome::Bind(_)), "{:?}", out[1]);
        match &out[0] {
            Outcome::Unschedulable(r) => {
                assert!(
                    r.contains("no GPU with 2 free nvidia.com/mig-1g.18gb devices"),
                    "{r}"
                )
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn node_selectors_taints_and_readiness() {
        let mut a = node("a");
        a.taints = vec![Taint {
            key: fabrik_api::TAINT_GPU_UNHEALTHY.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let mut b = node("b");
        b.labels.insert("pool".into(), "train".into());
        let mut c = node("c");
        c.schedulable = false;
        let mut nodes = vec![a, b, c];
        let mut wants_a = pod("p", "nvidia.com/gpu", 1);
        wants_a.node_selector.insert("pool".into(), "infer".into());
        let out = plan(&mut nodes, &[wants_a.clone()], &BTreeMap::new());
        match &out[0] {
            Outcome::Unschedulable(r) => {
                assert!(r.starts_with("0/3 nodes are available"), "{r}");
                assert!(r.contains("2 node selector does not match"), "{r}");
                assert!(r.contains("not ready"), "{r}");
            }
            o => panic!("{o:?}"),
        }
        wants_a.node_selector.clear();
        // The tainted node is skipped although it would win the tie by name.
        match &plan(&mut nodes.clone(), &[wants_a.clone()], &BTreeMap::new())[0] {
            Outcome::Bind(p) => assert_eq!(p.node, "b"),
            o => panic!("{o:?}"),
        }
        wants_a.tolerations = vec![Toleration {
            key: Some(fabrik_api::TAINT_GPU_UNHEALTHY.into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }];
        match &plan(&mut nodes.clone(), &[wants_a.clone()], &BTreeMap::new())[0] {
            Outcome::Bind(p) => assert_eq!(p.node, "a"),
            o => panic!("{o:?}"),
        }
        // A daemon pod pinned by required node affinity goes to its node only.
        wants_a.node_affinity = serde_json::json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]});
        match &plan(&mut nodes.clone(), &[wants_a.clone()], &BTreeMap::new())[0] {
            Outcome::Bind(p) => assert_eq!(p.node, "b"),
            o => panic!("{o:?}"),
        }
        wants_a.node_affinity = serde_json::json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["c"]}]}]});
        match &plan(&mut nodes, &[wants_a], &BTreeMap::new())[0] {
            Outcome::Unschedulable(r) => assert!(r.contains("node affinity does not match"), "{r}"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn gangs_are_all_or_nothing() {
        let mut nodes = vec![node("a"), node("b")];
        // Five 4-GPU pods need 20 GPUs; there are 16: none is placed, nothing is taken.
        let big: Vec<PodRequest> = (0..5)
            .map(|i| ganged(pod(&format!("big-{i}"), "nvidia.com/gpu", 4), "big", 5))
            .collect();
        let out = plan(&mut nodes, &big, &BTreeMap::new());
        for o in &out {
            match o {
                Outcome::Unschedulable(r) => {
                    assert!(r.contains("gang big: 4 of 5 pods fit"), "{r}")
                }
                o => panic!("{o:?}"),
            }
        }
        assert_eq!(nodes[0].free["nvidia.com/gpu"], 8);
        // Waiting for members.
        let partial = vec![ganged(pod("w-0", "nvidia.com/gpu", 1), "w", 3)];
        match &plan(&mut nodes, &partial, &BTreeMap::new())[0] {
            Outcome::Unschedulable(r) => assert!(r.contains("waiting for gang w: 1 of 3"), "{r}"),
            o => panic!("{o:?}"),
        }
        // …unless the others are bound already.
        let bound = BTreeMap::from([("ns/w".to_string(), 2)]);
        assert!(matches!(
            plan(&mut nodes, &partial, &bound)[0],
            Outcome::Bind(_)
        ));
        // Three 4-GPU pods fit together, interleaved with a single pod.
        let mut pods: Vec<PodRequest> = (0..3)
            .map(|i| ganged(pod(&format!("g-{i}"), "nvidia.com/gpu", 4), "g", 3))
            .collect();
        pods.insert(1, pod("solo", "cpu", 1));
        let out = plan(&mut nodes, &pods, &BTreeMap::new());
        assert!(out.iter().all(|o| matches!(o, Outcome::Bind(_))), "{out:?}");
    }
}
