//! Tenant usage: keeps `Tenant.status.usage` current from three host watches shared by all
//! tenants (one reflector per kind for the whole process):
//!
//! - pods labelled `fabrik.dev/tenant` — `pods` counts a tenant's host pods in
//!   `fabrik-<tenant>` that have not finished, `gpus` the GPU devices (`nvidia.com/gpu`,
//!   `nvidia.com/mig-*`, `fabrik.dev/shared-gpu-*`) its running ones request;
//! - the node agents' usage ConfigMaps (`fabrik-gpu-usage-<node>` in `fabrik-system`, see
//!   `fabrik_gpu::metering::wire`) — `gpuSeconds` and `gpuSecondsUtilized` are their sums,
//!   and never go down (the status keeps the larger of what it says and the sum);
//! - the Tenants themselves, to compare.
//!
//! Status is written (a merge patch of `status.usage` alone) only when the figures changed,
//! and at most once per [`Settings::min_write_interval`] per tenant ([`RateLimiter`]). With
//! shards, a replica writes only the tenants it runs.
//!
//! The summed counters are also kept over time ([`History`], per tenant, namespace, model and
//! partition) for the OpenCost-shaped allocation export ([`History::allocation`]), whose
//! windows are exact at their edges: the counters there are interpolated between the records
//! around each edge (`fabrik_gpu::metering::opencost::allocation_over`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fabrik_api::tenant::{
    host_namespace, GpuSeconds, NodeGpuUsage, Tenant, TenantUsage, LABEL_GPU_USAGE_NODE,
    USAGE_NAMESPACE,
};
use fabrik_apiserver::server::ExtensionRoute;
use fabrik_apiserver::ApiError;
use fabrik_gpu::metering::opencost::{self, Prices};
use fabrik_gpu::metering::{wire, Key, Snapshot};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

/// Errors of the allocation export.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The export's `window` is not understood.
    #[error("invalid window {0:?}: use a duration (30s, 30m, 6h, 1d) or `<RFC 3339>,<RFC 3339>`")]
    Window(String),
    /// The allocation could not be computed.
    #[error(transparent)]
    Allocation(#[from] opencost::Error),
}

/// Tunables.
#[derive(Clone, Debug)]
pub struct Settings {
    /// At most one status write per tenant per this interval.
    pub min_write_interval: Duration,
    /// How long to let a burst of changes settle before recomputing.
    pub settle: Duration,
    /// Recompute at least this often (watch gaps, rate-limited writes).
    pub resync: Duration,
    /// Host namespace of the node agents' usage ConfigMaps.
    pub namespace: String,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            min_write_interval: Duration::from_secs(5),
            settle: Duration::from_millis(200),
            resync: Duration::from_secs(30),
            namespace: USAGE_NAMESPACE.to_string(),
        }
    }
}

/// The GPU devices a pod requests (whole GPUs, MIG devices and shared slices, each 1).
pub fn pod_gpus(pod: &Pod) -> i64 {
    fabrik_gpu::metering::usages(pod, "", 0.0)
        .iter()
        .map(|u| u.devices as i64)
        .sum()
}

/// The tenant a host pod belongs to: its `fabrik.dev/tenant` label, when it lives in that
/// tenant's host namespace.
fn tenant_of(pod: &Pod) -> Option<String> {
    let tenant = pod.labels().get(fabrik_api::LABEL_TENANT)?;
    (pod.namespace().as_deref() == Some(host_namespace(tenant).as_str())).then(|| tenant.clone())
}

/// Per tenant: its unfinished host pods and the GPU devices its running pods request.
pub fn pod_usage<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, (i64, i64)> {
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for pod in pods {
        let Some(tenant) = tenant_of(pod) else {
            continue;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let entry = out.entry(tenant).or_default();
        entry.0 += 1;
        if phase == Some("Running") {
            entry.1 += pod_gpus(pod);
        }
    }
    out
}

/// Per tenant: GPU-seconds summed over the nodes' documents.
pub fn gpu_seconds<'a>(
    docs: impl IntoIterator<Item = &'a NodeGpuUsage>,
) -> BTreeMap<String, GpuSeconds> {
    let mut out: BTreeMap<String, GpuSeconds> = BTreeMap::new();
    for doc in docs {
        for (tenant, s) in &doc.tenants {
            let t = out.entry(tenant.clone()).or_default();
            let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
            t.allocated += clean(s.allocated);
            t.utilized += clean(s.utilized);
        }
    }
    out
}

