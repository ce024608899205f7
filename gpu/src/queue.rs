//! One decision of the control plane's GPU queue, pure (beside [`crate::placement::plan`], the
//! scheduler's placement, whose fit it uses): given the tenants' guarantees and limits, what every
//! tenant holds, the workloads waiting and the nodes as they are, which workloads are admitted
//! (and where), which borrowed workloads are preempted so that tenants get their fair share
//! back, and what every waiting pod is told.
//!
//! Quantities are devices of one host GPU resource (`nvidia.com/gpu`, a MIG profile, a shared
//! slice): each resource is shared on its own, with its own guarantees and fair shares, and a
//! tenant's standing across resources is its dominant share (DRF).

use std::collections::{BTreeMap, BTreeSet};

use crate::placement::fit;
use crate::placement::model::{NodeView, PodRequest};

pub mod layouts;
pub mod ledger;

/// Requests or holdings per host GPU resource.
pub type Gpus = BTreeMap<String, i64>;

/// A tenant's place in the queue.
#[derive(Clone, Debug, Default)]
pub struct TenantQueue {
    /// Tenant name.
    pub name: String,
    /// Its GPU resources (the host resources of its kinds).
    pub resources: Vec<String>,
    /// Guaranteed devices of each of its resources; `None`: no GPU quota (nothing
    /// guaranteed, borrowing unbounded).
    pub guarantee: Option<i64>,
    /// Devices of each resource it may hold beyond its guarantee.
    pub borrowing_limit: i64,
    /// Of its idle guarantee, devices others may borrow; `None`: all.
    pub lending_limit: Option<i64>,
    /// Weight among borrowers (≥ 1).
    pub weight: i64,
    /// Its group (a department of several tenants), if any: the members' idle guarantees go
    /// to each other first, and the group shares what the others leave as one claimant.
    pub parent: Option<String>,
}

impl TenantQueue {
    /// Its guarantee of `resource`.
    pub fn guaranteed(&self, resource: &str) -> i64 {
        match self.guarantee {
            Some(g) if self.resources.iter().any(|r| r == resource) => g,
            _ => 0,
        }
    }

    /// The most it may hold of `resource`.
    pub fn cap(&self, resource: &str) -> i64 {
        match self.guarantee {
            None => i64::MAX,
            Some(_) => self
                .guaranteed(resource)
                .saturating_add(self.borrowing_limit),
        }
    }
}

/// A workload waiting: one pod, or a gang admitted all together.
#[derive(Clone, Debug)]
pub struct Waiting {
    /// Tenant.
    pub tenant: String,
    /// `namespace/gang` or `namespace/pod` (host names).
    pub key: String,
    /// Its gated pods.
    pub pods: Vec<PodRequest>,
    /// Members it needs before it can be admitted (a gang's size less members admitted).
    pub needs: usize,
    /// Priority (higher first within the tenant).
    pub priority: i32,
    /// Arrival: the creation time of its first pod, in nanoseconds since the epoch.
    pub arrival: i128,
    /// The longest it runs once started, in nanoseconds: its pods' `activeDeadlineSeconds`,
    /// which the kubelet enforces; `None` when a pod has none.
    pub runtime: Option<i128>,
}

impl Waiting {
    /// What it asks for in all.
    pub fn gpus(&self) -> Gpus {
        sum(self.pods.iter())
    }
}

/// A pod holding GPUs: where, and which devices (their UUIDs, where known).
#[derive(Clone, Debug)]
pub struct HeldPod {
    /// The pod.
    pub request: PodRequest,
    /// Its node.
    pub node: String,
    /// The devices it holds there (device names, as `fabrik.dev/gpu-ids` has them).
    pub devices: Vec<String>,
}

/// A workload holding GPUs (admitted; running or about to).
#[derive(Clone, Debug, Default)]
pub struct Admitted {
    /// Tenant.
    pub tenant: String,
    /// As [`Waiting::key`].
    pub key: String,
    /// Its pods.
    pub pods: Vec<HeldPod>,
    /// Its priority.
    pub priority: i32,
    /// When it was admitted (nanoseconds since the epoch; 0 when unknown).
    pub admitted_at: i128,
    /// When it arrived, as [`Waiting::arrival`] (0 when unknown).
    pub arrival: i128,
    /// Whether its pods are already being preempted or deleted.
    pub leaving: bool,
    /// Whether it was admitted as backfill ([`Admission::backfill`]): the first to go when
    /// GPUs are needed.
    pub backfill: bool,
    /// When it will have ended at the latest (its start plus its pods' `activeDeadlineSeconds`,
    /// nanoseconds since the epoch); `None` when not known.
    pub ends_by: Option<i128>,
    /// Whether a PodDisruptionBudget allows none of its pods to go now: it is never chosen to
    /// be preempted (reclaim takes others, or waits).
    pub protected: bool,
    /// Whether it was admitted as its tenant's turn past its fair share ([`Admission::turn`]).
    /// Any other workload of a tenant beyond its guarantee goes back whole, when reclaim needs
    /// it, to a tenant below its own guarantee.
    pub turn: bool,
}

impl Admitted {
    /// What its pods hold in all: their requests, and what their ResourceClaims take.
    pub fn gpus(&self) -> Gpus {
        sum(self.pods.iter().map(|p| &p.request))
    }
}

/// Platform-wide settings.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Whether borrowed GPUs are taken back (by preemption) when their owners need them.
    pub reclaim: bool,
    /// How long a workload that fits its tenant's share waits before nodes are reserved for
    /// it, in nanoseconds.
    pub starvation_after: i128,
    /// The weight of each group (tenants' `parent`) among the claimants of idle GPUs; 1 for a
    /// group not listed.
    pub group_weights: BTreeMap<String, i64>,
    /// How long a workload reclaim serves waits for borrowed GPUs to come back on their own
    /// before borrowers are preempted, in nanoseconds from its arrival: a borrower known to end
    /// within it (`activeDeadlineSeconds`) is never preempted, its GPUs are counted as coming
    /// back. 0: preempt at once.
    pub reclaim_grace: i128,
    /// How long a GPU the queue laid out anew is left as it is before it may be laid out again
    /// for other demand, in nanoseconds ([`layouts`]): long enough that two demands cannot toss
    /// a GPU between them, and that a reconfiguration costs less than the work it makes room
    /// for.
    pub layout_hold: i128,
    /// The half-life of the [`ledger::Ledger`] that keeps fair shares over time, in
    /// nanoseconds; 0: no ledger (fair shares at each instant only).
    pub fairness_half_life: i128,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            reclaim: true,
            starvation_after: 60 * 1_000_000_000,
            group_weights: BTreeMap::new(),
            reclaim_grace: 0,
            layout_hold: layouts::HOLD,
            fairness_half_life: ledger::HALF_LIFE,
        }
    }
}

/// A reservation for a starving workload: nodes no other workload is placed on in queue order.
/// Their idle GPUs may still take backfill, which is preempted as soon as it is all that stands
/// between the workload and its nodes; once the reservation has waited the starvation bound, for
/// a tenant not ahead of its fair share over time, so is what tenants ahead of theirs hold there
/// beyond their guarantees (`drain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The workload's key.
    pub key: String,
    /// The nodes held for it.
    pub nodes: BTreeSet<String>,
    /// When it was made (nanoseconds since the epoch): backfill placed on its nodes since then
    /// is preempted once the nodes have drained but for it.
    pub since: i128,
    /// When its workload will fit on its nodes at the latest, with the backfill there gone:
    /// when the last of the runs it drains behind ends (their `activeDeadlineSeconds`);
    /// `None` while one of them has no known end. Where it is known, backfill goes on its
    /// nodes only when it is known to end by then (so it delays nothing).
    pub start_by: Option<i128>,
}

/// Everything one decision looks at.
#[derive(Clone, Debug, Default)]
pub struct Input {
    /// Tenants.
    pub tenants: Vec<TenantQueue>,
    /// Devices of each GPU resource on schedulable nodes.
    pub capacity: Gpus,
    /// The nodes, with what admitted pods take already committed.
    pub nodes: Vec<NodeView>,
    /// Workloads holding GPUs.
    pub admitted: Vec<Admitted>,
    /// Workloads waiting, in any order.
    pub waiting: Vec<Waiting>,
    /// The reservations of the previous decision, each kept while its workload waits.
    pub reservations: Vec<Reservation>,
    /// Per tenant and resource, the device-seconds it has lately been ahead of its fair share
    /// (negative: behind), from a [`ledger::Ledger`]; empty: fair shares count at each instant
    /// only. A tenant ahead takes no workload past its fair share while others below theirs
    /// wait.
    pub lead: BTreeMap<String, Gpus>,
    /// Now, in nanoseconds since the epoch.
    pub now: i128,
}

/// An admission: the workload's pods and the node each goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Workload key.
    pub key: String,
    /// Tenant.
    pub tenant: String,
    /// (pod name, node) for each pod.
    pub placements: Vec<(String, String)>,
    /// Whether it holds GPUs beyond its tenant's guarantee.
    pub borrowed: bool,
    /// Whether it is backfill: GPUs the queue would otherwise leave idle, beyond its tenant's
    /// fair share or on nodes reserved for another workload — the first to be preempted.
    pub backfill: bool,
    /// Whether it is its tenant's turn past its fair share, taken while other tenants below
    /// theirs waited (a workload larger than the rest of its share): reclaim does not take it
    /// back for a guarantee, or it would never run (see [`Admitted::turn`]).
    pub turn: bool,
}

/// A preemption: an admitted workload whose GPUs go back to their owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// Workload key.
    pub key: String,
    /// Its tenant.
    pub tenant: String,
    /// Its pods.
    pub pods: Vec<String>,
    /// Why, for the Event in its tenant.
    pub message: String,
}

/// A tenant's standing in one resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// Guaranteed.
    pub guaranteed: i64,
    /// Held (after this decision's admissions).
    pub admitted: i64,
    /// Held beyond the guarantee.
    pub borrowed: i64,
    /// Held as backfill ([`Admission::backfill`]): the first to be preempted.
    pub backfill: i64,
    /// Of its idle guarantee, held by others.
    pub lent: i64,
    /// Still waiting.
    pub pending: i64,
    /// Fair share under the current demand.
    pub fair_share: i64,
}

/// What a decision says.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Workloads to admit now.
    pub admit: Vec<Admission>,
    /// Workloads to preempt.
    pub preempt: Vec<Preemption>,
    /// For each waiting pod (`namespace/name`): why it waits.
    pub waiting: BTreeMap<String, String>,
    /// For each waiting pod that GPUs freeing up will let run: the devices its tenant's queue
    /// must still be given up to and including its workload — at least what has to free up
    /// before it runs. Not for a gang not all there, nor for more than the host has.
    pub ahead: BTreeMap<String, Gpus>,
    /// Per tenant and resource.
    pub standings: BTreeMap<String, BTreeMap<String, Standing>>,
    /// The reservations held after this decision.
    pub reservations: Vec<Reservation>,
    /// The waiting workloads (keys) their tenant's limits refuse (its quota and borrowing
    /// limit, a gang not all there) or the host can never run: more free GPUs would not let
    /// them run.
    pub limited: BTreeSet<String>,
}

/// The GPU devices `pods` ask for: their requests, and what their ResourceClaims take.
fn sum<'a>(pods: impl Iterator<Item = &'a PodRequest>) -> Gpus {
    let mut out = Gpus::new();
    for p in pods {
        for (k, v) in p.requests.iter().chain(&p.claimed) {
            if fabrik_api::is_host_gpu_resource(k) && *v > 0 {
                *out.entry(k.clone()).or_insert(0) += v;
            }
        }
    }
    out
}

fn get(m: &Gpus, r: &str) -> i64 {
    m.get(r).copied().unwrap_or(0)
}

/// Shares `pool` among claimants `(weight, want)` by weight, none above its want (water
/// filling, integer: remainders to the heaviest claimants first, then by position).
pub fn water_fill(pool: i64, claims: &[(i64, i64)]) -> Vec<i64> {
    let mut got = vec![0i64; claims.len()];
    let mut left = pool.max(0);
    loop {
        let open: Vec<usize> = (0..claims.len())
            .filter(|&i| got[i] < claims[i].1)
            .collect();
        if open.is_empty() || left == 0 {
            return got;
        }
        let total: i64 = open.iter().map(|&i| claims[i].0.max(1)).sum();
        let mut given = 0;
        for &i in &open {
            let share = left * claims[i].0.max(1) / total;
            let add = share.min(claims[i].1 - got[i]);
            got[i] += add;
            given += add;
        }
        if given == 0 {
            // Fewer devices left than claimants: one each, heaviest first.
            let mut order = open.clone();
            order.sort_by_key(|&i| (std::cmp::Reverse(claims[i].0), i));
            for i in order {
                if left == 0 {
                    break;
                }
                got[i] += 1;
                left -= 1;
            }
            continue;
        }
        left -= given;
    }
}

/// Per resource and tenant: what it holds and wants.
struct Books<'a> {
    input: &'a Input,
    /// tenant → resource → held.
    held: BTreeMap<String, Gpus>,
    /// tenant → resource → still waiting (but for what can never run here).
    pending: BTreeMap<String, Gpus>,
    /// tenant → resource → asked for by waiting workloads the host can never run
    /// ([`Books::never_fits`]): no part of any fair share.
    unplaceable: BTreeMap<String, Gpus>,
    /// The most the host could offer of each GPU resource.
    ceilings: BTreeMap<String, Ceiling>,
}

/// The most of a GPU resource the host could offer, were every GPU laid out as the densest
/// GPU offering it now (an over-estimate where GPUs differ).
#[derive(Clone, Copy, Debug)]
struct Ceiling {
    /// In all.
    total: i64,
    /// On the largest node.
    node: i64,
}

/// The [`Ceiling`] of every GPU resource some device offers now; those no device offers are
/// not known to be too small for anything (a new layout may yet offer them). An over-estimate
/// only costs a workload the host cannot run a plain "cannot run"; an under-estimate would
/// leave one it can run waiting, so every count errs high.
fn ceilings(nodes: &[NodeView]) -> BTreeMap<String, Ceiling> {
    // resource → the most it takes of one physical GPU (instances, or time-sliced slots).
    let mut densest: BTreeMap<&str, i64> = BTreeMap::new();
    let mut per_node: Vec<i64> = Vec::with_capacity(nodes.len());
    for n in nodes {
        let mut units: BTreeMap<(i64, &str), i64> = BTreeMap::new();
        for d in &n.devices {
            *units.entry((d.gpu, d.resource.as_str())).or_insert(0) += d.slots.max(1);
        }
        for ((_, r), k) in units {
            let e = densest.entry(r).or_insert(0);
            *e = (*e).max(k);
        }
        // Its GPUs: those its devices name, or as many as its node agent says it has (GPUs
        // being laid out anew offer no device meanwhile).
        let named = n
            .devices
            .iter()
            .map(|d| d.gpu)
            .collect::<BTreeSet<i64>>()
            .len() as i64;
        let said = layouts::labelled_gpu_count(&n.labels).map_or(0, i64::from);
        per_node.push(named.max(said));
    }
    let total: i64 = per_node.iter().sum();
    let largest = per_node.iter().copied().max().unwrap_or(0);
    densest
        .into_iter()
        .map(|(r, k)| {
            let c = Ceiling {
                total: total.saturating_mul(k),
                node: largest.saturating_mul(k),
            };
            (r.to_string(), c)
        })
        .collect()
}

