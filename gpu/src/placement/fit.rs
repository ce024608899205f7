//! Placement of one pod: which nodes can take it (readiness, node selector, taints, free
//! resources, GPU devices), which devices it gets there, and which node fits best. Pure.
//!
//! * Whole GPUs (`nvidia.com/gpu`): a pod asking for more than one gets GPUs of one NVLink
//!   island, on one NUMA node when one has enough; among the groups that can hold it, the one
//!   with the fewest free GPUs (best fit, so that large free groups stay whole for large pods).
//! * MIG devices and shared slices: taken from the GPU that already has the most devices in
//!   use (packed), so that whole GPUs stay free for re-partitioning.
//! * ResourceClaims ([`super::claims`]): an allocated claim's pods go to its node; a pending
//!   claim's requests take free devices among those their selectors match, whole GPUs as
//!   above, other devices packed.
//! * Required pod affinity and anti-affinity ([`super::affinity`]) against the pods on the
//!   nodes, those placed earlier in the round included.
//! * Node choice: best fit — the node left with the fewest free GPU devices of the requested
//!   kinds, then the least free CPU, then memory; ties by name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::affinity;
use super::claims::{ClaimAllocation, ClaimNeed, Count};
use super::model::{is_gpu_resource, GpuDevice, NodeView, PodRequest};

/// Where a pod goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The node.
    pub node: String,
    /// Indexes into the node's `devices` for its extended resources, in the order chosen.
    pub devices: Vec<usize>,
    /// The devices its pending ResourceClaims get there.
    pub claims: Vec<ClaimAllocation>,
}

/// What a pod gets on a node: devices for extended resources, and for claims.
type Fit = (Vec<usize>, Vec<ClaimAllocation>);

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    let Ok(taint) = serde_json::to_value(taint) else {
        return false;
    };
    tolerations.iter().any(|t| {
        serde_json::to_value(t).is_ok_and(|t| fabrik_machinery::scheduling::tolerates(&t, &taint))
    })
}

