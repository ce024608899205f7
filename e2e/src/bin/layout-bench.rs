//! `layout-bench`: GPU layouts that follow the queue's demand against a fixed layout, side by
//! side on one seeded workload whose mix of GPU kinds shifts, in a discrete-time simulation
//! (issue gpu-queues, deliverable 6 and "Benchmark").
//!
//! A factory of `--nodes` nodes × 8 H200. Four tenants, each asking for one kind of GPU and
//! guaranteed a quarter of the factory in it:
//!
//! * `train`: whole GPUs (`nvidia.com/gpu`), pods of 1, 2, 4 or 8;
//! * `infer`: MIG `1g.18gb` instances (7 to a GPU);
//! * `eval`: MIG `3g.71gb` instances (2 to a GPU);
//! * `notebooks`: time-sliced GPUs (`nvidia.com/gpu.shared`, 4 to a GPU).
//!
//! Jobs arrive over the first three quarters of the run, 1.3 × the factory's capacity in
//! GPU-seconds (a MIG `1g.18gb` instance counts 1/7 of a GPU, a `3g.71gb` 1/2, a time-slice
//! 1/4), in three phases of different mixes: inference first, then training, then evaluation
//! and notebooks. Every simulated second finished jobs give their devices back, jobs arrive, a
//! simulated node agent applies layouts (a GPU whose layout changes is offered to no one; once
//! none of its devices is in use it takes `--reconfigure-seconds` to come back in its new
//! layout), and every `--every` seconds the GPU queue decides ([`fabrik_gpu::queue::decide`],
//! its real decision function), the runs in the way of a new layout that may go are preempted
//! ([`layouts::in_the_way`]: backfill, and borrowers where a tenant is owed the new layout's
//! kind by its guarantee) and, where layouts follow demand, the queue's layout plan
//! ([`layouts::plan`], the controller's own) is written to the nodes' layout annotation. Runs:
//!
//! * **fixed layout**: node pools an administrator would lay out for the mean mix — half the
//!   nodes whole, a quarter MIG `1g.18gb`, an eighth MIG `3g.71gb`, the rest time-sliced; the
//!   layout never changes;
//! * **layouts follow demand**, from the same node pools;
//! * **layouts follow demand**, from every GPU whole (a factory nobody laid out).
//!
//! Not modelled: the API server, the syncer, the scheduler binding the pods, grace periods,
//! PodDisruptionBudgets, run times declared.
//!
//! ```sh
//! cargo build --release -p e2e --features bench --bin layout-bench
//! target/release/layout-bench [--seed N] [--seconds S] [--nodes N] [--every K] [--reconfigure-seconds R]
//! ```
//!
//! Results: `docs/benchmarks.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use clap::Parser;
use e2e::seeded::{wait, wait_cell, Rng, Windows};
use fabrik_gpu::device::GpuInfo;
use fabrik_gpu::layout::{self, GpuLayout, Layout};
use fabrik_gpu::placement::fit;
use fabrik_gpu::placement::model::{GpuDevice, NodeView, PodRequest};
use fabrik_gpu::profiles::GpuModel;
use fabrik_gpu::queue::layouts::{self, Recent};
use fabrik_gpu::queue::{
    decide, Admitted, Gpus, HeldPod, Input, Policy, Reservation, TenantQueue, Waiting, HOSTNAME,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The GPU model of every node.
const MODEL: &str = "H200-141GB";
/// GPUs per node.
const GPUS_PER_NODE: u32 = 8;
/// Nanoseconds per simulated second (the queue's clock is in nanoseconds).
const NS: i128 = 1_000_000_000;
/// The tenants and the kind of GPU each asks for.
const TENANTS: [(&str, &str); 4] = [
    ("train", fabrik_api::RESOURCE_GPU),
    ("infer", "nvidia.com/mig-1g.18gb"),
    ("eval", "nvidia.com/mig-3g.71gb"),
    ("notebooks", fabrik_api::RESOURCE_GPU_SHARED),
];
/// Each phase's mix: percent of the demand (in GPU-seconds) of each tenant.
const PHASES: [[u64; 4]; 3] = [[30, 50, 10, 10], [60, 15, 15, 10], [20, 20, 30, 30]];
/// Demand while jobs arrive, in percent of the factory's capacity.
const DEMAND_PCT: u64 = 130;
/// Width of the allocation-over-time windows, in seconds.
const WINDOW_S: u64 = 600;

/// Command line.
#[derive(Parser)]
#[command(about = "GPU layouts that follow the queue's demand vs a fixed layout")]
struct Args {
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated seconds.
    #[arg(long, default_value_t = 3600)]
    seconds: u64,
    /// Nodes (8 GPUs each; at least 8, for the fixed layout's pools).
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    /// Decide every K simulated seconds (jobs still arrive and finish on the second).
    #[arg(long, default_value_t = 5)]
    every: u64,
    /// How long a node agent takes to bring an idle GPU back in a new layout.
    #[arg(long, default_value_t = 20)]
    reconfigure_seconds: u64,
    /// How long a GPU laid out anew stays as it is (the queue policy's layout hold).
    #[arg(long, default_value_t = 60)]
    layout_hold_seconds: u64,
}

/// One job: a single pod.
struct Job {
    /// Index into [`TENANTS`].
    tenant: usize,
    key: String,
    pod: PodRequest,
    /// Devices its pod asks for.
    devices: i64,
    /// Run time once started, seconds.
    duration: u64,
    /// Arrival, seconds.
    arrival: u64,
}

/// Devices of each tenant's kind one GPU holds when laid out for it.
fn per_gpu(model: &'static GpuModel) -> [i64; 4] {
    TENANTS.map(|(_, r)| layouts::gpu_layout_for(r, model).map_or(1, |(_, n)| n))
}

/// The seeded workload: jobs sorted by arrival (their index is their id).
fn workload(seed: u64, seconds: u64, gpus: i64, per_gpu: [i64; 4]) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    let window = (seconds * 3 / 4).max(3);
    let phase_len = window / 3;
    // (tenant, devices, duration, arrival)
    let mut drafts: Vec<(usize, i64, u64, u64)> = Vec::new();
    for (p, mix) in PHASES.iter().enumerate() {
        let start = p as u64 * phase_len;
        for (tenant, pct) in mix.iter().enumerate() {
            // GPU-seconds × the devices of the kind one GPU holds: device-seconds.
            let target =
                gpus as u64 * phase_len * DEMAND_PCT / 100 * pct / 100 * per_gpu[tenant] as u64;
            let mut demand = 0u64;
            while demand < target {
                let devices = match TENANTS[tenant].0 {
                    "train" => match rng.pct() {
                        0..=29 => 1,
                        30..=54 => 2,
                        55..=79 => 4,
                        _ => 8,
                    },
                    _ => 1,
                };
                let duration = match TENANTS[tenant].0 {
                    "notebooks" => rng.range(30, 300),
                    "eval" => rng.range(60, 300),
                    _ => rng.range(60, 600),
                };
                let arrival = start + rng.range(0, phase_len - 1);
                demand += devices as u64 * duration;
                drafts.push((tenant, devices, duration, arrival));
            }
        }
    }
    drafts.sort_by_key(|(tenant, _, _, arrival)| (*arrival, *tenant));
    drafts
        .into_iter()
        .enumerate()
        .map(|(id, (tenant, devices, duration, arrival))| {
            let (name, resource) = TENANTS[tenant];
            let namespace = format!("fabrik-{name}");
            Job {
                tenant,
                key: format!("{namespace}/job-{id}"),
                pod: PodRequest {
                    namespace,
                    name: format!("job-{id}"),
                    requests: BTreeMap::from([
                        ("pods".to_string(), 1),
                        (resource.to_string(), devices),
                    ]),
                    ..Default::default()
                },
                devices,
                duration,
                arrival,
            }
        })
        .collect()
}