impl Books<'_> {
    fn tenant(&self, name: &str) -> Option<&TenantQueue> {
        self.input.tenants.iter().find(|t| t.name == name)
    }

    fn held(&self, tenant: &str, r: &str) -> i64 {
        self.held.get(tenant).map(|m| get(m, r)).unwrap_or(0)
    }

    fn pending(&self, tenant: &str, r: &str) -> i64 {
        self.pending.get(tenant).map(|m| get(m, r)).unwrap_or(0)
    }

    /// Why the host can never run `w` — more of a resource than all its GPUs could offer, or
    /// a pod larger than any node could hold — or `None`.
    fn never_fits(&self, w: &Waiting) -> Option<String> {
        for (r, n) in w.gpus() {
            if let Some(c) = self.ceilings.get(&r).filter(|c| n > c.total) {
                return Some(format!(
                    "it asks for {n} {r} in all, more than the host's GPUs could ever offer \
                     ({}): it cannot run unless the host grows",
                    c.total
                ));
            }
        }
        for p in &w.pods {
            for (r, n) in sum(std::iter::once(p)) {
                if let Some(c) = self.ceilings.get(&r).filter(|c| n > c.node) {
                    // (Not by name: a host pod's name is not the tenant's.)
                    let who = if w.pods.len() > 1 {
                        "one of its pods"
                    } else {
                        "it"
                    };
                    return Some(format!(
                        "{who} asks for {n} {r}, more than any node's GPUs could ever offer \
                         ({}): it cannot run unless a larger node joins",
                        c.node
                    ));
                }
            }
        }
        None
    }

    /// Device-seconds `tenant` has lately been ahead of its fair share of `r` (negative: behind).
    fn lead(&self, tenant: &str, r: &str) -> i64 {
        self.input.lead.get(tenant).map(|m| get(m, r)).unwrap_or(0)
    }

    /// What the tenants other than `tenant` hold or keep of `r`: their pods, and the idle
    /// guarantee they do not lend.
    fn others(&self, tenant: &str, r: &str) -> i64 {
        self.input
            .tenants
            .iter()
            .filter(|o| o.name != tenant)
            .map(|o| self.held(&o.name, r) + self.protected(o, r))
            .sum()
    }

    /// Counts an admission of `w` in the books.
    fn admitted(&mut self, w: &Waiting) {
        for (r, n) in w.gpus() {
            *self
                .held
                .entry(w.tenant.clone())
                .or_default()
                .entry(r.clone())
                .or_insert(0) += n;
            *self
                .pending
                .entry(w.tenant.clone())
                .or_default()
                .entry(r)
                .or_insert(0) -= n;
        }
    }

    /// Idle guarantee `t` keeps for itself (not lent) in `r`.
    fn protected(&self, t: &TenantQueue, r: &str) -> i64 {
        let idle = (t.guaranteed(r) - self.held(&t.name, r)).max(0);
        match t.lending_limit {
            None => 0,
            Some(lend) => (idle - lend).max(0),
        }
    }

    /// Fair shares of `r` for every tenant, under the demand of held + pending, in two levels:
    /// each tenant first gets its guarantee (up to its demand); the idle guarantees of a group's
    /// members go to the group's other members first; what is left of the idle guarantees
    /// (what tenants keep aside) and the unguaranteed capacity is shared among the groups by
    /// group weight — a tenant without a group is a group of its own, with its own weight —
    /// and a group's part among its members by their weights. Never above a tenant's demand
    /// or borrowing limit.
    fn fair_shares(&self, r: &str, group_weights: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
        let cap = get(&self.input.capacity, r);
        let tenants = &self.input.tenants;
        let demand: Vec<i64> = tenants
            .iter()
            .map(|t| self.held(&t.name, r) + self.pending(&t.name, r))
            .collect();
        let base: Vec<i64> = tenants
            .iter()
            .zip(&demand)
            .map(|(t, d)| (*d).min(t.guaranteed(r)))
            .collect();
        let kept: Vec<i64> = tenants
            .iter()
            .zip(&base)
            .map(|(t, b)| {
                let idle = t.guaranteed(r) - b;
                match t.lending_limit {
                    None => 0,
                    Some(lend) => (idle - lend).max(0),
                }
            })
            .collect();
        let claims: Vec<i64> = tenants
            .iter()
            .zip(demand.iter().zip(&base))
            .map(|(t, (d, b))| {
                let room = t.cap(r).saturating_sub(*b);
                (d - b).min(room).max(0)
            })
            .collect();
        // Groups in the order of their first member, members by position (so that, without
        // groups, every tenant is a claimant at its own position, as water_fill's tie-break
        // by position expects).
        let mut groups: Vec<((bool, &str), Vec<usize>)> = Vec::new();
        for (i, t) in tenants.iter().enumerate() {
            let key = match &t.parent {
                Some(p) => (true, p.as_str()),
                None => (false, t.name.as_str()),
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        // Within a group: its members' idle lendable guarantees, to its members first.
        let mut inner = vec![0i64; tenants.len()];
        for members in groups.iter().map(|(_, m)| m).filter(|m| m.len() > 1) {
            let idle: i64 = members
                .iter()
                .map(|&i| tenants[i].guaranteed(r) - base[i] - kept[i])
                .sum();
            let wants: Vec<(i64, i64)> = members
                .iter()
                .map(|&i| (tenants[i].weight, claims[i]))
                .collect();
            for (&i, got) in members.iter().zip(water_fill(idle, &wants)) {
                inner[i] = got;
            }
        }
        let pool =
            cap - base.iter().sum::<i64>() - kept.iter().sum::<i64>() - inner.iter().sum::<i64>();
        // Among groups, then within each group.
        let group_claims: Vec<(i64, i64)> = groups
            .iter()
            .map(|((grouped, name), members)| {
                let weight = match grouped {
                    true => group_weights.get(*name).copied().unwrap_or(1).max(1),
                    false => tenants[members[0]].weight,
                };
                let want = members.iter().map(|&i| claims[i] - inner[i]).sum();
                (weight, want)
            })
            .collect();
        let mut extra = vec![0i64; tenants.len()];
        for ((_, members), part) in groups.iter().zip(water_fill(pool, &group_claims)) {
            let wants: Vec<(i64, i64)> = members
                .iter()
                .map(|&i| (tenants[i].weight, claims[i] - inner[i]))
                .collect();
            for (&i, got) in members.iter().zip(water_fill(part, &wants)) {
                extra[i] = got;
            }
        }
        tenants
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), base[i] + inner[i] + extra[i]))
            .collect()
    }
}

/// Why a workload cannot be admitted now, and whether reclaim or backfill could help it.
enum Refusal {
    /// Its tenant's limits: wait until its own pods finish.
    Limit(String),
    /// Nothing freeing up lets it run: a gang not all there, or more than the host has.
    Never(String),
    /// Its tenant is at its fair share while others below theirs wait: it may still backfill
    /// GPUs nobody else can use now.
    Share(String),
    /// Others hold the GPUs (reclaim may help when it is within its fair share).
    Capacity(String),
    /// No node has room (reservation may help).
    Placement(String),
}

impl Refusal {
    /// Whether it waits for room on the nodes (which a reservation's drain can make).
    fn for_room(&self) -> bool {
        matches!(self, Refusal::Placement(_) | Refusal::Capacity(_))
    }

    fn message(&self) -> &str {
        match self {
            Refusal::Limit(m)
            | Refusal::Never(m)
            | Refusal::Share(m)
            | Refusal::Capacity(m)
            | Refusal::Placement(m) => m,
        }
    }
}

fn books(input: &Input) -> Books<'_> {
    let mut books = Books {
        input,
        held: BTreeMap::new(),
        pending: BTreeMap::new(),
        unplaceable: BTreeMap::new(),
        ceilings: ceilings(&input.nodes),
    };
    for a in &input.admitted {
        for (r, n) in a.gpus() {
            *books
                .held
                .entry(a.tenant.clone())
                .or_default()
                .entry(r)
                .or_insert(0) += n;
        }
    }
    for w in &input.waiting {
        let into = match books.never_fits(w) {
            None => &mut books.pending,
            Some(_) => &mut books.unplaceable,
        };
        let e = into.entry(w.tenant.clone()).or_default();
        for (r, n) in w.gpus() {
            *e.entry(r).or_insert(0) += n;
        }
    }
    books
}

/// Fair shares: resource → tenant → devices.
type FairShares = BTreeMap<String, BTreeMap<String, i64>>;

/// Each tenant's workloads, in its queue order: by priority, then arrival.
type Queues<'a> = BTreeMap<String, Vec<&'a Waiting>>;

fn queues<'a>(waiting: impl Iterator<Item = &'a Waiting>) -> Queues<'a> {
    let mut queues: Queues<'a> = BTreeMap::new();
    for w in waiting {
        queues.entry(w.tenant.clone()).or_default().push(w);
    }
    for q in queues.values_mut() {
        q.sort_by_key(|w| (std::cmp::Reverse(w.priority), w.arrival, w.key.clone()));
    }
    queues
}

/// How a pass tries workloads.
#[derive(Clone, Copy)]
enum Mode<'m> {
    /// In queue order, within the fair shares, off the nodes reserved for other workloads.
    Queue,
    /// Backfill: on the GPUs the queue leaves idle, past the fair shares and on reserved
    /// nodes too, never on `off` (nodes whose GPUs are spoken for); on a reserved node only
    /// when it ends by the reservation's `start_by` (`start_by`: node → it), where that is
    /// known.
    Backfill {
        off: &'m BTreeSet<String>,
        start_by: &'m BTreeMap<String, i128>,
    },
}

/// An admission pass: its admissions and refusals, and the books and nodes after them.
struct Pass<'a> {
    books: Books<'a>,
    /// The nodes after its admissions.
    nodes: Vec<NodeView>,
    admit: Vec<Admission>,
    /// Per tenant, its refused workloads in queue order.
    blocked: BTreeMap<String, Vec<(Refusal, &'a Waiting)>>,
    /// What each tenant holds after the queue-order pass, and in what order it came.
    holders: Holders,
}

/// The queue-order pass over every waiting workload, with `reservations` honoured.
fn pass<'a>(input: &'a Input, fair: &FairShares, reservations: &[Reservation]) -> Pass<'a> {
    let mut run = Pass {
        books: books(input),
        nodes: input.nodes.clone(),
        admit: Vec::new(),
        blocked: BTreeMap::new(),
        holders: Holders::default(),
    };
    let queues = queues(input.waiting.iter());
    admit_in_order(&mut run, fair, &queues, reservations, Mode::Queue);
    run.holders = Holders::of(input, &run.admit);
    run
}

/// Tries the heads of `queues` in turn — tenants within their guarantee first, then the least
/// dominant borrowed share per weight, then arrival — admitting what fits into `run`; in queue
/// mode what is refused is recorded.
fn admit_in_order<'a>(
    run: &mut Pass<'a>,
    fair: &FairShares,
    queues: &Queues<'a>,
    reservations: &[Reservation],
    mode: Mode<'_>,
) {
    let input = run.books.input;
    let fair_of = |t: &str, r: &str| fair.get(r).and_then(|m| m.get(t)).copied().unwrap_or(0);
    let mut cursor: BTreeMap<&str, usize> = BTreeMap::new();
    // What each tenant's reserved workloads, refused in this pass, claim of its fair share: its
    // workloads behind them in its queue may not take it.
    let mut claimed: BTreeMap<String, Gpus> = BTreeMap::new();
    loop {
        let mut best: Option<((bool, i64, i128), &'a Waiting)> = None;
        for (tenant, q) in queues {
            let i = cursor.get(tenant.as_str()).copied().unwrap_or(0);
            let Some(w) = q.get(i) else { continue };
            let Some(t) = run.books.tenant(tenant) else {
                continue;
            };
            let gpus = w.gpus();
            let within = gpus
                .iter()
                .all(|(r, n)| run.books.held(tenant, r) + n <= t.guaranteed(r));
            // Dominant borrowed share per weight (parts per million of capacity).
            let share = gpus
                .keys()
                .map(|r| {
                    let cap = get(&input.capacity, r).max(1);
                    let over = (run.books.held(tenant, r) - t.guaranteed(r)).max(0);
                    over * 1_000_000 / cap / t.weight.max(1)
                })
                .max()
                .unwrap_or(0);
            let key = (!within, share, w.arrival);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, w));
            }
        }
        let Some((_, w)) = best else { break };
        *cursor.entry(w.tenant.as_str()).or_insert(0) += 1;
        let claim = claimed.get(&w.tenant).cloned().unwrap_or_default();
        let tried = try_admit(
            &run.books,
            &fair_of,
            w,
            &mut run.nodes,
            reservations,
            mode,
            &claim,
        );
        match tried {
            Ok(admission) => {
                run.books.admitted(w);
                run.admit.push(admission);
            }
            Err(refusal) => {
                if matches!(mode, Mode::Queue) {
                    if reservations.iter().any(|r| r.key == w.key) {
                        let c = claimed.entry(w.tenant.clone()).or_default();
                        for (r, n) in w.gpus() {
                            *c.entry(r).or_insert(0) += n;
                        }
                    }
                    run.blocked
                        .entry(w.tenant.clone())
                        .or_default()
                        .push((refusal, w));
                }
            }
        }
    }
}