/// The usage to report: pods and GPUs as they are now, GPU-seconds never below what the status
/// already says.
pub fn desired(
    pods: Option<&(i64, i64)>,
    seconds: Option<&GpuSeconds>,
    current: Option<&TenantUsage>,
) -> TenantUsage {
    let (p, g) = pods.copied().unwrap_or((0, 0));
    let s = seconds.copied().unwrap_or_default();
    let floor = |v: f64| if v.is_finite() { v.floor() as i64 } else { 0 };
    TenantUsage {
        pods: p,
        gpus: g,
        gpu_seconds: floor(s.allocated).max(current.map_or(0, |c| c.gpu_seconds)),
        gpu_seconds_utilized: floor(s.utilized).max(current.map_or(0, |c| c.gpu_seconds_utilized)),
    }
}

/// At most one write per key per interval.
#[derive(Debug)]
pub struct RateLimiter {
    min_interval: Duration,
    last: HashMap<String, Instant>,
}

impl RateLimiter {
    /// A limiter allowing one write per `min_interval`.
    pub fn new(min_interval: Duration) -> RateLimiter {
        RateLimiter {
            min_interval,
            last: HashMap::new(),
        }
    }

    /// How long until `key` may be written (zero: now).
    pub fn wait(&self, key: &str, now: Instant) -> Duration {
        match self.last.get(key) {
            Some(t) => (*t + self.min_interval).saturating_duration_since(now),
            None => Duration::ZERO,
        }
    }

    /// Records a write of `key` at `now`.
    pub fn record(&mut self, key: &str, now: Instant) {
        self.last.insert(key.to_string(), now);
    }

    /// Forgets keys not in `keep` (deleted tenants).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.last.retain(|k, _| keep(k));
    }
}

/// The nodes' counters summed over time, for windows of the allocation export: per tenant,
/// namespace, GPU model and partition (pods folded), one entry per [`History::spacing`] at
/// most, for [`History::retention`]. Between two entries the counters are taken to grow
/// linearly; a quiet stretch (counters unchanged for a spacing or more) is kept as two entries
/// with the same counters, so that the growth after it is not spread over it.
#[derive(Debug)]
pub struct History {
    entries: Mutex<Entries>,
    /// Minimum time between kept entries (the last entry is replaced in between).
    pub spacing: chrono::Duration,
    /// How long entries are kept.
    pub retention: chrono::Duration,
}

/// The entries of a [`History`].
#[derive(Debug, Default)]
struct Entries {
    /// Counters at increasing times.
    list: VecDeque<(DateTime<Utc>, Snapshot)>,
    /// The latest time the counters were seen unchanged since the last entry.
    unchanged: Option<DateTime<Utc>>,
}

impl Entries {
    /// Appends an entry; one less than `spacing` after the entry before the last replaces
    /// the last.
    fn push(&mut self, at: DateTime<Utc>, counters: Snapshot, spacing: chrono::Duration) {
        let e = &mut self.list;
        let len = e.len();
        if len >= 2 && at - e[len - 2].0 < spacing {
            e.pop_back();
        }
        e.push_back((at, counters));
    }
}

impl Default for History {
    fn default() -> History {
        History {
            entries: Mutex::new(Entries::default()),
            spacing: chrono::Duration::minutes(1),
            retention: chrono::Duration::days(2),
        }
    }
}

/// The counters of the documents summed, pods folded (`pod` = "").
pub fn folded(docs: &[NodeGpuUsage]) -> Snapshot {
    let mut totals: BTreeMap<Key, (f64, f64)> = BTreeMap::new();
    for doc in docs {
        for (key, (a, u)) in wire::counters(doc).totals {
            let key = Key {
                pod: String::new(),
                ..key
            };
            let t = totals.entry(key).or_insert((0.0, 0.0));
            t.0 += a;
            t.1 += u;
        }
    }
    Snapshot { totals }
}