/// How the factory starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Node pools for the mean mix.
    Pools,
    /// Every GPU whole.
    Whole,
}

/// The runs compared.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Run {
    start: Start,
    /// Whether the queue's layout plan is written.
    follow: bool,
}

impl Run {
    fn label(self) -> &'static str {
        match (self.follow, self.start) {
            (false, Start::Pools) => "fixed layout (node pools)",
            (false, Start::Whole) => "fixed layout (all whole)",
            (true, Start::Pools) => "layouts follow demand, from node pools",
            (true, Start::Whole) => "layouts follow demand, from all whole",
        }
    }
}

/// The layout annotation of node `n` of `nodes` at the start.
fn initial_layout(start: Start, n: usize, nodes: usize) -> &'static str {
    let whole = "mode: whole\n";
    if start == Start::Whole {
        return whole;
    }
    let (a, b, c) = (
        nodes / 2,
        nodes / 2 + nodes / 4,
        nodes / 2 + nodes / 4 + nodes / 8,
    );
    if n < a {
        whole
    } else if n < b {
        "mode: mig\ngeometry: all-1g.18gb\n"
    } else if n < c {
        "mode: mig\ngeometry: all-3g.71gb\n"
    } else {
        "mode: time-slicing\nreplicas: 4\n"
    }
}