/// One decision.
pub fn decide(input: &Input, policy: &Policy) -> Decision {
    let demand = books(input);
    let resources: BTreeSet<String> = input
        .capacity
        .keys()
        .cloned()
        .chain(demand.pending.values().flat_map(|m| m.keys().cloned()))
        .collect();
    let fair: FairShares = resources
        .iter()
        .map(|r| (r.clone(), demand.fair_shares(r, &policy.group_weights)))
        .collect();
    let fair_of = |t: &str, r: &str| fair.get(r).and_then(|m| m.get(t)).copied().unwrap_or(0);

    // Reservations: a new one for every workload its tenant's share allows that has waited
    // longer than the starvation bound for room — refused because the nodes have no room for it
    // (smaller workloads take the pieces) or because others hold the GPUs — those of the
    // tenants furthest behind their fair shares over time first, then the oldest, on
    // nodes no other reservation holds; beyond the first, while at most half the nodes are
    // reserved; a tenant's reservations together within its share. Each is kept while its
    // workload waits for room within its tenant's share (refused by its limits or its share,
    // it would hold nodes for nothing). The pass is run again whenever they change, so that
    // nothing new goes to reserved nodes in queue order.
    //
    // Others holding the GPUs within their own fair shares is what starves a workload larger
    // than the rest of its tenant's share: reclaim takes only what is held beyond a share, so
    // without a reservation such a workload would wait for as long as the others have demand.
    // Its reserved nodes drain as their runs end (or, once the reservation is overdue, of what
    // tenants ahead of their shares hold there: `drain`); once admitted it runs past its
    // tenant's share and reclaim does not take it back (that would put its tenant below its
    // share): fair shares are honoured over time rather than at every instant.
    //
    // Within its share: its tenant below its fair share at its turn, not counting what its
    // own later workloads, which overtook it, hold; `reserved`: what its tenant's reservations
    // made before it claim. Past its share only while its tenant is not ahead of its share over
    // time (as `past_share` allows).
    let within_share = |w: &Waiting, run: &Pass<'_>, reserved: &Gpus| {
        let overtook = run.holders.overtaken(w);
        w.gpus().iter().all(|(r, n)| {
            let at_turn = run.books.held(&w.tenant, r) - get(&overtook, r) + get(reserved, r);
            let fair = fair_of(&w.tenant, r);
            let guaranteed = run.books.tenant(&w.tenant).map_or(0, |t| t.guaranteed(r));
            at_turn < fair
                && (run.books.lead(&w.tenant, r) <= 0 || at_turn + n <= fair.max(guaranteed))
        })
    };
    let waiting_for_room = |run: &Pass<'_>, w: &Waiting, refusal: &Refusal| {
        refusal.for_room() && within_share(w, run, &Gpus::new())
    };
    let mut reservations: Vec<Reservation> = input
        .reservations
        .iter()
        .filter(|r| input.waiting.iter().any(|w| w.key == r.key))
        .cloned()
        .collect();
    let mut run = pass(input, &fair, &reservations);
    let kept = reservations.len();
    reservations.retain(|r| {
        run.admit.iter().any(|a| a.key == r.key)
            || run
                .blocked
                .values()
                .flatten()
                .any(|(refusal, w)| w.key == r.key && waiting_for_room(&run, w, refusal))
    });
    if reservations.len() != kept {
        run = pass(input, &fair, &reservations);
    }
    let mut starving: Vec<&Waiting> = run
        .blocked
        .values()
        .flatten()
        .filter(|(refusal, w)| {
            waiting_for_room(&run, w, refusal)
                && input.now - w.arrival >= policy.starvation_after
                && !reservations.iter().any(|r| r.key == w.key)
        })
        .map(|(_, w)| *w)
        .collect();
    // The tenants furthest behind their fair shares over time first, then the oldest.
    let behind = |w: &Waiting| {
        w.gpus()
            .keys()
            .map(|r| {
                let cap = get(&input.capacity, r).max(1);
                i128::from(run.books.lead(&w.tenant, r)) * 1_000_000 / i128::from(cap)
            })
            .max()
            .unwrap_or(0)
    };
    starving.sort_by_cached_key(|w| (behind(w), w.arrival, w.key.clone()));
    let schedulable = input.nodes.iter().filter(|n| n.schedulable).count();
    let mut added = false;
    for w in starving {
        let mut claimed = Gpus::new();
        for r in &reservations {
            let mine = input.waiting.iter().find(|o| o.key == r.key);
            for (res, n) in mine
                .filter(|o| o.tenant == w.tenant)
                .map(Waiting::gpus)
                .into_iter()
                .flatten()
            {
                *claimed.entry(res).or_insert(0) += n;
            }
        }
        if !within_share(w, &run, &claimed) {
            continue;
        }
        let held: BTreeSet<String> = reservations
            .iter()
            .flat_map(|r| r.nodes.iter().cloned())
            .collect();
        let Some(r) = reserve(&input.nodes, w, &held, input.now) else {
            continue;
        };
        if !reservations.is_empty() && (held.len() + r.nodes.len()) * 2 > schedulable {
            break;
        }
        reservations.push(r);
        added = true;
    }
    if added {
        run = pass(input, &fair, &reservations);
    }
    reservations.retain(|r| !run.admit.iter().any(|a| a.key == r.key));
    // The reserved workloads that wait for room alone: their nodes are drained for them. One
    // that waits for its tenant's share has nothing drained for it and speaks for no GPUs
    // (others' work may use its nodes as backfill, drained once it waits for room alone).
    let for_room: BTreeSet<&str> = run
        .blocked
        .values()
        .flatten()
        .filter(|(refusal, _)| refusal.for_room())
        .map(|(_, w)| w.key.as_str())
        .collect();
    // When each reserved workload will fit at the latest, fixed once known: backfill that ends
    // by then does not delay it.
    for r in reservations
        .iter_mut()
        .filter(|r| r.start_by.is_none() && for_room.contains(r.key.as_str()))
    {
        if let Some(w) = input.waiting.iter().find(|w| w.key == r.key) {
            r.start_by = start_by(input, r, w, &run.nodes);
        }
    }

    let mut decision = Decision::default();
    // Nodes whose GPUs this decision has spoken for: backfill stays off them.
    let mut spoken_for: BTreeSet<String> = BTreeSet::new();
    if policy.reclaim {
        let (preempt, nodes) = reclaim(
            &run.books,
            &fair_of,
            &run.blocked,
            &run.nodes,
            &reservations,
            (policy.reclaim_grace, policy.starvation_after),
        );
        decision.preempt = preempt;
        spoken_for.extend(nodes);
    }
    for r in reservations
        .iter()
        .filter(|r| for_room.contains(r.key.as_str()))
    {
        let (preempt, nodes) = drain(
            &run.books,
            &fair_of,
            r,
            &run.nodes,
            &decision.preempt,
            policy.starvation_after,
        );
        decision.preempt.extend(preempt);
        spoken_for.extend(nodes);
    }

    // Backfill: what the queue-order pass refused for its tenant's fair share or for room off
    // the reserved nodes may still take GPUs nothing else can use now — it is the first to be
    // preempted (by reclaim, or when a reservation's nodes have drained but for it).
    let reserved: BTreeSet<&str> = reservations.iter().map(|r| r.key.as_str()).collect();
    let candidates = queues(
        run.blocked
            .values()
            .flatten()
            .filter(|(refusal, w)| {
                matches!(refusal, Refusal::Share(_) | Refusal::Placement(_))
                    && !reserved.contains(w.key.as_str())
            })
            .map(|(_, w)| *w),
    );
    let known_starts: BTreeMap<String, i128> = reservations
        .iter()
        .filter(|r| for_room.contains(r.key.as_str()))
        .filter_map(|r| r.start_by.map(|by| (r, by)))
        .flat_map(|(r, by)| r.nodes.iter().map(move |n| (n.clone(), by)))
        .collect();
    let before = run.admit.len();
    admit_in_order(
        &mut run,
        &fair,
        &candidates,
        &reservations,
        Mode::Backfill {
            off: &spoken_for,
            start_by: &known_starts,
        },
    );
    let backfilled: BTreeSet<String> = run.admit[before..].iter().map(|a| a.key.clone()).collect();
    for refused in run.blocked.values_mut() {
        refused.retain(|(_, w)| !backfilled.contains(&w.key));
    }

    for (tenant, refused) in &run.blocked {
        let behind = refused.len();
        let mut ahead = Gpus::new();
        for (place, (refusal, w)) in refused.iter().enumerate() {
            // What nothing freeing up lets run takes no GPUs before the workloads behind it.
            let limited = matches!(refusal, Refusal::Never(_));
            for (r, n) in w.gpus().into_iter().filter(|_| !limited) {
                *ahead.entry(r).or_insert(0) += n;
            }
            let at = Place {
                tenant,
                place: place + 1,
                of: behind,
                ahead: &ahead,
            };
            tell_waiting(&mut decision, &at, refusal, w, &reservations, input.now);
            if matches!(refusal, Refusal::Limit(_) | Refusal::Never(_)) {
                decision.limited.insert(w.key.clone());
            }
        }
    }
    let books = &run.books;
    // Held as backfill, per tenant and resource: admitted so, now or before.
    let mut backfill: BTreeMap<(&str, String), i64> = BTreeMap::new();
    let backfilled = input
        .admitted
        .iter()
        .filter(|a| a.backfill)
        .map(|a| (a.tenant.as_str(), a.gpus()));
    let by_key: BTreeMap<&str, &Waiting> =
        input.waiting.iter().map(|w| (w.key.as_str(), w)).collect();
    let now_backfilled = run
        .admit
        .iter()
        .filter(|a| a.backfill)
        .filter_map(|a| by_key.get(a.key.as_str()))
        .map(|w| (w.tenant.as_str(), w.gpus()));
    for (tenant, gpus) in backfilled.chain(now_backfilled) {
        for (r, n) in gpus {
            *backfill.entry((tenant, r)).or_insert(0) += n;
        }
    }
    for r in &resources {
        // What borrowers hold beyond the capacity nobody is guaranteed comes out of the idle
        // guarantees others lend, in proportion to what each lends.
        let borrowed: i64 = input
            .tenants
            .iter()
            .map(|o| (books.held(&o.name, r) - o.guaranteed(r)).max(0))
            .sum();
        let unguaranteed = (get(&input.capacity, r)
            - input.tenants.iter().map(|o| o.guaranteed(r)).sum::<i64>())
        .max(0);
        let excess = (borrowed - unguaranteed).max(0);
        let lendable: Vec<i64> = input
            .tenants
            .iter()
            .map(|o| {
                let idle = (o.guaranteed(r) - books.held(&o.name, r)).max(0);
                o.lending_limit.map_or(idle, |l| idle.min(l))
            })
            .collect();
        let total: i64 = lendable.iter().sum();
        for (t, lends) in input.tenants.iter().zip(&lendable) {
            let guaranteed = t.guaranteed(r);
            let held = books.held(&t.name, r);
            let lent = if total > 0 {
                (excess.min(total) * lends / total).min(*lends)
            } else {
                0
            };
            let s = Standing {
                guaranteed,
                admitted: held,
                borrowed: (held - guaranteed).max(0),
                backfill: backfill
                    .get(&(t.name.as_str(), r.clone()))
                    .copied()
                    .unwrap_or(0),
                lent,
                pending: books.pending(&t.name, r).max(0)
                    + books.unplaceable.get(&t.name).map_or(0, |m| get(m, r)),
                fair_share: fair_of(&t.name, r),
            };
            let per = decision.standings.entry(t.name.clone()).or_default();
            if s != Standing::default() {
                per.insert(r.clone(), s);
            }
        }
    }
    for t in &input.tenants {
        decision.standings.entry(t.name.clone()).or_default();
    }
    decision.admit = run.admit;
    decision.reservations = reservations;
    decision
}

/// Where a refused workload stands in its tenant's queue: `place` of `of` waiting (in the order
/// they will be admitted), with `ahead` devices to be given to it and the workloads before it.
struct Place<'a> {
    tenant: &'a str,
    place: usize,
    of: usize,
    ahead: &'a Gpus,
}

/// Tells each pod of a refused workload why it waits, and where it stands in its tenant's queue.
fn tell_waiting(
    decision: &mut Decision,
    at: &Place<'_>,
    refusal: &Refusal,
    w: &Waiting,
    reservations: &[Reservation],
    now: i128,
) {
    let Place {
        tenant,
        place,
        of,
        ahead,
    } = at;
    let mut message = match w.key.split_once("/gang/") {
        // A gang is admitted whole: say which, and its size.
        Some((_, gang)) => format!(
            "gang {gang} ({} pods, admitted all together): {}",
            w.pods.len().max(w.needs),
            refusal.message()
        ),
        None => refusal.message().to_string(),
    };
    if let Some(r) = reservations.iter().find(|r| r.key == w.key) {
        let nodes: Vec<&str> = r.nodes.iter().map(String::as_str).collect();
        if refusal.for_room() {
            message.push_str(&format!(
                "; waited past the starvation bound: node(s) {} reserved for it (no new work \
                 goes there)",
                nodes.join(", ")
            ));
        } else {
            message.push_str(&format!(
                "; waited past the starvation bound: node(s) {} reserved for it (others' work \
                 goes there only as backfill until its tenant's share lets it run)",
                nodes.join(", ")
            ));
        }
        if let Some(by) = r.start_by.filter(|_| refusal.for_room()) {
            message.push_str(&format!(
                ", free for it {} at the latest (the runs there declare their ends)",
                within(by - now)
            ));
        }
    }
    message.push_str(&format!(
        "; #{place} of {of} waiting in tenant {tenant}'s queue"
    ));
    // No estimated wait for what freed GPUs do not end (a gang not all there, more than the
    // host has).
    let limited = matches!(refusal, Refusal::Never(_));
    for p in &w.pods {
        let key = format!("{}/{}", p.namespace, p.name);
        if !limited {
            decision.ahead.insert(key.clone(), (*ahead).clone());
        }
        decision.waiting.insert(key, message.clone());
    }
}

/// `in 40 s`, `in 4 min`, `in 2 h`, `now` for a span of nanoseconds (rounded up).
fn within(ns: i128) -> String {
    let s = (ns.max(0) + 999_999_999) / 1_000_000_000;
    match s {
        0 => "now".to_string(),
        1..=119 => format!("in {s} s"),
        120..=7199 => format!("in {} min", (s + 59) / 60),
        _ => format!("in {} h", (s + 3599) / 3600),
    }
}

/// Admits `w` if its tenant's limits, the others' shares and the nodes allow it (in backfill
/// mode: past the fair shares, and on reserved nodes when nothing else has room for it).
fn try_admit(
    books: &Books<'_>,
    fair_of: &dyn Fn(&str, &str) -> i64,
    w: &Waiting,
    nodes: &mut [NodeView],
    reservations: &[Reservation],
    mode: Mode<'_>,
    claim: &Gpus,
) -> Result<Admission, Refusal> {
    let input = books.input;
    let Some(t) = books.tenant(&w.tenant) else {
        return Err(Refusal::Limit(format!("tenant {} is unknown", w.tenant)));
    };
    if w.pods.len() < w.needs {
        return Err(Refusal::Never(format!(
            "waiting for its gang: {} of {} pods exist",
            w.pods.len(),
            w.needs
        )));
    }
    if let Some(why) = books.never_fits(w) {
        return Err(Refusal::Never(why));
    }
    let gpus = w.gpus();
    let backfill = matches!(mode, Mode::Backfill { .. });
    let mut borrowed = false;
    let mut turn = false;
    for (r, n) in &gpus {
        let held = books.held(&t.name, r);
        let after = held + n;
        if after > t.cap(r) {
            return Err(Refusal::Limit(format!(
                "tenant {} holds {held} {r} of its {} guaranteed and {} it may borrow; this \
                 workload asks for {n} more",
                t.name,
                t.guaranteed(r),
                t.borrowing_limit
            )));
        }
        let others = books.others(&t.name, r);
        let cap = get(&input.capacity, r);
        if after > cap - others {
            let holders: Vec<String> = input
                .tenants
                .iter()
                .filter(|o| o.name != t.name && books.held(&o.name, r) > 0)
                .map(|o| {
                    let h = books.held(&o.name, r);
                    let over = (h - o.guaranteed(r)).max(0);
                    if over > 0 {
                        format!("tenant {} holds {h}, {over} of them borrowed", o.name)
                    } else {
                        format!("tenant {} holds {h}", o.name)
                    }
                })
                .collect();
            return Err(Refusal::Capacity(format!(
                "waiting for {n} {r}: {} of {cap} are free for it{}",
                (cap - others - held).max(0),
                if holders.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", holders.join("; "))
                }
            )));
        }
        borrowed |= after > t.guaranteed(r);
        // In queue order, beyond its guarantee and its fair share only while nobody below
        // theirs waits for this resource; what its own reserved workloads ahead in its queue
        // will need counts as held.
        let claimed = get(claim, r);
        let queued = held + claimed;
        let fair = fair_of(&t.name, r);
        let lead = books.lead(&t.name, r);
        let may_pass = claimed == 0 && lead <= 0;
        let past_while_others_wait = !backfill
            && past_share(queued, *n, t.guaranteed(r), fair, false)
            && input.tenants.iter().any(|o| {
                o.name != t.name
                    && books.pending(&o.name, r) > 0
                    && books.held(&o.name, r) < fair_of(&o.name, r)
            });
        // Past its share while others wait: only as its turn (a tenant that may pass).
        turn |= past_while_others_wait;
        if past_while_others_wait && past_share(queued, *n, t.guaranteed(r), fair, may_pass) {
            if claimed == 0 && queued < fair && lead > 0 {
                return Err(Refusal::Share(format!(
                    "tenant {} holds {queued} of its fair share of {r} ({fair}) but has lately \
                     held {lead} device-seconds beyond it: nothing past its share until that \
                     is given back, while other tenants wait",
                    t.name,
                )));
            }
            let kept = if claimed > 0 {
                format!(", {claimed} of it kept for its own reserved workload")
            } else {
                String::new()
            };
            return Err(Refusal::Share(format!(
                "tenant {} is at its fair share of {r} ({fair}{kept}) while other tenants wait",
                t.name,
            )));
        }
    }
    // Placement, all or nothing, off the nodes reserved for other workloads (in backfill mode,
    // on them too when nothing else has room, never on the nodes spoken for).
    let reserved: BTreeSet<String> = reservations
        .iter()
        .filter(|r| r.key != w.key)
        .flat_map(|r| r.nodes.iter().cloned())
        .collect();
    let (placements, after) = match mode {
        Mode::Queue => place_off(nodes, w, &reserved),
        Mode::Backfill { off, start_by } => {
            let both: BTreeSet<String> = reserved.union(off).cloned().collect();
            place_off(nodes, w, &both).or_else(|refused| {
                // Reserved nodes whose workload's start is known take only what ends by then.
                let late: BTreeSet<String> = reserved
                    .iter()
                    .filter(|n| {
                        start_by.get(*n).is_some_and(|by| {
                            w.runtime
                                .is_none_or(|run| input.now.saturating_add(run) > *by)
                        })
                    })
                    .chain(off.iter())
                    .cloned()
                    .collect();
                place_off(nodes, w, &late).map_err(|_| refused)
            })
        }
    }
    .map_err(Refusal::Placement)?;
    nodes.clone_from_slice(&after);
    Ok(Admission {
        key: w.key.clone(),
        tenant: w.tenant.clone(),
        placements,
        borrowed,
        backfill,
        turn,
    })
}

/// Where each pod of a workload goes — (pod, node) — and the nodes after.
type Placed = (Vec<(String, String)>, Vec<NodeView>);

/// Whether `n` more devices take a tenant holding `queued` (with what its reserved workloads
/// ahead in its queue claim) past both its guarantee and its fair share — what waits in queue
/// order while another tenant below its fair share waits. A tenant still below its share that
/// `may_pass` (nothing claimed, not ahead of its share over time) may take one workload past
/// it: a workload larger than its share would otherwise never run under contention (reclaim
/// never takes it below its share, so this does not bounce).
fn past_share(queued: i64, n: i64, guaranteed: i64, fair: i64, may_pass: bool) -> bool {
    queued + n > guaranteed && queued + n > fair && !(may_pass && queued < fair)
}

