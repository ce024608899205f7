//! The layouts to write for the demand waiting in one decision ([`plan`]): first idle GPUs
//! nobody waits for, laid out for the kinds too little of is free ([`Planner::convert`]); past
//! the starvation bound, busy GPUs that drain ([`Planner::drain`]). See the parent module.

use std::collections::{BTreeMap, BTreeSet};

use crate::layout::GpuLayout;
use crate::queue::{Input, Policy, Waiting};
use k8s_openapi::api::core::v1::Node;

use super::{gpu_layout_for, layout_text, node_gpus, units, Change, NodeGpus, Recent, Units};

/// How long demand must have waited before GPUs are re-laid out for it, in nanoseconds.
pub const WAITED: i128 = 5 * 1_000_000_000;

/// The most GPUs re-laid out in one decision.
const MAX_GPUS: usize = 64;

/// What the plan may re-lay out: one GPU, or all of a node's where they are not seen one by
/// one.
struct Gpu {
    node: usize,
    /// Its GPU indexes.
    indexes: Vec<u32>,
    /// What it offers now.
    offers: Units,
    /// Devices of it in use.
    used: i64,
    /// When the last of its runs ends at the latest (`i128::MAX` when not known; 0 idle).
    free_by: i128,
    /// Taken by this plan.
    taken: bool,
}

/// The GPUs of one node the plan lays out anew.
#[derive(Default)]
struct Planned {
    layouts: BTreeMap<u32, GpuLayout>,
    gpus: BTreeMap<u32, String>,
    drains: bool,
}

/// What laying out idle GPUs did for one workload's kind.
enum Converted {
    /// Nothing needed: what is free serves it.
    Needless,
    /// GPUs were laid out for it.
    Some,
    /// No idle GPU could be spared for it.
    None,
}

/// The layouts to write for the demand waiting in `input`: idle GPUs nobody waits for laid out
/// for the kinds too little of is free; past the policy's starvation bound, busy GPUs that
/// drain. None of the GPUs laid out within the policy's layout hold. Workloads their tenant's limits refuse (`limited`: more GPUs would not let them
/// run) count for nothing, so that a tenant past its quota cannot toss layouts about. See the
/// parent module.
pub fn plan(
    input: &Input,
    nodes: &[Node],
    recent: &Recent,
    policy: &Policy,
    limited: &BTreeSet<String>,
) -> Vec<Change> {
    if recent.settling(input.now) {
        return Vec::new();
    }
    let mut p = Planner::new(input, nodes, recent, policy.layout_hold, limited);
    let draining = nodes.iter().any(super::relayout_pending);
    let mut drained = false;
    // A tenant's work of one kind and pod size that found no room finds none later in this
    // decision either, until GPUs are laid out (the waiting are many under backlog).
    let mut hopeless: BTreeSet<(String, i64, &str)> = BTreeSet::new();
    let mut waiting: Vec<&Waiting> = input
        .waiting
        .iter()
        .filter(|w| input.now - w.arrival >= WAITED && !limited.contains(&w.key))
        .collect();
    waiting.sort_by_key(|w| (w.arrival, w.key.as_str()));
    for w in waiting {
        for (resource, _) in w.gpus() {
            if p.count >= MAX_GPUS {
                break;
            }
            // The most one pod of it takes of the kind: that much must be on one node.
            let pod = w
                .pods
                .iter()
                .map(|p| units(&p.requests, &resource).max(0) + units(&p.claimed, &resource).max(0))
                .max()
                .unwrap_or(0);
            let reserves = input.reservations.iter().any(|r| r.key == w.key);
            let memo = (resource.clone(), pod, w.tenant.as_str());
            if !reserves && hopeless.contains(&memo) {
                continue;
            }
            match p.convert(w, &resource, pod) {
                Converted::Needless => continue,
                Converted::Some => {
                    hopeless.clear();
                    continue;
                }
                Converted::None => {}
            }
            if !reserves {
                hopeless.insert(memo);
            }
            if draining || drained || input.now - w.arrival < policy.starvation_after {
                continue;
            }
            drained = p.drain(w, &resource, pod);
        }
    }
    p.changes()
}

