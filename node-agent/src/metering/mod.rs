//! GPU-second metering: per pod, how many GPU(-device)-seconds it was allocated and how many
//! of those were used (allocated × GPU utilization), attributed to the tenant through the
//! syncer's labels `fabrik.dev/tenant` and `fabrik.dev/namespace` (absent: `""` and the pod's
//! namespace), and rendered as Prometheus text.
//!
//! A [`Meter`] is fed observations (the GPU pods running on a node now) and credits the time
//! since the previous observation of that node to every pod seen in both — so accounting is
//! exact to one observation interval, and a pod is never credited for time before it was first
//! seen or after it was last seen. The clock is injected ([`Clock`]), so tests drive it.
//!
//! Units: `partition="whole"` counts whole GPUs (a 4-GPU pod accrues 4 s per second);
//! `mig-<profile>` and `shared-<MiB>mib-<pct>pct` count devices of that kind. Counters of
//! pods that are gone are kept (counters never go back), for the process lifetime.
//!
//! Read out as Prometheus text ([`Meter::metrics_text`]), per tenant
//! ([`Meter::usage_by_tenant`]), or as an OpenCost `/allocation` response over a window
//! between two [`Snapshot`]s ([`opencost`]). [`publish`] writes each node's counters to the
//! host as a ConfigMap, which the control plane sums into `Tenant.status.usage`.

pub mod http;
pub mod opencost;
pub mod publish;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// A monotonic clock.
pub trait Clock: Send + Sync {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct SystemClock(Instant);

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock(Instant::now())
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
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
    /// `whole`, `mig-<profile>` or `shared-<MiB>mib-<pct>pct`.
    pub partition: String,
}

/// One pod's GPU holding at an observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    /// The series.
    pub key: Key,
    /// How many GPUs / devices of the partition it holds.
    pub devices: f64,
    /// Utilization of those GPUs now (0..=1).
    pub utilization: f64,
}

/// The GPU holdings of a pod, from its requests (and limits): `nvidia.com/gpu`,
/// `nvidia.com/mig-<profile>`, `fabrik.dev/shared-gpu-…`.
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
        let partition = if k == "nvidia.com/gpu" {
            "whole".to_string()
        } else if let Some(p) = k.strip_prefix("nvidia.com/mig-") {
            format!("mig-{p}")
        } else if let Some(p) = k.strip_prefix("fabrik.dev/shared-gpu-") {
            format!("shared-{p}")
        } else {
            continue;
        };
        *per.entry(partition).or_insert(0) += i64::try_from(q.value()).unwrap_or(0);
    }
    per.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(partition, n)| Usage {
            key: Key {
                tenant: tenant.clone(),
                namespace: namespace.clone(),
                pod: pod.metadata.name.clone().unwrap_or_default(),
                gpu_model: gpu_model.to_string(),
                partition,
            },
            devices: n as f64,
            utilization: utilization.clamp(0.0, 1.0),
        })
        .collect()
}

/// The GPU holdings of the running pods of a node (for the standalone agent): each pod's
/// utilization is the mean over the GPUs its `fabrik.dev/gpu-devices` name (`uuids` maps device
/// UUIDs to GPU indexes; `utilization` is per GPU index), 0 when unknown.
pub fn node_usages(
    pods: &[Pod],
    uuids: &BTreeMap<String, u32>,
    utilization: &BTreeMap<u32, f64>,
    gpu_model: &str,
) -> Vec<Usage> {
    let mut out = Vec::new();
    for p in pods {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Running") || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let gpus: BTreeSet<u32> = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_DEVICES))
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

/// One tenant's GPU use (devices as in [`Key::partition`]: a MIG device or shared slice
/// counts as one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TenantUsage {
    /// Allocated device-seconds so far.
    pub gpu_seconds_allocated: f64,
    /// Allocated device-seconds weighted by utilization so far.
    pub gpu_seconds_utilization_weighted: f64,
    /// Devices held by the tenant's pods at the latest observations.
    pub gpus_in_use: f64,
    /// The tenant's GPU pods running at the latest observations.
    pub pods: usize,
}

/// The counters at one moment, to compute use over a window (see [`opencost`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per series: allocated and utilized seconds.
    pub totals: BTreeMap<Key, (f64, f64)>,
}

#[derive(Default)]
struct State {
    /// Per source (node): time of its last observation and the series (with their device
    /// counts) seen then.
    last: BTreeMap<String, (Duration, BTreeMap<Key, f64>)>,
    /// Per series: allocated and utilized seconds.
    totals: BTreeMap<Key, (f64, f64)>,
    /// Per series: the source (node) that saw it last.
    origin: BTreeMap<Key, String>,
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
        Meter::new(Arc::new(SystemClock::default()))
    }
}