/// Places every pod of `w` on the nodes not in `off`, all or nothing; or says why not, as a
/// waiting pod is told.
fn place_off(nodes: &[NodeView], w: &Waiting, off: &BTreeSet<String>) -> Result<Placed, String> {
    // Not enough free anywhere: no need to try the nodes one by one.
    for (r, n) in &w.gpus() {
        let free: i64 = nodes
            .iter()
            .filter(|v| v.schedulable && !off.contains(&v.name))
            .map(|v| get(&v.free, r))
            .sum();
        if free < *n {
            return Err(format!(
                "no room on the nodes: {free} {r} free, {n} asked for"
            ));
        }
    }
    let mut trial: Vec<NodeView> = nodes.to_vec();
    for n in trial.iter_mut() {
        if off.contains(&n.name) {
            n.schedulable = false;
        }
    }
    let mut placements = Vec::new();
    for p in &w.pods {
        match fit::choose(&trial, p) {
            Ok(placement) => {
                fit::commit(&mut trial, p, &placement);
                placements.push((p.name.clone(), placement.node));
            }
            Err(reason) => {
                let what = if w.pods.len() > 1 {
                    // (Not by name: a host pod's name is not the tenant's.)
                    format!(
                        "gang: {} of {} pods fit; the next does not: {reason}",
                        placements.len(),
                        w.pods.len(),
                    )
                } else {
                    reason
                };
                return Err(format!("no room on the nodes: {what}"));
            }
        }
    }
    for (n, before) in trial.iter_mut().zip(nodes.iter()) {
        n.schedulable = before.schedulable;
    }
    Ok((placements, trial))
}

/// Per tenant, what its workloads hold and their place in its queue: (priority, arrival,
/// admitted at, GPUs) — the admitted ones, and a pass's admissions (admitted "now").
#[derive(Default)]
struct Holders(BTreeMap<String, Vec<(i32, i128, i128, Gpus)>>);

impl Holders {
    fn of(input: &Input, admit: &[Admission]) -> Holders {
        let mut out: BTreeMap<String, Vec<(i32, i128, i128, Gpus)>> = BTreeMap::new();
        for a in &input.admitted {
            let gpus = a.gpus();
            out.entry(a.tenant.clone()).or_default().push((
                a.priority,
                a.arrival,
                a.admitted_at,
                gpus,
            ));
        }
        let by_key: BTreeMap<&str, &Waiting> =
            input.waiting.iter().map(|w| (w.key.as_str(), w)).collect();
        for a in admit {
            if let Some(w) = by_key.get(a.key.as_str()) {
                out.entry(a.tenant.clone()).or_default().push((
                    w.priority,
                    w.arrival,
                    i128::MAX,
                    w.gpus(),
                ));
            }
        }
        Holders(out)
    }

    /// What `w`'s tenant holds that overtook `w`: its workloads behind it in its queue (no
    /// higher priority, later arrival) admitted while it waited.
    fn overtaken(&self, w: &Waiting) -> Gpus {
        let turn = (std::cmp::Reverse(w.priority), w.arrival);
        let mut out = Gpus::new();
        let held = self.0.get(&w.tenant).map(Vec::as_slice).unwrap_or_default();
        for (priority, arrival, admitted_at, gpus) in held {
            if *admitted_at > w.arrival && (std::cmp::Reverse(*priority), *arrival) > turn {
                for (r, n) in gpus {
                    *out.entry(r.clone()).or_insert(0) += n;
                }
            }
        }
        out
    }
}

/// The nodes to hold for a starving workload: for each pod, the node with the most devices of
/// what it asks for (free or busy) that could ever hold it, so that what runs there drains
/// into room for it; never one of `taken` (held for other workloads).
fn reserve(
    nodes: &[NodeView],
    w: &Waiting,
    taken: &BTreeSet<String>,
    now: i128,
) -> Option<Reservation> {
    let mut chosen = BTreeSet::new();
    for p in &w.pods {
        let gpus = sum(std::iter::once(p));
        let best = nodes
            .iter()
            .filter(|n| n.schedulable && !chosen.contains(&n.name) && !taken.contains(&n.name))
            .filter(|n| {
                gpus.iter().all(|(r, want)| {
                    n.devices.iter().filter(|d| &d.resource == r).count() as i64 >= *want
                })
            })
            .max_by_key(|n| {
                let free: i64 = gpus.keys().map(|r| get(&n.free, r)).sum();
                (free, std::cmp::Reverse(n.name.clone()))
            })?;
        chosen.insert(best.name.clone());
    }
    Some(Reservation {
        key: w.key.clone(),
        nodes: chosen,
        since: now,
        start_by: None,
    })
}

/// Whether `a`'s tenant is ahead of its fair share in everything `a` holds: over time (it has
/// lately held more than its share, [`Input::lead`]) or now (it holds more than its share).
fn ahead_of_share(books: &Books<'_>, fair_of: &dyn Fn(&str, &str) -> i64, a: &Admitted) -> bool {
    a.gpus()
        .keys()
        .all(|r| books.lead(&a.tenant, r) > 0 || books.held(&a.tenant, r) > fair_of(&a.tenant, r))
}

/// Whether `a` is backfill on `r`'s nodes that a drain for `r` may preempt: placed there since
/// `r` was made.
fn drainable(a: &Admitted, r: &Reservation) -> bool {
    a.backfill && a.admitted_at >= r.since && a.pods.iter().any(|p| r.nodes.contains(&p.node))
}

/// When `w` fits on `r`'s nodes at the latest, with what is leaving and the backfill a drain
/// may preempt gone: now, or the end of the last run there it has to wait for; `None` when one
/// of those has no known end.
fn start_by(input: &Input, r: &Reservation, w: &Waiting, nodes: &[NodeView]) -> Option<i128> {
    let on = |a: &Admitted| a.pods.iter().any(|p| r.nodes.contains(&p.node));
    let mut view = nodes.to_vec();
    for a in input
        .admitted
        .iter()
        .filter(|a| a.leaving || drainable(a, r))
    {
        for p in &a.pods {
            release(&mut view, p);
        }
    }
    let off: BTreeSet<String> = view
        .iter()
        .filter(|n| !r.nodes.contains(&n.name))
        .map(|n| n.name.clone())
        .collect();
    if place_off(&view, w, &off).is_ok() {
        return Some(input.now);
    }
    let mut holders: Vec<&Admitted> = input
        .admitted
        .iter()
        .filter(|a| !a.leaving && !drainable(a, r) && on(a))
        .collect();
    holders.sort_by_key(|a| (a.ends_by.unwrap_or(i128::MAX), a.key.clone()));
    for a in holders {
        let end = a.ends_by?;
        for p in &a.pods {
            release(&mut view, p);
        }
        if place_off(&view, w, &off).is_ok() {
            return Some(end.max(input.now));
        }
    }
    None
}

/// Gives back, in a trial view of the nodes, what `pod` holds. A pod whose devices are not
/// known (bound by a host scheduler that does not say which, on a node whose devices are
/// counted from its `allocatable`) gives back as many used devices of each GPU resource as it
/// asked for.
fn release(view: &mut [NodeView], pod: &HeldPod) {
    if let Some(n) = view.iter_mut().find(|n| n.name == pod.node) {
        for (k, v) in &pod.request.requests {
            *n.free.entry(k.clone()).or_insert(0) += v;
        }
        if pod.devices.is_empty() {
            for (r, want) in &pod.request.requests {
                let mut left = *want;
                for d in n
                    .devices
                    .iter_mut()
                    .filter(|d| &d.resource == r && d.used > 0)
                {
                    if left <= 0 {
                        break;
                    }
                    d.used -= 1;
                    left -= 1;
                }
            }
            return;
        }
        for d in n.devices.iter_mut() {
            if pod.devices.contains(&d.name) {
                d.used = (d.used - 1).max(0);
            }
        }
    }
}

/// Preemptions that give tenants below their fair share the GPUs borrowers hold beyond theirs,
/// and the nodes whose GPUs they are for (the ones freed, and the ones coming back anyway).
/// A waiting workload counts first on what comes back on its own within `grace` of its
/// arrival (runs known to end by then), and has nothing preempted for it before that.
fn reclaim(
    books: &Books<'_>,
    fair_of: &dyn Fn(&str, &str) -> i64,
    blocked: &BTreeMap<String, Vec<(Refusal, &Waiting)>>,
    nodes: &[NodeView],
    reservations: &[Reservation],
    (grace, guarantee_after): (i128, i128),
) -> (Vec<Preemption>, BTreeSet<String>) {
    let input = books.input;
    let mut out: Vec<Preemption> = Vec::new();
    let mut spoken_for: BTreeSet<String> = BTreeSet::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    // Runs whose GPUs are counted as coming back on their own (never preempted).
    let mut counted: BTreeSet<String> = BTreeSet::new();
    // What each borrower holds beyond its fair share, per resource, as preemption shrinks it.
    // What is already leaving (preempted by an earlier decision, its pods not gone yet) is no
    // longer its: counted, the borrower would lose more in each decision until those pods are
    // gone, down below its share.
    let mut leaving: BTreeMap<(String, String), i64> = BTreeMap::new();
    for a in input.admitted.iter().filter(|a| a.leaving) {
        for (r, n) in a.gpus() {
            *leaving.entry((a.tenant.clone(), r)).or_insert(0) += n;
        }
    }
    let mut over: BTreeMap<(String, String), i64> = BTreeMap::new();
    // And beyond its guarantee: what a tenant owed its guarantee may take back whole.
    let mut borrowing: BTreeMap<(String, String), i64> = BTreeMap::new();
    for a in &input.admitted {
        for r in a.gpus().keys() {
            let key = (a.tenant.clone(), r.clone());
            let gone = leaving.get(&key).copied().unwrap_or(0);
            let holds = books.held(&a.tenant, r) - gone;
            over.entry(key.clone())
                .or_insert_with(|| holds - fair_of(&a.tenant, r));
            let guaranteed = books.tenant(&a.tenant).map_or(0, |t| t.guaranteed(r));
            borrowing.entry(key).or_insert(holds - guaranteed);
        }
    }
    // GPUs already on their way back count first.
    let mut view: Vec<NodeView> = nodes.to_vec();
    for a in input.admitted.iter().filter(|a| a.leaving) {
        for p in &a.pods {
            release(&mut view, p);
        }
    }
    for (tenant, refused) in blocked {
        // Its workloads reclaim may serve, in queue order, each within its fair share (or the
        // one workload a tenant below its share may take past it), at most RECLAIM_ROUNDS per
        // decision: each is judged on the nodes as the ones before it left them.
        let mut gaining = Gpus::new();
        let mut rounds = 0;
        for (refusal, w) in refused {
            if rounds == RECLAIM_ROUNDS {
                break;
            }
            let eligible = matches!(refusal, Refusal::Capacity(_) | Refusal::Placement(_))
                && w.gpus().iter().all(|(r, n)| {
                    let held = books.held(tenant, r) + get(&gaining, r);
                    held + n <= fair_of(tenant, r) || held < fair_of(tenant, r)
                });
            if !eligible {
                continue;
            }
            rounds += 1;
            let gpus = w.gpus();
            // All of it within its tenant's guarantee: a borrower's whole workload may go for
            // it even where that takes the borrower below its fair share (a guarantee holds
            // under contention; borrowing is on that understanding).
            let owed = input.now - w.arrival >= guarantee_after
                && books.tenant(tenant).is_some_and(|t| {
                    gpus.iter().all(|(r, n)| {
                        books.held(tenant, r) + get(&gaining, r) + n <= t.guaranteed(r)
                    })
                });
            for (r, n) in &gpus {
                *gaining.entry(r.clone()).or_insert(0) += n;
            }
            // Never on nodes reserved for other workloads (it could not be admitted there).
            let elsewhere: BTreeSet<String> = reservations
                .iter()
                .filter(|r| r.key != w.key)
                .flat_map(|r| r.nodes.iter().cloned())
                .collect();
            // What comes back on its own within its grace.
            let grace_end = w.arrival.saturating_add(grace).max(input.now);
            let ending = |a: &Admitted| {
                !a.leaving
                    && !taken.contains(&a.key)
                    && !counted.contains(&a.key)
                    && a.ends_by.is_some_and(|end| end <= grace_end)
            };
            let soon: Vec<&Admitted> = input.admitted.iter().filter(|a| ending(a)).collect();
            let mut base = view.clone();
            for a in &soon {
                for p in &a.pods {
                    release(&mut base, p);
                }
            }
            if let Ok((placements, after)) = place_off(&base, w, &elsewhere) {
                // Room on its way back already: spoken for.
                view = after;
                counted.extend(soon.iter().map(|a| a.key.clone()));
                spoken_for.extend(placements.into_iter().map(|(_, node)| node));
                continue;
            }
            if grace > 0 && input.now < w.arrival.saturating_add(grace) {
                // Within its grace: nothing preempted for it yet.
                continue;
            }
            // Victims: workloads of tenants above their fair share in what it needs, lowest
            // priority and newest first, never taking a tenant below its fair share (checked as
            // victims add up). Tried node by node, as upstream's preemption: the node where the
            // fewest GPUs go makes room.
            let mut victims: Vec<&Admitted> = input
                .admitted
                .iter()
                .filter(|a| !a.leaving && a.tenant != *tenant && !taken.contains(&a.key))
                .filter(|a| !a.protected && !ending(a))
                .filter(|a| a.gpus().keys().any(|r| gpus.contains_key(r)))
                .collect();
            // Backfill first: it was admitted on that understanding.
            victims.sort_by_key(|a| {
                (
                    !a.backfill,
                    a.priority,
                    std::cmp::Reverse(a.admitted_at),
                    a.key.clone(),
                )
            });
            // Each victim with whether it goes for a guarantee (taking its tenant below its
            // fair share); those that do not are tried first.
            type Room<'v> = (i64, Vec<(&'v Admitted, bool)>, Placed);
            let mut best: Option<Room<'_>> = None;
            for for_guarantee in [false, true] {
                if best.is_some() || (for_guarantee && !owed) {
                    break;
                }
                for node in base
                    .iter()
                    .filter(|n| n.schedulable)
                    .map(|n| n.name.clone())
                {
                    let mut trial = base.clone();
                    let mut surplus = over.clone();
                    let mut lent = borrowing.clone();
                    let mut chosen: Vec<(&Admitted, bool)> = Vec::new();
                    let mut freed = 0;
                    let mut placed = None;
                    for v in victims
                        .iter()
                        .filter(|v| v.pods.iter().any(|p| p.node == node))
                    {
                        let vg = sum(v.pods.iter().map(|p| &p.request));
                        let left = |m: &BTreeMap<(String, String), i64>, r: &str| {
                            m.get(&(v.tenant.clone(), r.to_string()))
                                .copied()
                                .unwrap_or(0)
                        };
                        let fits_surplus = vg.iter().all(|(r, n)| left(&surplus, r) >= *n);
                        // A borrower: beyond its guarantee in every resource it holds here,
                        // and not there on its turn.
                        let borrower = !v.turn && vg.keys().all(|r| left(&lent, r) > 0);
                        let may_go = fits_surplus || (for_guarantee && borrower);
                        if !may_go {
                            continue;
                        }
                        for (r, n) in &vg {
                            let key = (v.tenant.clone(), r.clone());
                            for m in [&mut surplus, &mut lent] {
                                if let Some(o) = m.get_mut(&key) {
                                    *o -= n;
                                }
                            }
                            freed += n;
                        }
                        for p in &v.pods {
                            release(&mut trial, p);
                        }
                        chosen.push((v, !fits_surplus));
                        placed = place_off(&trial, w, &elsewhere).ok();
                        if placed.is_some() {
                            break;
                        }
                    }
                    if let Some(room) = placed {
                        if best.as_ref().is_none_or(|(f, _, _)| freed < *f) {
                            best = Some((freed, chosen, room));
                        }
                    }
                }
            }
            // Preempting would not make room: take nothing for it.
            let Some((_, chosen, (placements, after))) = best else {
                continue;
            };
            view = after;
            counted.extend(soon.iter().map(|a| a.key.clone()));
            spoken_for.extend(placements.into_iter().map(|(_, node)| node));
            for (v, for_guarantee) in chosen {
                spoken_for.extend(v.pods.iter().map(|p| p.node.clone()));
                for (r, n) in sum(v.pods.iter().map(|p| &p.request)) {
                    let key = (v.tenant.clone(), r);
                    for m in [&mut over, &mut borrowing] {
                        if let Some(o) = m.get_mut(&key) {
                            *o -= n;
                        }
                    }
                }
                taken.insert(v.key.clone());
                let what: Vec<String> = gpus.iter().map(|(r, n)| format!("{n} {r}")).collect();
                // (Another tenant's workload is not named to this one.)
                let message = if for_guarantee {
                    format!(
                        "preempted by Fabrik's GPU queue: tenant {} borrowed these GPUs beyond \
                         its guarantee, and tenant {tenant}, below its own guarantee, needs {} \
                         (a workload is taken back whole)",
                        v.tenant,
                        what.join(", "),
                    )
                } else {
                    format!(
                        "preempted by Fabrik's GPU queue: tenant {} held these GPUs beyond its \
                         fair share, and tenant {tenant}, below its fair share, needs {}",
                        v.tenant,
                        what.join(", "),
                    )
                };
                out.push(Preemption {
                    key: v.key.clone(),
                    tenant: v.tenant.clone(),
                    pods: v.pods.iter().map(|p| p.request.name.clone()).collect(),
                    message,
                });
            }
        }
    }
    (out, spoken_for)
}