/// Picks `count` whole GPUs: one NVLink island, one NUMA node when possible, best fit.
fn pick_whole(devices: &[GpuDevice], free: &[usize], count: usize) -> Option<Vec<usize>> {
    if count == 0 {
        return Some(Vec::new());
    }
    // Groups of free devices by (island, NUMA node), then by island.
    let mut by_numa: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
    let mut by_island: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for &i in free {
        let d = &devices[i];
        by_numa.entry((d.island, d.numa)).or_default().push(i);
        by_island.entry(d.island).or_default().push(i);
    }
    // Partly used time-sliced GPUs first, then by index.
    let order = |v: &mut Vec<usize>| {
        v.sort_by_key(|&i| (-devices[i].used, devices[i].gpu, i));
    };
    if let Some(mut group) = by_numa
        .into_values()
        .filter(|g| g.len() >= count)
        .min_by_key(|g| g.len())
    {
        order(&mut group);
        group.truncate(count);
        return Some(group);
    }
    if count == 1 {
        return None;
    }
    let island = by_island
        .into_values()
        .filter(|g| g.len() >= count)
        .min_by_key(|g| g.len())?;
    // Span as few NUMA nodes as possible: take from the fullest-free NUMA node first.
    let mut per_numa: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for i in island {
        per_numa.entry(devices[i].numa).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = per_numa.into_values().collect();
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    let mut out = Vec::new();
    for mut g in groups {
        order(&mut g);
        for i in g {
            if out.len() < count {
                out.push(i);
            }
        }
    }
    Some(out)
}

/// Picks `count` MIG or shared devices, packed onto the busiest GPU. Several devices for one
/// pod come from one GPU (a CUDA process cannot use slices of two GPUs as one): the busiest GPU
/// that has enough, then the one with the fewest free.
fn pick_packed(devices: &[GpuDevice], free: &[usize], count: usize) -> Option<Vec<usize>> {
    if free.len() < count {
        return None;
    }
    let busy = |gpu: i64| -> i64 {
        devices
            .iter()
            .filter(|d| d.gpu == gpu && d.used > 0)
            .count()
            .try_into()
            .unwrap_or(i64::MAX)
    };
    let mut by_gpu: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for &i in free {
        by_gpu.entry(devices[i].gpu).or_default().push(i);
    }
    let (_, mut v) = by_gpu
        .into_iter()
        .filter(|(_, v)| v.len() >= count)
        .min_by_key(|(gpu, v)| (-busy(*gpu), v.len(), *gpu))?;
    v.sort_by_key(|&i| devices[i].name.clone());
    v.truncate(count);
    Some(v)
}

/// Devices for `pod`'s claims on `node` (none of `taken`), or why they cannot be had there.
fn fit_claims(
    node: &NodeView,
    pod: &PodRequest,
    taken: &[usize],
) -> Result<Vec<ClaimAllocation>, String> {
    let mut used: Vec<usize> = taken.to_vec();
    let mut out = Vec::new();
    for need in &pod.claims {
        let (claim, requests) = match need {
            ClaimNeed::Allocated {
                node: Some(n),
                claim,
            } if *n != node.name => {
                return Err(format!(
                    "resource claim {claim} is allocated on another node"
                ))
            }
            ClaimNeed::Allocated { .. } => continue,
            ClaimNeed::Pending { claim, requests } => (claim, requests),
        };
        let mut results = Vec::new();
        for r in requests {
            let mut got = None;
            for alt in &r.alternatives {
                let on_node =
                    |d: &GpuDevice| alt.matching.contains(&(node.name.clone(), d.name.clone()));
                let free: Vec<usize> = node
                    .devices
                    .iter()
                    .enumerate()
                    .filter(|(i, d)| d.free() && !used.contains(i) && on_node(d))
                    .map(|(i, _)| i)
                    .collect();
                let picked = match alt.count {
                    Count::All => {
                        let all = node.devices.iter().filter(|d| on_node(d)).count();
                        (!free.is_empty() && free.len() == all).then_some(free)
                    }
                    Count::Exactly(n) => {
                        let whole = free
                            .iter()
                            .all(|&i| node.devices[i].resource == "nvidia.com/gpu");
                        if whole {
                            pick_whole(&node.devices, &free, n)
                        } else {
                            pick_packed(&node.devices, &free, n)
                        }
                    }
                };
                if let Some(p) = picked {
                    got = Some((alt.name.clone(), p));
                    break;
                }
            }
            let Some((name, picked)) = got else {
                return Err(format!("cannot allocate resource claim {claim}"));
            };
            for i in picked {
                used.push(i);
                results.push((name.clone(), i));
            }
        }
        out.push(ClaimAllocation {
            claim: claim.clone(),
            results,
        });
    }
    Ok(out)
}

/// Devices for `pod` on `node`, or why it does not fit there.
pub fn fit(node: &NodeView, pod: &PodRequest) -> Result<Fit, String> {
    if !node.schedulable {
        return Err("node is not ready or is cordoned".into());
    }
    for (k, v) in &pod.node_selector {
        if node.labels.get(k) != Some(v) {
            return Err("node selector does not match".into());
        }
    }
    if !fabrik_machinery::scheduling::required_affinity_selects(
        &pod.node_affinity,
        &node.name,
        &node.labels,
    ) {
        return Err("node affinity does not match".into());
    }
    for t in &node.taints {
        let blocks = t.effect == "NoSchedule" || t.effect == "NoExecute";
        if blocks && !tolerates(&pod.tolerations, t) {
            return Err(format!("untolerated taint {}", t.key));
        }
    }
    for (k, want) in &pod.requests {
        if *want <= 0 {
            continue;
        }
        let have = node.free.get(k).copied().unwrap_or(0);
        if have < *want {
            return Err(format!("insufficient {k}"));
        }
    }
    let mut chosen = Vec::new();
    for (k, want) in &pod.requests {
        if !is_gpu_resource(k) || *want <= 0 {
            continue;
        }
        let count = usize::try_from(*want).map_err(|_| format!("insufficient {k}"))?;
        let free: Vec<usize> = node
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.resource == *k && d.free())
            .map(|(i, _)| i)
            .collect();
        let picked = if k == "nvidia.com/gpu" {
            pick_whole(&node.devices, &free, count).ok_or_else(|| {
                if free.len() >= count {
                    format!("no NVLink island with {count} free GPUs")
                } else {
                    format!("insufficient {k} devices")
                }
            })?
        } else {
            pick_packed(&node.devices, &free, count).ok_or_else(|| {
                if free.len() >= count {
                    format!("no GPU with {count} free {k} devices")
                } else {
                    format!("insufficient {k} devices")
                }
            })?
        };
        chosen.extend(picked);
    }
    let claims = fit_claims(node, pod, &chosen)?;
    Ok((chosen, claims))
}

