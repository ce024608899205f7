//! `queue-bench`: Fabrik's GPU queue against a naive first-fit, side by side on the same
//! seeded mixed workload, in a discrete-time simulation (issue gpu-queues, "Benchmark").
//!
//! Two simulated factories: A, 2 nodes × 8 GPUs (the issue's factory), and B, `--big-nodes`
//! nodes × 8 GPUs. Four tenants, each guaranteed a quarter of the GPUs, each allowed to
//! borrow every GPU, lending without limit, weight 1:
//!
//! * `train`: mostly 8-GPU and 4-GPU jobs, and gangs of 2 or 4 pods × 8 GPUs (only gangs
//!   that fit the factory: 2 pods on factory A);
//! * `infer`: many 1-GPU and 2-GPU jobs;
//! * `notebooks`: short 1-GPU jobs (below its share of the GPUs on average);
//! * `mixed`: 1, 2, 4 and 8-GPU jobs.
//!
//! Jobs arrive over the first three quarters of the run with about 1.4 × the GPUs' capacity
//! in GPU-seconds, so a backlog builds and lasts to the end; the job count scales with the
//! factory. Every simulated second, finished jobs give their GPUs back, new jobs arrive, and
//! each policy places what it can:
//!
//! * **queue**: [`fabrik_gpu::queue::decide`], the GPU queue's real decision
//!   function, on an [`Input`] built from the simulation (nodes with what admitted pods hold
//!   committed, admitted workloads, waiting workloads, the previous reservation, each
//!   tenant's lead over its fair share from a [`Ledger`] kept as the controller keeps it,
//!   half-life `--fairness-half-life`, 0 for none); admissions
//!   are committed on the node the decision names ([`fit::choose`] on that node, as the
//!   scheduler would); a preempted workload gives its GPUs back at once and waits again with
//!   its original arrival, and runs its full duration again once readmitted. Four runs: as
//!   the queue is by default (pods declare no run time, borrowed GPUs are reclaimed at once);
//!   with every pod declaring its run time (`activeDeadlineSeconds`, 1 to 1.5 × the real one:
//!   backfill on reserved nodes only where it ends in time, a reservation not drained of
//!   backfill about to end, reclaim counting on what ends within its grace); with a reclaim
//!   grace period (`--reclaim-grace`, 60 s) and no declared run times; with both;
//! * **first-fit**: every pending pod in arrival order on the first node (by name) with
//!   enough free GPUs; no quotas, no gangs: a gang's members hold their GPUs as they are
//!   placed, and the gang runs (its clock starts) only once all are placed.
//!
//! Not modelled: the API server, the syncer, the scheduler binding the pods, the grace
//! period of a preemption (GPUs come back the same second), MIG and shared GPUs.
//!
//! ```sh
//! cargo build --release -p e2e --features bench --bin queue-bench
//! target/release/queue-bench [--seed N] [--seconds S] [--big-nodes N] [--every K]
//!                            [--reclaim-grace S] [--fairness-half-life S]
//! ```
//!
//! Defaults: seed 1, 3,600 simulated seconds, 64 nodes, placement every 5 simulated seconds
//! (`--every 1`: every second, about 15 minutes on 2 cores for the large factory). Results:
//! `docs/benchmarks.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use clap::Parser;
use e2e::seeded::{wait, wait_cell, Rng, Windows};
use fabrik_gpu::placement::fit;
use fabrik_gpu::placement::model::{GpuDevice, NodeView, PodRequest};
use fabrik_gpu::queue::ledger::{self, Ledger};
use fabrik_gpu::queue::{
    decide, water_fill, Admitted, Decision, Gpus, HeldPod, Input, Policy, Reservation, TenantQueue,
    Waiting, HOSTNAME,
};

/// The one GPU resource simulated (whole GPUs).
const GPU: &str = "nvidia.com/gpu";
/// GPUs per node.
const GPUS_PER_NODE: i64 = 8;
/// Nanoseconds per simulated second (the queue's clock is in nanoseconds).
const NS: i128 = 1_000_000_000;
/// The tenants.
const TENANTS: [&str; 4] = ["train", "infer", "notebooks", "mixed"];
/// Demand of each tenant while jobs arrive, in percent of the factory's GPUs (1.4 × in all).
const DEMAND_PCT: [u64; 4] = [45, 40, 15, 40];
/// Seconds left out of the steady state (fairness) at the start of a run.
const WARM_UP_S: u64 = 300;
/// Width of the allocation-over-time windows, in seconds.
const WINDOW_S: u64 = 600;
/// Allocation that counts as "full".
const FULL: f64 = 0.95;