/// One decision's plan as it goes: what is free and offered per node and kind, and the GPUs it
/// may take.
struct Planner<'a> {
    input: &'a Input,
    laid: Vec<Option<NodeGpus>>,
    names: Vec<&'a str>,
    /// Free units per node and kind, on the nodes that take pods.
    free: Vec<Units>,
    /// All units per node and kind, on the nodes that take pods.
    total: Vec<Units>,
    free_all: Units,
    /// What the waiting workloads ask for, per kind.
    demand: Units,
    gpus: Vec<Gpu>,
    /// Reserved nodes, and for which workload.
    reserved: BTreeMap<&'a str, &'a str>,
    /// What the tenants are guaranteed of each kind in all.
    guaranteed: Units,
    /// What each tenant holds of each kind.
    held: BTreeMap<&'a str, Units>,
    changes: BTreeMap<usize, Planned>,
    count: usize,
}

impl<'a> Planner<'a> {
    fn new(
        input: &'a Input,
        nodes: &[Node],
        recent: &Recent,
        hold: i128,
        limited: &BTreeSet<String>,
    ) -> Planner<'a> {
        let laid: Vec<Option<NodeGpus>> = nodes
            .iter()
            .zip(&input.nodes)
            .map(|(n, v)| node_gpus(n, v).filter(|_| v.schedulable))
            .collect();
        let names: Vec<&str> = input.nodes.iter().map(|v| v.name.as_str()).collect();
        let mut free: Vec<Units> = vec![Units::new(); input.nodes.len()];
        let mut total: Vec<Units> = vec![Units::new(); input.nodes.len()];
        for (n, view) in input.nodes.iter().enumerate() {
            if !view.schedulable {
                continue;
            }
            for d in &view.devices {
                *free[n].entry(d.resource.clone()).or_insert(0) += (d.slots - d.used).max(0);
                *total[n].entry(d.resource.clone()).or_insert(0) += d.slots;
            }
        }
        let mut free_all = Units::new();
        for f in &free {
            for (r, n) in f {
                *free_all.entry(r.clone()).or_insert(0) += n;
            }
        }
        let mut demand = Units::new();
        for w in input.waiting.iter().filter(|w| !limited.contains(&w.key)) {
            for (r, n) in w.gpus() {
                *demand.entry(r).or_insert(0) += n;
            }
        }
        let mut guaranteed = Units::new();
        for t in &input.tenants {
            for r in &t.resources {
                *guaranteed.entry(r.clone()).or_insert(0) += t.guaranteed(r);
            }
        }
        let mut held: BTreeMap<&str, Units> = BTreeMap::new();
        for a in &input.admitted {
            let h = held.entry(a.tenant.as_str()).or_default();
            for (r, n) in a.gpus() {
                *h.entry(r).or_insert(0) += n;
            }
        }
        let reserved = input
            .reservations
            .iter()
            .flat_map(|r| r.nodes.iter().map(|n| (n.as_str(), r.key.as_str())))
            .collect();
        let gpus = candidates(input, &laid, &names, recent, hold);
        Planner {
            input,
            laid,
            names,
            free,
            total,
            free_all,
            demand,
            gpus,
            reserved,
            guaranteed,
            held,
            changes: BTreeMap::new(),
            count: 0,
        }
    }

    /// Whether node `n` may be laid out for `w`: not reserved for another workload.
    fn usable(&self, n: usize, w: &Waiting) -> bool {
        self.reserved
            .get(self.names[n])
            .is_none_or(|key| *key == w.key.as_str())
    }

    /// The nodes that may be laid out for `w`'s `resource`, with how much of it one unit the
    /// plan lays out there makes.
    fn layable(&self, w: &Waiting, resource: &str) -> Vec<(usize, i64)> {
        self.laid
            .iter()
            .enumerate()
            .filter(|(n, _)| self.usable(*n, w))
            .filter_map(|(n, g)| Some((n, g.as_ref()?.per_unit(resource)?)))
            .collect()
    }

    /// Whether GPU `g` may be spared for another kind: idle, and nobody waits for what it
    /// offers beyond what is free elsewhere.
    fn spare(&self, g: &Gpu, resource: &str) -> bool {
        !g.taken
            && g.used == 0
            && !g.offers.contains_key(resource)
            && g.offers
                .iter()
                .all(|(r, n)| units(&self.demand, r) <= units(&self.free_all, r) - n)
    }

    /// Lays idle GPUs nobody waits for out for `w`'s `resource` (its largest pod taking `pod`),
    /// when too little of it is free: as many as it needs, on the node needing the fewest (the
    /// one with most of it free already, then the fewest spare GPUs, so that idle nodes stay
    /// whole for large jobs).
    fn convert(&mut self, w: &Waiting, resource: &str, pod: i64) -> Converted {
        let short = units(&self.demand, resource) - units(&self.free_all, resource);
        let fits = (0..self.free.len())
            .any(|n| self.usable(n, w) && units(&self.free[n], resource) >= pod);
        if fits && short <= 0 {
            return Converted::Needless;
        }
        // (GPUs to lay out, free of the kind there already less, spare GPUs there, node)
        let mut best: Option<(usize, i64, usize, usize)> = None;
        for (n, per_unit) in self.layable(w, resource) {
            let have = units(&self.free[n], resource);
            let wanted = if have >= pod { short } else { pod - have };
            let needed = usize::try_from((wanted.max(1) + per_unit - 1) / per_unit).unwrap_or(0);
            let spares = self
                .gpus
                .iter()
                .filter(|x| x.node == n && self.spare(x, resource))
                .count();
            if spares == 0 || (have < pod && spares < needed) {
                continue;
            }
            let option = (needed.min(spares), -have, spares, n);
            if best.as_ref().is_none_or(|b| option < *b) {
                best = Some(option);
            }
        }
        let Some((needed, _, _, n)) = best else {
            return Converted::None;
        };
        for _ in 0..needed {
            let Some(i) = (0..self.gpus.len())
                .find(|&i| self.gpus[i].node == n && self.spare(&self.gpus[i], resource))
            else {
                break;
            };
            for (r, k) in self.gpus[i].offers.clone() {
                for m in [&mut self.free_all, &mut self.free[n], &mut self.total[n]] {
                    *m.entry(r.clone()).or_insert(0) -= k;
                }
            }
            self.take(i, resource, true);
        }
        Converted::Some
    }

    /// Busy GPUs that drain for `w`'s `resource`, on one node, those freed soonest: for a pod
    /// no node has enough of the kind for at all; or, for a tenant below its guarantee of a
    /// kind the tenants are guaranteed more of than the nodes offer, `pod` more of it from GPUs
    /// of kinds offered beyond their own guarantees (no guarantee traded for another). Whether
    /// it drained any.
    fn drain(&mut self, w: &Waiting, resource: &str, pod: i64) -> bool {
        let ever = (0..self.total.len())
            .any(|n| self.usable(n, w) && units(&self.total[n], resource) >= pod);
        let held = self
            .held
            .get(w.tenant.as_str())
            .map_or(0, |h| units(h, resource));
        let guarantee = self
            .input
            .tenants
            .iter()
            .find(|t| t.name == w.tenant)
            .map_or(0, |t| t.guaranteed(resource));
        let owed = held + pod <= guarantee
            && units(&self.guaranteed, resource) > units(&self.input.capacity, resource);
        if ever && !owed {
            return false;
        }
        // (devices in use, when freed, GPUs, node, the GPUs)
        let mut cheapest: Option<(i64, i128, usize, usize, Vec<usize>)> = None;
        for (n, per_unit) in self.layable(w, resource) {
            let gpus = &self.gpus;
            let mut mine: Vec<usize> = (0..gpus.len())
                .filter(|&i| {
                    gpus[i].node == n && !gpus[i].taken && !gpus[i].offers.contains_key(resource)
                })
                .collect();
            mine.sort_by_key(|&i| (gpus[i].used, gpus[i].free_by, gpus[i].indexes.clone()));
            // Enough for the pod on this node; for a guarantee, `pod` more.
            let mut have = units(&self.total[n], resource);
            let want = if ever { have + pod } else { pod };
            let mut left = self.input.capacity.clone();
            let mut take = Vec::new();
            for i in mine {
                if have >= want {
                    break;
                }
                if ever {
                    let surplus = gpus[i]
                        .offers
                        .iter()
                        .all(|(c, k)| units(&left, c) - k >= units(&self.guaranteed, c));
                    if !surplus {
                        continue;
                    }
                    for (c, k) in &gpus[i].offers {
                        *left.entry(c.clone()).or_insert(0) -= k;
                    }
                }
                have += per_unit;
                take.push(i);
            }
            if have < want {
                continue;
            }
            let used = take.iter().map(|&i| gpus[i].used).sum();
            let by = take.iter().map(|&i| gpus[i].free_by).max().unwrap_or(0);
            let option = (used, by, take.len(), n, take);
            if cheapest.as_ref().is_none_or(|c| option < *c) {
                cheapest = Some(option);
            }
        }
        let Some((_, _, _, _, take)) = cheapest else {
            return false;
        };
        for i in take {
            self.take(i, resource, false);
        }
        true
    }

    /// Lays GPU `i` out for `resource`, counting what it will offer (as free when it is idle).
    fn take(&mut self, i: usize, resource: &str, idle: bool) {
        let n = self.gpus[i].node;
        let Some(g) = &self.laid[n] else { return };
        let (Some((layout, _)), Some(per_unit)) =
            (gpu_layout_for(resource, g.model), g.per_unit(resource))
        else {
            return;
        };
        *self.total[n].entry(resource.to_string()).or_insert(0) += per_unit;
        if idle {
            *self.free[n].entry(resource.to_string()).or_insert(0) += per_unit;
            *self.free_all.entry(resource.to_string()).or_insert(0) += per_unit;
        }
        let gpu = &mut self.gpus[i];
        gpu.taken = true;
        let planned = self.changes.entry(n).or_default();
        for &index in &gpu.indexes {
            planned.layouts.insert(index, layout.clone());
            planned.gpus.insert(index, resource.to_string());
        }
        planned.drains |= gpu.used > 0;
        self.count += 1;
    }

    /// The layouts to write, a node each.
    fn changes(self) -> Vec<Change> {
        let Planner {
            laid,
            names,
            changes,
            ..
        } = self;
        changes
            .into_iter()
            .filter_map(|(n, planned)| {
                let g = laid[n].as_ref()?;
                Some(Change {
                    node: names[n].to_string(),
                    layout: layout_text(g, &planned.layouts)?,
                    gpus: planned.gpus,
                    drains: planned.drains,
                })
            })
            .collect()
    }
}

