//! GPU-second metering: per pod, how long it held which GPUs (allocated seconds) and how much
//! of that the GPUs were busy (allocated × utilization), attributed to the tenant through the
//! syncer's labels `fabrik.dev/tenant` and `fabrik.dev/namespace` (absent: `""` and the pod's
//! namespace), and rendered as Prometheus text.
//!
//! # What is credited
//!
//! A pod is credited from its containers' start to their stop as the kubelet reports them
//! ([`run_times`]): the simulated kubelet writes both with nanoseconds
//! ([`ANNOTATION_STARTED_AT`], [`ANNOTATION_FINISHED_AT`]); otherwise the container statuses'
//! `startedAt` / `finishedAt` are used, which hold whole seconds only. A [`Meter`] is fed
//! observations — the GPU pods of a node at one instant, each with its start and, once it has
//! stopped, its stop — and at each one credits every pod from where its credit ended (at first:
//! its start) up to the observation or its stop, whichever is earlier. So the first and the
//! last partial intervals are credited exactly, fractions of seconds kept, and no time outside
//! [start, stop] is credited. A pod that vanishes without a reported stop is credited up to the
//! last observation that saw it run. The clock is injected ([`Clock`]), so tests drive it.
//!
//! # Units
//!
//! Every series (tenant, namespace, pod, GPU model, partition) has two counters in
//! **device-seconds**: per second, the number of devices of its partition the pod holds —
//! `partition="whole"` counts whole GPUs (a 4-GPU pod accrues 4 s per second), `mig-<profile>`
//! MIG devices and `shared-<MiB>mib-<pct>pct` capped shared slices (each 1 device), and
//! `time-sliced` (`nvidia.com/gpu.shared`) the pod's **share of its physical GPU**: the seconds
//! of one time-sliced GPU are split across the pods on it in proportion to the replicas they
//! hold, so a GPU shared by 4 pods for 10 s accrues 10 s in all, not 40 (HAMi's accounting).
//! `Tenant.status.usage.gpuSeconds` is the sum of these device-seconds.
//!
//! **GPU-seconds** (whole-GPU equivalents) are device-seconds × [`gpu_fraction`] of the
//! partition: a MIG device its compute slices out of 7 (`1g.18gb` = 1/7), a shared slice its
//! compute percentage, a whole GPU and a time-sliced share 1. The OpenCost export
//! ([`opencost`]) and the `fabrik_gpu_equivalent_*` metrics count these.
//!
//! # Guarantees
//!
//! Counters never go back, and counters of pods that are gone are kept for the process
//! lifetime. No time of a series is credited twice, also across a restart: [`Meter::restore`]
//! adds what an earlier process published, and a new meter credits no time before it was made
//! (the time between the earlier process's last publication and the new start is lost, never
//! doubled).
//!
//! Read out as Prometheus text ([`Meter::metrics_text`]), per tenant
//! ([`Meter::usage_by_tenant`]), or as an OpenCost `/allocation` response over a window
//! ([`opencost`]). [`wire`] is the document each node's counters are published in (a ConfigMap
//! on the host, written by the node agent's publisher), which the control plane sums into
//! `Tenant.status.usage`.
//!
//! The model only: serving `/metrics` and publishing the ConfigMaps are the node agent's
//! (`node_agent::metering::{http, publish}`).

pub mod opencost;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// Pod annotation the simulated kubelet writes on GPU pods when their app containers first
/// start: the time, RFC 3339 with nanoseconds (`startedAt` in the status holds whole seconds).
/// The start of the pod's metered time. In the `fabrik.dev` domain, which tenants cannot set.
pub const ANNOTATION_STARTED_AT: &str = "fabrik.dev/containers-started-at";

/// Pod annotation the simulated kubelet writes on GPU pods when their containers stop for good
/// (`Succeeded` or `Failed`): the time, RFC 3339 with nanoseconds. The end of the pod's
/// metered time.
pub const ANNOTATION_FINISHED_AT: &str = "fabrik.dev/containers-finished-at";

/// The partition of time-sliced GPU replicas (`nvidia.com/gpu.shared`).
pub const PARTITION_TIME_SLICED: &str = "time-sliced";

/// A wall clock (the kubelet's timestamps are wall-clock times).
pub trait Clock: Send + Sync {
    /// The time now.
    fn now(&self) -> Timestamp;
}

/// The system's clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// The labels of one series.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// Tenant (`fabrik.dev/tenant`, or `""`).
    pub tenant: String,
    /// Tenant namespace (`fabrik.dev/namespace`, or the pod's namespace).
    pub namespace: String,
    /// Pod name (the host pod's).
    pub pod: String,
    /// GPU model.
    pub gpu_model: String,
    /// `whole`, `mig-<profile>`, `shared-<MiB>mib-<pct>pct` or `time-sliced`.
    pub partition: String,
}

/// One pod's GPU holding at an observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    /// The series.
    pub key: Key,
    /// How many GPUs / devices (time-sliced: replicas) of the partition it holds.
    pub devices: f64,
    /// Utilization of those GPUs now (0..=1).
    pub utilization: f64,
    /// When its containers started (None: unknown; then from when it is first observed).
    pub started: Option<Timestamp>,
    /// When they stopped for good (None: still running).
    pub stopped: Option<Timestamp>,
    /// Time-sliced: the physical GPU (UUID) of each replica it holds, from
    /// `fabrik.dev/gpu-devices` (empty: unknown, counted as one GPU of its own).
    pub gpus: Vec<String>,
}