/// A window of the export: `30s`, `30m`, `6h`, `2d` (ending now) or `<start>,<end>` in
/// RFC 3339.
pub fn parse_window(
    window: &str,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, DateTime<Utc>), Error> {
    let bad = || Error::Window(window.to_string());
    let w = window.trim();
    if let Some((a, b)) = w.split_once(',') {
        let parse = |s: &str| {
            DateTime::parse_from_rfc3339(s.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| bad())
        };
        return Ok((parse(a)?, parse(b)?));
    }
    let unit = w.chars().last().ok_or_else(bad)?;
    let n: i64 = w[..w.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
    let length = match unit {
        's' => chrono::Duration::try_seconds(n),
        'm' => chrono::Duration::try_minutes(n),
        'h' => chrono::Duration::try_hours(n),
        'd' => chrono::Duration::try_days(n),
        _ => None,
    }
    .filter(|_| n > 0)
    .ok_or_else(bad)?;
    Ok((now - length, now))
}

impl History {
    fn with<R>(&self, f: impl FnOnce(&mut Entries) -> R) -> R {
        let mut guard = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Records the counters at `at`.
    pub fn record(&self, at: DateTime<Utc>, counters: Snapshot) {
        let (spacing, retention) = (self.spacing, self.retention);
        self.with(|e| {
            let last = e.list.back().map(|(t, s)| (*t, s.clone()));
            if let Some((last_at, last)) = last {
                if last == counters {
                    e.unchanged = Some(at);
                    return;
                }
                // Unchanged for a spacing or more: flat until it was last seen so.
                if let Some(quiet) = e.unchanged.take().filter(|q| *q - last_at >= spacing) {
                    e.push(quiet, last, spacing);
                }
            }
            e.unchanged = None;
            e.push(at, counters, spacing);
            while e.list.front().is_some_and(|(t, _)| at - *t > retention) {
                e.list.pop_front();
            }
        })
    }

    /// The OpenCost-shaped allocation (aggregated by namespace, one per tenant) of the
    /// GPU-hours used in `window`: the counters at its start and end interpolated between the
    /// entries around each (never an earlier entry for the start), the window cut to what is
    /// recorded (the answer's `start` and `end` say what it covers).
    pub fn allocation(
        &self,
        window: &str,
        now: DateTime<Utc>,
        prices: &Prices,
        cluster: &str,
    ) -> Result<serde_json::Value, Error> {
        let (start, end) = parse_window(window, now)?;
        if end < start {
            return Err(opencost::Error::Window { start, end }.into());
        }
        let out = self.with(|e| {
            opencost::allocation_over(e.list.make_contiguous(), start, end, prices, cluster)
        })?;
        Ok(out)
    }
}

/// The path of the allocation export on the host API.
pub const ALLOCATION_PATH: &str = "/opencost/allocation";

/// `GET /opencost/allocation?window=…[&aggregate=namespace]` over `history`: OpenCost's
/// `/allocation` answer (one entry per tenant namespace). A missing or bad `window`, or an
/// aggregation other than `namespace`, is a 400 naming the parameter.
pub fn allocation_route(history: Arc<History>, prices: Prices, cluster: String) -> ExtensionRoute {
    Arc::new(move |query| {
        if let Some(a) = query.get("aggregate").filter(|a| a.as_str() != "namespace") {
            return Err(ApiError::BadRequest(format!(
                "aggregate={a:?} is not supported: the export aggregates by namespace (one per tenant)"
            )));
        }
        let window = query.get("window").ok_or_else(|| {
            ApiError::BadRequest(
                "missing query parameter `window` (e.g. window=1h, or window=<RFC 3339>,<RFC 3339>)"
                    .into(),
            )
        })?;
        history
            .allocation(window, Utc::now(), &prices, &cluster)
            .map_err(|e| ApiError::BadRequest(e.to_string()))
    })
}

fn owned_by_usage(cm: &ConfigMap) -> Option<NodeGpuUsage> {
    cm.labels().get(LABEL_GPU_USAGE_NODE)?;
    wire::parse(cm)
}

/// Keeps every (owned) tenant's `status.usage` current until `shutdown` resolves.
pub async fn run(
    host: Client,
    owns: Arc<dyn Fn(&Tenant) -> bool + Send + Sync>,
    history: Arc<History>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let changed = Arc::new(Notify::new());
    let pods_api: Api<Pod> = Api::all(host.clone());
    let cms_api: Api<ConfigMap> = Api::namespaced(host.clone(), &settings.namespace);
    let tenants_api: Api<Tenant> = Api::all(host.clone());
    let (pods, pods_w) = reflector::store();
    let (cms, cms_w) = reflector::store();
    let (tenants, tenants_w) = reflector::store();
    let tasks = [
        spawn_reflector(
            watcher(
                pods_api,
                watcher::Config::default().labels(fabrik_api::LABEL_TENANT),
            )
            .default_backoff()
            .reflect(pods_w)
            .boxed(),
            changed.clone(),
        ),
        spawn_reflector(
            watcher(
                cms_api,
                watcher::Config::default().labels(LABEL_GPU_USAGE_NODE),
            )
            .default_backoff()
            .reflect(cms_w)
            .boxed(),
            changed.clone(),
        ),
        spawn_reflector(
            watcher(tenants_api.clone(), watcher::Config::default())
                .default_backoff()
                .reflect(tenants_w)
                .boxed(),
            changed.clone(),
        ),
    ];
    let mut limiter = RateLimiter::new(settings.min_write_interval);
    tokio::pin!(shutdown);
    let ready = async {
        let _ = pods.wait_until_ready().await;
        let _ = cms.wait_until_ready().await;
        let _ = tenants.wait_until_ready().await;
    };
    tokio::select! {
        _ = &mut shutdown => {}
        _ = ready => {
            let mut next = Duration::ZERO;
            loop {
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = changed.notified() => tokio::time::sleep(settings.settle).await,
                    _ = tokio::time::sleep(next) => {}
                }
                next = pass(&tenants_api, &pods, &cms, &tenants, &*owns, &history, &mut limiter)
                    .await
                    .min(settings.resync);
            }
        }
    }
    for t in tasks {
        t.abort();
    }
}

fn spawn_reflector<K: Send + 'static>(
    mut stream: futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    changed: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::debug!(error = %e, "usage watch failed; retrying"),
            }
        }
    })
}