/// Command line.
#[derive(Parser)]
#[command(about = "Fabrik's GPU queue vs naive first-fit on a seeded mixed workload")]
struct Args {
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated seconds.
    #[arg(long, default_value_t = 3600)]
    seconds: u64,
    /// Nodes of the large factory (8 GPUs each).
    #[arg(long, default_value_t = 64)]
    big_nodes: usize,
    /// Place (decide) every K simulated seconds, for both policies (jobs still arrive and
    /// finish on the second). 5 by default: one decision per simulated second on the large
    /// factory takes about 15 minutes.
    #[arg(long, default_value_t = 5)]
    every: u64,
    /// The reclaim grace period of the last two queue runs, seconds.
    #[arg(long, default_value_t = 60)]
    reclaim_grace: u64,
    /// The half-life of the queue's fair-share ledger (fair shares kept over time), seconds;
    /// 0: fair shares at each instant only.
    #[arg(long, default_value_t = (ledger::HALF_LIFE / NS) as u64)]
    fairness_half_life: u64,
}

/// Job size classes, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Size {
    One,
    Two,
    Four,
    Eight,
    Gang,
}

impl Size {
    const ALL: [Size; 5] = [Size::One, Size::Two, Size::Four, Size::Eight, Size::Gang];

    fn of(pods: &[i64]) -> Size {
        match pods {
            [1] => Size::One,
            [2] => Size::Two,
            [4] => Size::Four,
            [_] => Size::Eight,
            _ => Size::Gang,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Size::One => "1 GPU",
            Size::Two => "2 GPUs",
            Size::Four => "4 GPUs",
            Size::Eight => "8 GPUs",
            Size::Gang => "gang (2–4 × 8)",
        }
    }
}

/// One job of the workload.
struct Job {
    /// Index into [`TENANTS`].
    tenant: usize,
    /// Workload key (`fabrik-TENANT/job-N`, a gang's `fabrik-TENANT/gang/job-N`).
    key: String,
    /// Its pods (one for a single job).
    pods: Vec<PodRequest>,
    /// GPUs of each pod.
    gpus: Vec<i64>,
    /// Run time once started, seconds.
    duration: u64,
    /// Its pods' `activeDeadlineSeconds`: the run time its owner declares, 1 to 1.5 × the
    /// real one (owners overestimate).
    deadline: u64,
    /// Arrival, seconds.
    arrival: u64,
    size: Size,
}

impl Job {
    fn total_gpus(&self) -> i64 {
        self.gpus.iter().sum()
    }

    /// Arrival in the queue's clock: the second, then the job's index for a stable order
    /// within it.
    fn arrival_ns(&self, id: usize) -> i128 {
        i128::from(self.arrival) * NS + id as i128
    }
}

/// The seeded workload of a factory with `gpus` GPUs on `nodes` nodes: jobs sorted by
/// arrival (their index is their id).
fn workload(seed: u64, seconds: u64, nodes: usize, gpus: i64) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    let window = (seconds * 3 / 4).max(1);
    // (tenant, pod sizes, duration, arrival)
    let mut drafts: Vec<(usize, Vec<i64>, u64, u64)> = Vec::new();
    for (tenant, pct) in DEMAND_PCT.iter().enumerate() {
        let target = gpus as u64 * window * pct / 100;
        let mut demand = 0u64;
        while demand < target {
            let roll = rng.pct();
            let pods: Vec<i64> = match TENANTS[tenant] {
                "train" if roll < 45 => vec![8],
                "train" if roll < 80 => vec![4],
                "train" => {
                    let members = if nodes >= 4 && rng.pct() < 50 { 4 } else { 2 };
                    if nodes >= members {
                        vec![8; members]
                    } else {
                        vec![8]
                    }
                }
                "infer" if roll < 60 => vec![1],
                "infer" => vec![2],
                "notebooks" => vec![1],
                _ if roll < 40 => vec![1],
                _ if roll < 65 => vec![2],
                _ if roll < 85 => vec![4],
                _ => vec![8],
            };
            let duration = if TENANTS[tenant] == "notebooks" {
                rng.range(30, 180)
            } else {
                rng.range(30, 600)
            };
            let arrival = rng.range(0, window - 1);
            demand += pods.iter().sum::<i64>() as u64 * duration;
            drafts.push((tenant, pods, duration, arrival));
        }
    }
    drafts.sort_by_key(|(tenant, _, _, arrival)| (*arrival, *tenant));
    // Declared run times from a stream of their own, so that the jobs stay those of the
    // previous runs.
    let mut declared = Rng::new(seed ^ 0x5eed_dead_1e55);
    drafts
        .into_iter()
        .enumerate()
        .map(|(id, (tenant, gpus, duration, arrival))| {
            let deadline = duration + duration * declared.range(0, 50) / 100;
            let namespace = format!("fabrik-{}", TENANTS[tenant]);
            let key = if gpus.len() > 1 {
                format!("{namespace}/gang/job-{id}")
            } else {
                format!("{namespace}/job-{id}")
            };
            let pods = gpus
                .iter()
                .enumerate()
                .map(|(k, g)| PodRequest {
                    namespace: namespace.clone(),
                    name: format!("job-{id}-{k}"),
                    requests: BTreeMap::from([("pods".to_string(), 1), (GPU.to_string(), *g)]),
                    ..Default::default()
                })
                .collect();
            Job {
                tenant,
                key,
                pods,
                size: Size::of(&gpus),
                gpus,
                duration,
                deadline,
                arrival,
            }
        })
        .collect()
}