/// When a reservation's nodes have drained but for backfill, the backfill that stands in its
/// workload's way, newest first (not a run known to end so soon that waiting for it idles
/// fewer GPU-seconds than preempting it loses; none where taking it would leave the workload
/// refused for its tenant's share, [`admissible_after`]); and the reserved nodes, spoken for
/// once the workload fits there (now, or when what is leaving has gone).
fn drain(
    books: &Books<'_>,
    fair_of: &dyn Fn(&str, &str) -> i64,
    r: &Reservation,
    nodes: &[NodeView],
    preempted: &[Preemption],
    patience: i128,
) -> (Vec<Preemption>, BTreeSet<String>) {
    let input = books.input;
    let Some(w) = input.waiting.iter().find(|w| w.key == r.key) else {
        return (Vec::new(), BTreeSet::new());
    };
    let going = |a: &Admitted| a.leaving || preempted.iter().any(|p| p.key == a.key);
    let mut view = nodes.to_vec();
    for a in input.admitted.iter().filter(|a| going(a)) {
        for p in &a.pods {
            release(&mut view, p);
        }
    }
    let off: BTreeSet<String> = view
        .iter()
        .filter(|n| !r.nodes.contains(&n.name))
        .map(|n| n.name.clone())
        .collect();
    if place_off(&view, w, &off).is_ok() {
        return (Vec::new(), r.nodes.clone());
    }
    // Waiting for a backfill run known to end soon idles fewer GPU-seconds than preempting it
    // throws away: such a run is left to end (the reserved GPUs idle meanwhile are those free
    // on its nodes).
    let idle: i64 = view
        .iter()
        .filter(|n| r.nodes.contains(&n.name))
        .map(|n| w.gpus().keys().map(|res| get(&n.free, res)).sum::<i64>())
        .sum();
    let cheaper_to_wait = |a: &Admitted| {
        a.ends_by.is_some_and(|end| {
            let done = a.gpus().values().sum::<i64>();
            (end - input.now).max(0).saturating_mul(i128::from(idle))
                <= (input.now - a.admitted_at)
                    .max(0)
                    .saturating_mul(i128::from(done))
        })
    };
    // Overdue: the nodes held for the starvation bound, for a tenant not ahead of its fair share
    // over time. Then the runs there of tenants ahead of theirs — over time, or now — may go
    // too, as far as those tenants hold beyond their guarantees (`ahead_of_share`): reclaim
    // over time. Without it a tenant whose workloads are larger than its share waits, for each
    // of them, for a whole node's runs to end, and falls behind its share for good (those runs
    // are others' within their shares at the instant, which reclaim does not take).
    let overdue = input.now - r.since >= patience
        && w.gpus().keys().all(|res| books.lead(&w.tenant, res) <= 0);
    let on_nodes = |a: &Admitted| a.pods.iter().any(|p| r.nodes.contains(&p.node));
    let mut victims: Vec<&Admitted> = input
        .admitted
        .iter()
        .filter(|a| !going(a) && !a.protected && !cheaper_to_wait(a))
        .filter(|a| {
            drainable(a, r)
                || (overdue
                    && on_nodes(a)
                    && !a.turn
                    && a.tenant != w.tenant
                    && ahead_of_share(books, fair_of, a))
        })
        .collect();
    // Backfill first (it was admitted on that understanding), then the newest.
    victims.sort_by_key(|a| (!a.backfill, std::cmp::Reverse(a.admitted_at), a.key.clone()));
    let mut chosen = Vec::new();
    // What each tenant would hold after the runs chosen so far: a run that is not backfill goes
    // only while its tenant keeps its guarantee.
    let mut left: BTreeMap<(&str, String), i64> = BTreeMap::new();
    for a in victims {
        if !a.backfill {
            let gpus = a.gpus();
            let keeps_guarantee = gpus.iter().all(|(res, n)| {
                let held = *left
                    .entry((a.tenant.as_str(), res.clone()))
                    .or_insert_with(|| books.held(&a.tenant, res));
                let guaranteed = books.tenant(&a.tenant).map_or(0, |t| t.guaranteed(res));
                held - n >= guaranteed
            });
            if !keeps_guarantee {
                continue;
            }
            for (res, n) in gpus {
                if let Some(h) = left.get_mut(&(a.tenant.as_str(), res)) {
                    *h -= n;
                }
            }
        }
        for p in &a.pods {
            release(&mut view, p);
        }
        chosen.push(a);
        if place_off(&view, w, &off).is_ok() {
            if !admissible_after(books, fair_of, w, &chosen) {
                // The drain would put the tenants whose backfill it takes below their fair
                // shares, and the workload, past its own, would then be refused for them: it
                // would throw work away for nothing. Its nodes take backfill meanwhile.
                return (Vec::new(), BTreeSet::new());
            }
            let on: Vec<&str> = r.nodes.iter().map(String::as_str).collect();
            let preempt = chosen
                .iter()
                .map(|a| Preemption {
                    key: a.key.clone(),
                    tenant: a.tenant.clone(),
                    pods: a.pods.iter().map(|p| p.request.name.clone()).collect(),
                    message: if drainable(a, r) {
                        format!(
                            "preempted by Fabrik's GPU queue: it ran as backfill on node(s) {}, \
                             reserved for a workload of tenant {} that waited past the \
                             starvation bound; those nodes have drained but for backfill",
                            on.join(", "),
                            w.tenant
                        )
                    } else {
                        format!(
                            "preempted by Fabrik's GPU queue: it ran on node(s) {}, reserved \
                             for a workload of tenant {}, which waited past the starvation bound \
                             and is not ahead of its fair share over time, while tenant {} has \
                             held more than its own (only what it holds beyond its guarantee is \
                             taken)",
                            on.join(", "),
                            w.tenant,
                            a.tenant
                        )
                    },
                })
                .collect();
            return (preempt, r.nodes.clone());
        }
    }
    (Vec::new(), BTreeSet::new())
}

/// Whether `w` is still admitted in queue order once `victims` are preempted: a workload taking
/// its tenant past its guarantee and its fair share ([`past_share`]) is refused while another
/// tenant below its fair share waits — as the victims' tenants would, where the preemption
/// takes them below theirs.
fn admissible_after(
    books: &Books<'_>,
    fair_of: &dyn Fn(&str, &str) -> i64,
    w: &Waiting,
    victims: &[&Admitted],
) -> bool {
    let Some(t) = books.tenant(&w.tenant) else {
        return false;
    };
    w.gpus().iter().all(|(r, n)| {
        let mut taken: BTreeMap<&str, i64> = BTreeMap::new();
        for v in victims {
            *taken.entry(v.tenant.as_str()).or_insert(0) += get(&v.gpus(), r);
        }
        let after = |tenant: &str| books.held(tenant, r) - taken.get(tenant).copied().unwrap_or(0);
        if !past_share(
            after(&w.tenant),
            *n,
            t.guaranteed(r),
            fair_of(&w.tenant, r),
            books.lead(&w.tenant, r) <= 0,
        ) {
            return true;
        }
        taken
            .iter()
            .filter(|(o, k)| **o != w.tenant && **k > 0)
            .all(|(o, _)| after(o) >= fair_of(o, r))
    })
}

/// How many of one tenant's waiting workloads reclaim serves in one decision.
const RECLAIM_ROUNDS: usize = 16;