/// One GPU as the simulated node agent has it.
struct GpuState {
    /// Its layout as applied.
    applied: GpuLayout,
    /// Its devices in that layout.
    devices: Vec<GpuDevice>,
    /// When a change to an idle GPU completes.
    ready_at: Option<u64>,
}

/// One node: its layout annotation, the layout each GPU should have, and its GPUs.
struct NodeState {
    name: String,
    annotation: String,
    desired: BTreeMap<u32, GpuLayout>,
    gpus: Vec<GpuState>,
}

/// The devices GPU `i` of `node` offers laid out as `l`.
fn devices(model: &'static GpuModel, node: &str, i: u32, l: &GpuLayout) -> Vec<GpuDevice> {
    let target = layout::gpu_target(&GpuInfo::plain(i, model), l)
        .expect("the bench's layouts are valid for its model");
    let mut out = Vec::new();
    for (resource, n) in target.resources() {
        let (count, slots) = if resource == fabrik_api::RESOURCE_GPU_SHARED {
            (1, n)
        } else {
            (n, 1)
        };
        for _ in 0..count {
            let k = out.len();
            out.push(GpuDevice {
                name: format!("gpu-{i}-{k}"),
                uuid: format!("GPU-{node}-{i}-{k}"),
                resource: resource.clone(),
                gpu: i64::from(i),
                numa: i64::from(i / 4),
                island: 0,
                slots,
                used: 0,
            });
        }
    }
    out
}

impl NodeState {
    fn new(model: &'static GpuModel, name: String, annotation: &str) -> NodeState {
        let desired = per_gpu_layouts(annotation);
        let gpus = desired
            .iter()
            .map(|(i, l)| GpuState {
                applied: l.clone(),
                devices: devices(model, &name, *i, l),
                ready_at: None,
            })
            .collect();
        NodeState {
            name,
            annotation: annotation.to_string(),
            desired,
            gpus,
        }
    }

    /// Whether GPU `i` waits for a new layout (and so is offered to no one).
    fn changing(&self, i: usize) -> bool {
        self.desired.get(&(i as u32)) != Some(&self.gpus[i].applied)
    }

    /// The node as the queue sees it: the devices of every GPU not being changed.
    fn view(&self) -> NodeView {
        let mut free = BTreeMap::from([
            ("cpu".to_string(), 1_000_000),
            ("memory".to_string(), 1 << 40),
            ("pods".to_string(), 1_000),
        ]);
        let mut offered = Vec::new();
        for (i, g) in self.gpus.iter().enumerate() {
            if self.changing(i) {
                continue;
            }
            for d in &g.devices {
                *free.entry(d.resource.clone()).or_insert(0) += d.slots - d.used;
                offered.push(d.clone());
            }
        }
        NodeView {
            name: self.name.clone(),
            schedulable: true,
            labels: BTreeMap::from([(HOSTNAME.to_string(), self.name.clone())]),
            free,
            devices: offered,
            ..Default::default()
        }
    }