/// A node with 8 whole GPUs: NUMA 0 for GPUs 0–3, 1 for 4–7, one NVLink island.
fn node(name: &str) -> NodeView {
    NodeView {
        name: name.to_string(),
        schedulable: true,
        labels: BTreeMap::from([(HOSTNAME.to_string(), name.to_string())]),
        free: BTreeMap::from([
            ("cpu".to_string(), 1_000_000),
            ("memory".to_string(), 1 << 40),
            ("pods".to_string(), 1_000),
            (GPU.to_string(), GPUS_PER_NODE),
        ]),
        devices: (0..GPUS_PER_NODE)
            .map(|i| GpuDevice {
                name: format!("gpu-{i}"),
                uuid: format!("GPU-{name}-{i}"),
                resource: GPU.to_string(),
                gpu: i,
                numa: i / 4,
                island: 0,
                slots: 1,
                used: 0,
            })
            .collect(),
        ..Default::default()
    }
}

/// The tenants' queues on a factory of `gpus` GPUs.
fn tenants(gpus: i64) -> Vec<TenantQueue> {
    TENANTS
        .iter()
        .map(|name| TenantQueue {
            name: name.to_string(),
            resources: vec![GPU.to_string()],
            guarantee: Some(gpus / 4),
            borrowing_limit: gpus,
            lending_limit: None,
            weight: 1,
            parent: None,
        })
        .collect()
}

/// Fair shares as the queue defines them (each tenant's guarantee first, up to its demand,
/// then the rest by water-filling among those that want more, equal weights), for the
/// first-fit run and to check the queue's standings.
fn fair_shares(tenants: &[TenantQueue], capacity: i64, demand: &[i64; 4]) -> [i64; 4] {
    let base: Vec<i64> = tenants
        .iter()
        .zip(demand)
        .map(|(t, d)| (*d).min(t.guaranteed(GPU)))
        .collect();
    let pool = capacity - base.iter().sum::<i64>();
    let claims: Vec<(i64, i64)> = tenants
        .iter()
        .zip(demand.iter().zip(&base))
        .map(|(t, (d, b))| (t.weight, (d - b).min(t.cap(GPU) - b).max(0)))
        .collect();
    let extra = water_fill(pool, &claims);
    let mut out = [0; 4];
    for (i, (b, e)) in base.iter().zip(extra).enumerate() {
        out[i] = b + e;
    }
    out
}

/// The placement policies compared.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placer {
    /// The GPU queue; `deadlines`: the pods declare their run times
    /// (`activeDeadlineSeconds`); `grace`: the reclaim grace period, seconds.
    Queue {
        deadlines: bool,
        grace: u64,
    },
    FirstFit,
}

impl Placer {
    fn label(self) -> String {
        match self {
            Placer::Queue {
                deadlines: false,
                grace: 0,
            } => "GPU queue".into(),
            Placer::Queue {
                deadlines: true,
                grace: 0,
            } => "GPU queue, run times declared".into(),
            Placer::Queue { deadlines, grace } => format!(
                "GPU queue, {}reclaim grace {grace} s",
                if deadlines {
                    "run times declared, "
                } else {
                    ""
                }
            ),
            Placer::FirstFit => "first-fit".into(),
        }
    }
}