/// Whole-GPU equivalents of one device of `partition`: a MIG device its compute slices out of
/// 7 (`1g.18gb` = 1/7, `3g.71gb` = 3/7), a shared slice its compute percentage, a whole GPU 1,
/// and a time-sliced share 1 (its device-seconds are already a share of one GPU).
pub fn gpu_fraction(partition: &str) -> f64 {
    if let Some(profile) = partition.strip_prefix("mig-") {
        let slices: String = profile.chars().take_while(char::is_ascii_digit).collect();
        return slices.parse::<f64>().map(|n| n / 7.0).unwrap_or(1.0);
    }
    if let Some(shared) = partition.strip_prefix("shared-") {
        let pct = shared
            .rsplit('-')
            .next()
            .and_then(|p| p.strip_suffix("pct"))
            .and_then(|p| p.parse::<f64>().ok());
        return pct.map(|p| p / 100.0).unwrap_or(1.0);
    }
    1.0
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// When the pod's containers started and, once the pod has finished (`Succeeded` or
/// `Failed`), when they stopped, as the kubelet reports them: the simulated kubelet's
/// [`ANNOTATION_STARTED_AT`] / [`ANNOTATION_FINISHED_AT`] (nanoseconds), else the earliest
/// `startedAt` and the latest `finishedAt` of the app containers' statuses (whole seconds).
pub fn run_times(pod: &Pod) -> (Option<Timestamp>, Option<Timestamp>) {
    let precise = |key: &str| annotation(pod, key).and_then(|v| v.trim().parse::<Timestamp>().ok());
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let started = precise(ANNOTATION_STARTED_AT).or_else(|| {
        containers
            .iter()
            .flat_map(|c| {
                let state = c.state.as_ref();
                let last = c.last_state.as_ref();
                [
                    state.and_then(|s| s.running.as_ref()?.started_at.clone()),
                    state.and_then(|s| s.terminated.as_ref()?.started_at.clone()),
                    last.and_then(|s| s.terminated.as_ref()?.started_at.clone()),
                ]
            })
            .flatten()
            .map(|t| t.0)
            .min()
    });
    let finished = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let stopped = if finished {
        precise(ANNOTATION_FINISHED_AT).or_else(|| {
            containers
                .iter()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.clone())
                .map(|t| t.0)
                .max()
        })
    } else {
        None
    };
    (started, stopped)
}

/// The GPU holdings of a pod, from its requests (and limits): `nvidia.com/gpu` (`whole`),
/// `nvidia.com/mig-<profile>`, `fabrik.dev/shared-gpu-…` and `nvidia.com/gpu.shared`
/// (`time-sliced`), with its start and stop ([`run_times`]).
pub fn usages(pod: &Pod, gpu_model: &str, utilization: f64) -> Vec<Usage> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let tenant = labels
        .get(fabrik_api::LABEL_TENANT)
        .cloned()
        .unwrap_or_default();
    let namespace = labels
        .get(fabrik_api::LABEL_NAMESPACE)
        .cloned()
        .unwrap_or(ns);
    // What the pod holds while it runs, counted as the scheduler and quota count it (sidecars
    // with the app containers, init containers as a maximum): requests, or limits where only
    // limits are set (extended resources have them equal).
    let value = serde_json::to_value(pod).unwrap_or_default();
    let mut amounts = fabrik_machinery::resources::pod_limits(&value);
    amounts.extend(fabrik_machinery::resources::pod_requests(&value));
    let mut per: BTreeMap<String, i64> = BTreeMap::new();
    for (k, q) in amounts {
        let partition = if k == fabrik_api::RESOURCE_GPU {
            "whole".to_string()
        } else if k == fabrik_api::RESOURCE_GPU_SHARED {
            PARTITION_TIME_SLICED.to_string()
        } else if let Some(p) = k.strip_prefix("nvidia.com/mig-") {
            format!("mig-{p}")
        } else if let Some(p) = k.strip_prefix("fabrik.dev/shared-gpu-") {
            format!("shared-{p}")
        } else {
            continue;
        };
        *per.entry(partition).or_insert(0) += i64::try_from(q.value()).unwrap_or(0);
    }
    let (started, stopped) = run_times(pod);
    let devices: Vec<String> = annotation(pod, fabrik_api::ANNOTATION_GPU_DEVICES)
        .map(|d| {
            d.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    per.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(partition, n)| Usage {
            gpus: if partition == PARTITION_TIME_SLICED {
                devices.clone()
            } else {
                Vec::new()
            },
            key: Key {
                tenant: tenant.clone(),
                namespace: namespace.clone(),
                pod: pod.metadata.name.clone().unwrap_or_default(),
                gpu_model: gpu_model.to_string(),
                partition,
            },
            devices: n as f64,
            utilization: utilization.clamp(0.0, 1.0),
            started,
            stopped,
        })
        .collect()
}

/// Re-labels the whole-GPU holdings of pods on a node whose MIG devices follow NVIDIA's single
/// strategy (there `nvidia.com/gpu` is a MIG device of `profile`) as that profile's, so that
/// they are metered as the MIG devices they are.
pub fn as_single_mig(usages: &mut [Usage], profile: &str) {
    for u in usages {
        if u.key.partition == "whole" {
            u.key.partition = format!("mig-{profile}");
        }
    }
}

/// The MIG profile of a node whose GPU feature labels say NVIDIA's single strategy
/// (`nvidia.com/mig.strategy=single`, `nvidia.com/gpu.product=<product>-MIG-<profile>`).
pub fn single_mig_profile(labels: &BTreeMap<String, String>) -> Option<String> {
    if labels.get("nvidia.com/mig.strategy").map(String::as_str) != Some("single") {
        return None;
    }
    let product = labels.get("nvidia.com/gpu.product")?;
    product
        .rsplit_once("-MIG-")
        .map(|(_, p)| p.to_string())
        .filter(|p| !p.is_empty())
}

/// The GPU holdings of the pods of a node (for the standalone agent): those running (also
/// while being deleted: their containers still hold the GPUs) and those finished (with their
/// stop, so that their last partial interval is credited). Each pod's utilization is the mean
/// over the GPUs its `fabrik.dev/gpu-devices` name (`uuids` maps device UUIDs to GPU indexes;
/// `utilization` is per GPU index), 0 when unknown.
pub fn node_usages(
    pods: &[Pod],
    uuids: &BTreeMap<String, u32>,
    utilization: &BTreeMap<u32, f64>,
    gpu_model: &str,
) -> Vec<Usage> {
    let mut out = Vec::new();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, Some("Running" | "Succeeded" | "Failed")) {
            continue;
        }
        let gpus: BTreeSet<u32> = annotation(p, fabrik_api::ANNOTATION_GPU_DEVICES)
            .map(|d| {
                d.split(',')
                    .filter_map(|u| uuids.get(u.trim()).copied())
                    .collect()
            })
            .unwrap_or_default();
        let known: Vec<f64> = gpus
            .iter()
            .filter_map(|g| utilization.get(g).copied())
            .collect();
        let u = if known.is_empty() {
            0.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        out.extend(usages(p, gpu_model, u));
    }
    out
}