    /// The Node object the queue's layout plan reads: the node agent's labels, the layout
    /// annotation and the agent's layout status (which GPUs wait for which pods).
    fn object(&self, pods_on: &BTreeMap<u32, Vec<String>>) -> Node {
        let waiting: BTreeMap<String, &Vec<String>> = pods_on
            .iter()
            .filter(|(i, _)| self.changing(**i as usize))
            .map(|(i, p)| (i.to_string(), p))
            .collect();
        let pending = (0..self.gpus.len()).any(|i| self.changing(i));
        let status = serde_json::json!({
            "state": if pending { "pending" } else { "applied" },
            "waitingFor": waiting,
        });
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([
                    (fabrik_api::LABEL_GPU_MODEL.to_string(), MODEL.to_string()),
                    (
                        fabrik_api::LABEL_GPU_COUNT.to_string(),
                        GPUS_PER_NODE.to_string(),
                    ),
                ])),
                annotations: Some(BTreeMap::from([
                    (
                        fabrik_api::ANNOTATION_GPU_LAYOUT.to_string(),
                        self.annotation.clone(),
                    ),
                    (
                        fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
                        status.to_string(),
                    ),
                ])),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The simulated node agent's second: a GPU whose layout changes is withheld; once none
    /// of its devices is in use, it comes back in its new layout after `reconfigure` seconds.
    fn agent(&mut self, model: &'static GpuModel, t: u64, reconfigure: u64) -> u32 {
        let mut applied = 0;
        for i in 0..self.gpus.len() {
            if !self.changing(i) {
                continue;
            }
            let g = &mut self.gpus[i];
            if g.devices.iter().any(|d| d.used > 0) {
                g.ready_at = None;
                continue;
            }
            let ready = *g.ready_at.get_or_insert(t + reconfigure);
            if t >= ready {
                let l = self.desired[&(i as u32)].clone();
                g.devices = devices(model, &self.name, i as u32, &l);
                g.applied = l;
                g.ready_at = None;
                applied += 1;
            }
        }
        applied
    }
}

/// Each GPU's layout as `annotation` says it.
fn per_gpu_layouts(annotation: &str) -> BTreeMap<u32, GpuLayout> {
    let indexes: Vec<u32> = (0..GPUS_PER_NODE).collect();
    layout::parse(annotation)
        .ok()
        .and_then(|l| l.per_gpu(&indexes))
        .unwrap_or_else(|| {
            Layout::Whole {}
                .per_gpu(&indexes)
                .expect("whole GPUs are said GPU by GPU")
        })
}

/// What one run measured.
#[derive(Default)]
struct Stats {
    /// Steps with a job waiting.
    backlog_steps: u64,
    /// Sum over backlog steps of the GPU-equivalents held, as a fraction of the GPUs.
    alloc_sum: f64,
    /// Sum over backlog steps of the fraction of GPUs being laid out (offered to no one).
    changing_sum: f64,
    /// Per tenant, sum over backlog steps of the fraction of the GPUs it holds.
    tenant_sum: [f64; 4],
    /// Allocated fraction summed per time bucket, and the steps in each.
    buckets: Windows,
    /// Layouts written, GPUs they re-laid out, and of those GPUs the ones busy (drained).
    writes: u64,
    relaid: u64,
    drained: u64,
    /// GPU layout changes the node agents completed.
    applied: u64,
    /// Workloads preempted: by reclaim (within a kind), and in the way of a new layout.
    reclaimed: u64,
    for_layouts: u64,
    /// Wall time of decide() and of the layout plan.
    decide: (u64, Duration, Duration),
    plan: (u64, Duration, Duration),
    /// Jobs done, and the GPU-seconds of their work.
    done: u64,
    done_gpu_s: f64,
    /// Per tenant and devices per pod: (wait in seconds, whether the job started).
    waits: BTreeMap<(usize, i64), Vec<(u64, bool)>>,
}

fn timed(slot: &mut (u64, Duration, Duration), took: Duration) {
    slot.0 += 1;
    slot.1 += took;
    slot.2 = slot.2.max(took);
}