/// What one run measured.
#[derive(Default)]
struct Stats {
    /// Steps with a job waiting (after placement).
    backlog_steps: u64,
    /// Sum over backlog steps of the allocated fraction.
    alloc_sum: f64,
    /// Backlog steps at ≥ 95 % allocated.
    full_steps: u64,
    /// Sum over backlog steps of the fraction held by running workloads.
    useful_sum: f64,
    /// Steady-state backlog steps (after the warm-up).
    steady_steps: u64,
    /// Sum over those of the largest |held − fair share| of a tenant, in points of capacity.
    max_dev_sum: f64,
    /// Steady steps where every tenant is within 5 points of its fair share.
    within5_steps: u64,
    /// Over steady steps: GPUs owed to guarantees (waiting jobs each within what is left of
    /// their tenant's guarantee, in arrival order), as fractions of capacity; and the steps
    /// where some tenant was owed any.
    owed_sum: f64,
    short_steps: u64,
    /// Per tenant, over steady steps: sums of held and fair share (fractions of capacity)
    /// and of |held − fair|.
    tenant_held: [f64; 4],
    tenant_fair: [f64; 4],
    tenant_dev: [f64; 4],
    /// Per tenant, over the steady steps in which one workload holds every GPU: the sum of
    /// held − fair share (fractions of capacity). While that workload runs no placement keeps
    /// the others at their fair shares (each holds nothing); a tenant whose demand stays
    /// within its share never holds more than its share, so cannot make it up later.
    tenant_whole: [f64; 4],
    /// Allocated fraction summed per time bucket, and the steps in each.
    buckets: Windows,
    /// Workloads preempted, and the GPU-seconds of work they lost; and of those, the backfill
    /// preempted because a reservation's nodes had drained (the rest: reclaim).
    preemptions: u64,
    lost_gpu_s: i64,
    drained: u64,
    drained_gpu_s: i64,
    /// decide() calls and their wall time.
    decide_calls: u64,
    decide_time: Duration,
    decide_max: Duration,
    /// Decisions whose fair shares differ from [`fair_shares`] (a check of the bench).
    fair_mismatch: u64,
    /// Jobs finished.
    done: u64,
    /// GPU-seconds of the jobs done (work delivered).
    done_gpu_s: i64,
    /// Per size: (wait in seconds, whether the job started); a job never started counts
    /// the time it waited until the end of the run.
    waits: BTreeMap<Size, Vec<(u64, bool)>>,
}

/// One policy on one factory.
struct Sim<'a> {
    jobs: &'a [Job],
    policy: Placer,
    tenants: Vec<TenantQueue>,
    capacity: i64,
    nodes: Vec<NodeView>,
    node_index: HashMap<String, usize>,
    key_index: HashMap<&'a str, usize>,
    /// Per job: the pods placed (all of a running job; a prefix of a first-fit gang).
    held: Vec<Vec<HeldPod>>,
    /// Per job: whether the queue admitted it (last) as backfill.
    backfill: Vec<bool>,
    /// Whether each job was admitted as its tenant's turn past its fair share.
    turn: Vec<bool>,
    /// Per job: when it (last) started and ends, while running.
    running_since: Vec<Option<(u64, u64)>>,
    first_start: Vec<Option<u64>>,
    /// Arrived and not running (a first-fit gang may hold some GPUs).
    waiting: BTreeSet<usize>,
    running: BTreeSet<usize>,
    /// GPUs held per tenant, in all, and by running workloads.
    held_by: [i64; 4],
    held_total: i64,
    useful: i64,
    /// The queue's reservations and the latest decision's fair shares.
    reservations: Vec<Reservation>,
    fair: [i64; 4],
    /// The queue's fair-share ledger, and its half-life in nanoseconds.
    ledger: Ledger,
    half_life: i128,
    stats: Stats,
}