/// The node label admitted pods are pinned by.
pub const HOSTNAME: &str = "kubernetes.io/hostname";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::model::GpuDevice;

    fn node(name: &str, gpus: i64) -> NodeView {
        NodeView {
            name: name.into(),
            schedulable: true,
            labels: BTreeMap::from([(HOSTNAME.to_string(), name.to_string())]),
            free: BTreeMap::from([
                ("cpu".into(), 1_000_000),
                ("memory".into(), 1 << 40),
                ("pods".into(), 110),
                ("nvidia.com/gpu".into(), gpus),
            ]),
            devices: (0..gpus)
                .map(|i| GpuDevice {
                    name: format!("gpu-{i}"),
                    uuid: format!("GPU-{name}-{i}"),
                    resource: "nvidia.com/gpu".into(),
                    gpu: i,
                    numa: 0,
                    island: 0,
                    slots: 1,
                    used: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn pod(ns: &str, name: &str, gpus: i64) -> PodRequest {
        PodRequest {
            namespace: ns.into(),
            name: name.into(),
            requests: BTreeMap::from([("pods".into(), 1), ("nvidia.com/gpu".into(), gpus)]),
            ..Default::default()
        }
    }

    fn tenant(name: &str, guarantee: i64, borrow: i64) -> TenantQueue {
        TenantQueue {
            name: name.into(),
            resources: vec!["nvidia.com/gpu".into()],
            guarantee: Some(guarantee),
            borrowing_limit: borrow,
            lending_limit: None,
            weight: 1,
            parent: None,
        }
    }

    fn waiting(tenant: &str, name: &str, gpus: i64, arrival: i128) -> Waiting {
        Waiting {
            tenant: tenant.into(),
            key: format!("fabrik-{tenant}/{name}"),
            pods: vec![pod(&format!("fabrik-{tenant}"), name, gpus)],
            needs: 1,
            priority: 0,
            arrival,
            runtime: None,
        }
    }

    /// An input on `nodes`; the capacity is every GPU of the nodes, held or free (as the
    /// controller counts it).
    fn input(tenants: Vec<TenantQueue>, nodes: Vec<NodeView>, waiting: Vec<Waiting>) -> Input {
        let capacity = Gpus::from([(
            "nvidia.com/gpu".to_string(),
            nodes.iter().map(|n| n.devices.len() as i64).sum(),
        )]);
        Input {
            tenants,
            capacity,
            nodes,
            waiting,
            ..Default::default()
        }
    }

    /// The admitted workloads of a decision, placed on `nodes` as the scheduler would.
    fn admitted_from(d: &Decision, i: &Input, nodes: &mut [NodeView]) -> Vec<Admitted> {
        d.admit
            .iter()
            .map(|a| {
                let w = i.waiting.iter().find(|w| w.key == a.key).expect("admitted");
                let pods = w
                    .pods
                    .iter()
                    .zip(&a.placements)
                    .map(|(p, (_, node))| {
                        let on: Vec<NodeView> =
                            nodes.iter().filter(|n| &n.name == node).cloned().collect();
                        let placement = fit::choose(&on, p).expect("fits");
                        let at = nodes.iter().position(|n| &n.name == node).expect("node");
                        let devices = placement
                            .devices
                            .iter()
                            .map(|&d| nodes[at].devices[d].name.clone())
                            .collect();
                        fit::commit(nodes, p, &placement);
                        HeldPod {
                            request: p.clone(),
                            node: node.clone(),
                            devices,
                        }
                    })
                    .collect();
                Admitted {
                    tenant: a.tenant.clone(),
                    key: a.key.clone(),
                    pods,
                    admitted_at: 1,
                    arrival: w.arrival,
                    backfill: a.backfill,
                    turn: a.turn,
                    ..Default::default()
                }
            })
            .collect()
    }

    /// A workload of `tenant` holding `gpus` on the nodes (committed as the scheduler would).
    fn hold(nodes: &mut [NodeView], tenant: &str, name: &str, gpus: i64, at: i128) -> Admitted {
        let p = pod(&format!("fabrik-{tenant}"), name, gpus);
        let placement = fit::choose(nodes, &p).expect("room");
        let at_node = nodes
            .iter()
            .position(|n| n.name == placement.node)
            .expect("node");
        let devices = placement
            .devices
            .iter()
            .map(|&d| nodes[at_node].devices[d].name.clone())
            .collect();
        fit::commit(nodes, &p, &placement);
        Admitted {
            tenant: tenant.into(),
            key: format!("fabrik-{tenant}/{name}"),
            pods: vec![HeldPod {
                request: p,
                node: placement.node,
                devices,
            }],
            admitted_at: at,
            arrival: at,
            ..Default::default()
        }
    }

    /// Tenants t and o (8 guaranteed, 8 more they may borrow) on `nodes` (two of 8), at `now`.
    fn t_and_o(
        nodes: Vec<NodeView>,
        admitted: Vec<Admitted>,
        waiting: Vec<Waiting>,
        now: i128,
    ) -> Input {
        let mut i = input(vec![tenant("t", 8, 8), tenant("o", 8, 8)], nodes, waiting);
        i.admitted = admitted;
        i.now = now;
        i
    }

    /// Node n2 reserved for t's 8-GPU `big` since `since`.
    fn n2_for_big(since: i128) -> Reservation {
        Reservation {
            key: "fabrik-t/big".into(),
            nodes: BTreeSet::from(["n2".to_string()]),
            since,
            start_by: None,
        }
    }

    #[test]
    fn reclaim_never_takes_a_borrower_below_its_fair_share() {
        // One node of 8: a (4 guaranteed, may borrow 4) holds 6 in three workloads of 2; b (4
        // guaranteed) holds 2 and waits. Fair shares: 4 and 4.
        let mut nodes = vec![node("n1", 8)];
        let mut admitted: Vec<Admitted> = (0..3)
            .map(|i| hold(&mut nodes, "a", &format!("a{i}"), 2, i))
            .collect();
        admitted.push(hold(&mut nodes, "b", "b0", 2, 9));
        let tenants = vec![tenant("a", 4, 4), tenant("b", 4, 0)];
        let mut i = input(
            tenants.clone(),
            nodes.clone(),
            vec![waiting("b", "two", 2, 10)],
        );
        i.admitted = admitted.clone();
        let d = decide(&i, &Policy::default());
        // a is 2 over its share: one of its workloads goes, the newest; it is told whose need,
        // not which of b's workloads.
        assert_eq!(d.preempt.len(), 1, "{:?}", d.preempt);
        assert_eq!(d.preempt[0].key, "fabrik-a/a2");
        assert!(
            d.preempt[0]
                .message
                .ends_with("tenant b, below its fair share, needs 2 nvidia.com/gpu"),
            "{}",
            d.preempt[0].message
        );
        // The same where nobody knows which devices each pod holds (a host scheduler bound
        // them on nodes whose GPUs are counted from `allocatable`).
        let mut unnamed = i.clone();
        for a in unnamed.admitted.iter_mut() {
            for p in a.pods.iter_mut() {
                p.devices.clear();
            }
        }
        let d = decide(&unnamed, &Policy::default());
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-a/a2"]);
        // A disruption budget protects a2: the next newest goes instead; protecting all of a's
        // workloads, nothing does.
        let mut budgeted = i.clone();
        budgeted.admitted[2].protected = true;
        let d = decide(&budgeted, &Policy::default());
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-a/a1"]);
        for a in budgeted.admitted.iter_mut() {
            a.protected = true;
        }
        let d = decide(&budgeted, &Policy::default());
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        // b waits for 4 more: a's surplus of 2 cannot make room; nothing is taken.
        let mut i = input(tenants, nodes, vec![waiting("b", "four", 4, 10)]);
        i.admitted = admitted;
        let d = decide(&i, &Policy::default());
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
    }

    #[test]
    fn a_guarantee_takes_back_a_borrower_s_whole_workload_but_not_its_turn() {
        // One node of 8. b (4 guaranteed, may borrow 4) runs one workload of 8, borrowed while
        // a (4 guaranteed) had nothing to run; now a waits for 1. Taking b's workload puts b
        // below its fair share (4) — but a's guarantee holds: once a has waited the starvation
        // bound, it goes back, whole.
        let setup = |turn: bool, at: i128| {
            let mut nodes = vec![node("n1", 8)];
            let mut big = hold(&mut nodes, "b", "big", 8, 0);
            big.turn = turn;
            let mut i = input(
                vec![tenant("a", 4, 0), tenant("b", 4, 4)],
                nodes,
                vec![waiting("a", "one", 1, 10)],
            );
            i.admitted = vec![big];
            i.now = at;
            decide(&i, &Policy::default())
        };
        // Not before a has waited the starvation bound (runs may end meanwhile).
        let bound = Policy::default().starvation_after;
        let d = setup(false, 10 + bound - 1);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        let d = setup(false, 10 + bound);
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-b/big"]);
        assert!(
            d.preempt[0].message.contains(
                "tenant b borrowed these GPUs beyond its guarantee, and tenant a, below its own \
                 guarantee, needs 1 nvidia.com/gpu"
            ),
            "{}",
            d.preempt[0].message
        );
        // Admitted as b's turn past its share while others waited (a workload larger than the
        // rest of its share, which would otherwise never run): not taken back; a waits.
        let d = setup(true, 10 + 10 * bound);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert!(d.admit.is_empty(), "{:?}", d.admit);
    }

    #[test]
    fn a_workload_past_its_share_while_others_wait_is_admitted_as_its_turn() {
        // Two nodes of 8; a, b and c each guaranteed 5 and allowed 11. b and c hold 4 each on
        // one node and wait for 2 more (below their fair shares); a waits for 8, past its share:
        // admitted on the empty node as a's turn. Alone, the same workload is plain borrowing.
        let run = |others: bool| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let mut admitted = Vec::new();
            let mut w = vec![waiting("a", "big", 8, 0)];
            if others {
                admitted.push(hold(&mut nodes, "b", "b0", 4, 0));
                admitted.push(hold(&mut nodes, "c", "c0", 4, 0));
                w.push(waiting("b", "more", 2, 1));
                w.push(waiting("c", "more", 2, 2));
            }
            let mut i = input(
                vec![tenant("a", 5, 11), tenant("b", 5, 11), tenant("c", 5, 11)],
                nodes,
                w,
            );
            i.admitted = admitted;
            decide(&i, &Policy::default())
        };
        let d = run(true);
        let big = d.admit.iter().find(|a| a.key == "fabrik-a/big");
        assert!(big.is_some_and(|a| a.turn && a.borrowed), "{:?}", d.admit);
        let d = run(false);
        let big = d.admit.iter().find(|a| a.key == "fabrik-a/big");
        assert!(big.is_some_and(|a| !a.turn && a.borrowed), "{:?}", d.admit);
    }

    #[test]
    fn reclaim_counts_what_is_already_leaving_as_gone() {
        // One node of 12. a (4 guaranteed, may borrow 8) holds 8 in four workloads of 2, the
        // newest, a3, already leaving (preempted by the previous decision, its pod not gone
        // yet); b (4) holds 2 and waits for 2; c (2, may borrow 1) holds 2 and waits for 1.
        // Fair shares: a 5, b 4, c 3. b's workload takes a3's GPUs as they come back; a, without a3,
        // holds 6: taking another 2 would put it below its share, so c waits.
        let mut nodes = vec![node("n1", 12)];
        let mut admitted: Vec<Admitted> = (0..4)
            .map(|i| hold(&mut nodes, "a", &format!("a{i}"), 2, i))
            .collect();
        admitted[3].leaving = true;
        admitted.push(hold(&mut nodes, "b", "b0", 2, 9));
        admitted.push(hold(&mut nodes, "c", "c0", 2, 9));
        let tenants = vec![tenant("a", 4, 8), tenant("b", 4, 0), tenant("c", 2, 1)];
        let mut i = input(
            tenants,
            nodes,
            vec![waiting("b", "two", 2, 10), waiting("c", "one", 1, 11)],
        );
        i.admitted = admitted;
        let d = decide(&i, &Policy::default());
        let fair = |t: &str| d.standings[t]["nvidia.com/gpu"].fair_share;
        assert_eq!((fair("a"), fair("b"), fair("c")), (5, 4, 3));
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
    }

    #[test]
    fn no_reservation_for_a_workload_its_share_does_not_allow() {
        // One node of 8, full: t holds 4 (its fair share) and waits for an 8-GPU job; o holds 4.
        let mut nodes = vec![node("n1", 8)];
        let admitted = vec![
            hold(&mut nodes, "t", "t0", 4, 0),
            hold(&mut nodes, "o", "o0", 4, 0),
        ];
        let tenants = vec![tenant("t", 4, 8), tenant("o", 4, 0)];
        let mut i = input(
            tenants,
            nodes,
            vec![waiting("t", "big", 8, 0), waiting("o", "small", 1, 0)],
        );
        i.admitted = admitted;
        i.now = 600 * 1_000_000_000;
        // Even one kept from an earlier decision is dropped.
        i.reservations = vec![Reservation {
            key: "fabrik-t/big".into(),
            nodes: BTreeSet::from(["n1".to_string()]),
            since: 0,
            start_by: None,
        }];
        let d = decide(&i, &Policy::default());
        assert_eq!(d.reservations, vec![]);
    }

    #[test]
    fn water_fill_follows_weights_and_wants() {
        assert_eq!(water_fill(8, &[(1, 8), (1, 8)]), vec![4, 4]);
        assert_eq!(water_fill(9, &[(2, 100), (1, 100)]), vec![6, 3]);
        assert_eq!(water_fill(8, &[(1, 2), (1, 100)]), vec![2, 6]);
        assert_eq!(water_fill(1, &[(1, 5), (3, 5)]), vec![0, 1]);
        assert_eq!(water_fill(0, &[(1, 5)]), vec![0]);
    }

    #[test]
    fn guarantees_hold_and_idle_gpus_are_lent() {
        // 16 GPUs; a and b are guaranteed 8 each; a may borrow 8.
        let nodes = vec![node("n1", 8), node("n2", 8)];
        let tenants = vec![tenant("a", 8, 8), tenant("b", 8, 0)];
        let w: Vec<Waiting> = (0..12)
            .map(|i| waiting("a", &format!("p{i}"), 1, i))
            .collect();
        let i = input(tenants.clone(), nodes.clone(), w);
        let d = decide(&i, &Policy::default());
        assert_eq!(d.admit.len(), 12, "b is idle: a borrows 4 of its GPUs");
        assert_eq!(d.admit.iter().filter(|a| a.borrowed).count(), 4);
        let a = &d.standings["a"]["nvidia.com/gpu"];
        assert_eq!((a.admitted, a.borrowed, a.fair_share), (12, 4, 12));
        assert_eq!(d.standings["b"]["nvidia.com/gpu"].lent, 4);

        // b now wants its 8: a's borrowed pods are preempted (4 of them), never a's own.
        let b_wants = (0..8)
            .map(|k| waiting("b", &format!("q{k}"), 1, 100 + k))
            .collect();
        let mut i2 = input(tenants, nodes.clone(), b_wants);
        let mut placed = nodes;
        i2.admitted = admitted_from(&d, &i, &mut placed);
        i2.nodes = placed;
        let d2 = decide(&i2, &Policy::default());
        assert_eq!(d2.admit.len(), 4, "the 4 free GPUs go to b at once");
        let victims: BTreeSet<&str> = d2.preempt.iter().map(|p| p.tenant.as_str()).collect();
        assert_eq!(victims, BTreeSet::from(["a"]));
        assert_eq!(d2.preempt.len(), 4, "{:?}", d2.preempt);
        assert!(
            d2.preempt[0].message.contains("tenant b"),
            "{}",
            d2.preempt[0].message
        );
        assert_eq!(d2.standings["b"]["nvidia.com/gpu"].fair_share, 8);
        assert_eq!(d2.standings["a"]["nvidia.com/gpu"].fair_share, 8);
    }

    #[test]
    fn limits_and_gangs_are_all_or_nothing() {
        let nodes = vec![node("n1", 8), node("n2", 8)];
        let tenants = vec![tenant("a", 4, 0)];
        let mut gang = waiting("a", "g", 2, 0);
        gang.pods.push(pod("fabrik-a", "g-1", 2));
        gang.pods.push(pod("fabrik-a", "g-2", 2));
        gang.needs = 3;
        let i = input(tenants, nodes, vec![gang]);
        let d = decide(&i, &Policy::default());
        assert!(d.admit.is_empty());
        let why = &d.waiting["fabrik-a/g"];
        assert!(
            why.contains("holds 0 nvidia.com/gpu of its 4 guaranteed"),
            "{why}"
        );
        // A gang whose members do not all exist yet waits.
        let mut partial = waiting("a", "h", 1, 0);
        partial.needs = 2;
        let d = decide(
            &input(vec![tenant("a", 4, 0)], vec![node("n1", 8)], vec![partial]),
            &Policy::default(),
        );
        assert!(d.waiting["fabrik-a/h"].contains("1 of 2 pods exist"));
    }

    #[test]
    fn what_the_host_can_never_run_is_told_so_and_claims_no_share() {
        // 2 × 8 GPUs. a asks for a gang of 3 × 8 and for one pod of 9; b wants 12 GPUs.
        let nodes = vec![node("n1", 8), node("n2", 8)];
        let mut gang = waiting("a", "g", 8, 0);
        gang.pods.push(pod("fabrik-a", "g-1", 8));
        gang.pods.push(pod("fabrik-a", "g-2", 8));
        gang.needs = 3;
        let wide = waiting("a", "wide", 9, 1);
        let b: Vec<Waiting> = (0..12)
            .map(|k| waiting("b", &format!("b-{k}"), 1, 2 + k))
            .collect();
        let mut all = vec![gang, wide];
        all.extend(b);
        let i = input(vec![tenant("a", 4, 100), tenant("b", 4, 12)], nodes, all);
        let d = decide(&i, &Policy::default());
        let said = &d.waiting["fabrik-a/g"];
        assert!(
            said.contains(
                "it asks for 24 nvidia.com/gpu in all, more than the host's GPUs could ever offer \
                 (16): it cannot run unless the host grows"
            ),
            "{said}"
        );
        let said = &d.waiting["fabrik-a/wide"];
        assert!(
            said.contains(
                "it asks for 9 nvidia.com/gpu, more than any node's GPUs could ever offer (8)"
            ),
            "{said}"
        );
        // Nothing frees up for them: no estimate, no layout; they are still pending.
        for key in ["fabrik-a/g", "fabrik-a/wide"] {
            assert!(!d.ahead.contains_key(key), "{key}: {:?}", d.ahead.get(key));
            assert!(d.limited.contains(key), "{key}");
        }
        assert_eq!(d.standings["a"]["nvidia.com/gpu"].pending, 33);
        // And they take no part of a fair share: b gets all it wants, a nothing.
        assert_eq!(d.standings["b"]["nvidia.com/gpu"].fair_share, 12);
        assert_eq!(d.standings["a"]["nvidia.com/gpu"].fair_share, 0);
        assert_eq!(d.admit.iter().filter(|a| a.tenant == "b").count(), 12);
        // Once the host has room for the gang (four nodes), it is a workload like any other.
        let mut bigger = i.clone();
        bigger.nodes.extend([node("n3", 8), node("n4", 8)]);
        bigger.capacity.insert("nvidia.com/gpu".into(), 32);
        let d = decide(&bigger, &Policy::default());
        assert!(!d
            .waiting
            .get("fabrik-a/g")
            .is_some_and(|m| m.contains("cannot run")));
        assert!(d.waiting["fabrik-a/wide"].contains("cannot run unless a larger node joins"));
        // GPUs being laid out anew offer no device meanwhile: the node agent's count of its
        // GPUs still says what the node has.
        let mut relaid = i.clone();
        for n in &mut relaid.nodes {
            n.devices.truncate(6);
            n.labels
                .insert(fabrik_api::LABEL_GPU_COUNT.to_string(), "8".to_string());
        }
        relaid.waiting = vec![waiting("c", "eight", 8, 20)];
        relaid.tenants.push(tenant("c", 8, 0));
        let d = decide(&relaid, &Policy::default());
        let said = d.waiting.get("fabrik-c/eight").cloned().unwrap_or_default();
        assert!(!said.contains("cannot run"), "{said}");
    }

    #[test]
    fn a_gang_not_all_there_gets_no_estimated_wait() {
        let mut partial = waiting("a", "h", 1, 0);
        partial.needs = 2;
        let nodes = vec![node("n1", 8)];
        let mut held = nodes.clone();
        let busy = hold(&mut held, "b", "busy", 8, 0);
        let mut i = input(
            vec![tenant("a", 4, 0), tenant("b", 4, 4)],
            held,
            vec![partial, waiting("a", "next", 1, 2)],
        );
        i.admitted = vec![busy];
        let d = decide(&i, &Policy::default());
        assert!(d.waiting["fabrik-a/h"].contains("1 of 2 pods exist"));
        assert!(!d.ahead.contains_key("fabrik-a/h"), "{:?}", d.ahead);
        // The workload behind it waits for GPUs to free up: its estimate counts its own alone.
        assert_eq!(
            d.ahead.get("fabrik-a/next"),
            Some(&Gpus::from([("nvidia.com/gpu".to_string(), 1)])),
            "{:?}",
            d.waiting
        );
    }

    #[test]
    fn a_group_s_idle_guarantees_go_to_its_members_first_and_it_shares_the_rest_as_one() {
        // 16 GPUs. x and y (4 guaranteed each) form a department; z (8 guaranteed) idles; w
        // (nothing guaranteed) wants everything; so does x, y wants nothing.
        let fair = |grouped: bool, dept_weight: Option<i64>| {
            let nodes = vec![node("n1", 8), node("n2", 8)];
            let mut x = tenant("x", 4, 16);
            let mut y = tenant("y", 4, 16);
            if grouped {
                x.parent = Some("dept".into());
                y.parent = Some("dept".into());
            }
            let mut w = tenant("w", 0, 16);
            w.guarantee = None;
            let tenants = vec![x, y, tenant("z", 8, 0), w];
            let waiting: Vec<Waiting> = (0..16)
                .map(|i| waiting("x", &format!("x{i}"), 1, i))
                .chain((0..16).map(|i| waiting("w", &format!("w{i}"), 1, i)))
                .collect();
            let mut policy = Policy::default();
            if let Some(weight) = dept_weight {
                policy.group_weights.insert("dept".into(), weight);
            }
            let d = decide(&input(tenants, nodes, waiting), &policy);
            let of = |t: &str| d.standings[t]["nvidia.com/gpu"].fair_share;
            (of("x"), of("w"))
        };
        // Alone, x shares the 12 idle GPUs (y's and z's) with w: 4 + 6, and w 6.
        assert_eq!(fair(false, None), (10, 6));
        // In the department, y's idle 4 go to x first; the department and w share z's 8.
        assert_eq!(fair(true, None), (12, 4));
        // The department's weight counts, not its number of members: at 3 it takes 6 of z's 8.
        assert_eq!(fair(true, Some(3)), (14, 2));
    }

    #[test]
    fn waiting_pods_know_their_place_in_their_tenant_s_queue() {
        // One node of 2, held: three single pods wait; the urgent one, though last, is first.
        let mut nodes = vec![node("n1", 2)];
        let held = hold(&mut nodes, "a", "running", 2, 0);
        let mut urgent = waiting("a", "urgent", 1, 3);
        urgent.priority = 1000;
        let mut i = input(
            vec![tenant("a", 2, 0)],
            nodes,
            vec![waiting("a", "old", 1, 1), waiting("a", "new", 1, 2), urgent],
        );
        i.admitted = vec![held];
        let d = decide(&i, &Policy::default());
        assert!(d.admit.is_empty(), "{:?}", d.admit);
        for (pod, place) in [("urgent", 1), ("old", 2), ("new", 3)] {
            let key = format!("fabrik-a/{pod}");
            let why = &d.waiting[&key];
            assert!(
                why.ends_with(&format!("#{place} of 3 waiting in tenant a's queue")),
                "{pod}: {why}"
            );
            // What must free up before it runs: its own and those ahead of it.
            assert_eq!(d.ahead[&key]["nvidia.com/gpu"], place as i64, "{pod}");
        }
    }

    #[test]
    fn borrowers_share_by_weight_and_stop_at_their_fair_share_under_contention() {
        let nodes = vec![node("n1", 8), node("n2", 8)];
        let mut a = tenant("a", 0, 16);
        a.weight = 3;
        let b = tenant("b", 0, 16);
        let mut w: Vec<Waiting> = (0..16)
            .map(|i| waiting("a", &format!("p{i}"), 1, i))
            .collect();
        w.extend((0..16).map(|i| waiting("b", &format!("q{i}"), 1, i)));
        let d = decide(&input(vec![a, b], nodes, w), &Policy::default());
        let count = |t: &str| d.admit.iter().filter(|x| x.tenant == t).count();
        assert_eq!((count("a"), count("b")), (12, 4));
    }

    #[test]
    fn a_starving_large_job_gets_a_reservation() {
        // Two 8-GPU nodes, each with 1 GPU busy; an 8-GPU job waits behind 1-GPU jobs.
        let mut n1 = node("n1", 8);
        let mut n2 = node("n2", 8);
        for n in [&mut n1, &mut n2] {
            n.free.insert("nvidia.com/gpu".into(), 7);
            n.devices[0].used = 1;
        }
        let tenants = vec![tenant("a", 16, 0)];
        let mut w = vec![waiting("a", "big", 8, 0)];
        w.extend((0..4).map(|i| waiting("a", &format!("s{i}"), 1, 10 + i)));
        let mut i = input(tenants, vec![n1, n2], w);
        i.now = 30 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        assert_eq!(d.admit.len(), 4, "not starving yet: small jobs backfill");
        assert!(d.reservations.is_empty());
        i.now = 61 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        let [r] = d.reservations.as_slice() else {
            panic!("one reservation: {:?}", d.reservations)
        };
        assert_eq!(r.key, "fabrik-a/big");
        assert_eq!(r.nodes.len(), 1);
        // Small jobs go to the other node only.
        let reserved = r.nodes.iter().next().cloned().unwrap_or_default();
        assert_eq!(d.admit.len(), 4);
        assert!(
            d.admit.iter().all(|a| a.placements[0].1 != reserved),
            "{:?}",
            d.admit
        );
        assert!(
            d.waiting["fabrik-a/big"].contains("reserved"),
            "{}",
            d.waiting["fabrik-a/big"]
        );
    }

    #[test]
    fn workloads_their_tenant_s_limits_refuse_are_named() {
        // t may hold 1 and holds it; o may hold 2 and holds nothing, one GPU is free. t's second
        // pod is refused by t's limit; o's 2-GPU pod only for room.
        let mut nodes = vec![node("n1", 2)];
        let admitted = vec![hold(&mut nodes, "t", "one", 1, 0)];
        let mut i = input(
            vec![tenant("t", 1, 0), tenant("o", 1, 1)],
            nodes,
            vec![waiting("t", "two", 1, 5), waiting("o", "big", 2, 5)],
        );
        i.admitted = admitted;
        let d = decide(&i, &Policy::default());
        assert_eq!(
            d.limited,
            BTreeSet::from(["fabrik-t/two".to_string()]),
            "{:?}",
            d.waiting
        );
    }

    #[test]
    fn a_job_larger_than_the_rest_of_its_share_gets_its_turn() {
        // Two nodes of 8; a, b and c each guaranteed 5 and allowed the whole factory. a and c
        // hold 11 between them, within their fair shares, and keep asking for more; b, holding
        // nothing, waits for 8. Reclaim cannot help (nobody holds more than its share), and
        // without a reservation b would wait for as long as a and c have demand.
        let tenants = vec![tenant("a", 5, 11), tenant("b", 5, 11), tenant("c", 5, 11)];
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let mut admitted = vec![
            hold(&mut nodes, "a", "a0", 4, 0),
            hold(&mut nodes, "c", "c0", 4, 0),
        ];
        let first = admitted[0].pods[0].node.clone();
        assert_eq!(admitted[1].pods[0].node, first, "a0 and c0 fill one node");
        admitted.push(hold(&mut nodes, "a", "a1", 2, 0));
        admitted.push(hold(&mut nodes, "c", "c1", 1, 0));
        let mut w = vec![waiting("b", "big", 8, 0)];
        w.extend((0..3).map(|i| waiting("a", &format!("a-more{i}"), 1, 10 + i)));
        w.extend((0..3).map(|i| waiting("c", &format!("c-more{i}"), 1, 10 + i)));
        let mut i = input(tenants.clone(), nodes.clone(), w.clone());
        i.admitted = admitted.clone();
        i.now = 30 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert!(d.reservations.is_empty(), "not starving yet");
        i.now = 61 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        let [r] = d.reservations.as_slice() else {
            panic!("one reservation: {:?}", d.reservations)
        };
        assert_eq!(r.key, "fabrik-b/big");
        let reserved = r.nodes.iter().next().cloned().unwrap_or_default();
        assert_ne!(reserved, first, "the node with room is reserved");
        assert!(
            d.admit
                .iter()
                .filter(|a| a.placements.iter().any(|(_, n)| *n == reserved))
                .all(|a| a.backfill),
            "only backfill goes to the reserved node: {:?}",
            d.admit
        );
        // The reserved node drains (a1 and c1 end): b's job is admitted there, past b's share.
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let full = vec![
            hold(&mut nodes, "a", "a0", 4, 0),
            hold(&mut nodes, "c", "c0", 4, 0),
        ];
        let mut i = input(tenants.clone(), nodes.clone(), w.clone());
        i.admitted = full.clone();
        i.reservations = d.reservations.clone();
        i.now = 90 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        let big = d.admit.iter().find(|a| a.key == "fabrik-b/big");
        assert_eq!(
            big.map(|a| a.placements[0].1.clone()),
            Some(reserved.clone()),
            "{:?}",
            d.admit
        );
        // Running, it is not taken back while a and c, below their shares, wait: taking it
        // would put b below its own.
        let mut admitted = full;
        admitted.extend(admitted_from(&d, &i, &mut nodes));
        let mut i = input(tenants, nodes, w[1..].to_vec());
        i.admitted = admitted;
        i.now = 120 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert!(d.standings["b"]["nvidia.com/gpu"].fair_share < 8);
    }

    #[test]
    fn a_tenant_ahead_of_its_share_over_time_takes_nothing_past_it_while_others_wait() {
        // a, b and c each guaranteed 5 of 16. a and c hold 4 each on one node and wait for
        // 2-GPU jobs; b, holding nothing, waits for 8 (past its share of 5), the other node
        // empty.
        let tenants = vec![tenant("a", 5, 11), tenant("b", 5, 11), tenant("c", 5, 11)];
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let admitted = vec![
            hold(&mut nodes, "a", "a0", 4, 0),
            hold(&mut nodes, "c", "c0", 4, 0),
        ];
        let mut w = vec![waiting("b", "big", 8, 0)];
        w.extend((0..3).map(|i| waiting("a", &format!("a-more{i}"), 2, 10 + i)));
        w.extend((0..3).map(|i| waiting("c", &format!("c-more{i}"), 2, 10 + i)));
        let mut i = input(tenants, nodes, w);
        i.admitted = admitted;
        i.now = 30 * 1_000_000_000;
        let big = |d: &Decision| d.admit.iter().any(|a| a.key == "fabrik-b/big");
        // No record, or behind over time: its job goes past its share, as before.
        assert!(big(&decide(&i, &Policy::default())));
        i.lead = BTreeMap::from([("b".to_string(), Gpus::from([("nvidia.com/gpu".into(), -1)]))]);
        assert!(big(&decide(&i, &Policy::default())));
        // Ahead over time: it waits while a and c, below their shares, take what they may; it
        // is told why.
        i.lead = BTreeMap::from([(
            "b".to_string(),
            Gpus::from([("nvidia.com/gpu".into(), 1200)]),
        )]);
        let d = decide(&i, &Policy::default());
        assert!(!big(&d), "{:?}", d.admit);
        assert!(d.admit.iter().any(|a| a.tenant == "a"), "{:?}", d.admit);
        let said = d.waiting.get("fabrik-b/big").cloned().unwrap_or_default();
        assert!(
            said.starts_with(
                "tenant b holds 0 of its fair share of nvidia.com/gpu (5) but has lately held 1200 \
                 device-seconds beyond it: nothing past its share until that is given back"
            ),
            "{said}"
        );
        // Past the starvation bound no node is reserved for it: that would hold GPUs for
        // nothing while it may not run.
        i.now = 600 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        assert!(!big(&d), "{:?}", d.admit);
        assert!(
            d.reservations.iter().all(|r| r.key != "fabrik-b/big"),
            "{:?}",
            d.reservations
        );
        // Nobody else waiting: the record does not matter, idle GPUs are used.
        let mut alone = i.clone();
        alone.waiting.retain(|w| w.tenant == "b");
        assert!(big(&decide(&alone, &Policy::default())));
        // Refused for room (a's 2-GPU run on the other node), past the bound: a node is
        // reserved for it only while its tenant is not ahead.
        let mut nodes = i.nodes.clone();
        i.admitted.push(hold(&mut nodes, "a", "a1", 2, 0));
        i.nodes = nodes;
        let reserved = |d: &Decision| d.reservations.iter().any(|r| r.key == "fabrik-b/big");
        let d = decide(&i, &Policy::default());
        assert!(!reserved(&d), "{:?}", d.reservations);
        i.lead.clear();
        let d = decide(&i, &Policy::default());
        assert!(reserved(&d), "{:?} {:?}", d.reservations, d.waiting);
    }

    #[test]
    fn the_tenant_furthest_behind_its_share_over_time_gets_the_reservation_first() {
        // Two nodes of 8 with 2 GPUs busy on each; a's and b's 8-GPU jobs both starve, and only
        // one node may be reserved. By arrival a's would go first; b has been further below
        // its fair share lately.
        let tenants = vec![tenant("a", 4, 12), tenant("b", 4, 12), tenant("x", 8, 0)];
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let mut admitted = vec![hold(&mut nodes, "x", "x0", 2, 0)];
        let other = if admitted[0].pods[0].node == "n1" {
            1
        } else {
            0
        };
        admitted.push(hold(&mut nodes[other..=other], "x", "x1", 2, 0));
        let w = vec![waiting("a", "big", 8, 0), waiting("b", "big", 8, 10)];
        let mut i = input(tenants, nodes, w);
        i.admitted = admitted;
        i.now = 600 * 1_000_000_000;
        let reserved = |i: &Input| {
            decide(i, &Policy::default())
                .reservations
                .iter()
                .map(|r| r.key.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(reserved(&i), ["fabrik-a/big"]);
        let lead = |n: i64| Gpus::from([("nvidia.com/gpu".to_string(), n)]);
        i.lead = BTreeMap::from([("a".to_string(), lead(-10)), ("b".to_string(), lead(-5000))]);
        assert_eq!(reserved(&i), ["fabrik-b/big"]);
    }

    #[test]
    fn idle_gpus_go_to_backfill_past_the_fair_share_and_are_the_first_taken_back() {
        // Two nodes of 8. a holds 8 (its fair share) on one; b holds 1 on the other and waits
        // for 8, which no node has; a waits for four more. The 7 idle GPUs go to a as backfill.
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let a_big = hold(&mut nodes, "a", "a-big", 8, 0);
        let b_one = hold(&mut nodes, "b", "b-one", 1, 0);
        let other = b_one.pods[0].node.clone();
        let tenants = vec![tenant("a", 8, 8), tenant("b", 8, 8)];
        let mut w: Vec<Waiting> = (0..4)
            .map(|k| waiting("a", &format!("a{k}"), 1, 10 + k))
            .collect();
        w.push(waiting("b", "b-big", 8, 5));
        let mut i = input(tenants.clone(), nodes.clone(), w.clone());
        i.admitted = vec![a_big.clone(), b_one];
        let d = decide(&i, &Policy::default());
        assert_eq!(d.admit.len(), 4, "{:?}", d.waiting);
        assert!(d
            .admit
            .iter()
            .all(|a| a.backfill && a.placements[0].1 == other));
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert_eq!(d.standings["a"]["nvidia.com/gpu"].fair_share, 8);
        // Its standing says how much of what it holds is backfill.
        assert_eq!(d.standings["a"]["nvidia.com/gpu"].admitted, 12);
        assert_eq!(d.standings["a"]["nvidia.com/gpu"].backfill, 4);
        assert!(d.waiting.contains_key("fabrik-b/b-big"));

        // b's pod ends: its 8-GPU job needs the node a's backfill is on. Reclaim takes the
        // backfill, not a's older workload (which alone would also have made room).
        let mut placed = vec![node("n1", 8), node("n2", 8)];
        let a_big = hold(&mut placed, "a", "a-big", 8, 0);
        let mut admitted = admitted_from(&d, &i, &mut placed);
        admitted.push(a_big);
        let mut i2 = input(tenants, placed.clone(), vec![waiting("b", "b-big", 8, 5)]);
        i2.admitted = admitted;
        i2.nodes = placed;
        let d2 = decide(&i2, &Policy::default());
        assert_eq!(d2.standings["a"]["nvidia.com/gpu"].backfill, 4);
        let mut taken: Vec<&str> = d2.preempt.iter().map(|p| p.key.as_str()).collect();
        taken.sort();
        assert_eq!(
            taken,
            vec!["fabrik-a/a0", "fabrik-a/a1", "fabrik-a/a2", "fabrik-a/a3"]
        );
    }

    #[test]
    fn a_reservation_s_nodes_drain_of_backfill_once_only_backfill_stands_in_the_way() {
        // n1 is full with o's own work; on n2, o runs backfill placed before the reservation
        // (early, 1 GPU) and since (late, 2 GPUs). t's 8-GPU job holds n2 since t = 100 s;
        // it is 150 s, within the starvation bound of the reservation (past it, what o holds
        // beyond its share goes too: see the next test).
        let s = 1_000_000_000i128;
        let setup = |with_early: bool| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let mut admitted = vec![hold(&mut nodes, "o", "o-full", 8, 0)];
            if with_early {
                let mut early = hold(&mut nodes, "o", "o-early", 1, 50 * s);
                early.backfill = true;
                admitted.push(early);
            }
            let mut late = hold(&mut nodes, "o", "o-late", 2, 120 * s);
            late.backfill = true;
            admitted.push(late);
            let mut i = t_and_o(
                nodes,
                admitted,
                vec![waiting("t", "big", 8, 0), waiting("o", "more", 1, 10 * s)],
                150 * s,
            );
            i.reservations = vec![n2_for_big(100 * s)];
            // Reclaim (o is above its fair share) would take the backfill anyway: off, to see
            // the reservation alone.
            let policy = Policy {
                reclaim: false,
                ..Policy::default()
            };
            decide(&i, &policy)
        };
        // The early backfill still stands in the way, and it was there before the
        // reservation: nothing is preempted yet, the reservation holds (though the GPUs are
        // all held, the job waits for its nodes to drain).
        let d = setup(true);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert_eq!(d.reservations.len(), 1, "{:?}", d.waiting);
        // Once it ends, only the late backfill stands in the way: it is preempted, and the
        // drained node takes no new backfill meanwhile.
        let d = setup(false);
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-o/o-late"]);
        // Another tenant's workload is not named to it.
        assert!(
            d.preempt[0].message.contains(
                "ran as backfill on node(s) n2, reserved for a workload of tenant t that waited"
            ) && !d.preempt[0].message.contains("big"),
            "{}",
            d.preempt[0].message
        );
        assert!(d.admit.is_empty(), "{:?}", d.admit);
        assert_eq!(d.reservations.len(), 1);
    }

    #[test]
    fn an_overdue_drain_takes_what_tenants_ahead_of_their_share_hold_beyond_their_guarantee() {
        // t, o and p are each guaranteed 4 of 16 GPUs. o and p each run 4 GPUs on n1 and more
        // on n2 (o 4, p 2 + 2), where t's 8-GPU job has had its reservation since 100 s: o and
        // p hold 8 each, above their fair shares, and all of n2 is what they borrowed. What
        // they hold beyond their fair shares (less than 8 in all: t's share is about a third)
        // cannot make room for 8 GPUs on one node, so reclaim takes nothing; the drain would
        // wait for their runs there to end.
        let s = 1_000_000_000i128;
        let setup = |now: i128, o_on_n1: i64, t_lead: i64| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let mut admitted = Vec::new();
            // Each run admitted 10 s after the one before.
            let mut on = |nodes: &mut Vec<NodeView>, at: &str, who: &str, name: &str, n: i64| {
                for v in nodes.iter_mut() {
                    v.schedulable = v.name == at;
                }
                let since = 10 * s * (admitted.len() as i128 + 1);
                let a = hold(nodes, who, name, n, since);
                for v in nodes.iter_mut() {
                    v.schedulable = true;
                }
                admitted.push(a);
            };
            on(&mut nodes, "n1", "o", "o-base", o_on_n1);
            on(&mut nodes, "n1", "p", "p-base", 4);
            on(&mut nodes, "n2", "o", "o-x", 4);
            on(&mut nodes, "n2", "p", "p-x", 2);
            on(&mut nodes, "n2", "p", "p-y", 2);
            let mut i = input(
                vec![tenant("t", 4, 12), tenant("o", 4, 12), tenant("p", 4, 12)],
                nodes,
                vec![waiting("t", "big", 8, 0)],
            );
            i.admitted = admitted;
            i.now = now;
            i.lead = BTreeMap::from([(
                "t".to_string(),
                Gpus::from([("nvidia.com/gpu".into(), t_lead)]),
            )]);
            i.reservations = vec![n2_for_big(100 * s)];
            decide(&i, &Policy::default())
        };
        let taken = |d: &Decision| -> Vec<String> {
            let mut k: Vec<String> = d.preempt.iter().map(|p| p.key.clone()).collect();
            k.sort();
            k
        };
        // Within the starvation bound of the reservation: the runs there are left to end.
        let d = setup(150 * s, 4, -100);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert_eq!(d.reservations.len(), 1, "{:?}", d.waiting);
        // Past it, with t behind its fair share over time: what o and p hold on n2 goes,
        // newest first, and each is told why.
        let d = setup(170 * s, 4, -100);
        assert_eq!(
            taken(&d),
            vec!["fabrik-o/o-x", "fabrik-p/p-x", "fabrik-p/p-y"],
            "{:?}",
            d.waiting
        );
        let message = &d.preempt[0].message;
        assert!(
            message.contains("reserved for a workload of tenant t, which waited past the")
                && message.contains("not ahead of its fair share over time")
                && message.contains("beyond its guarantee"),
            "{message}"
        );
        // t lately ahead of its share over time: nothing is taken for it.
        let d = setup(170 * s, 4, 100);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        // o with only 2 on n1: taking its 4 on n2 would leave it below its guarantee, and
        // without them there is no room: nothing is taken at all.
        let d = setup(170 * s, 2, -100);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
    }

    #[test]
    fn a_reservation_past_its_tenant_s_share_idles_no_gpu_and_drains_nothing() {
        // t's 2-GPU job arrived at 10 s; t's later 8-GPU run overtook it and fills one node, so
        // t is at its fair share (8 of 16) but for that run, and the job is reserved the other
        // node. There o (fair share 8 too) runs 4 GPUs and wants more.
        let s = 1_000_000_000i128;
        let setup = |o_backfill: i64, o_more: i64, guarantees: (i64, i64)| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let mut late = hold(&mut nodes, "t", "t-late", 8, 30 * s);
            late.arrival = 20 * s;
            let reserved = if late.pods[0].node == "n1" {
                "n2"
            } else {
                "n1"
            };
            let mut admitted = vec![late, hold(&mut nodes, "o", "o-run", 4, 0)];
            if o_backfill > 0 {
                let mut b = hold(&mut nodes, "o", "o-backfill", o_backfill, 150 * s);
                b.backfill = true;
                admitted.push(b);
            }
            let mut i = input(
                vec![
                    tenant("t", guarantees.0, 16 - guarantees.0),
                    tenant("o", guarantees.1, 16 - guarantees.1),
                ],
                nodes,
                vec![
                    waiting("t", "job", 2, 10 * s),
                    waiting("o", "more", o_more, 40 * s),
                ],
            );
            i.admitted = admitted;
            i.now = 200 * s;
            i.reservations = vec![Reservation {
                key: "fabrik-t/job".into(),
                nodes: BTreeSet::from([reserved.to_string()]),
                since: 100 * s,
                start_by: None,
            }];
            (decide(&i, &Policy::default()), reserved)
        };
        // o, below its share, waits: the job is refused for t's share, not for room. Its node
        // is not spoken for: o's work runs on its free GPUs as backfill (they idled before).
        let (d, reserved) = setup(0, 4, (8, 8));
        let more = d.admit.iter().find(|a| a.key == "fabrik-o/more");
        assert!(
            more.is_some_and(|a| a.backfill && a.placements[0].1 == reserved),
            "{:?}\n{:?}",
            d.admit,
            d.waiting
        );
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert!(
            d.waiting["fabrik-t/job"].contains("only as backfill"),
            "{}",
            d.waiting["fabrik-t/job"]
        );
        // The node full with o's work, 4 GPUs of it backfill placed since the reservation: o
        // at its share, the job waits for room. Draining o's backfill would put o below its
        // share, and the job, past t's, would then be refused for it: nothing is preempted.
        let (d, _) = setup(4, 1, (8, 8));
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        assert!(d.admit.iter().all(|a| a.key != "fabrik-t/job"));
        // Where the job is within t's guarantee (12; o's 4), the same backfill is drained.
        let (d, _) = setup(4, 1, (12, 4));
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-o/o-backfill"], "{:?}", d.waiting);
    }

    #[test]
    fn a_drain_counts_the_backfill_it_takes_from_the_reserved_workload_s_own_tenant() {
        // t (2 guaranteed, its fair share) runs 2 GPUs of backfill on n1, which is reserved for
        // its older 8-GPU job; o (14 guaranteed, its fair share) runs 6 more there as backfill
        // and fills n2. Draining n1 takes t's own backfill too, which leaves t below its share:
        // the job is admitted once n1 is empty, so the drain goes ahead, o's backfill with it.
        let s = 1_000_000_000i128;
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let mut mine = hold(&mut nodes, "t", "t-backfill", 2, 150 * s);
        mine.backfill = true;
        let mut theirs = hold(&mut nodes, "o", "o-backfill", 6, 160 * s);
        theirs.backfill = true;
        let full = hold(&mut nodes, "o", "o-run", 8, 0);
        assert_eq!(
            (&mine.pods[0].node, &theirs.pods[0].node, &full.pods[0].node),
            (&"n1".to_string(), &"n1".to_string(), &"n2".to_string())
        );
        let mut i = input(
            vec![tenant("t", 2, 14), tenant("o", 14, 2)],
            nodes,
            vec![
                waiting("t", "big", 8, 10 * s),
                waiting("o", "more", 1, 40 * s),
            ],
        );
        i.admitted = vec![mine, theirs, full];
        i.now = 200 * s;
        i.reservations = vec![Reservation {
            key: "fabrik-t/big".into(),
            nodes: BTreeSet::from(["n1".to_string()]),
            since: 100 * s,
            start_by: None,
        }];
        let d = decide(&i, &Policy::default());
        let mut taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        taken.sort();
        assert_eq!(
            taken,
            vec!["fabrik-o/o-backfill", "fabrik-t/t-backfill"],
            "{:?}",
            d.waiting
        );
    }

    #[test]
    fn reclaim_waits_its_grace_and_counts_on_borrowers_that_end_within_it() {
        // One node of 8: a (4 guaranteed, may borrow 4) holds 6 in three workloads of 2, the
        // newest (a2) declaring it ends at 40 s; b (4 guaranteed) holds 2 and waits for 2 more
        // since 10 s. a is 2 over its fair share of 4.
        let s = 1_000_000_000i128;
        let setup = |a2_ends: Option<i128>, now: i128| {
            let mut nodes = vec![node("n1", 8)];
            let mut admitted: Vec<Admitted> = (0..3)
                .map(|k| hold(&mut nodes, "a", &format!("a{k}"), 2, k))
                .collect();
            admitted[2].ends_by = a2_ends;
            admitted.push(hold(&mut nodes, "b", "b0", 2, 9));
            let mut i = input(
                vec![tenant("a", 4, 4), tenant("b", 4, 0)],
                nodes,
                vec![waiting("b", "two", 2, 10 * s)],
            );
            i.admitted = admitted;
            i.now = now;
            let policy = Policy {
                reclaim_grace: 60 * s,
                ..Policy::default()
            };
            decide(&i, &policy)
        };
        // Within the grace, a2 unknown to end: nothing preempted yet.
        let d = setup(None, 30 * s);
        assert!(d.preempt.is_empty(), "{:?}", d.preempt);
        // Past it (arrived at 10 s, 60 s grace): the newest borrowed workload goes.
        let d = setup(None, 71 * s);
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-a/a2"]);
        // a2 ends at 40 s, within b's grace (by 70 s): it is never preempted, not even past
        // the grace, and nothing else of a's is taken for b.
        for now in [30 * s, 71 * s] {
            let d = setup(Some(40 * s), now);
            assert!(d.preempt.is_empty(), "at {now}: {:?}", d.preempt);
        }
        // One that ends after the grace is preempted once it is over.
        let d = setup(Some(500 * s), 71 * s);
        let taken: Vec<&str> = d.preempt.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(taken, vec!["fabrik-a/a2"]);
    }

    #[test]
    fn backfill_on_reserved_nodes_ends_in_time_when_run_times_are_declared() {
        // n1 is full; on n2, o's 4-GPU run ends by 300 s. t's 8-GPU job holds n2 (made at
        // 100 s), so it fits there by 300 s at the latest. o waits with two 1-GPU jobs past
        // its share: one declares 50 s, one 1,000 s.
        let s = 1_000_000_000i128;
        let mut nodes = vec![node("n1", 8), node("n2", 8)];
        let mut admitted = vec![hold(&mut nodes, "o", "o-full", 8, 0)];
        let mut running = hold(&mut nodes, "o", "o-run", 4, 50 * s);
        running.ends_by = Some(300 * s);
        admitted.push(running);
        let mut short = waiting("o", "short", 1, 20 * s);
        short.runtime = Some(50 * s);
        let mut long = waiting("o", "long", 1, 10 * s);
        long.runtime = Some(1_000 * s);
        let mut i = t_and_o(
            nodes,
            admitted,
            vec![waiting("t", "big", 8, 0), long, short],
            200 * s,
        );
        i.reservations = vec![n2_for_big(100 * s)];
        let policy = Policy {
            reclaim: false,
            ..Policy::default()
        };
        let d = decide(&i, &policy);
        assert_eq!(d.reservations.len(), 1, "{:?}", d.waiting);
        assert_eq!(d.reservations[0].start_by, Some(300 * s));
        // The waiting job is told when its nodes are free at the latest.
        let told = &d.waiting["fabrik-t/big"];
        assert!(
            told.contains("free for it in 100 s at the latest"),
            "{told}"
        );
        // Only the run that ends by then goes on the reserved node (as backfill); the long
        // one, though older, would delay the job and waits.
        let admitted: Vec<(&str, bool)> = d
            .admit
            .iter()
            .map(|a| (a.key.as_str(), a.backfill))
            .collect();
        assert_eq!(admitted, vec![("fabrik-o/short", true)]);

        // Later, o's run has ended early (at 260 s) and only that backfill (admitted at 250 s,
        // ending by 300 s) stands in the way: waiting 40 s for it idles 7 GPUs × 40 s, more
        // than the 10 GPU-seconds preempting it loses — it goes. One ending by 261 s is left to
        // end (7 GPUs × 1 s ≤ 1 GPU × 10 s).
        for (ends, preempted) in [(300 * s, true), (261 * s, false)] {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let mut admitted = vec![hold(&mut nodes, "o", "o-full", 8, 0)];
            let mut bf = hold(&mut nodes, "o", "short", 1, 250 * s);
            bf.backfill = true;
            bf.ends_by = Some(ends);
            admitted.push(bf);
            let mut i = t_and_o(nodes, admitted, vec![waiting("t", "big", 8, 0)], 260 * s);
            i.reservations = d.reservations.clone();
            let later = decide(&i, &policy);
            let taken: Vec<&str> = later.preempt.iter().map(|p| p.key.as_str()).collect();
            if preempted {
                assert_eq!(taken, vec!["fabrik-o/short"]);
            } else {
                assert!(taken.is_empty(), "{taken:?}");
                assert_eq!(later.reservations.len(), 1);
            }
        }
    }

    #[test]
    fn starving_workloads_get_a_reservation_each_on_up_to_half_the_nodes() {
        // Four nodes of 8, each with 1 GPU busy: three 8-GPU jobs have starved.
        let mut nodes: Vec<NodeView> = (1..=4).map(|k| node(&format!("n{k}"), 8)).collect();
        let admitted: Vec<Admitted> = (0..4)
            .map(|k| hold(&mut nodes[k..=k], "a", &format!("one{k}"), 1, 0))
            .collect();
        let w: Vec<Waiting> = (0..3)
            .map(|k| waiting("a", &format!("big{k}"), 8, k))
            .collect();
        let mut i = input(vec![tenant("a", 32, 0)], nodes, w);
        i.admitted = admitted;
        i.now = 61 * 1_000_000_000;
        let d = decide(&i, &Policy::default());
        let keys: Vec<&str> = d.reservations.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["fabrik-a/big0", "fabrik-a/big1"],
            "oldest first: {:?}",
            d.waiting
        );
        let all: BTreeSet<&String> = d.reservations.iter().flat_map(|r| &r.nodes).collect();
        assert_eq!(all.len(), 2, "disjoint: {:?}", d.reservations);
        assert!(d.waiting["fabrik-a/big2"].contains("no room"));
        assert!(!d.waiting["fabrik-a/big2"].contains("reserved"));
    }

    #[test]
    fn a_reserved_workload_keeps_its_share_from_its_own_later_workloads() {
        // a (fair share 8) holds 4 and waits for an 8-GPU job that fits no node; b, below its
        // share, waits. a's later 4-GPU job fits a's share alone and is admitted in queue
        // order while the 8-GPU job has not starved — once it has a reservation, it keeps 8 of
        // a's share: the later job only backfills (the first to be preempted).
        let later = |reserved: bool| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let a_run = hold(&mut nodes[0..1], "a", "a-run", 4, 0);
            let b_run = hold(&mut nodes[1..2], "b", "b-run", 2, 0);
            let mut i = input(
                vec![tenant("a", 8, 8), tenant("b", 8, 8)],
                nodes,
                vec![
                    waiting("a", "big", 8, 0),
                    waiting("a", "later", 4, 5),
                    waiting("b", "wants", 8, 1),
                ],
            );
            i.admitted = vec![a_run, b_run];
            if reserved {
                i.reservations = vec![Reservation {
                    key: "fabrik-a/big".into(),
                    nodes: BTreeSet::from(["n2".to_string()]),
                    since: 0,
                    start_by: None,
                }];
            }
            i.now = if reserved { 100 } else { 30 } * 1_000_000_000;
            let d = decide(&i, &Policy::default());
            assert!(d.waiting.contains_key("fabrik-a/big"), "{:?}", d.admit);
            assert_eq!(d.reservations.len(), usize::from(reserved));
            d.admit
                .iter()
                .find(|a| a.key == "fabrik-a/later")
                .map(|a| a.backfill)
        };
        assert_eq!(later(false), Some(false));
        assert_eq!(later(true), Some(true));
    }

    #[test]
    fn a_job_its_own_later_small_jobs_overtook_gets_a_reservation() {
        // One tenant fills both nodes with 1-GPU pods; its 8-GPU job arrived at 10 s. When the
        // pods holding the GPUs arrived before it, it merely waits its turn; when they arrived
        // after it (they overtook it: they fit, it did not), it gets a reservation once starved.
        let s = 1_000_000_000i128;
        let reserved = |small_arrival: i128| {
            let mut nodes = vec![node("n1", 8), node("n2", 8)];
            let admitted: Vec<Admitted> = (0..16)
                .map(|k| {
                    let mut a = hold(&mut nodes, "a", &format!("s{k}"), 1, 20 * s);
                    a.arrival = small_arrival;
                    a
                })
                .collect();
            let mut i = input(
                vec![tenant("a", 16, 16)],
                nodes,
                vec![waiting("a", "big", 8, 10 * s)],
            );
            i.admitted = admitted;
            i.now = 100 * s;
            let d = decide(&i, &Policy::default());
            assert!(d.waiting["fabrik-a/big"].contains("waiting for 8"));
            d.reservations.len()
        };
        assert_eq!(reserved(5 * s), 0, "they were ahead of it");
        assert_eq!(reserved(15 * s), 1, "they overtook it");
    }
}