/// One run.
struct Sim<'a> {
    jobs: &'a [Job],
    run: Run,
    model: &'static GpuModel,
    per_gpu: [i64; 4],
    gpus: i64,
    tenants: Vec<TenantQueue>,
    nodes: Vec<NodeState>,
    node_index: HashMap<String, usize>,
    key_index: HashMap<&'a str, usize>,
    /// Per job while it holds devices: its pod's node and devices.
    held: Vec<Option<HeldPod>>,
    backfill: Vec<bool>,
    /// Per job: when it (last) started and ends, while running.
    running_since: Vec<Option<(u64, u64)>>,
    first_start: Vec<Option<u64>>,
    waiting: BTreeSet<usize>,
    running: BTreeSet<usize>,
    /// GPU-equivalents held, in all and per tenant.
    held_gpus: f64,
    held_by: [f64; 4],
    reservations: Vec<Reservation>,
    recent: Recent,
    policy: Policy,
    stats: Stats,
}

impl<'a> Sim<'a> {
    fn new(
        jobs: &'a [Job],
        nodes: usize,
        run: Run,
        model: &'static GpuModel,
        policy: Policy,
    ) -> Sim<'a> {
        let per_gpu = per_gpu(model);
        let gpus = nodes as i64 * i64::from(GPUS_PER_NODE);
        let nodes: Vec<NodeState> = (0..nodes)
            .map(|n| {
                NodeState::new(
                    model,
                    format!("node-{n:03}"),
                    initial_layout(run.start, n, nodes),
                )
            })
            .collect();
        Sim {
            jobs,
            run,
            model,
            per_gpu,
            gpus,
            tenants: TENANTS
                .iter()
                .zip(per_gpu)
                .map(|((name, resource), per)| TenantQueue {
                    name: name.to_string(),
                    resources: vec![resource.to_string()],
                    guarantee: Some(gpus / 4 * per),
                    borrowing_limit: gpus * per,
                    lending_limit: None,
                    weight: 1,
                    parent: None,
                })
                .collect(),
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
            held: (0..jobs.len()).map(|_| None).collect(),
            backfill: vec![false; jobs.len()],
            running_since: vec![None; jobs.len()],
            first_start: vec![None; jobs.len()],
            waiting: BTreeSet::new(),
            running: BTreeSet::new(),
            held_gpus: 0.0,
            held_by: [0.0; 4],
            reservations: Vec::new(),
            recent: Recent::default(),
            policy,
            stats: Stats::default(),
        }
    }

    /// GPU-equivalents of job `j`.
    fn gpu_eq(&self, j: usize) -> f64 {
        let job = &self.jobs[j];
        job.devices as f64 / self.per_gpu[job.tenant] as f64
    }

    /// Places job `j` on node `n` as the scheduler would, and starts it at `t`.
    fn start(&mut self, j: usize, n: usize, t: u64) {
        let job = &self.jobs[j];
        let view = self.nodes[n].view();
        let placement = fit::choose(std::slice::from_ref(&view), &job.pod)
            .expect("the queue placed the pod on a node with room for it");
        let names: Vec<String> = placement
            .devices
            .iter()
            .map(|&d| view.devices[d].name.clone())
            .collect();
        self.mark(n, &names, 1);
        self.held[j] = Some(HeldPod {
            request: job.pod.clone(),
            node: self.nodes[n].name.clone(),
            devices: names,
        });
        self.waiting.remove(&j);
        self.running.insert(j);
        self.running_since[j] = Some((t, t + job.duration));
        self.first_start[j].get_or_insert(t);
        self.held_gpus += self.gpu_eq(j);
        self.held_by[job.tenant] += self.gpu_eq(j);
    }

    /// Adds `by` to the use of the named devices of node `n`.
    fn mark(&mut self, n: usize, names: &[String], by: i64) {
        for g in &mut self.nodes[n].gpus {
            for d in &mut g.devices {
                if names.contains(&d.name) {
                    d.used += by;
                }
            }
        }
    }

    /// Job `j` stops (finished or preempted) and gives its devices back.
    fn stop(&mut self, j: usize) {
        self.running.remove(&j);
        self.running_since[j] = None;
        if let Some(pod) = self.held[j].take() {
            let n = self.node_index[&pod.node];
            self.mark(n, &pod.devices, -1);
        }
        self.held_gpus -= self.gpu_eq(j);
        self.held_by[self.jobs[j].tenant] -= self.gpu_eq(j);
    }

    /// The pods on each GPU of each node (for the node agents' layout status).
    fn pods_on(&self) -> Vec<BTreeMap<u32, Vec<String>>> {
        let mut out = vec![BTreeMap::new(); self.nodes.len()];
        for &j in &self.running {
            let Some(pod) = &self.held[j] else { continue };
            let n = self.node_index[&pod.node];
            for d in &pod.devices {
                let gpu = d
                    .strip_prefix("gpu-")
                    .and_then(|r| r.split('-').next())
                    .and_then(|i| i.parse::<u32>().ok());
                if let Some(g) = gpu {
                    let list: &mut Vec<String> = out[n].entry(g).or_default();
                    list.push(format!("{}/{}", pod.request.namespace, pod.request.name));
                }
            }
        }
        out
    }

    /// One decision of the GPU queue, and (where layouts follow demand) its layout plan,
    /// carried out.
    fn queue_step(&mut self, t: u64) {
        let jobs = self.jobs;
        let views: Vec<NodeView> = self.nodes.iter().map(NodeState::view).collect();
        let pods_on = self.pods_on();
        let objects: Vec<Node> = self
            .nodes
            .iter()
            .zip(&pods_on)
            .map(|(n, p)| n.object(p))
            .collect();
        let mut capacity = Gpus::new();
        for d in views.iter().flat_map(|v| &v.devices) {
            *capacity.entry(d.resource.clone()).or_insert(0) += d.slots;
        }
        let admitted: Vec<Admitted> = self
            .running
            .iter()
            .filter_map(|&j| {
                Some(Admitted {
                    tenant: TENANTS[jobs[j].tenant].0.to_string(),
                    key: jobs[j].key.clone(),
                    pods: vec![self.held[j].clone()?],
                    admitted_at: self.running_since[j].map_or(0, |(s, _)| i128::from(s) * NS),
                    arrival: i128::from(jobs[j].arrival) * NS + j as i128,
                    backfill: self.backfill[j],
                    ..Default::default()
                })
            })
            .collect();
        let waiting: Vec<Waiting> = self
            .waiting
            .iter()
            .map(|&j| Waiting {
                tenant: TENANTS[jobs[j].tenant].0.to_string(),
                key: jobs[j].key.clone(),
                pods: vec![jobs[j].pod.clone()],
                needs: 1,
                priority: 0,
                arrival: i128::from(jobs[j].arrival) * NS + j as i128,
                runtime: None,
            })
            .collect();
        let input = Input {
            tenants: self.tenants.clone(),
            capacity,
            nodes: views,
            admitted,
            waiting,
            reservations: std::mem::take(&mut self.reservations),
            // Fair shares at each instant: this bench compares layouts, not fairness over time
            // (its policy has no ledger).
            lead: Default::default(),
            now: i128::from(t) * NS,
        };
        let policy = self.policy.clone();
        let began = Instant::now();
        let mut decision = decide(&input, &policy);
        timed(&mut self.stats.decide, began.elapsed());
        let in_the_way = if self.run.follow {
            layouts::in_the_way(&input, &objects, &policy, &decision.limited)
        } else {
            Vec::new()
        };
        for a in &decision.admit {
            let j = self.key_index[a.key.as_str()];
            self.backfill[j] = a.backfill;
            for (_, node) in &a.placements {
                self.start(j, self.node_index[node], t);
            }
        }
        let reclaimed = decision.preempt.len() as u64;
        decision.preempt.extend(in_the_way);
        let mut stopped = BTreeSet::new();
        for (k, p) in decision.preempt.iter().enumerate() {
            let j = self.key_index[p.key.as_str()];
            if self.running_since[j].is_some() && stopped.insert(j) {
                if (k as u64) < reclaimed {
                    self.stats.reclaimed += 1;
                } else {
                    self.stats.for_layouts += 1;
                }
                self.stop(j);
                self.waiting.insert(j);
            }
        }
        self.reservations = decision.reservations.clone();
        if !self.run.follow {
            return;
        }
        let began = Instant::now();
        let changes = layouts::plan(&input, &objects, &self.recent, &policy, &decision.limited);
        timed(&mut self.stats.plan, began.elapsed());
        for change in changes {
            let n = self.node_index[&change.node];
            self.stats.writes += 1;
            self.stats.relaid += change.gpus.len() as u64;
            let busy = change
                .gpus
                .keys()
                .filter(|&&g| {
                    self.nodes[n].gpus[g as usize]
                        .devices
                        .iter()
                        .any(|d| d.used > 0)
                })
                .count();
            self.stats.drained += busy as u64;
            self.recent
                .note(&change.node, change.gpus.keys().copied(), input.now);
            let node = &mut self.nodes[n];
            node.desired = per_gpu_layouts(&change.layout);
            node.annotation = change.layout;
        }
    }

    /// The whole run.
    fn run(mut self, seconds: u64, every: u64, reconfigure: u64) -> Stats {
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
                self.stats.done_gpu_s += self.gpu_eq(j) * jobs[j].duration as f64;
            }
            while next < jobs.len() && jobs[next].arrival <= t {
                self.waiting.insert(next);
                next += 1;
            }
            for n in 0..self.nodes.len() {
                let model = self.model;
                self.stats.applied += u64::from(self.nodes[n].agent(model, t, reconfigure));
            }
            if t % every == 0 {
                self.queue_step(t);
            }
            self.measure(t);
        }
        for (j, job) in jobs.iter().enumerate() {
            if job.arrival >= seconds {
                continue;
            }
            let wait = wait(job.arrival, self.first_start[j], seconds);
            self.stats
                .waits
                .entry((job.tenant, job.devices))
                .or_default()
                .push(wait);
        }
        self.stats
    }

    fn measure(&mut self, t: u64) {
        let alloc = self.held_gpus / self.gpus as f64;
        self.stats.buckets.add(t, alloc);
        if self.waiting.is_empty() {
            return;
        }
        let changing: usize = self
            .nodes
            .iter()
            .map(|n| (0..n.gpus.len()).filter(|&i| n.changing(i)).count())
            .sum();
        let s = &mut self.stats;
        s.backlog_steps += 1;
        s.alloc_sum += alloc;
        s.changing_sum += changing as f64 / self.gpus as f64;
        for (sum, held) in s.tenant_sum.iter_mut().zip(self.held_by) {
            *sum += held / self.gpus as f64;
        }
    }
}