/// Best-fit score of `pod` on `node` with `devices`: lower is better.
fn score(node: &NodeView, pod: &PodRequest) -> (i64, i64, i64) {
    let left = |k: &str| {
        node.free.get(k).copied().unwrap_or(0) - pod.requests.get(k).copied().unwrap_or(0)
    };
    let gpu_left: i64 = pod
        .requests
        .keys()
        .filter(|k| is_gpu_resource(k))
        .map(|k| left(k))
        .sum();
    (gpu_left, left("cpu"), left("memory"))
}

/// A candidate: its score, node name and devices.
type Candidate<'a> = ((i64, i64, i64), &'a str, Fit);

/// The best node for `pod`, or a summary of why none fits (`0/N nodes are available: …`).
pub fn choose(nodes: &[NodeView], pod: &PodRequest) -> Result<Placement, String> {
    let mut best: Option<Candidate> = None;
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let domains: Vec<affinity::NodePods<'_>> = nodes
        .iter()
        .map(|n| (n.name.as_str(), &n.labels, n.pods.as_slice()))
        .collect();
    let me = affinity::Placed {
        namespace: pod.namespace.clone(),
        labels: pod.labels.clone(),
    };
    for (n, domain) in nodes.iter().zip(&domains) {
        let placed = if pod.pod_affinity.is_empty() {
            Ok(())
        } else {
            affinity::allows(&pod.pod_affinity, &me, *domain, &domains)
        };
        match placed.and_then(|()| fit(n, pod)) {
            Ok(devices) => {
                let s = score(n, pod);
                let better = best
                    .as_ref()
                    .is_none_or(|(bs, bn, _)| (s, n.name.as_str()) < (*bs, *bn));
                if better {
                    best = Some((s, n.name.as_str(), devices));
                }
            }
            Err(r) => *reasons.entry(r).or_insert(0) += 1,
        }
    }
    if let Some((_, node, (devices, claims))) = best {
        return Ok(Placement {
            node: node.to_string(),
            devices,
            claims,
        });
    }
    let why: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    Err(format!(
        "0/{} nodes are available: {}",
        nodes.len(),
        if why.is_empty() {
            "no nodes".to_string()
        } else {
            why.join(", ")
        }
    ))
}

/// Takes the placement's resources and devices out of the node's free ones.
pub fn commit(nodes: &mut [NodeView], pod: &PodRequest, placement: &Placement) {
    let Some(n) = nodes.iter_mut().find(|n| n.name == placement.node) else {
        return;
    };
    n.pods.push(affinity::Placed {
        namespace: pod.namespace.clone(),
        labels: pod.labels.clone(),
    });
    for (k, v) in &pod.requests {
        *n.free.entry(k.clone()).or_insert(0) -= v;
    }
    let claimed = placement
        .claims
        .iter()
        .flat_map(|c| c.results.iter().map(|(_, i)| *i));
    for i in placement.devices.iter().copied().chain(claimed) {
        if let Some(d) = n.devices.get_mut(i) {
            d.used += 1;
        }
    }
}