/// One tenant's GPU use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantUsage {
    /// Allocated device-seconds so far (see the module documentation).
    pub gpu_seconds_allocated: f64,
    /// Allocated device-seconds weighted by utilization so far.
    pub gpu_seconds_utilization_weighted: f64,
    /// Allocated GPU-seconds in whole-GPU equivalents so far ([`gpu_fraction`]).
    pub gpu_equivalent_seconds_allocated: f64,
    /// Devices (time-sliced: replicas) held by the tenant's running pods at the latest
    /// observations.
    pub gpus_in_use: f64,
    /// The tenant's GPU pods running at the latest observations.
    pub pods: usize,
}

/// The counters at one moment, to compute use over a window (see [`opencost`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per series: allocated and utilized device-seconds.
    pub totals: BTreeMap<Key, (f64, f64)>,
}

/// What one source (node) reported, and how far its series are credited.
#[derive(Default)]
struct Source {
    /// Its latest observation: when, and the pods it reported then.
    last: Option<(Timestamp, Vec<Usage>)>,
    /// Per series: the time up to which it is credited (kept after the pod is gone, so that
    /// no time of the series is ever credited twice).
    credited: BTreeMap<Key, Timestamp>,
    /// Per physical time-sliced GPU: the time up to which its seconds have been split.
    split: BTreeMap<String, Timestamp>,
}

struct State {
    /// When the meter was made: no time before it is credited (an earlier process may have).
    since: Timestamp,
    /// Per source.
    sources: BTreeMap<String, Source>,
    /// Per series: allocated and utilized device-seconds.
    totals: BTreeMap<Key, (f64, f64)>,
    /// Per series: the source (node) that saw it last.
    origin: BTreeMap<Key, String>,
}

/// Time one pod held its devices within one observation step: `[from, to]`.
struct Piece {
    key: Key,
    from: Timestamp,
    to: Timestamp,
    devices: f64,
    utilization: f64,
    /// Time-sliced: the physical GPUs and the replicas it holds on each.
    shares: Option<Vec<(String, f64)>>,
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// A piece's hold on one physical time-sliced GPU.
struct Hold {
    /// Index of the piece.
    piece: usize,
    from: Timestamp,
    to: Timestamp,
    /// Replicas of the GPU it holds.
    replicas: f64,
}

/// Device-seconds of each hold on one physical GPU: every stretch of time is split across the
/// holds then, in proportion to their replicas (the GPU's seconds in all, whoever holds it).
/// Returns (piece index, seconds) pairs.
fn split_gpu(holds: &[Hold]) -> Vec<(usize, f64)> {
    let mut edges: Vec<Timestamp> = holds.iter().flat_map(|h| [h.from, h.to]).collect();
    edges.sort();
    edges.dedup();
    let mut out: BTreeMap<usize, f64> = BTreeMap::new();
    for w in edges.windows(2) {
        let (a, b) = (w[0], w[1]);
        let holding: Vec<&Hold> = holds.iter().filter(|h| h.from <= a && h.to >= b).collect();
        let total: f64 = holding.iter().map(|h| h.replicas).sum();
        if total <= 0.0 {
            continue;
        }
        let dt = seconds(a, b);
        for h in holding {
            *out.entry(h.piece).or_insert(0.0) += dt * h.replicas / total;
        }
    }
    out.into_iter().collect()
}

/// GPU-second counters, shared by whoever observes and whoever serves `/metrics`.
#[derive(Clone)]
pub struct Meter {
    clock: Arc<dyn Clock>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").finish_non_exhaustive()
    }
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::new(Arc::new(SystemClock))
    }
}