fn ms(slot: &(u64, Duration, Duration)) -> String {
    if slot.0 == 0 {
        return "–".to_string();
    }
    format!(
        "{:.2} / {:.1}",
        slot.1.as_secs_f64() * 1000.0 / slot.0 as f64,
        slot.2.as_secs_f64() * 1000.0
    )
}

fn main() {
    let args = Args::parse();
    let seconds = args.seconds.max(60);
    let every = args.every.max(1);
    let nodes = args.nodes.max(8);
    let model = fabrik_gpu::profiles::model(MODEL).expect("a built-in model");
    let per_gpu = per_gpu(model);
    let gpus = nodes as i64 * i64::from(GPUS_PER_NODE);
    let jobs = workload(args.seed, seconds, gpus, per_gpu);
    let demand: f64 = jobs
        .iter()
        .map(|j| j.devices as f64 / per_gpu[j.tenant] as f64 * j.duration as f64)
        .sum();
    let runs = [
        Run {
            start: Start::Pools,
            follow: false,
        },
        Run {
            start: Start::Pools,
            follow: true,
        },
        Run {
            start: Start::Whole,
            follow: true,
        },
    ];
    let mut results = Vec::new();
    for run in runs {
        let began = Instant::now();
        let policy = Policy {
            layout_hold: i128::from(args.layout_hold_seconds) * NS,
            fairness_half_life: 0,
            ..Policy::default()
        };
        let stats = Sim::new(&jobs, nodes, run, model, policy).run(
            seconds,
            every,
            args.reconfigure_seconds,
        );
        eprintln!(
            "{}: simulated in {:.1} s",
            run.label(),
            began.elapsed().as_secs_f64()
        );
        results.push((run, stats));
    }
    println!(
        "seed {}, {nodes} nodes × {GPUS_PER_NODE} {MODEL} ({gpus} GPUs), {seconds} simulated s, \
         decisions every {every} s, a GPU re-laid out in {} s once idle and then held {} s; {} \
         jobs, {:.0} GPU-s of work ({:.2} × the GPU-seconds of the run)\n",
        args.seed,
        args.reconfigure_seconds,
        args.layout_hold_seconds,
        jobs.len(),
        demand,
        demand / (gpus as f64 * seconds as f64)
    );
    println!(
        "| run | allocated under backlog | GPUs being laid out | layouts written (GPUs; of them busy) | \
         layout changes applied | preempted: reclaim / in a layout's way | jobs done / \
         never started | work done (GPU-s) | decide() mean / max ms | plan() mean / max ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (run, s) in &results {
        let b = s.backlog_steps.max(1) as f64;
        let never: usize = s
            .waits
            .values()
            .map(|w| w.iter().filter(|(_, started)| !started).count())
            .sum();
        println!(
            "| {} | {:.1} % | {:.1} % | {} ({}; {}) | {} | {} / {} | {} / {} | {:.0} | {} | {} |",
            run.label(),
            s.alloc_sum * 100.0 / b,
            s.changing_sum * 100.0 / b,
            s.writes,
            s.relaid,
            s.drained,
            s.applied,
            s.reclaimed,
            s.for_layouts,
            s.done,
            never,
            s.done_gpu_s,
            ms(&s.decide),
            ms(&s.plan),
        );
    }
    println!("\nWait from arrival to (first) start, seconds: p50 / p99 / max (`≥`: includes jobs never started, counted to the end of the run); never started in brackets.\n");
    let labels: Vec<&str> = results.iter().map(|(r, _)| r.label()).collect();
    println!("| tenant (kind) | jobs | {} |", labels.join(" | "));
    println!("|---|---|{}", "---|".repeat(labels.len()));
    // Each tenant, then (where its pods differ in size) each size.
    let sizes: BTreeSet<(usize, i64)> = results
        .iter()
        .flat_map(|(_, s)| s.waits.keys().copied())
        .collect();
    for (i, (tenant, resource)) in TENANTS.iter().enumerate() {
        let mine: Vec<i64> = sizes
            .iter()
            .filter(|(t, _)| *t == i)
            .map(|(_, d)| *d)
            .collect();
        let mut rows = vec![(format!("{tenant} ({resource})"), None)];
        if mine.len() > 1 {
            rows.extend(
                mine.iter()
                    .map(|d| (format!("{tenant}, {d} per pod"), Some(*d))),
            );
        }
        for (label, size) in rows {
            let waits = |s: &Stats| -> Vec<(u64, bool)> {
                s.waits
                    .iter()
                    .filter(|((t, d), _)| *t == i && size.is_none_or(|z| z == *d))
                    .flat_map(|(_, w)| w.iter().copied())
                    .collect()
            };
            let cells: Vec<String> = results
                .iter()
                .map(|(_, s)| {
                    let w = waits(s);
                    let never = w.iter().filter(|(_, started)| !started).count();
                    format!("{} ({never})", wait_cell(&w))
                })
                .collect();
            let jobs = results.first().map_or(0, |(_, s)| waits(s).len());
            println!("| {label} | {jobs} | {} |", cells.join(" | "));
        }
    }
    println!("\nEach tenant's mean share of the GPUs (GPU-equivalents) while jobs wait, %.\n");
    println!("| run | {} |", TENANTS.map(|(t, _)| t).join(" | "));
    println!("|---|{}", "---|".repeat(TENANTS.len()));
    for (run, s) in &results {
        let b = s.backlog_steps.max(1) as f64;
        let cells: Vec<String> = s
            .tenant_sum
            .iter()
            .map(|x| format!("{:.1}", x * 100.0 / b))
            .collect();
        println!("| {} | {} |", run.label(), cells.join(" | "));
    }
    let windows = results
        .first()
        .map(|(_, s)| s.buckets.clone())
        .unwrap_or_default();
    let (buckets, heads) = (windows.len(), windows.heads());

    println!(
        "\nGPU allocation over time (mean % of the GPUs, in GPU-equivalents, in each window).\n"
    );
    println!("| run | {} |", heads.join(" | "));
    println!("|---|{}", "---|".repeat(buckets));
    for (run, s) in &results {
        let cells = s.buckets.percents();
        println!("| {} | {} |", run.label(), cells.join(" | "));
    }
}