impl<'a> Sim<'a> {
    fn new(jobs: &'a [Job], nodes: usize, policy: Placer, half_life: i128) -> Sim<'a> {
        let nodes: Vec<NodeView> = (0..nodes).map(|i| node(&format!("node-{i:03}"))).collect();
        let capacity = nodes.len() as i64 * GPUS_PER_NODE;
        Sim {
            jobs,
            policy,
            tenants: tenants(capacity),
            capacity,
            node_index: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
            nodes,
            key_index: jobs
                .iter()
                .enumerate()
                .map(|(i, j)| (j.key.as_str(), i))
                .collect(),
            held: vec![Vec::new(); jobs.len()],
            backfill: vec![false; jobs.len()],
            turn: vec![false; jobs.len()],
            running_since: vec![None; jobs.len()],
            first_start: vec![None; jobs.len()],
            waiting: BTreeSet::new(),
            running: BTreeSet::new(),
            held_by: [0; 4],
            held_total: 0,
            useful: 0,
            reservations: Vec::new(),
            fair: [0; 4],
            ledger: Ledger::default(),
            half_life,
            stats: Stats::default(),
        }
    }

    /// Places pod `k` of job `j` on node `n` (which must fit it), as the scheduler would.
    fn place(&mut self, j: usize, k: usize, n: usize) -> Result<(), String> {
        let pod = &self.jobs[j].pods[k];
        let placement = fit::choose(&self.nodes[n..=n], pod)?;
        let devices = placement
            .devices
            .iter()
            .map(|&d| self.nodes[n].devices[d].name.clone())
            .collect();
        fit::commit(&mut self.nodes, pod, &placement);
        self.held[j].push(HeldPod {
            request: pod.clone(),
            node: self.nodes[n].name.clone(),
            devices,
        });
        let g = self.jobs[j].gpus[k];
        self.held_by[self.jobs[j].tenant] += g;
        self.held_total += g;
        Ok(())
    }

    /// Gives back every GPU job `j` holds.
    fn release(&mut self, j: usize) {
        for pod in std::mem::take(&mut self.held[j]) {
            let n = self.node_index[&pod.node];
            let node = &mut self.nodes[n];
            for (k, v) in &pod.request.requests {
                *node.free.entry(k.clone()).or_insert(0) += v;
            }
            for d in node.devices.iter_mut() {
                if pod.devices.contains(&d.name) {
                    d.used -= 1;
                }
            }
            let g = pod.request.requests.get(GPU).copied().unwrap_or(0);
            self.held_by[self.jobs[j].tenant] -= g;
            self.held_total -= g;
        }
    }

    /// Job `j`, all its pods placed, starts running at `t`.
    fn start(&mut self, j: usize, t: u64) {
        self.waiting.remove(&j);
        self.running.insert(j);
        self.running_since[j] = Some((t, t + self.jobs[j].duration));
        self.first_start[j].get_or_insert(t);
        self.useful += self.jobs[j].total_gpus();
    }

    /// Job `j` stops running (finished or preempted) and gives its GPUs back.
    fn stop(&mut self, j: usize) {
        self.running.remove(&j);
        self.running_since[j] = None;
        self.useful -= self.jobs[j].total_gpus();
        self.release(j);
    }

    /// GPUs each tenant still waits for (pods not placed).
    fn pending(&self) -> [i64; 4] {
        let mut out = [0; 4];
        for &j in &self.waiting {
            let job = &self.jobs[j];
            let placed = self.held[j].len();
            out[job.tenant] += job.gpus[placed..].iter().sum::<i64>();
        }
        out
    }

    /// One decision of the GPU queue, carried out.
    fn queue_step(&mut self, t: u64, deadlines: bool, grace: u64) {
        let jobs = self.jobs;
        let admitted: Vec<Admitted> = self
            .running
            .iter()
            .map(|&j| Admitted {
                tenant: TENANTS[jobs[j].tenant].to_string(),
                key: jobs[j].key.clone(),
                pods: self.held[j].clone(),
                priority: 0,
                admitted_at: self.running_since[j].map_or(0, |(s, _)| i128::from(s) * NS),
                arrival: jobs[j].arrival_ns(j),
                leaving: false,
                backfill: self.backfill[j],
                turn: self.turn[j],
                ends_by: self.running_since[j]
                    .filter(|_| deadlines)
                    .map(|(s, _)| i128::from(s + jobs[j].deadline) * NS),
                protected: false,
            })
            .collect();
        let waiting: Vec<Waiting> = self
            .waiting
            .iter()
            .map(|&j| Waiting {
                tenant: TENANTS[jobs[j].tenant].to_string(),
                key: jobs[j].key.clone(),
                pods: jobs[j].pods.clone(),
                needs: jobs[j].pods.len(),
                priority: 0,
                arrival: jobs[j].arrival_ns(j),
                runtime: deadlines.then(|| i128::from(jobs[j].deadline) * NS),
            })
            .collect();
        let input = Input {
            tenants: self.tenants.clone(),
            capacity: Gpus::from([(GPU.to_string(), self.capacity)]),
            nodes: self.nodes.clone(),
            admitted,
            waiting,
            reservations: std::mem::take(&mut self.reservations),
            lead: self.ledger.lead(i128::from(t) * NS, self.half_life),
            now: i128::from(t) * NS,
        };
        let began = Instant::now();
        let policy = Policy {
            reclaim_grace: i128::from(grace) * NS,
            fairness_half_life: self.half_life,
            ..Policy::default()
        };
        let decision: Decision = decide(&input, &policy);
        let took = began.elapsed();
        self.ledger
            .record(input.now, policy.fairness_half_life, &decision.standings);
        self.stats.decide_calls += 1;
        self.stats.decide_time += took;
        self.stats.decide_max = self.stats.decide_max.max(took);

        for (i, name) in TENANTS.iter().enumerate() {
            self.fair[i] = decision
                .standings
                .get(*name)
                .and_then(|m| m.get(GPU))
                .map_or(0, |s| s.fair_share);
        }
        let mut demand = self.pending();
        for (d, h) in demand.iter_mut().zip(self.held_by) {
            *d += h;
        }
        if fair_shares(&self.tenants, self.capacity, &demand) != self.fair {
            self.stats.fair_mismatch += 1;
        }

        for a in &decision.admit {
            let j = *self
                .key_index
                .get(a.key.as_str())
                .expect("the queue admits only workloads it was given");
            self.backfill[j] = a.backfill;
            self.turn[j] = a.turn;
            for (pod, node) in &a.placements {
                let k = jobs[j]
                    .pods
                    .iter()
                    .position(|p| &p.name == pod)
                    .expect("the admission names the workload's pods");
                let n = self.node_index[node];
                self.place(j, k, n)
                    .expect("the queue placed the pod on a node with room for it");
            }
            self.start(j, t);
        }
        for p in &decision.preempt {
            let j = *self
                .key_index
                .get(p.key.as_str())
                .expect("the queue preempts only workloads it was given");
            if let Some((since, _)) = self.running_since[j] {
                let lost = (t - since) as i64 * jobs[j].total_gpus();
                self.stats.preemptions += 1;
                self.stats.lost_gpu_s += lost;
                if p.message.contains("ran as backfill") {
                    self.stats.drained += 1;
                    self.stats.drained_gpu_s += lost;
                }
                self.stop(j);
                self.waiting.insert(j);
            }
        }
        self.reservations = decision.reservations;
    }

    /// The most free GPUs on one node.
    fn max_free(&self) -> i64 {
        self.nodes
            .iter()
            .map(|n| n.free.get(GPU).copied().unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    /// One pass of naive first-fit: pending pods in arrival order, each on the first node
    /// (by name) with room.
    fn first_fit_step(&mut self, t: u64) {
        let mut max_free = self.max_free();
        let order: Vec<usize> = self.waiting.iter().copied().collect();
        for j in order {
            if max_free == 0 {
                break;
            }
            while self.held[j].len() < self.jobs[j].pods.len() {
                let k = self.held[j].len();
                let g = self.jobs[j].gpus[k];
                if g > max_free {
                    break;
                }
                let Some(n) = self
                    .nodes
                    .iter()
                    .position(|n| n.free.get(GPU).copied().unwrap_or(0) >= g)
                else {
                    break;
                };
                self.place(j, k, n)
                    .expect("a node with enough free whole GPUs on one island fits the pod");
                max_free = self.max_free();
            }
            if self.held[j].len() == self.jobs[j].pods.len() {
                // A gang's clock starts once its last member is placed.
                self.start(j, t);
            }
        }
    }

    /// The whole run.
    fn run(mut self, seconds: u64, every: u64) -> Stats {
        let jobs = self.jobs;
        let mut next = 0;
        self.stats.buckets = Windows::new(seconds, WINDOW_S);
        for t in 0..seconds {
            let finished: Vec<usize> = self
                .running
                .iter()
                .copied()
                .filter(|&j| self.running_since[j].is_some_and(|(_, end)| end <= t))
                .collect();
            for j in finished {
                self.stop(j);
                self.stats.done += 1;
                self.stats.done_gpu_s += jobs[j].total_gpus() * jobs[j].duration as i64;
            }
            while next < jobs.len() && jobs[next].arrival <= t {
                self.waiting.insert(next);
                next += 1;
            }
            if t % every == 0 {
                match self.policy {
                    Placer::Queue { deadlines, grace } => self.queue_step(t, deadlines, grace),
                    Placer::FirstFit => self.first_fit_step(t),
                }
            }
            self.measure(t);
        }
        for (j, job) in jobs.iter().enumerate() {
            if job.arrival >= seconds {
                continue;
            }
            let wait = wait(job.arrival, self.first_start[j], seconds);
            self.stats.waits.entry(job.size).or_default().push(wait);
        }
        self.stats
    }

    /// The step's readings, after placement.
    fn measure(&mut self, t: u64) {
        let cap = self.capacity as f64;
        let alloc = self.held_total as f64 / cap;
        self.stats.buckets.add(t, alloc);
        if self.waiting.is_empty() {
            return;
        }
        let s = &mut self.stats;
        s.backlog_steps += 1;
        s.alloc_sum += alloc;
        if alloc >= FULL {
            s.full_steps += 1;
        }
        s.useful_sum += self.useful as f64 / cap;
        if t < WARM_UP_S {
            return;
        }
        let fair = match self.policy {
            Placer::Queue { .. } => self.fair,
            Placer::FirstFit => {
                let mut demand = self.pending();
                for (d, h) in demand.iter_mut().zip(self.held_by) {
                    *d += h;
                }
                fair_shares(&self.tenants, self.capacity, &demand)
            }
        };
        let whole = self.held.iter().any(|pods| {
            let gpus: i64 = pods
                .iter()
                .map(|p| p.request.requests.get(GPU).copied().unwrap_or(0))
                .sum();
            gpus == self.capacity
        });
        let s = &mut self.stats;
        s.steady_steps += 1;
        let mut worst: f64 = 0.0;
        for (i, (held, fair)) in self.held_by.iter().zip(fair).enumerate() {
            let held = *held as f64 / cap;
            let f = fair as f64 / cap;
            let dev = (held - f).abs() * 100.0;
            worst = worst.max(dev);
            s.tenant_held[i] += held;
            s.tenant_fair[i] += f;
            s.tenant_dev[i] += dev;
            if whole {
                s.tenant_whole[i] += held - f;
            }
        }
        s.max_dev_sum += worst;
        if worst <= 5.0 {
            s.within5_steps += 1;
        }
        // What guarantees owe: per tenant, its waiting jobs (oldest first) that fit in what is
        // left of its guarantee.
        let mut owed = 0;
        for (ti, t) in self.tenants.iter().enumerate() {
            let mut room = t.guaranteed(GPU) - self.held_by[ti];
            for &j in &self.waiting {
                let job = &self.jobs[j];
                if job.tenant != ti {
                    continue;
                }
                let need: i64 = job.gpus[self.held[j].len()..].iter().sum();
                if need <= room {
                    room -= need;
                    owed += need;
                }
            }
        }
        let s = &mut self.stats;
        s.owed_sum += owed as f64 / cap;
        if owed > 0 {
            s.short_steps += 1;
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// A factory's description and its two runs.
struct Factory {
    name: String,
    /// Its GPUs.
    gpus: i64,
    jobs: usize,
    demand_gpu_s: i64,
    runs: Vec<(Placer, Stats, Duration)>,
}

fn main() {
    let args = Args::parse();
    let seconds = args.seconds.max(1);
    let every = args.every.max(1);
    let mut factories = Vec::new();
    for (label, nodes) in [("A", 2usize), ("B", args.big_nodes.max(1))] {
        let gpus = nodes as i64 * GPUS_PER_NODE;
        let jobs = workload(args.seed, seconds, nodes, gpus);
        let demand_gpu_s = jobs
            .iter()
            .map(|j| j.total_gpus() * j.duration as i64)
            .sum();
        let mut runs = Vec::new();
        let grace = args.reclaim_grace;
        for policy in [
            Placer::Queue {
                deadlines: false,
                grace: 0,
            },
            Placer::Queue {
                deadlines: true,
                grace: 0,
            },
            Placer::Queue {
                deadlines: false,
                grace,
            },
            Placer::Queue {
                deadlines: true,
                grace,
            },
            Placer::FirstFit,
        ] {
            let began = Instant::now();
            let half_life = i128::from(args.fairness_half_life) * NS;
            let stats = Sim::new(&jobs, nodes, policy, half_life).run(seconds, every);
            let took = began.elapsed();
            eprintln!(
                "factory {label} ({nodes} × 8), {}: {:.1} s",
                policy.label(),
                took.as_secs_f64()
            );
            runs.push((policy, stats, took));
        }
        factories.push(Factory {
            name: format!("{label}: {nodes} × 8 GPUs"),
            gpus,
            jobs: jobs.len(),
            demand_gpu_s,
            runs,
        });
    }
    report(&args, seconds, every, &factories);
}

/// Prints the tables (markdown).
fn report(args: &Args, seconds: u64, every: u64, factories: &[Factory]) {
    println!(
        "seed {}, {seconds} simulated s, placement every {every} s; warm-up excluded from \
         fairness: {WARM_UP_S} s; the queue's fair-share half-life: {} s\n",
        args.seed, args.fairness_half_life
    );
    for f in factories {
        let capacity_gpu_s = f.gpus * seconds as i64;
        println!(
            "- factory {}: {} jobs, {} GPU-s of work ({:.2} × the GPU-seconds of the run)",
            f.name,
            f.jobs,
            f.demand_gpu_s,
            f.demand_gpu_s as f64 / capacity_gpu_s.max(1) as f64
        );
    }
    println!();
    println!(
        "| factory | policy | allocated under backlog | time ≥ 95 % | useful (running) | \
         fairness: max dev, mean | over time: worst tenant's mean share − mean fair share (of it, while one workload held every GPU) | \
         steady time all ≤ 5 pts | preemptions (GPU-s lost; of them \
         for reservations) | \
         jobs done / never started | work done (GPU-s) | decide() calls/s (mean, max ms) | \
         guarantees: GPUs owed (mean), steady time short |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for f in factories {
        for (policy, s, _) in &f.runs {
            let b = s.backlog_steps.max(1) as f64;
            let steady = s.steady_steps.max(1) as f64;
            let never: usize = s
                .waits
                .values()
                .map(|w| w.iter().filter(|(_, started)| !started).count())
                .sum();
            let decisions = if s.decide_calls == 0 {
                "–".to_string()
            } else {
                let secs = s.decide_time.as_secs_f64();
                format!(
                    "{:.0} ({:.2}, {:.1} ms)",
                    s.decide_calls as f64 / secs.max(1e-9),
                    secs * 1000.0 / s.decide_calls as f64,
                    s.decide_max.as_secs_f64() * 1000.0
                )
            };
            // Shares over time: the tenant whose mean allocation is furthest from its mean fair
            // share (whole 8-GPU jobs on 16 GPUs cannot be within 5 points at every instant).
            let (who, off) = (0..TENANTS.len())
                .map(|i| (i, (s.tenant_held[i] - s.tenant_fair[i]) * 100.0 / steady))
                .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                .unwrap_or((0, 0.0));
            // And how much of it fell while one workload held every GPU.
            let whole = s.tenant_whole[who] * 100.0 / steady;
            let whole = if whole.abs() >= 0.05 {
                format!("; {whole:+.1} of it while one workload held every GPU")
            } else {
                String::new()
            };
            println!(
                "| {} | {} | {} | {} | {} | {:.1} pts | {:+.1} pts ({}{}) | {:.0} % | {} | {} / {} | {} | {} | {:.2} %, {:.0} % |",
                f.name,
                policy.label(),
                pct(s.alloc_sum / b),
                pct(s.full_steps as f64 / b),
                pct(s.useful_sum / b),
                s.max_dev_sum / steady,
                off,
                TENANTS[who],
                whole,
                s.within5_steps as f64 * 100.0 / steady,
                if matches!(policy, Placer::Queue { .. }) {
                    format!(
                        "{} ({}; {} ({}))",
                        s.preemptions, s.lost_gpu_s, s.drained, s.drained_gpu_s
                    )
                } else {
                    "–".to_string()
                },
                s.done,
                never,
                s.done_gpu_s,
                decisions,
                s.owed_sum * 100.0 / steady,
                s.short_steps as f64 * 100.0 / steady
            );
        }
    }
    println!();
    println!("Wait from arrival to (first) start, seconds: p50 / p99 / max (`≥`: includes jobs never started, counted to the end of the run).\n");
    let labels: Vec<String> = factories
        .first()
        .map(|f| f.runs.iter().map(|(p, _, _)| p.label()).collect())
        .unwrap_or_default();
    println!(
        "| factory | job size | jobs | {} | never started: {} |",
        labels.join(" | "),
        labels.join(" / ")
    );
    println!("|---|---|---|{}---|", "---|".repeat(labels.len()));
    for f in factories {
        for size in Size::ALL {
            let waits: Vec<&[(u64, bool)]> = f
                .runs
                .iter()
                .map(|(_, s, _)| s.waits.get(&size).map(Vec::as_slice).unwrap_or(&[]))
                .collect();
            let jobs = waits.first().map_or(0, |w| w.len());
            if jobs == 0 {
                continue;
            }
            let never: Vec<String> = waits
                .iter()
                .map(|w| w.iter().filter(|(_, s)| !s).count().to_string())
                .collect();
            let cells: Vec<String> = waits.iter().map(|w| wait_cell(w)).collect();
            println!(
                "| {} | {} | {} | {} | {} |",
                f.name,
                size.label(),
                jobs,
                cells.join(" | "),
                never.join(" / ")
            );
        }
    }
    println!();
    println!("Steady state (backlog, after the warm-up), per tenant: mean allocated share / mean fair share / mean |deviation|, % of the GPUs.\n");
    println!("| factory | policy | {} |", TENANTS.join(" | "));
    println!("|---|---|{}", "---|".repeat(TENANTS.len()));
    for f in factories {
        for (policy, s, _) in &f.runs {
            let steady = s.steady_steps.max(1) as f64;
            let cells: Vec<String> = (0..TENANTS.len())
                .map(|i| {
                    format!(
                        "{:.1} / {:.1} / {:.1}",
                        s.tenant_held[i] * 100.0 / steady,
                        s.tenant_fair[i] * 100.0 / steady,
                        s.tenant_dev[i] / steady
                    )
                })
                .collect();
            println!(
                "| {} | {} | {} |",
                f.name,
                policy.label(),
                cells.join(" | ")
            );
        }
    }
    println!();
    let windows = factories
        .first()
        .and_then(|f| f.runs.first())
        .map(|(_, s, _)| s.buckets.clone())
        .unwrap_or_default();
    let (buckets, heads) = (windows.len(), windows.heads());

    println!("GPU allocation over time (mean % of the GPUs allocated in each window).\n");
    println!("| factory | policy | {} |", heads.join(" | "));
    println!("|---|---|{}", "---|".repeat(buckets));
    for f in factories {
        for (policy, s, _) in &f.runs {
            let cells = s.buckets.percents();
            println!(
                "| {} | {} | {} |",
                f.name,
                policy.label(),
                cells.join(" | ")
            );
        }
    }
    for f in factories {
        for (policy, s, took) in &f.runs {
            if s.fair_mismatch > 0 {
                println!(
                    "\nnote: factory {}, {}: {} decisions whose fair shares differ from the bench's own water-filling",
                    f.name,
                    policy.label(),
                    s.fair_mismatch
                );
            }
            eprintln!(
                "factory {}, {}: simulated in {:.1} s",
                f.name,
                policy.label(),
                took.as_secs_f64()
            );
        }
    }
}