impl Meter {
    /// A meter reading `clock`; it credits no time before now.
    pub fn new(clock: Arc<dyn Clock>) -> Meter {
        let since = clock.now();
        Meter {
            clock,
            state: Arc::new(Mutex::new(State {
                since,
                sources: BTreeMap::new(),
                totals: BTreeMap::new(),
                origin: BTreeMap::new(),
            })),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Records what `source` (a node) runs now, by the meter's clock.
    pub fn observe(&self, source: &str, now_running: Vec<Usage>) {
        self.observe_at(source, self.clock.now(), now_running);
    }

    /// Records what `source` (a node) runs at `at` (the instant the kubelet's pass acted at):
    /// the pods holding GPUs then, and those that stopped since the previous observation (with
    /// their stop). Every one is credited from where its credit ended — at first its start,
    /// never before the meter was made — up to `at` or its stop, whichever is earlier.
    pub fn observe_at(&self, source: &str, at: Timestamp, now_running: Vec<Usage>) {
        self.with(|s| {
            let since = s.since;
            let src = s.sources.entry(source.to_string()).or_default();
            let mut pieces = Vec::new();
            for u in &now_running {
                // From where its credit ended, else its start, else now (first seen); never
                // before the meter was made.
                let credited = src.credited.get(&u.key).copied();
                let from = match (credited, u.started) {
                    (Some(c), Some(start)) => c.max(start),
                    (Some(c), None) => c,
                    (None, Some(start)) => start,
                    (None, None) => at,
                }
                .max(since);
                let to = u.stopped.map_or(at, |stop| stop.min(at));
                if to <= from {
                    src.credited.entry(u.key.clone()).or_insert(from);
                    continue;
                }
                src.credited.insert(u.key.clone(), to);
                let shares = (u.key.partition == PARTITION_TIME_SLICED).then(|| {
                    if u.gpus.is_empty() {
                        // Unknown GPU: one of its own.
                        return vec![(format!("{}/{}", u.key.namespace, u.key.pod), 1.0)];
                    }
                    let each = u.devices / u.gpus.len() as f64;
                    let mut per: BTreeMap<&str, f64> = BTreeMap::new();
                    for g in &u.gpus {
                        *per.entry(g.as_str()).or_insert(0.0) += each;
                    }
                    per.into_iter().map(|(g, n)| (g.to_string(), n)).collect()
                });
                pieces.push(Piece {
                    key: u.key.clone(),
                    from,
                    to,
                    devices: u.devices,
                    utilization: u.utilization,
                    shares,
                });
            }
            // Device-seconds per piece: devices × time, or its share of time-sliced GPUs.
            let mut credit: Vec<f64> = pieces
                .iter()
                .map(|p| match p.shares {
                    None => p.devices * seconds(p.from, p.to),
                    Some(_) => 0.0,
                })
                .collect();
            let mut per_gpu: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
            for (i, p) in pieces.iter().enumerate() {
                for (gpu, replicas) in p.shares.iter().flatten() {
                    per_gpu.entry(gpu.clone()).or_default().push(Hold {
                        piece: i,
                        from: p.from,
                        to: p.to,
                        replicas: *replicas,
                    });
                }
            }
            for (gpu, mut holds) in per_gpu {
                // A GPU's seconds are split once: never again for time already split (a pod
                // whose start is reported earlier than the previous observation).
                let done = src.split.get(&gpu).copied();
                if let Some(done) = done {
                    for h in &mut holds {
                        h.from = h.from.max(done);
                    }
                    holds.retain(|h| h.to > h.from);
                }
                if let Some(end) = holds.iter().map(|h| h.to).max() {
                    src.split.insert(gpu, done.map_or(end, |d| d.max(end)));
                }
                for (i, secs) in split_gpu(&holds) {
                    credit[i] += secs;
                }
            }
            for (p, c) in pieces.iter().zip(credit) {
                let t = s.totals.entry(p.key.clone()).or_insert((0.0, 0.0));
                t.0 += c;
                t.1 += c * p.utilization;
            }
            for u in &now_running {
                s.totals.entry(u.key.clone()).or_insert((0.0, 0.0));
                s.origin.insert(u.key.clone(), source.to_string());
            }
            let later = src.last.as_ref().is_none_or(|(t, _)| *t <= at);
            if later {
                src.last = Some((at, now_running));
            }
        });
    }

    /// Allocated and utilized device-seconds of one series.
    pub fn get(&self, key: &Key) -> Option<(f64, f64)> {
        self.with(|s| s.totals.get(key).copied())
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            totals: self.with(|s| s.totals.clone()),
        }
    }

    /// The counters of the series `source` saw last (a node's share of a meter that several
    /// simulated nodes feed).
    pub fn snapshot_of(&self, source: &str) -> Snapshot {
        self.with(|s| Snapshot {
            totals: s
                .totals
                .iter()
                .filter(|(k, _)| s.origin.get(*k).is_some_and(|o| o == source))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        })
    }

    /// Adds `counters` (e.g. what an earlier run of this node published) to the counters,
    /// attributed to `source`: counters then continue from where that run left them. (No time
    /// before this meter was made is credited again: see the module documentation.)
    pub fn restore(&self, source: &str, counters: &Snapshot) {
        self.with(|s| {
            for (k, (allocated, utilized)) in &counters.totals {
                let t = s.totals.entry(k.clone()).or_insert((0.0, 0.0));
                t.0 += allocated;
                t.1 += utilized;
                s.origin
                    .entry(k.clone())
                    .or_insert_with(|| source.to_string());
            }
        });
    }

    /// Per tenant (`""` for pods without a tenant label): the counters summed over its
    /// series, and what its pods hold at each node's latest observation.
    pub fn usage_by_tenant(&self) -> BTreeMap<String, TenantUsage> {
        self.with(|s| {
            let mut out: BTreeMap<String, TenantUsage> = BTreeMap::new();
            for (k, (allocated, utilized)) in &s.totals {
                let u = out.entry(k.tenant.clone()).or_default();
                u.gpu_seconds_allocated += allocated;
                u.gpu_seconds_utilization_weighted += utilized;
                u.gpu_equivalent_seconds_allocated += allocated * gpu_fraction(&k.partition);
            }
            let mut pods: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
            for (_, seen) in s.sources.values().filter_map(|src| src.last.as_ref()) {
                for u in seen.iter().filter(|u| u.stopped.is_none()) {
                    let k = &u.key;
                    out.entry(k.tenant.clone()).or_default().gpus_in_use += u.devices;
                    pods.entry(&k.tenant)
                        .or_default()
                        .insert((&k.namespace, &k.pod));
                }
            }
            for (tenant, set) in pods {
                if let Some(u) = out.get_mut(tenant) {
                    u.pods = set.len();
                }
            }
            out
        })
    }

    /// The Prometheus text of the counters: the body of a `GET /metrics` answer (content type
    /// `text/plain; version=0.0.4`). The same as [`Meter::render`].
    pub fn metrics_text(&self) -> String {
        self.render()
    }

    /// The counters in Prometheus text exposition format (version 0.0.4): device-seconds
    /// (`fabrik_gpu_allocated_seconds_total`, `fabrik_gpu_utilized_seconds_total`) and
    /// whole-GPU-equivalent seconds (`fabrik_gpu_equivalent_allocated_seconds_total`,
    /// `fabrik_gpu_equivalent_utilized_seconds_total`).
    pub fn render(&self) -> String {
        let totals = self.with(|s| s.totals.clone());
        let mut out = String::new();
        // Name, help, utilized (else allocated), in whole-GPU equivalents (else devices).
        let families = [
            (
                "fabrik_gpu_allocated_seconds_total",
                "Device-seconds allocated to a pod: per second, the devices of its partition it holds (a whole GPU, a MIG device, a shared slice: 1 each; time-sliced: its share of its physical GPU).",
                false,
                false,
            ),
            (
                "fabrik_gpu_utilized_seconds_total",
                "Allocated device-seconds weighted by the GPUs' utilization.",
                true,
                false,
            ),
            (
                "fabrik_gpu_equivalent_allocated_seconds_total",
                "GPU-seconds allocated to a pod in whole-GPU equivalents: device-seconds times the device's share of a GPU (MIG: compute slices / 7; shared slice: compute percentage; whole and time-sliced: 1).",
                false,
                true,
            ),
            (
                "fabrik_gpu_equivalent_utilized_seconds_total",
                "Allocated whole-GPU-equivalent seconds weighted by the GPUs' utilization.",
                true,
                true,
            ),
        ];
        for (name, help, utilized, equivalent) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (k, v) in &totals {
                let seconds = if utilized { v.1 } else { v.0 };
                let value = if equivalent {
                    seconds * gpu_fraction(&k.partition)
                } else {
                    seconds
                };
                let _ = writeln!(
                    out,
                    "{name}{{tenant=\"{}\",namespace=\"{}\",pod=\"{}\",gpu_model=\"{}\",partition=\"{}\"}} {value}",
                    escape(&k.tenant),
                    escape(&k.namespace),
                    escape(&k.pod),
                    escape(&k.gpu_model),
                    escape(&k.partition),
                );
            }
        }
        out
    }
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// `secs` seconds after 2025-01-01T00:00:00Z.
    pub(crate) fn t(secs: f64) -> Timestamp {
        Timestamp::from_second(1_735_689_600).expect("base") + SignedDuration::from_secs_f64(secs)
    }