/// One recomputation; returns how long until a rate-limited write is due (or a long time).
async fn pass(
    api: &Api<Tenant>,
    pods: &Store<Pod>,
    cms: &Store<ConfigMap>,
    tenants: &Store<Tenant>,
    owns: &(dyn Fn(&Tenant) -> bool + Send + Sync),
    history: &History,
    limiter: &mut RateLimiter,
) -> Duration {
    let all_pods = pods.state();
    let by_pods = pod_usage(all_pods.iter().map(|p| p.as_ref()));
    let docs: Vec<NodeGpuUsage> = cms
        .state()
        .iter()
        .filter_map(|c| owned_by_usage(c))
        .collect();
    let seconds = gpu_seconds(&docs);
    history.record(Utc::now(), folded(&docs));
    let now = Instant::now();
    let mut next = Duration::MAX;
    let all = tenants.state();
    limiter.retain(|k| all.iter().any(|t| t.name_any() == k));
    for tenant in all {
        if tenant.metadata.deletion_timestamp.is_some() || !owns(&tenant) {
            continue;
        }
        let name = tenant.name_any();
        let current = tenant.status.as_ref().and_then(|s| s.usage.as_ref());
        let want = desired(by_pods.get(&name), seconds.get(&name), current);
        if current == Some(&want) {
            continue;
        }
        let wait = limiter.wait(&name, now);
        if !wait.is_zero() {
            next = next.min(wait);
            continue;
        }
        limiter.record(&name, now);
        let patch = json!({"status": {"usage": want}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(tenant = %name, error = %e, "writing tenant usage failed; retrying");
                next = next.min(limiter.wait(&name, now));
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_api::tenant::GpuSeries;

    fn pod(tenant: &str, ns: &str, phase: &str, resources: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns, "labels": {"fabrik.dev/tenant": tenant}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": resources}}]},
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    #[test]
    fn pods_and_gpus_are_counted_per_tenant() {
        let pods = [
            pod("a", "fabrik-a", "Running", json!({"nvidia.com/gpu": "2"})),
            pod(
                "a",
                "fabrik-a",
                "Running",
                json!({"nvidia.com/mig-1g.18gb": "1"}),
            ),
            pod(
                "a",
                "fabrik-a",
                "Running",
                json!({"fabrik.dev/shared-gpu-8192mib-25pct": "1", "cpu": "2"}),
            ),
            // Pending: a pod, no GPUs yet.
            pod("a", "fabrik-a", "Pending", json!({"nvidia.com/gpu": "4"})),
            // Finished: nothing.
            pod("a", "fabrik-a", "Succeeded", json!({"nvidia.com/gpu": "1"})),
            // Not in the tenant's namespace: not the tenant's.
            pod("a", "fabrik-b", "Running", json!({"nvidia.com/gpu": "1"})),
            pod("b", "fabrik-b", "Running", json!({"cpu": "1"})),
        ];
        let u = pod_usage(pods.iter());
        assert_eq!(u["a"], (4, 4));
        assert_eq!(u["b"], (1, 0));
        assert_eq!(u.len(), 2);
    }

    fn doc(node: &str, tenant: &str, allocated: f64, utilized: f64) -> NodeGpuUsage {
        let seconds = GpuSeconds {
            allocated,
            utilized,
        };
        NodeGpuUsage {
            node: node.into(),
            tenants: [(tenant.to_string(), seconds)].into_iter().collect(),
            series: vec![GpuSeries {
                tenant: tenant.into(),
                namespace: "ml".into(),
                pod: format!("pod-{node}"),
                gpu_model: "H200-141GB".into(),
                partition: "whole".into(),
                seconds,
            }],
        }
    }

    #[test]
    fn gpu_seconds_sum_over_nodes_and_never_go_down() {
        let docs = [
            doc("n0", "a", 10.5, 5.0),
            doc("n1", "a", 20.0, 10.0),
            doc("n1", "b", f64::NAN, -1.0),
        ];
        let s = gpu_seconds(&docs);
        assert_eq!(
            s["a"],
            GpuSeconds {
                allocated: 30.5,
                utilized: 15.0
            }
        );
        assert_eq!(s["b"], GpuSeconds::default());
        let u = desired(Some(&(2, 1)), s.get("a"), None);
        assert_eq!(
            u,
            TenantUsage {
                pods: 2,
                gpus: 1,
                gpu_seconds: 30,
                gpu_seconds_utilized: 15
            }
        );
        // A node's ConfigMap gone: the status keeps what it said.
        let before = TenantUsage {
            gpu_seconds: 100,
            gpu_seconds_utilized: 40,
            ..u.clone()
        };
        let after = desired(None, s.get("a"), Some(&before));
        assert_eq!(
            after,
            TenantUsage {
                pods: 0,
                gpus: 0,
                gpu_seconds: 100,
                gpu_seconds_utilized: 40
            }
        );
        assert_eq!(desired(None, None, None), TenantUsage::default());
    }

    #[test]
    fn writes_are_rate_limited_per_tenant() {
        let mut l = RateLimiter::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(l.wait("a", t0), Duration::ZERO);
        l.record("a", t0);
        assert_eq!(
            l.wait("a", t0 + Duration::from_secs(2)),
            Duration::from_secs(3)
        );
        assert_eq!(l.wait("b", t0 + Duration::from_secs(2)), Duration::ZERO);
        assert_eq!(l.wait("a", t0 + Duration::from_secs(5)), Duration::ZERO);
        l.retain(|k| k != "a");
        assert_eq!(l.wait("a", t0), Duration::ZERO);
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn windows_parse() {
        let now = at("2025-01-01T12:00:00Z");
        assert_eq!(
            parse_window("30m", now).expect("30m"),
            (at("2025-01-01T11:30:00Z"), now)
        );
        assert_eq!(
            parse_window("30s", now).expect("30s").0,
            at("2025-01-01T11:59:30Z")
        );
        assert_eq!(
            parse_window("1d", now).expect("1d").0,
            at("2024-12-31T12:00:00Z")
        );
        assert_eq!(
            parse_window("2025-01-01T00:00:00Z,2025-01-01T01:00:00Z", now).expect("pair"),
            (at("2025-01-01T00:00:00Z"), at("2025-01-01T01:00:00Z"))
        );
        for bad in ["", "h", "0h", "-1h", "5x", "yesterday", "a,b"] {
            assert!(parse_window(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn history_thins_and_answers_windows() {
        let h = History::default();
        let snap = |a: f64| folded(&[doc("n0", "a", a, a / 2.0), doc("n1", "a", a, 0.0)]);
        h.record(at("2025-01-01T10:00:00Z"), snap(0.0));
        h.record(at("2025-01-01T10:00:20Z"), snap(900.0));
        // Within a minute of the entry before the last: replaces the last.
        h.record(at("2025-01-01T10:00:40Z"), snap(1800.0));
        assert_eq!(h.with(|e| e.list.len()), 2);
        // Unchanged: nothing recorded, until it changes: then flat until 11:00.
        h.record(at("2025-01-01T11:00:00Z"), snap(1800.0));
        assert_eq!(h.with(|e| e.list.len()), 2);
        h.record(at("2025-01-01T11:30:00Z"), snap(2700.0));
        h.record(at("2025-01-01T12:00:00Z"), snap(3600.0));
        assert_eq!(h.with(|e| e.list.len()), 5);
        let now = at("2025-01-01T12:00:00Z");
        let out = h
            .allocation("1h", now, &Prices::default(), "fabrik")
            .expect("allocation");
        // From the counters at 11:00 (flat since 10:00:40): 1800 s more on each node.
        let a = &out["data"][0]["fabrik-a"];
        assert_eq!(a["gpuHours"], 1.0);
        assert_eq!(a["totalEfficiency"], 0.25);
        let out = h
            .allocation(
                "2025-01-01T10:00:00Z,2025-01-01T12:00:00Z",
                now,
                &Prices {
                    default_per_gpu_hour: 2.0,
                    ..Default::default()
                },
                "fabrik",
            )
            .expect("allocation");
        let a = &out["data"][0]["fabrik-a"];
        // Two nodes' pods, 3600 s each, folded into one series.
        assert_eq!(a["gpuHours"], 2.0);
        assert_eq!(a["gpuCost"], 4.0);
        assert_eq!(a["properties"]["labels"]["fabrik.dev/tenant"], "a");
        assert!(h
            .allocation("nonsense", Utc::now(), &Prices::default(), "c")
            .is_err());
        // Before anything was recorded: the window starts at the earliest entry.
        let out = h
            .allocation("7d", now, &Prices::default(), "c")
            .expect("allocation");
        assert_eq!(out["data"][0]["fabrik-a"]["start"], "2025-01-01T10:00:00Z");
        // A window inside the quiet stretch used nothing; one across its end only what came
        // after it.
        let out = h
            .allocation(
                "2025-01-01T10:10:00Z,2025-01-01T10:50:00Z",
                now,
                &Prices::default(),
                "fabrik",
            )
            .expect("allocation");
        assert_eq!(out["data"][0]["fabrik-a"]["gpuHours"], 0.0);
        let out = h
            .allocation(
                "2025-01-01T10:30:00Z,2025-01-01T11:15:00Z",
                now,
                &Prices::default(),
                "fabrik",
            )
            .expect("allocation");
        // 11:00 to 11:15: half of 900 s more on each node.
        assert_eq!(out["data"][0]["fabrik-a"]["gpuHours"], 0.25);
    }

    #[test]
    fn windows_inside_a_steady_run_report_the_steady_gpu_count() {
        // 8 GPUs held on one node from 10:00, published every 15 s, recorded 0.3 s later.
        let h = History::default();
        let t0 = at("2025-01-01T10:00:00Z");
        let ms = chrono::Duration::milliseconds;
        for i in 0..=40 {
            let published = 15.0 * f64::from(i);
            h.record(
                t0 + ms(i64::from(i) * 15_000 + 300),
                folded(&[doc("n0", "a", 8.0 * published, 0.0)]),
            );
        }
        // At the last record and between records (the window then ends at the last one).
        for now in [t0 + ms(600_300), t0 + ms(607_000)] {
            for window in ["30s", "1m", "2m"] {
                let out = h
                    .allocation(window, now, &Prices::default(), "fabrik")
                    .expect("allocation");
                let count = out["data"][0]["fabrik-a"]["gpuCount"]
                    .as_f64()
                    .unwrap_or(0.0);
                assert!((count / 8.0 - 1.0).abs() < 0.01, "{window}: {count}");
            }
        }
    }
}