impl Meter {
    /// A meter reading `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Meter {
        Meter {
            clock,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Records what `source` (a node) runs now.
    pub fn observe(&self, source: &str, now_running: Vec<Usage>) {
        let now = self.clock.now();
        self.with(|s| {
            let seen: BTreeMap<Key, f64> = now_running
                .iter()
                .map(|u| (u.key.clone(), u.devices))
                .collect();
            if let Some((then, before)) = s.last.get(source) {
                let dt = now.saturating_sub(*then).as_secs_f64();
                for u in &now_running {
                    if before.contains_key(&u.key) {
                        let t = s.totals.entry(u.key.clone()).or_insert((0.0, 0.0));
                        t.0 += dt * u.devices;
                        t.1 += dt * u.devices * u.utilization;
                    }
                }
            }
            for u in &now_running {
                s.totals.entry(u.key.clone()).or_insert((0.0, 0.0));
                s.origin.insert(u.key.clone(), source.to_string());
            }
            s.last.insert(source.to_string(), (now, seen));
        });
    }

    /// Allocated and utilized seconds of one series.
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
    /// attributed to `source`: counters then continue from where that run left them.
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
            }
            let mut pods: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
            for (_, seen) in s.last.values() {
                for (k, devices) in seen {
                    out.entry(k.tenant.clone()).or_default().gpus_in_use += devices;
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

    /// The counters in Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let totals = self.with(|s| s.totals.clone());
        let mut out = String::new();
        for (name, help, pick) in [
            (
                "fabrik_gpu_allocated_seconds_total",
                "GPU-seconds allocated to a pod (whole GPUs, or devices of a MIG / shared partition).",
                0,
            ),
            (
                "fabrik_gpu_utilized_seconds_total",
                "Allocated GPU-seconds weighted by the GPUs' utilization.",
                1,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (k, v) in &totals {
                let value = if pick == 0 { v.0 } else { v.1 };
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct TestClock(AtomicU64);

    impl Clock for TestClock {
        fn now(&self) -> Duration {
            Duration::from_millis(self.0.load(Ordering::SeqCst))
        }
    }

    impl TestClock {
        fn advance(&self, ms: u64) {
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
        let u = usages(
            &pod("b", "nvidia.com/mig-1g.18gb", "2", None),
            "H200-141GB",
            0.5,
        );
        assert_eq!(u[0].key.tenant, "");
        assert_eq!(u[0].key.namespace, "fabrik-t");
        assert_eq!(u[0].key.partition, "mig-1g.18gb");
        assert!(usages(&pod("c", "cpu", "2", None), "H200-141GB", 0.5).is_empty());
    }

    #[test]
    fn credits_time_between_observations_of_pods_seen_at_both() {
        let clock = Arc::new(TestClock::default());
        let meter = Meter::new(clock.clone());
        let a = usages(
            &pod("a", "nvidia.com/gpu", "2", Some("t")),
            "H200-141GB",
            0.25,
        );
        let b = usages(
            &pod("b", "nvidia.com/gpu", "1", Some("t")),
            "H200-141GB",
            1.0,
        );
        meter.observe("n0", a.clone());
        clock.advance(10_000);
        meter.observe("n0", [a.clone(), b.clone()].concat());
        clock.advance(5_000);
        meter.observe("n0", b.clone());
        clock.advance(5_000);
        meter.observe("n0", b.clone());
        // a: 2 GPUs × 10 s (seen at 0 and 10 s); b: 1 GPU × 10 s (seen at 10, 15, 20 s).
        assert_eq!(meter.get(&a[0].key), Some((20.0, 5.0)));
        assert_eq!(meter.get(&b[0].key), Some((10.0, 10.0)));
        // A gap (a pod gone and back) is not credited.
        clock.advance(100_000);
        meter.observe("n0", a.clone());
        clock.advance(1_000);
        meter.observe("n0", a.clone());
        assert_eq!(meter.get(&a[0].key), Some((22.0, 5.5)));
        let text = meter.render();
        assert!(text.contains("# TYPE fabrik_gpu_allocated_seconds_total counter"));
        assert!(text.contains(
            "fabrik_gpu_allocated_seconds_total{tenant=\"t\",namespace=\"ml\",pod=\"a\",gpu_model=\"H200-141GB\",partition=\"whole\"} 22"
        ));
        assert!(text.contains(
            "fabrik_gpu_utilized_seconds_total{tenant=\"t\",namespace=\"ml\",pod=\"b\",gpu_model=\"H200-141GB\",partition=\"whole\"} 10"
        ));
    }

    #[test]
    fn sources_are_independent_and_labels_escaped() {
        let clock = Arc::new(TestClock::default());
        let meter = Meter::new(clock.clone());
        let a = usages(&pod("a\"x", "nvidia.com/gpu", "1", None), "H100-80GB", 1.0);
        meter.observe("n0", a.clone());
        clock.advance(1_000);
        meter.observe("n1", a.clone());
        assert_eq!(meter.get(&a[0].key), Some((0.0, 0.0)));
        assert!(meter.render().contains("pod=\"a\\\"x\""));
    }

    #[test]
    fn usage_by_tenant_sums_counters_and_counts_what_runs_now() {
        let clock = Arc::new(TestClock::default());
        let meter = Meter::new(clock.clone());
        let a = usages(
            &pod("a", "nvidia.com/gpu", "2", Some("t1")),
            "H200-141GB",
            0.5,
        );
        let b = usages(
            &pod("b", "nvidia.com/mig-1g.18gb", "3", Some("t1")),
            "H200-141GB",
            1.0,
        );
        let c = usages(
            &pod("c", "nvidia.com/gpu", "1", Some("t2")),
            "H200-141GB",
            0.0,
        );
        meter.observe("n0", [a.clone(), c.clone()].concat());
        meter.observe("n1", b.clone());
        clock.advance(10_000);
        meter.observe("n0", a.clone());
        meter.observe("n1", b.clone());
        let by = meter.usage_by_tenant();
        let t1 = &by["t1"];
        // a: 2 × 10 s at 0.5; b: 3 × 10 s at 1.0.
        assert_eq!(t1.gpu_seconds_allocated, 50.0);
        assert_eq!(t1.gpu_seconds_utilization_weighted, 40.0);
        assert_eq!(t1.gpus_in_use, 5.0);
        assert_eq!(t1.pods, 2);
        // c ran at the first observation only: nothing credited, nothing held now.
        assert_eq!(by["t2"], TenantUsage::default());
        assert_eq!(meter.metrics_text(), meter.render());
        assert_eq!(meter.snapshot().totals.get(&a[0].key), Some(&(20.0, 10.0)));
    }
}