    /// A clock the test moves, starting at [`t`]`(0)`.
    #[derive(Default)]
    pub(crate) struct TestClock(AtomicI64);

    impl Clock for TestClock {
        fn now(&self) -> Timestamp {
            t(self.0.load(Ordering::SeqCst) as f64 / 1000.0)
        }
    }

    impl TestClock {
        pub(crate) fn advance(&self, ms: i64) {
            self.0.fetch_add(ms, Ordering::SeqCst);
        }
    }

    fn pod(name: &str, resource: &str, n: &str, tenant: Option<&str>) -> Pod {
        let mut labels = serde_json::Map::new();
        if let Some(t) = tenant {
            labels.insert(fabrik_api::LABEL_TENANT.into(), t.into());
            labels.insert(fabrik_api::LABEL_NAMESPACE.into(), "ml".into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "fabrik-t", "labels": labels},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: n}}}]},
        }))
        .expect("pod")
    }

    fn key(pod: &str, partition: &str) -> Key {
        Key {
            tenant: "t".into(),
            namespace: "ml".into(),
            pod: pod.into(),
            gpu_model: "H200-141GB".into(),
            partition: partition.into(),
        }
    }

    /// A pod holding `devices` of `partition`, started at `start` (stopped at `stop`).
    fn held(pod: &str, partition: &str, devices: f64, start: f64, stop: Option<f64>) -> Usage {
        Usage {
            key: key(pod, partition),
            devices,
            utilization: 0.5,
            started: Some(t(start)),
            stopped: stop.map(t),
            gpus: Vec::new(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn sidecar_gpus_are_metered_with_the_app_containers() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "fabrik-t"},
            "spec": {
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                "containers": [{"name": "c", "resources": {
                    "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        }))
        .expect("pod");
        let u = usages(&p, "H200-141GB", 0.0);
        assert_eq!(u.len(), 1);
        // The sidecar runs beside the app container (2); the setup container ran alone with
        // the sidecar (3) before them: a pod holds the larger.
        assert_eq!(u[0].devices, 3.0);
    }

    #[test]
    fn usages_read_partitions_and_tenant_labels() {
        let u = usages(
            &pod("a", "nvidia.com/gpu", "4", Some("team-a")),
            "H200-141GB",
            0.5,
        );
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].key.tenant, "team-a");
        assert_eq!(u[0].key.namespace, "ml");
        assert_eq!(u[0].key.partition, "whole");
        assert_eq!(u[0].devices, 4.0);
        assert!(u[0].gpus.is_empty());
        let u = usages(
            &pod("b", "nvidia.com/mig-1g.18gb", "2", None),
            "H200-141GB",
            0.5,
        );
        assert_eq!(u[0].key.tenant, "");
        assert_eq!(u[0].key.namespace, "fabrik-t");
        assert_eq!(u[0].key.partition, "mig-1g.18gb");
        assert!(usages(&pod("c", "cpu", "2", None), "H200-141GB", 0.5).is_empty());
        // NVIDIA's renamed time-sliced resource, with the physical GPU of each replica.
        let mut p = pod("d", "nvidia.com/gpu.shared", "2", Some("team-a"));
        p.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_DEVICES.to_string(),
            "GPU-aaa, GPU-aaa".to_string(),
        )]));
        let u = usages(&p, "H200-141GB", 0.5);
        assert_eq!(u[0].key.partition, PARTITION_TIME_SLICED);
        assert_eq!(u[0].devices, 2.0);
        assert_eq!(
            u[0].gpus,
            vec!["GPU-aaa".to_string(), "GPU-aaa".to_string()]
        );
    }

    #[test]
    fn run_times_prefer_the_kubelets_nanoseconds_and_stop_only_when_finished() {
        let mut p = pod("a", "nvidia.com/gpu", "1", None);
        p.status = Some(
            serde_json::from_value(serde_json::json!({
                "phase": "Running",
                "containerStatuses": [
                    {"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
                        "state": {"running": {"startedAt": "2025-01-01T00:00:20Z"}},
                        "lastState": {"terminated": {"exitCode": 1,
                            "startedAt": "2025-01-01T00:00:03Z",
                            "finishedAt": "2025-01-01T00:00:09Z"}}}],
            }))
            .expect("status"),
        );
        // Whole seconds from the statuses: the first start of the containers.
        assert_eq!(run_times(&p), (Some(t(3.0)), None));
        p.metadata.annotations = Some(BTreeMap::from([
            (
                ANNOTATION_STARTED_AT.to_string(),
                "2025-01-01T00:00:03.25Z".to_string(),
            ),
            (
                ANNOTATION_FINISHED_AT.to_string(),
                "2025-01-01T00:00:42.123456789Z".to_string(),
            ),
        ]));
        // Not finished: no stop, whatever the annotations say.
        assert_eq!(run_times(&p), (Some(t(3.25)), None));
        if let Some(s) = p.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        let stop: Timestamp = "2025-01-01T00:00:42.123456789Z".parse().expect("time");
        assert_eq!(run_times(&p), (Some(t(3.25)), Some(stop)));
    }

    #[test]
    fn credits_from_start_to_stop_with_partial_intervals() {
        let clock = Arc::new(TestClock::default());
        let meter = Meter::new(clock.clone());
        let k = key("a", "whole");
        // Started at 0.37 s; observed at 1.0, 2.1 and 3.05 s; stopped at 3.5 s, which the
        // observation at 4.2 s reports.
        for at in [1.0, 2.1, 3.05] {
            meter.observe_at("n0", t(at), vec![held("a", "whole", 2.0, 0.37, None)]);
        }
        assert!(close(meter.get(&k).expect("a").0, 2.0 * (3.05 - 0.37)));
        meter.observe_at("n0", t(4.2), vec![held("a", "whole", 2.0, 0.37, Some(3.5))]);
        let (allocated, utilized) = meter.get(&k).expect("a");
        assert!(close(allocated, 2.0 * (3.5 - 0.37)), "{allocated}");
        assert!(close(utilized, allocated * 0.5));
        // A finished pod still reported, or reported again: nothing more.
        meter.observe_at("n0", t(9.0), vec![held("a", "whole", 2.0, 0.37, Some(3.5))]);
        // The same pod back with an earlier start (a bad report): time already credited is not
        // credited again; and a stop before the credit's end credits nothing.
        meter.observe_at("n0", t(9.5), vec![held("a", "whole", 2.0, 0.0, Some(3.0))]);
        assert!(close(meter.get(&k).expect("a").0, 2.0 * (3.5 - 0.37)));
        // The pod is gone; one of the same name starts later: from its start.
        meter.observe_at("n0", t(10.0), vec![]);
        meter.observe_at("n0", t(12.0), vec![held("a", "whole", 2.0, 11.0, None)]);
        assert!(close(meter.get(&k).expect("a").0, 2.0 * (3.5 - 0.37 + 1.0)));
        // Observing with the meter's own clock.
        clock.advance(12_500);
        meter.observe("n0", vec![held("a", "whole", 2.0, 11.0, None)]);
        assert!(close(meter.get(&k).expect("a").0, 2.0 * (3.5 - 0.37 + 1.5)));
    }

    #[test]
    fn a_new_meter_credits_nothing_before_it_was_made() {
        let clock = Arc::new(TestClock::default());
        clock.advance(100_000);
        let meter = Meter::new(clock.clone());
        // What the earlier process published, restored; a pod running since 50 s.
        let k = key("a", "whole");
        meter.restore(
            "n0",
            &Snapshot {
                totals: [(k.clone(), (40.0, 20.0))].into_iter().collect(),
            },
        );
        meter.observe_at("n0", t(110.0), vec![held("a", "whole", 1.0, 50.0, None)]);
        assert!(close(meter.get(&k).expect("a").0, 40.0 + 10.0));
        // A pod that started and stopped before the meter was made: nothing.
        meter.observe_at(
            "n0",
            t(111.0),
            vec![held("b", "whole", 1.0, 10.0, Some(90.0))],
        );
        assert_eq!(meter.get(&key("b", "whole")), Some((0.0, 0.0)));
    }

    /// A tiny deterministic generator for the simulations.
    pub(crate) struct Lcg(pub(crate) u64);

    impl Lcg {
        /// Uniform in [0, 1).
        pub(crate) fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Result of [`kubelet_run`]: per pod the ground truth (device-seconds between the
    /// kubelet's start and stop) and what the meter credited; and what crediting only between
    /// two observations that both saw a running pod (the earlier meter) would have credited.
    struct Run {
        truth: Vec<f64>,
        metered: Vec<f64>,
        between_observations: Vec<f64>,
    }

    /// Simulates a kubelet whose passes come every `period` plus up to `lag` seconds (a loaded
    /// node): `pods` pods, each asked to run 30–90 s (fractional) and holding 1, 2 or 8 GPUs,
    /// arrive over time; a pass starts the arrived ones (their start is the pass's instant),
    /// stops those whose run is over (their stop is the pass's instant) and reports the
    /// running and the stopped ones to the meter at its instant, as `Kubelet::pass` does.
    fn kubelet_run(pods: usize, period: f64, lag: f64, seed: u64) -> Run {
        let clock = Arc::new(TestClock::default());
        let meter = Meter::new(clock);
        let mut rng = Lcg(seed);
        // (arrival, run seconds, devices); start and stop once they happen.
        let mut plan: Vec<(f64, f64, f64)> = (0..pods)
            .map(|i| {
                let devices = [1.0, 2.0, 8.0][i % 3];
                (rng.next() * 120.0, 30.0 + rng.next() * 60.0, devices)
            })
            .collect();
        plan.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut start: Vec<Option<f64>> = vec![None; pods];
        let mut stop: Vec<Option<f64>> = vec![None; pods];
        let mut seen: Vec<Vec<f64>> = vec![Vec::new(); pods];
        let mut now = 0.5;
        while stop.iter().any(Option::is_none) {
            let mut report = Vec::new();
            for (i, (arrival, run, devices)) in plan.iter().enumerate() {
                let name = format!("p{i}");
                match (start[i], stop[i]) {
                    (None, _) if *arrival <= now => start[i] = Some(now),
                    (Some(s), None) if now >= s + run => {
                        stop[i] = Some(now);
                        report.push(held(&name, "whole", *devices, s, Some(now)));
                    }
                    (Some(s), None) => {
                        seen[i].push(now);
                        report.push(held(&name, "whole", *devices, s, None));
                    }
                    _ => {}
                }
            }
            meter.observe_at("n0", t(now), report);
            now += period + rng.next() * lag;
        }
        let mut out = Run {
            truth: Vec::new(),
            metered: Vec::new(),
            between_observations: Vec::new(),
        };
        for (i, (_, _, devices)) in plan.iter().enumerate() {
            let (Some(s), Some(f)) = (start[i], stop[i]) else {
                continue;
            };
            out.truth.push(devices * (f - s));
            let k = key(&format!("p{i}"), "whole");
            out.metered.push(meter.get(&k).map_or(0.0, |v| v.0));
            let first = seen[i].first().copied().unwrap_or(f);
            let last = seen[i].last().copied().unwrap_or(f);
            out.between_observations.push(devices * (last - first));
        }
        out
    }

    /// Largest and mean relative error of `got` against `truth`.
    fn errors(got: &[f64], truth: &[f64]) -> (f64, f64) {
        let rel: Vec<f64> = got.iter().zip(truth).map(|(g, t)| (g - t) / t).collect();
        let worst = rel
            .iter()
            .copied()
            .fold(0.0, |m: f64, e| if e.abs() > m.abs() { e } else { m });
        (worst, rel.iter().sum::<f64>() / rel.len() as f64)
    }

    #[test]
    fn simulated_30_to_90_s_pods_are_metered_within_a_thousandth() {
        // `fabrik up`'s kubelets pass every 200 ms; loaded, later.
        for (period, lag, seed) in [(0.2, 0.0, 1), (0.2, 0.3, 2), (1.0, 0.5, 3), (1.0, 1.5, 4)] {
            let run = kubelet_run(300, period, lag, seed);
            assert_eq!(run.truth.len(), 300);
            let (worst, mean) = errors(&run.metered, &run.truth);
            let (old_worst, old_mean) = errors(&run.between_observations, &run.truth);
            eprintln!(
                "passes every {period} s + up to {lag} s: metered worst {:+.5} %, mean {:+.5} %; \
                 between observations (the earlier meter) worst {:+.3} %, mean {:+.3} %",
                worst * 100.0,
                mean * 100.0,
                old_worst * 100.0,
                old_mean * 100.0
            );
            assert!(worst.abs() <= 1e-3, "worst {worst}");
            // In fact exact but for floating point.
            assert!(worst.abs() <= 1e-9, "worst {worst}");
            assert!(old_mean < -1e-3, "the old way was low: {old_mean}");
        }
    }

    fn sliced(pod: &str, replicas: f64, gpus: &[&str], start: f64, stop: Option<f64>) -> Usage {
        Usage {
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
            ..held(pod, PARTITION_TIME_SLICED, replicas, start, stop)
        }
    }

    fn allocated(meter: &Meter, pod: &str) -> f64 {
        meter
            .get(&key(pod, PARTITION_TIME_SLICED))
            .map_or(0.0, |v| v.0)
    }

    #[test]
    fn a_time_sliced_gpu_bills_its_own_seconds_split_across_its_pods() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        // Four pods on one GPU for 10 s: 10 s in all, 2.5 each.
        let four: Vec<Usage> = (0..4)
            .map(|i| sliced(&format!("p{i}"), 1.0, &["GPU-0"], 0.0, None))
            .collect();
        meter.observe_at("n0", t(4.0), four.clone());
        meter.observe_at(
            "n0",
            t(10.0),
            four.iter()
                .map(|u| Usage {
                    stopped: Some(t(10.0)),
                    ..u.clone()
                })
                .collect(),
        );
        let each: Vec<f64> = (0..4)
            .map(|i| allocated(&meter, &format!("p{i}")))
            .collect();
        assert!(each.iter().all(|s| close(*s, 2.5)), "{each:?}");
        assert!(close(each.iter().sum(), 10.0));
        // In whole-GPU equivalents too.
        let text = meter.render();
        assert!(text.contains(
            "fabrik_gpu_equivalent_allocated_seconds_total{tenant=\"t\",namespace=\"ml\",pod=\"p0\",gpu_model=\"H200-141GB\",partition=\"time-sliced\"} 2.5"
        ), "{text}");
    }

    #[test]
    fn time_sliced_shares_follow_who_holds_the_gpu_and_how_many_replicas() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        // a holds GPU-0 from 0 s; b joins at 4 s (reported at 5 s) with 2 replicas; c holds
        // GPU-1 alone with 2 replicas on it; d's GPU is unknown. All stop at 10 s.
        meter.observe_at(
            "n0",
            t(5.0),
            vec![
                sliced("a", 1.0, &["GPU-0"], 0.0, None),
                sliced("b", 2.0, &["GPU-0", "GPU-0"], 4.0, None),
                sliced("c", 2.0, &["GPU-1", "GPU-1"], 0.0, None),
                sliced("d", 3.0, &[], 0.0, None),
            ],
        );
        meter.observe_at(
            "n0",
            t(10.0),
            vec![
                sliced("a", 1.0, &["GPU-0"], 0.0, Some(10.0)),
                sliced("b", 2.0, &["GPU-0", "GPU-0"], 4.0, Some(10.0)),
                sliced("c", 2.0, &["GPU-1", "GPU-1"], 0.0, Some(10.0)),
                sliced("d", 3.0, &[], 0.0, Some(10.0)),
            ],
        );
        // a: 4 s alone, then 6 s at 1/3; b: 6 s at 2/3. GPU-0 bills 10 s.
        assert!(close(allocated(&meter, "a"), 4.0 + 2.0));
        assert!(close(allocated(&meter, "b"), 4.0));
        assert!(close(allocated(&meter, "c"), 10.0));
        assert!(close(allocated(&meter, "d"), 10.0));
        // One pod across two GPUs holds two GPUs' seconds.
        meter.observe_at(
            "n1",
            t(12.0),
            vec![sliced("e", 2.0, &["GPU-7", "GPU-8"], 10.0, Some(12.0))],
        );
        assert!(close(allocated(&meter, "e"), 4.0));
    }

    #[test]
    fn a_time_sliced_gpus_seconds_are_never_split_twice() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        meter.observe_at("n0", t(5.0), vec![sliced("a", 1.0, &["GPU-0"], 0.0, None)]);
        // b reports a start (3 s) before the last observation (5 s): GPU-0's seconds up to 5 s
        // were a's already.
        meter.observe_at(
            "n0",
            t(9.0),
            vec![
                sliced("a", 1.0, &["GPU-0"], 0.0, None),
                sliced("b", 1.0, &["GPU-0"], 3.0, None),
            ],
        );
        assert!(close(allocated(&meter, "a") + allocated(&meter, "b"), 9.0));
        assert!(close(allocated(&meter, "b"), 2.0));
    }

    #[test]
    fn render_names_device_seconds_and_gpu_equivalents() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        meter.observe_at(
            "n0",
            t(7.0),
            vec![
                held("a", "mig-1g.18gb", 2.0, 0.0, None),
                held("b", "whole", 1.0, 3.0, None),
                held("c", "shared-20480mib-25pct", 1.0, 3.0, None),
            ],
        );
        let text = meter.render();
        for (family, pod, partition, value) in [
            (
                "fabrik_gpu_allocated_seconds_total",
                "a",
                "mig-1g.18gb",
                "14",
            ),
            (
                "fabrik_gpu_equivalent_allocated_seconds_total",
                "a",
                "mig-1g.18gb",
                "2",
            ),
            ("fabrik_gpu_utilized_seconds_total", "b", "whole", "2"),
            (
                "fabrik_gpu_equivalent_utilized_seconds_total",
                "b",
                "whole",
                "2",
            ),
            (
                "fabrik_gpu_equivalent_allocated_seconds_total",
                "c",
                "shared-20480mib-25pct",
                "1",
            ),
        ] {
            let line = format!(
                "{family}{{tenant=\"t\",namespace=\"ml\",pod=\"{pod}\",gpu_model=\"H200-141GB\",partition=\"{partition}\"}} {value}\n"
            );
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        for family in [
            "fabrik_gpu_allocated_seconds_total",
            "fabrik_gpu_utilized_seconds_total",
            "fabrik_gpu_equivalent_allocated_seconds_total",
            "fabrik_gpu_equivalent_utilized_seconds_total",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} counter\n")),
                "{family}"
            );
        }
        assert!(text.contains("Device-seconds allocated to a pod"));
        assert!(text.contains("whole-GPU equivalents"));
        assert_eq!(meter.metrics_text(), text);
    }

    #[test]
    fn fractions_of_partitions() {
        assert_eq!(gpu_fraction("whole"), 1.0);
        assert_eq!(gpu_fraction("mig-1g.18gb"), 1.0 / 7.0);
        assert_eq!(gpu_fraction("mig-3g.71gb"), 3.0 / 7.0);
        assert_eq!(gpu_fraction("shared-20480mib-25pct"), 0.25);
        assert_eq!(gpu_fraction(PARTITION_TIME_SLICED), 1.0);
        assert_eq!(gpu_fraction("strange"), 1.0);
    }

    #[test]
    fn sources_are_independent_and_labels_escaped() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        let mut a = usages(&pod("a\"x", "nvidia.com/gpu", "1", None), "H100-80GB", 1.0);
        meter.observe_at("n0", t(1.0), a.clone());
        meter.observe_at("n1", t(2.0), a.clone());
        // Unknown starts: from the first observation of each source.
        assert_eq!(meter.get(&a[0].key), Some((0.0, 0.0)));
        meter.observe_at("n0", t(4.0), a.clone());
        assert!(close(meter.get(&a[0].key).expect("a").0, 3.0));
        // A start reported later does not reach back before what was seen already.
        a[0].started = Some(t(0.5));
        meter.observe_at("n1", t(3.0), a.clone());
        assert!(close(meter.get(&a[0].key).expect("a").0, 4.0));
        assert!(meter.render().contains("pod=\"a\\\"x\""));
        assert_eq!(meter.snapshot_of("n1").totals.len(), 1);
        assert!(meter.snapshot_of("n0").totals.is_empty());
    }

    #[test]
    fn node_usages_report_running_and_finished_pods() {
        let mut running = pod("r", "nvidia.com/gpu", "1", Some("t"));
        running.status =
            Some(serde_json::from_value(serde_json::json!({"phase": "Running"})).expect("status"));
        let mut done = pod("d", "nvidia.com/gpu", "1", Some("t"));
        done.status = Some(
            serde_json::from_value(serde_json::json!({"phase": "Succeeded",
                "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 0,
                        "startedAt": "2025-01-01T00:00:01Z",
                        "finishedAt": "2025-01-01T00:00:31Z"}}}]}))
            .expect("status"),
        );
        let pending = pod("p", "nvidia.com/gpu", "1", Some("t"));
        let u = node_usages(
            &[running, done, pending],
            &BTreeMap::new(),
            &BTreeMap::new(),
            "H200-141GB",
        );
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].stopped, None);
        assert_eq!((u[1].started, u[1].stopped), (Some(t(1.0)), Some(t(31.0))));
    }

    #[test]
    fn usage_by_tenant_sums_counters_and_counts_what_runs_now() {
        let meter = Meter::new(Arc::new(TestClock::default()));
        let with = |mut u: Vec<Usage>, tenant: &str, start: f64, stop: Option<f64>| {
            for x in &mut u {
                x.key.tenant = tenant.into();
                x.started = Some(t(start));
                x.stopped = stop.map(t);
            }
            u
        };
        let a = usages(
            &pod("a", "nvidia.com/gpu", "2", Some("t1")),
            "H200-141GB",
            0.5,
        );
        let b = usages(
            &pod("b", "nvidia.com/mig-1g.18gb", "7", Some("t1")),
            "H200-141GB",
            1.0,
        );
        let c = usages(
            &pod("c", "nvidia.com/gpu", "1", Some("t2")),
            "H200-141GB",
            0.0,
        );
        meter.observe_at(
            "n0",
            t(10.0),
            [
                with(a.clone(), "t1", 0.0, None),
                with(c.clone(), "t2", 10.0, None),
            ]
            .concat(),
        );
        meter.observe_at("n1", t(10.0), with(b.clone(), "t1", 0.0, None));
        // c stopped at once (at 10 s), in the next report.
        meter.observe_at(
            "n0",
            t(12.0),
            [
                with(a.clone(), "t1", 0.0, None),
                with(c.clone(), "t2", 10.0, Some(10.0)),
            ]
            .concat(),
        );
        let by = meter.usage_by_tenant();
        let t1 = &by["t1"];
        // a: 2 × 12 s at 0.5; b: 7 × 10 s at 1.0 (7 MIG 1g devices = 1 GPU).
        assert!(close(t1.gpu_seconds_allocated, 24.0 + 70.0));
        assert!(close(t1.gpu_seconds_utilization_weighted, 12.0 + 70.0));
        assert!(close(t1.gpu_equivalent_seconds_allocated, 24.0 + 10.0));
        assert_eq!(t1.gpus_in_use, 9.0);
        assert_eq!(t1.pods, 2);
        // c held its GPU for no time, and holds nothing now.
        let t2 = &by["t2"];
        assert_eq!(
            (t2.gpu_seconds_allocated, t2.gpus_in_use, t2.pods),
            (0.0, 0.0, 0)
        );
        assert_eq!(meter.snapshot().totals.len(), 3);
    }
}