/// The GPUs a plan may re-lay out: each GPU of a node seen one by one, all of a node's as one
/// otherwise; none being changed or re-laid out lately. With what they offer, how busy they
/// are and when their runs end at the latest.
fn candidates(
    input: &Input,
    laid: &[Option<NodeGpus>],
    names: &[&str],
    recent: &Recent,
    hold: i128,
) -> Vec<Gpu> {
    // When each device's, and each node's, runs end at the latest.
    let mut ends: BTreeMap<(&str, &str), i128> = BTreeMap::new();
    let mut node_ends: BTreeMap<&str, i128> = BTreeMap::new();
    for a in &input.admitted {
        let by = a.ends_by.unwrap_or(i128::MAX);
        for p in &a.pods {
            let e = node_ends.entry(p.node.as_str()).or_insert(0);
            *e = (*e).max(by);
            for d in &p.devices {
                let e = ends.entry((p.node.as_str(), d.as_str())).or_insert(0);
                *e = (*e).max(by);
            }
        }
    }
    let mut gpus: Vec<Gpu> = Vec::new();
    for (n, g) in laid.iter().enumerate() {
        let Some(g) = g else { continue };
        let (mut used, mut free_by) = (BTreeMap::<u32, i64>::new(), BTreeMap::<u32, i128>::new());
        for d in &input.nodes[n].devices {
            let Ok(i) = u32::try_from(d.gpu) else {
                continue;
            };
            *used.entry(i).or_insert(0) += d.used;
            if d.used > 0 {
                let end = ends
                    .get(&(names[n], d.name.as_str()))
                    .copied()
                    .unwrap_or(i128::MAX);
                let by = free_by.entry(i).or_insert(0);
                *by = (*by).max(end);
            }
        }
        if !g.seen {
            // All of its GPUs as one, when none is being changed or held.
            if !g.changing.is_empty()
                || g.desired
                    .keys()
                    .any(|&i| recent.held(names[n], i, input.now, hold))
            {
                continue;
            }
            let mut offers = Units::new();
            for (r, k) in g.have.values().flatten() {
                *offers.entry(r.clone()).or_insert(0) += k;
            }
            let busy = used.values().sum::<i64>();
            gpus.push(Gpu {
                node: n,
                indexes: g.desired.keys().copied().collect(),
                offers,
                used: busy,
                free_by: if busy > 0 {
                    node_ends.get(names[n]).copied().unwrap_or(i128::MAX)
                } else {
                    0
                },
                taken: false,
            });
            continue;
        }
        for (&index, offers) in &g.have {
            if g.changing.contains(&index) || recent.held(names[n], index, input.now, hold) {
                continue;
            }
            gpus.push(Gpu {
                node: n,
                indexes: vec![index],
                offers: offers.clone(),
                used: used.get(&index).copied().unwrap_or(0),
                free_by: free_by.get(&index).copied().unwrap_or(0),
                taken: false,
            });
        }
    }
    gpus
}
