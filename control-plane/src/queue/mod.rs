//! Fabrik's GPU queue: fair sharing of the host's GPUs among tenants, on any host scheduler.
//!
//! The syncer creates every host pod that asks for GPUs with the scheduling gate
//! [`fabrik_api::QUEUE_GATE`]; no scheduler binds a gated pod. This controller decides
//! ([`fabrik_gpu::queue`]) which workloads — a pod, or a gang all at once — go now, and admits
//! each pod by pinning it to the node the decision placed it on (`nodeSelector`
//! `kubernetes.io/hostname`, which a gated pod may gain) and removing the gate; whatever
//! scheduler the host runs then binds it there. A tenant's `quota.gpus` is its guarantee; beyond it a tenant borrows idle
//! GPUs up to its `queue.borrowingLimit`, shared among borrowers by weight; when an owner's
//! demand comes back, borrowed workloads are preempted (whole gangs, lowest priority and newest
//! first, through the Eviction API so that PodDisruptionBudgets hold; never a workload a budget
//! protects now; after the policy's reclaim grace, and never a borrower declared to end within
//! it) until every tenant is at its fair share: the queue marks each pod (`DisruptionTarget`, reason
//! [`fabrik_api::REASON_QUEUE_RECLAIM`]); the tenant's syncer evicts the host pod within its own
//! grace period and, once the eviction is accepted, tells the tenant (the condition, an Event,
//! the pod `Failed` with reason `Preempted`); a marked pod still there after [`Settings::evict_after`] is evicted here. A
//! workload waiting past the starvation bound gets nodes reserved for it; GPUs that nothing can
//! use in queue order go to backfill (annotated as such), the first to be preempted.
//!
//! Visible: waiting pods carry why in their `PodScheduled` condition (the syncer copies it to
//! the tenant pod); `Tenant.status.queue` has each tenant's standing; `/metrics` has
//! `fabrik_queue_*`; preemptions are Events in the preempted tenant.
//!
//! One replica decides (the one holding shard 0 when sharded); decisions are recomputed from
//! the host's objects on every change. The one thing not in them, the fair-share ledger (how
//! far each tenant has lately been ahead of its share), the deciding replica saves in the
//! ConfigMap [`LEDGER_CONFIGMAP`] every [`Settings::save_every`] and when it stops, and a
//! replica that starts deciding reads it first.

pub mod input;
pub mod wait;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabrik_api::tenant::{QueueStatus, Tenant};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;

use fabrik_gpu::queue::{self as decide, layouts, ledger, Decision, Policy, Reservation};

/// Settings of the queue controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// What the decisions follow (unless the policy ConfigMap says otherwise).
    pub policy: Policy,
    /// The host namespace of the policy ConfigMap ([`POLICY_CONFIGMAP`]).
    pub namespace: String,
    /// How long a pod marked for preemption is left to its tenant's syncer (which tells the
    /// tenant, then evicts it) before the queue evicts it itself.
    pub evict_after: Duration,
    /// Longest time between decisions without a change (the starvation bound is timed).
    pub resync: Duration,
    /// Quiet time after a change before deciding (changes come in bursts).
    pub settle: Duration,
    /// How often the deciding replica saves the fair-share ledger ([`LEDGER_CONFIGMAP`]).
    pub save_every: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            policy: Policy::default(),
            namespace: fabrik_api::tenant::USAGE_NAMESPACE.to_string(),
            evict_after: Duration::from_secs(15),
            resync: Duration::from_secs(2),
            settle: Duration::from_millis(100),
            save_every: Duration::from_secs(15),
        }
    }
}

/// The GPU queue's command-line settings (`fabrik up`, `fabrik serve`).
#[derive(clap::Args, Clone, Debug)]
pub struct QueueArgs {
    /// Hold tenants' GPU pods at the GPU queue's scheduling gate until their workload is
    /// admitted (fair sharing, borrowing, reclaim, gangs on any host scheduler). `false`: GPU
    /// pods go straight to the host's scheduler, each tenant limited by its quota alone.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    gpu_queue: bool,
    /// Take borrowed GPUs back (by preemption) when their owners' demand returns.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    queue_reclaim: bool,
    /// Seconds a workload its tenant's share allows may wait for room before nodes are
    /// reserved for it.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    queue_starvation_seconds: u64,
    /// Seconds a workload reclaim serves waits for borrowed GPUs to come back on their own
    /// before borrowers are preempted; a borrower whose pods' `activeDeadlineSeconds` ends
    /// within it is never preempted. 0: preempt at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    queue_reclaim_grace_seconds: u32,
    /// Seconds a GPU the queue laid out anew for waiting demand is left as it is before it may
    /// be laid out again (at most 3600): longer where a GPU's reconfiguration is slow.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    queue_layout_hold_seconds: u32,
    /// The half-life, in seconds, of the record of how far each tenant has lately been ahead of
    /// its fair share: a tenant ahead takes no workload past its share while others below
    /// theirs wait, so shares hold over time. 0: shares hold at each instant only.
    #[arg(long, value_name = "SECONDS", default_value_t = (ledger::HALF_LIFE / 1_000_000_000) as u32)]
    queue_fairness_half_life_seconds: u32,
}

impl QueueArgs {
    /// The queue's settings, or none when it is off.
    pub fn settings(&self, namespace: &str) -> Option<Settings> {
        self.gpu_queue.then(|| Settings {
            policy: Policy {
                reclaim: self.queue_reclaim,
                starvation_after: i128::from(self.queue_starvation_seconds) * 1_000_000_000,
                group_weights: Default::default(),
                reclaim_grace: i128::from(self.queue_reclaim_grace_seconds) * 1_000_000_000,
                layout_hold: i128::from(self.queue_layout_hold_seconds) * 1_000_000_000,
                fairness_half_life: i128::from(self.queue_fairness_half_life_seconds)
                    * 1_000_000_000,
            },
            namespace: namespace.to_string(),
            ..Settings::default()
        })
    }
}

/// What the queue last decided, for `/metrics`.
#[derive(Default)]
pub struct Figures {
    standings: Mutex<BTreeMap<String, Vec<QueueStatus>>>,
    /// Per tenant and resource: device-seconds lately held beyond its fair share.
    leads: Mutex<BTreeMap<String, decide::Gpus>>,
    admitted_total: std::sync::atomic::AtomicU64,
    preempted_total: std::sync::atomic::AtomicU64,
}

impl Figures {
    /// Prometheus text of the queue's figures.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let standings = match self.standings.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        };
        type Gauge = (&'static str, &'static str, fn(&QueueStatus) -> i64);
        let gauges: [Gauge; 7] = [
            (
                "fabrik_queue_guaranteed_gpus",
                "GPUs guaranteed to the tenant.",
                |s| s.guaranteed,
            ),
            (
                "fabrik_queue_admitted_gpus",
                "GPUs held by the tenant's admitted pods.",
                |s| s.admitted,
            ),
            (
                "fabrik_queue_borrowed_gpus",
                "GPUs the tenant holds beyond its guarantee.",
                |s| s.borrowed,
            ),
            (
                "fabrik_queue_backfill_gpus",
                "GPUs the tenant holds as backfill (the first to be preempted).",
                |s| s.backfill,
            ),
            (
                "fabrik_queue_lent_gpus",
                "The tenant's idle guaranteed GPUs held by others.",
                |s| s.lent,
            ),
            (
                "fabrik_queue_pending_gpus",
                "GPUs asked for by the tenant's waiting pods.",
                |s| s.pending,
            ),
            (
                "fabrik_queue_fair_share_gpus",
                "The tenant's fair share under current demand.",
                |s| s.fair_share,
            ),
        ];
        for (name, help, value) in gauges {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
            for (tenant, list) in &standings {
                for s in list {
                    out.push_str(&format!(
                        "{name}{{tenant=\"{tenant}\",resource=\"{}\"}} {}\n",
                        s.resource,
                        value(s)
                    ));
                }
            }
        }
        let leads = match self.leads.lock() {
            Ok(l) => l.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let name = "fabrik_queue_fair_share_lead_gpu_seconds";
        out.push_str(&format!(
            "# HELP {name} GPU-seconds the tenant has lately held beyond its fair share \
             (negative: below it), halved every fairness half-life.\n# TYPE {name} gauge\n"
        ));
        for (tenant, per) in &leads {
            for (resource, v) in per {
                out.push_str(&format!(
                    "{name}{{tenant=\"{tenant}\",resource=\"{resource}\"}} {v}\n"
                ));
            }
        }
        for (name, help, v) in [
            (
                "fabrik_queue_admitted_workloads_total",
                "Workloads the GPU queue admitted.",
                &self.admitted_total,
            ),
            (
                "fabrik_queue_preempted_workloads_total",
                "Workloads the GPU queue preempted to restore fair shares.",
                &self.preempted_total,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                v.load(std::sync::atomic::Ordering::Relaxed)
            ));
        }
        out
    }
}

fn spawn_watch<K>(
    stream: futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    changed: Arc<Notify>,
    what: &'static str,
) -> tokio::task::JoinHandle<()>
where
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = stream;
        let mut last_error: Option<String> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    last_error = None;
                    changed.notify_one();
                }
                Err(e) => {
                    // Once per distinct failure, not per retry.
                    let text = e.to_string();
                    if last_error.as_deref() != Some(text.as_str()) {
                        tracing::warn!(watch = what, error = %text, "GPU queue watch failed; retrying");
                        last_error = Some(text);
                    }
                }
            }
        }
    })
}

/// Watches every object of kind `K` into `writer` where the host lets Fabrik list them (one
/// list of one object tells); `None` where it does not.
async fn watch_if_served<K>(
    host: &Client,
    writer: reflector::store::Writer<K>,
    changed: &Arc<Notify>,
    what: &'static str,
) -> Option<tokio::task::JoinHandle<()>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api = Api::<K>::all(host.clone());
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .ok()?;
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .boxed();
    Some(spawn_watch(stream, changed.clone(), what))
}

/// The platform's queue policy on the host: ConfigMap `fabrik-gpu-queue` in the control plane's
/// namespace ([`Settings::namespace`], `fabrik-system` by default),
/// keys `reclaim` (`true`/`false`), `starvationSeconds`, `reclaimGraceSeconds`,
/// `fairnessHalfLifeSeconds`, `layoutHoldSeconds` (at most 3600) and `groupWeights` (the weight
/// of each group of tenants among the claimants of idle GPUs: `research=2, vision=1`; 1 for a
/// group not listed); what it does not set comes from the command line.
pub const POLICY_CONFIGMAP: &str = "fabrik-gpu-queue";

/// The policy a ConfigMap sets over `defaults`; a value that does not parse is told once (by
/// its text) and the default kept.
fn policy_from(cm: &ConfigMap, defaults: &Policy, state: &mut State) -> Policy {
    let mut policy = defaults.clone();
    let data = cm.data.clone().unwrap_or_default();
    let mut problems = Vec::new();
    if let Some(v) = data.get("reclaim") {
        match v.trim() {
            "true" => policy.reclaim = true,
            "false" => policy.reclaim = false,
            other => problems.push(format!("reclaim: {other:?} is not true or false")),
        }
    }
    for (key, nanos) in [
        ("starvationSeconds", &mut policy.starvation_after),
        ("reclaimGraceSeconds", &mut policy.reclaim_grace),
        ("fairnessHalfLifeSeconds", &mut policy.fairness_half_life),
    ] {
        if let Some(v) = data.get(key) {
            match v.trim().parse::<u32>() {
                Ok(n) => *nanos = i128::from(n) * 1_000_000_000,
                Err(_) => problems.push(format!("{key}: {v:?} is not a whole number of seconds")),
            }
        }
    }
    if let Some(v) = data.get("layoutHoldSeconds") {
        match v.trim().parse::<u32>() {
            Ok(n) if i128::from(n) * 1_000_000_000 <= layouts::MAX_HOLD => {
                policy.layout_hold = i128::from(n) * 1_000_000_000;
            }
            _ => problems.push(format!(
                "layoutHoldSeconds: {v:?} is not a whole number of seconds up to 3600"
            )),
        }
    }
    if let Some(v) = data.get("groupWeights") {
        for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = entry.split_once('=').and_then(|(group, weight)| {
                let weight = weight.trim().parse::<i64>().ok()?;
                let group = group.trim();
                let valid = fabrik_machinery::validation::dns1123_label(group).is_empty()
                    && (1..=1000).contains(&weight);
                valid.then(|| (group.to_string(), weight))
            });
            match parsed {
                Some((group, weight)) => {
                    policy.group_weights.insert(group, weight);
                }
                None => problems.push(format!(
                    "groupWeights: {entry:?} is not GROUP=WEIGHT (a DNS label, 1 to 1000)"
                )),
            }
        }
    }
    const SETTINGS: [&str; 6] = [
        "reclaim",
        "starvationSeconds",
        "reclaimGraceSeconds",
        "fairnessHalfLifeSeconds",
        "layoutHoldSeconds",
        "groupWeights",
    ];
    for k in data.keys() {
        if !SETTINGS.contains(&k.as_str()) {
            problems.push(format!("{k}: not a setting ({})", SETTINGS.join(", ")));
        }
    }
    let said = problems.join("; ");
    if !said.is_empty() && state.policy_problems != said {
        tracing::warn!(configmap = POLICY_CONFIGMAP, problems = %said,
            "GPU queue policy: values ignored");
    }
    state.policy_problems = said;
    policy
}

/// How often a waiting pod's message is rewritten when only its figures change.
const RETELL: Duration = Duration::from_secs(15);

/// Whether two messages to a waiting pod say the same but for their figures (the place in the
/// queue and the estimate, after "; #", are figures too): the newer one may wait for
/// [`RETELL`].
fn same_kind(a: &str, b: &str) -> bool {
    let words = |t: &str| -> String {
        let t = t.split("; #").next().unwrap_or(t);
        t.chars().filter(|c| !c.is_ascii_digit()).collect()
    };
    words(a) == words(b)
}

/// A pod's gates without the queue's, for a merge patch: none left removes the field.
fn gates_without_queue(pod: &Pod) -> serde_json::Value {
    let gates: Vec<_> = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.name != fabrik_api::QUEUE_GATE)
        .collect();
    if gates.is_empty() {
        serde_json::Value::Null
    } else {
        json!(gates)
    }
}

/// A pod's conditions with the one of `type_` replaced (for a status merge patch).
fn with_condition(
    pod: &Pod,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> Vec<k8s_openapi::api::core::v1::PodCondition> {
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != type_);
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        )),
        ..Default::default()
    });
    conditions
}

/// A tenant's host GPU resources.
pub type Resources = dyn Fn(&Tenant) -> Vec<String> + Send + Sync;

/// Runs the queue until `shutdown`; `leader` says whether this replica decides now, and
/// `resources` gives a tenant's host GPU resources.
pub async fn run(
    host: Client,
    settings: Settings,
    figures: Arc<Figures>,
    leader: Arc<dyn Fn() -> bool + Send + Sync>,
    resources: Arc<Resources>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let changed = Arc::new(Notify::new());
    let (pods, pods_w) = reflector::store::<Pod>();
    let (nodes, nodes_w) = reflector::store::<Node>();
    let (tenants, tenants_w) = reflector::store::<Tenant>();
    let (slices, slices_w) = reflector::store::<ResourceSlice>();
    let (policies, policies_w) = reflector::store::<ConfigMap>();
    let (budgets, budgets_w) = reflector::store::<PodDisruptionBudget>();
    let (claims, claims_w) = reflector::store::<ResourceClaim>();
    let (classes, classes_w) = reflector::store::<DeviceClass>();
    let mut tasks = vec![
        spawn_watch(
            watcher(
                Api::<ConfigMap>::namespaced(host.clone(), &settings.namespace),
                watcher::Config::default().fields(&format!("metadata.name={POLICY_CONFIGMAP}")),
            )
            .default_backoff()
            .reflect(policies_w)
            .boxed(),
            changed.clone(),
            "policy",
        ),
        spawn_watch(
            watcher(Api::<Pod>::all(host.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(pods_w)
                .boxed(),
            changed.clone(),
            "pods",
        ),
        spawn_watch(
            watcher(Api::<Node>::all(host.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(nodes_w)
                .boxed(),
            changed.clone(),
            "nodes",
        ),
        spawn_watch(
            watcher(Api::<Tenant>::all(host.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(tenants_w)
                .boxed(),
            changed.clone(),
            "tenants",
        ),
    ];
    // Device topology where the host serves ResourceSlices (resource.k8s.io/v1); counts from
    // the nodes' allocatable otherwise.
    let slices_watch = watch_if_served(&host, slices_w, &changed, "resourceslices").await;
    let slices_served = slices_watch.is_some();
    tasks.extend(slices_watch);
    // ResourceClaims and DeviceClasses: the GPUs a pod's claims take count as its GPUs.
    let claims_watch = watch_if_served(&host, claims_w, &changed, "resourceclaims").await;
    let claims_served = claims_watch.is_some();
    tasks.extend(claims_watch);
    let classes_watch = watch_if_served(&host, classes_w, &changed, "deviceclasses").await;
    let classes_served = classes_watch.is_some();
    tasks.extend(classes_watch);
    // PodDisruptionBudgets, so that no workload a budget protects is chosen for preemption.
    let budgets_watch = watch_if_served(&host, budgets_w, &changed, "poddisruptionbudgets").await;
    let budgets_served = budgets_watch.is_some();
    tasks.extend(budgets_watch);
    if !budgets_served {
        tracing::warn!(
            "GPU queue: the host's PodDisruptionBudgets cannot be listed; preemptions will not \
             avoid the workloads they protect (evictions still honour them)"
        );
    }
    let ready = async {
        let _ = pods.wait_until_ready().await;
        let _ = nodes.wait_until_ready().await;
        let _ = tenants.wait_until_ready().await;
        if slices_served {
            let _ = slices.wait_until_ready().await;
        }
        if claims_served {
            let _ = claims.wait_until_ready().await;
        }
        if classes_served {
            let _ = classes.wait_until_ready().await;
        }
        if budgets_served {
            let _ = budgets.wait_until_ready().await;
        }
    };
    tokio::pin!(shutdown);
    let mut state = State::default();
    tokio::select! {
        _ = &mut shutdown => {}
        _ = ready => loop {
            tokio::select! {
                _ = &mut shutdown => break,
                // Changes come in bursts: one decision for a burst, at most one per `settle`.
                _ = changed.notified() => tokio::time::sleep(settings.settle).await,
                _ = tokio::time::sleep(settings.resync) => {}
            }
            if !leader() {
                state.ledger_read = false;
                continue;
            }
            if !state.ledger_read {
                read_ledger(&host, &settings, &mut state).await;
            }
            let stores = Stores {
                policies: &policies,
                pods: &pods,
                nodes: &nodes,
                tenants: &tenants,
                slices: &slices,
                budgets: &budgets,
                claims: &claims,
                classes: &classes,
            };
            pass(&host, &settings, &figures, &*resources, stores, &mut state).await;
        }
    }
    // The ledger goes to the next leader as this one left it.
    if state.ledger_read && state.half_life > 0 && leader() {
        save_ledger(&host, &settings, &mut state).await;
    }
    for t in tasks {
        t.abort();
    }
}

/// The ConfigMap, in the control plane's namespace ([`Settings::namespace`]), where the
/// deciding replica keeps the fair-share ledger for the next one (key [`LEDGER_KEY`]: the JSON
/// of [`ledger::Ledger::save`]). Fabrik writes it; nobody else needs to. Deleting it starts fair
/// shares over time from even.
pub const LEDGER_CONFIGMAP: &str = "fabrik-gpu-queue-ledger";

/// The key of [`LEDGER_CONFIGMAP`] holding the ledger.
pub const LEDGER_KEY: &str = "ledger.json";

/// Reads the saved ledger into `state`, for a replica that starts deciding. Where none is
/// saved, or what is saved is not a ledger (told once), fair shares over time start from even
/// and the next save replaces it; where the host does not answer, the read is retried on the
/// next pass, and until then decisions go on from the ledger in memory, which is not saved.
async fn read_ledger(host: &Client, settings: &Settings, state: &mut State) {
    let what = "read the fair-share ledger".to_string();
    let listed = Api::<ConfigMap>::namespaced(host.clone(), &settings.namespace)
        .list(
            &kube::api::ListParams::default().fields(&format!("metadata.name={LEDGER_CONFIGMAP}")),
        )
        .await;
    let list = match listed {
        Ok(list) => list,
        Err(e) => {
            state.failed(what, &e);
            return;
        }
    };
    state.ok(&what);
    let saved = list
        .items
        .first()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|data| data.get(LEDGER_KEY));
    state.ledger = match saved.map(|text| ledger::Ledger::restore(text, now_nanos())) {
        None => ledger::Ledger::default(),
        Some(Ok(l)) => {
            tracing::info!(
                configmap = LEDGER_CONFIGMAP,
                "GPU queue: fair-share ledger read"
            );
            l
        }
        Some(Err(e)) => {
            tracing::warn!(configmap = LEDGER_CONFIGMAP, error = %e,
                "GPU queue: the saved fair-share ledger is unreadable; fair shares over time start \
                 from even, and the next save replaces it");
            ledger::Ledger::default()
        }
    };
    state.ledger_read = true;
    state.ledger_saved = None;
    state.saved_empty = false;
}

/// Whether the ledger is due to be saved, `since` the last save (`None`: not saved yet),
/// saving `every` so long; `saved_empty`: whether the saved ledger held no lead, `empty`:
/// whether the ledger holds none now (asked only when the time has come) — an empty ledger
/// saved once stays saved, and is not written every interval for nothing.
fn save_due(
    since: Option<Duration>,
    every: Duration,
    saved_empty: bool,
    empty: impl FnOnce() -> bool,
) -> bool {
    since.is_none_or(|s| s >= every) && !(saved_empty && empty())
}

/// Saves the ledger ([`LEDGER_CONFIGMAP`]), created where it is not there yet.
async fn save_ledger(host: &Client, settings: &Settings, state: &mut State) {
    let now = now_nanos();
    let empty = state.ledger.lead(now, state.half_life).is_empty();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(LEDGER_CONFIGMAP.to_string()),
            namespace: Some(settings.namespace.clone()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            LEDGER_KEY.to_string(),
            state.ledger.save(now, state.half_life),
        )])),
        ..Default::default()
    };
    let api = Api::<ConfigMap>::namespaced(host.clone(), &settings.namespace);
    let params = PostParams {
        field_manager: Some("fabrik-gpu-queue".to_string()),
        ..Default::default()
    };
    let mut written = match api.replace(LEDGER_CONFIGMAP, &params, &cm).await {
        Err(kube::Error::Api(s)) if s.code == 404 => api.create(&params, &cm).await,
        other => other,
    };
    if matches!(&written, Err(kube::Error::Api(s)) if s.code == 404) {
        // No namespace yet (`fabrik up` before its node agents made it): made here.
        let ns = k8s_openapi::api::core::v1::Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(settings.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let made = Api::<k8s_openapi::api::core::v1::Namespace>::all(host.clone())
            .create(&params, &ns)
            .await;
        written = match made {
            // (409: made meanwhile.)
            Ok(_) => api.create(&params, &cm).await,
            Err(kube::Error::Api(s)) if s.code == 409 => api.create(&params, &cm).await,
            Err(e) => Err(e),
        };
    }
    let what = "save the fair-share ledger".to_string();
    match written {
        Ok(_) => {
            state.ok(&what);
            state.ledger_saved = Some(std::time::Instant::now());
            state.saved_empty = empty;
        }
        // (Not a race: the namespace went again, or is going.)
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let text = format!("namespace {} does not exist", settings.namespace);
            if state.failures.get(&what) != Some(&text) {
                tracing::warn!(configmap = LEDGER_CONFIGMAP, problem = %text,
                    "GPU queue: the fair-share ledger cannot be saved; a new leader will start \
                     fair shares over time from even");
                state.failures.insert(what, text);
            }
        }
        Err(e) => state.failed(what, &e),
    }
}

struct Stores<'a> {
    policies: &'a Store<ConfigMap>,
    pods: &'a Store<Pod>,
    nodes: &'a Store<Node>,
    tenants: &'a Store<Tenant>,
    slices: &'a Store<ResourceSlice>,
    budgets: &'a Store<PodDisruptionBudget>,
    claims: &'a Store<ResourceClaim>,
    classes: &'a Store<DeviceClass>,
}

/// What the controller remembers between decisions.
#[derive(Default)]
struct State {
    reservations: Vec<Reservation>,
    /// How far each tenant has lately been ahead of its fair share.
    ledger: ledger::Ledger,
    /// Whether `ledger` is the saved one, read since this replica last started deciding (until
    /// then it is not saved, lest it overwrite the saved one).
    ledger_read: bool,
    /// When `ledger` was last saved.
    ledger_saved: Option<std::time::Instant>,
    /// Whether the ledger last saved held no lead.
    saved_empty: bool,
    /// The half-life the ledger is kept with (the last pass's policy), nanoseconds.
    half_life: i128,
    /// Nodes repartitioned for demand lately.
    repartitioned: layouts::Recent,
    /// When each waiting pod was last told why it waits.
    told: BTreeMap<String, std::time::Instant>,
    /// GPUs freed lately, for estimated waits.
    freed: wait::Freed,
    /// Per kind of GPU: why the last pass's layout for it could not be written (told to the
    /// pods waiting for it by the next pass).
    layouts_failed: BTreeMap<String, String>,
    /// What was wrong with the policy ConfigMap, as last told.
    policy_problems: String,
    /// Failures already logged, by what failed (logged again only when the error changes).
    failures: BTreeMap<String, String>,
}

impl State {
    fn failed(&mut self, what: String, e: &kube::Error) {
        if matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404) {
            // The object changed or went since the cache saw it: the next decision, on the
            // newer object, retries. Not worth a warning.
            tracing::debug!(%what, error = %e, "GPU queue write raced a change");
            return;
        }
        let text = e.to_string();
        if self.failures.get(&what) != Some(&text) {
            tracing::warn!(%what, error = %text, "GPU queue write failed; retried on the next decision");
            self.failures.insert(what, text);
        }
    }

    fn ok(&mut self, what: &str) {
        self.failures.remove(what);
    }
}

fn now_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

async fn pass(
    host: &Client,
    settings: &Settings,
    figures: &Figures,
    resources: &Resources,
    stores: Stores<'_>,
    state: &mut State,
) {
    fn owned<K>(store: &Store<K>) -> Vec<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        store.state().iter().map(|o| (**o).clone()).collect()
    }
    let pods: Vec<Pod> = owned(stores.pods);
    let nodes: Vec<Node> = owned(stores.nodes);
    let slices: Vec<ResourceSlice> = owned(stores.slices);
    let tenants: Vec<Arc<Tenant>> = stores.tenants.state();
    let queues = tenants
        .iter()
        .filter(|t| t.metadata.deletion_timestamp.is_none())
        .map(|t| input::tenant_queue(t, resources(t)))
        .collect();
    let budgets: Vec<PodDisruptionBudget> = owned(stores.budgets);
    let claims: Vec<ResourceClaim> = owned(stores.claims);
    let classes: Vec<DeviceClass> = owned(stores.classes);
    let host_objects = input::Host {
        nodes: &nodes,
        slices: &slices,
        pods: &pods,
        pdbs: &budgets,
        claims: &claims,
        classes: &classes,
    };
    let input::Built {
        mut input,
        release,
        unreadable,
    } = input::build(queues, host_objects, now_nanos());
    input.reservations = state.reservations.clone();
    let policy = match stores.policies.state().first() {
        Some(cm) => policy_from(cm, &settings.policy, state),
        None => settings.policy.clone(),
    };
    input.lead = state.ledger.lead(input.now, policy.fairness_half_life);
    match figures.leads.lock() {
        Ok(mut l) => l.clone_from(&input.lead),
        Err(p) => p.into_inner().clone_from(&input.lead),
    }
    let mut decision = decide::decide(&input, &policy);
    state
        .ledger
        .record(input.now, policy.fairness_half_life, &decision.standings);
    // Backfill, and borrowers owed to a guarantee, alone keeping GPUs from their new layout go.
    for p in layouts::in_the_way(&input, &nodes, &policy, &decision.limited) {
        if !decision.preempt.iter().any(|q| q.key == p.key) {
            decision.preempt.push(p);
        }
    }
    state.reservations = decision.reservations.clone();
    decision.waiting.extend(unreadable);
    tell_layouts(&input, &nodes, &state.layouts_failed, &mut decision);
    release_all(host, &pods, &release, state).await;
    state.freed.observe(&input, std::time::Instant::now());
    state
        .freed
        .preempting(decision.preempt.iter().map(|p| p.key.as_str()));
    apply(host, settings, figures, &pods, &tenants, &decision, state).await;
    // Kinds of GPU too little of is free: idle GPUs nobody waits for are laid out for them
    // (or, past the starvation bound, busy ones drain for a pod no node could hold). What
    // failed is what this pass's writes failed for: a kind the plan no longer lays out (its
    // demand gone, or served by GPUs that freed up) is no longer said to be retried.
    let mut failed = BTreeMap::new();
    for change in layouts::plan(
        &input,
        &nodes,
        &state.repartitioned,
        &policy,
        &decision.limited,
    ) {
        let node = &change.node;
        let what = format!("layout {node}");
        let patch = json!({"metadata": {"annotations": {
            fabrik_api::ANNOTATION_GPU_LAYOUT: change.layout}}});
        match Api::<Node>::all(host.clone())
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                state.ok(&what);
                state
                    .repartitioned
                    .note(node, change.gpus.keys().copied(), input.now);
                let gpus: Vec<String> = change
                    .gpus
                    .iter()
                    .map(|(g, r)| format!("GPU {g} for {r}"))
                    .collect();
                tracing::info!(%node, gpus = %gpus.join(", "), drains = change.drains,
                    "GPU queue: GPUs laid out for waiting demand");
            }
            Err(e) => {
                if let Some(told) = layout_failure(node, &e) {
                    for r in change.gpus.values() {
                        failed.insert(r.clone(), told.clone());
                    }
                }
                state.failed(what, &e);
            }
        }
    }
    state.layouts_failed = failed;
    state.half_life = policy.fairness_half_life;
    let due = save_due(
        state.ledger_saved.map(|at| at.elapsed()),
        settings.save_every,
        state.saved_empty,
        || state.ledger.lead(now_nanos(), state.half_life).is_empty(),
    );
    if state.ledger_read && state.half_life > 0 && due {
        save_ledger(host, settings, state).await;
    }
}

/// Lets the gated pods that take no GPU go (their claims are for other devices): the gate
/// removed, nothing pinned.
async fn release_all(host: &Client, pods: &[Pod], release: &[String], state: &mut State) {
    for key in release {
        let (ns, name) = pod_ns_name(key);
        let Some(pod) = pods.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name)
        }) else {
            continue;
        };
        let patch = json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "spec": {"schedulingGates": gates_without_queue(pod)},
        });
        let what = format!("release {key}");
        match Api::<Pod>::namespaced(host.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => state.ok(&what),
            Err(e) => state.failed(what, &e),
        }
    }
}

/// What the pods waiting for a kind are told when writing `node`'s layout for it failed with
/// `e`: the host's status and reason, not its message (which may name the control plane's own
/// identity and rights; the log has it all). Nothing for a conflict or a node gone, which the
/// next decision retries on newer objects.
fn layout_failure(node: &str, e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 409 || s.code == 404 => None,
        kube::Error::Api(s) => Some(format!(
            "the host refused node {node}'s layout: {} {}; the platform's administrators see \
             why in the control plane's log",
            s.code, s.reason
        )),
        _ => Some(format!(
            "the host API did not answer writing node {node}'s layout"
        )),
    }
}

/// Tells the waiting pods that want a kind of GPU being laid out which GPUs of which node are
/// being laid out for it; and, where the last layout written for their kind failed (`failed`:
/// kind → what failed), that it failed and why.
fn tell_layouts(
    input: &decide::Input,
    nodes: &[Node],
    failed: &BTreeMap<String, String>,
    decision: &mut Decision,
) {
    // Per kind, looked up once (many pods may wait for one kind).
    let mut laid: BTreeMap<String, Option<String>> = BTreeMap::new();
    for w in &input.waiting {
        let (mut coming, mut failing) = (Vec::new(), Vec::new());
        for r in w.gpus().into_keys() {
            let said = laid.entry(r.clone()).or_insert_with(|| {
                let (node, gpus) = layouts::laying_out(nodes, &input.nodes, &r)?;
                let gpus: Vec<String> = gpus.iter().map(u32::to_string).collect();
                let (s, verb) = if gpus.len() == 1 {
                    ("", "is")
                } else {
                    ("s", "are")
                };
                Some(format!(
                    "GPU{s} {} of node {node} {verb} being laid out for {r}",
                    gpus.join(", ")
                ))
            });
            match (said, failed.get(&r)) {
                (Some(said), _) => coming.push(said.clone()),
                (None, Some(why)) => failing.push(format!(
                    "the GPU queue could not lay GPUs out for {r} ({why}); it retries on every \
                     decision"
                )),
                (None, None) => {}
            }
        }
        let mut notes = Vec::new();
        if !coming.is_empty() {
            notes.push(format!(
                "{} (runs on them end first, no new work goes there)",
                coming.join(", ")
            ));
        }
        notes.extend(failing);
        if notes.is_empty() {
            continue;
        }
        // First, so that it is told at once (not held back as a change of figures).
        let note = notes.join("; ");
        for p in &w.pods {
            if let Some(m) = decision
                .waiting
                .get_mut(&format!("{}/{}", p.namespace, p.name))
            {
                *m = format!("{note}; {m}");
            }
        }
    }
}

fn pod_ns_name(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

async fn apply(
    host: &Client,
    settings: &Settings,
    figures: &Figures,
    pods: &[Pod],
    tenants: &[Arc<Tenant>],
    decision: &Decision,
    state: &mut State,
) {
    let find = |ns: &str, name: &str| {
        pods.iter().find(|p| {
            p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name)
        })
    };
    // Admissions: pin to the node, clear the gate (guarded by the pod's resourceVersion).
    let now = now_nanos();
    for a in &decision.admit {
        let ns = pod_ns_name(&a.key).0;
        for (name, node) in &a.placements {
            let Some(pod) = find(ns, name) else { continue };
            let how = match (a.backfill, a.borrowed, a.turn) {
                (true, _, _) => "backfill",
                (false, true, true) => "borrowed turn",
                (false, true, false) => "borrowed",
                (false, false, _) => "guaranteed",
            };
            let patch = json!({
                "metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "annotations": {fabrik_api::ANNOTATION_QUEUE_ADMITTED: format!("{now} {how}")},
                },
                "spec": {
                    "nodeSelector": {decide::HOSTNAME: node},
                    "schedulingGates": gates_without_queue(pod),
                },
            });
            let what = format!("admit {ns}/{name}");
            match Api::<Pod>::namespaced(host.clone(), ns)
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => state.ok(&what),
                Err(e) => state.failed(what, &e),
            }
        }
        figures
            .admitted_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(workload = %a.key, tenant = %a.tenant, borrowed = a.borrowed, "GPU queue admitted");
    }
    // Preemptions: say why on the pod and in an Event, then evict within the grace period.
    for p in &decision.preempt {
        let ns = pod_ns_name(&p.key).0;
        for name in &p.pods {
            let Some(pod) = find(ns, name) else { continue };
            let pods_api = Api::<Pod>::namespaced(host.clone(), ns);
            let conditions = with_condition(
                pod,
                "DisruptionTarget",
                "True",
                fabrik_api::REASON_QUEUE_RECLAIM,
                &p.message,
            );
            let what = format!("preempt {ns}/{name}");
            if let Err(e) = pods_api
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": conditions}})),
                )
                .await
            {
                state.failed(what, &e);
                continue;
            }
            state.ok(&what);
            event(
                host,
                pod,
                "Warning",
                fabrik_api::REASON_QUEUE_RECLAIM,
                &p.message,
            )
            .await;
        }
        figures
            .preempted_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(workload = %p.key, tenant = %p.tenant, reason = %p.message, "GPU queue preempted");
    }
    // Pods marked for preemption that are still there (their tenant's syncer evicts them
    // at once; it may be down): evicted here, within their own grace period.
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let marked = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter().find(|c| {
                    c.type_ == "DisruptionTarget"
                        && c.reason.as_deref() == Some(fabrik_api::REASON_QUEUE_RECLAIM)
                })
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        let Some(at) = marked else { continue };
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(at);
        if age.as_secs() < settings.evict_after.as_secs() as i64 {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let what = format!("evict {ns}/{name}");
        match Api::<Pod>::namespaced(host.clone(), &ns)
            .evict(&name, &EvictParams::default())
            .await
        {
            Ok(_) => state.ok(&what),
            Err(e) => state.failed(what, &e),
        }
    }
    // Waiting pods: why, in their PodScheduled condition — written when it changes, but a
    // message that only changes its figures at most every `RETELL` per pod (every admission
    // changes the figures of every waiting pod: a write each would swamp a long queue).
    let now = std::time::Instant::now();
    state
        .told
        .retain(|k, at| decision.waiting.contains_key(k) && now.duration_since(*at) < RETELL);
    for (key, message) in &decision.waiting {
        let (ns, name) = pod_ns_name(key);
        let Some(pod) = find(ns, name) else { continue };
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.message.as_deref())
            .unwrap_or("");
        let estimate = match decision.ahead.get(key) {
            Some(ahead) => format!("; {}", state.freed.describe(ahead, now)),
            None => String::new(),
        };
        let text = format!("queued by Fabrik's GPU queue: {message}{estimate}");
        if current == text {
            continue;
        }
        let same_kind = same_kind(current, &text);
        if same_kind && state.told.contains_key(key) {
            continue;
        }
        state.told.insert(key.clone(), now);
        let conditions = with_condition(pod, "PodScheduled", "False", "SchedulingGated", &text);
        let what = format!("status {ns}/{name}");
        match Api::<Pod>::namespaced(host.clone(), ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await
        {
            Ok(_) => state.ok(&what),
            Err(e) => state.failed(what, &e),
        }
    }
    // Tenants' standings: Tenant.status.queue (when it changes) and /metrics.
    let mut all = BTreeMap::new();
    for t in tenants {
        let name = t.metadata.name.clone().unwrap_or_default();
        let list: Vec<QueueStatus> = decision
            .standings
            .get(&name)
            .into_iter()
            .flatten()
            .map(|(resource, s)| QueueStatus {
                resource: resource.clone(),
                guaranteed: s.guaranteed,
                admitted: s.admitted,
                borrowed: s.borrowed,
                backfill: s.backfill,
                lent: s.lent,
                pending: s.pending,
                fair_share: s.fair_share,
            })
            .collect();
        let current = t
            .status
            .as_ref()
            .map(|s| s.queue.clone())
            .unwrap_or_default();
        if current != list && t.metadata.deletion_timestamp.is_none() {
            let what = format!("tenant {name}");
            match Api::<Tenant>::all(host.clone())
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"queue": list}})),
                )
                .await
            {
                Ok(_) => state.ok(&what),
                Err(e) => state.failed(what, &e),
            }
        }
        all.insert(name, list);
    }
    match figures.standings.lock() {
        Ok(mut s) => *s = all,
        Err(p) => *p.into_inner() = all,
    }
}

/// With the queue off: removes its gate from the host pods it holds (left by an earlier run
/// with the queue on), so that they go to the host's scheduler as the others now do. Once, at
/// start; returns how many pods were released.
pub async fn release_gates(host: Client) -> usize {
    let pods: Api<Pod> = Api::all(host.clone());
    let list = match pods
        .list(&kube::api::ListParams::default().labels(fabrik_api::LABEL_TENANT))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list pods to release the GPU queue's gates");
            return 0;
        }
    };
    let mut released = 0;
    for pod in list.iter().filter(|p| input::gated(p)) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "spec": {"schedulingGates": gates_without_queue(pod)},
        });
        match Api::<Pod>::namespaced(host.clone(), &ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => released += 1,
            Err(e) => tracing::warn!(pod = %format!("{ns}/{name}"), error = %e,
                "cannot release the GPU queue's gate"),
        }
    }
    if released > 0 {
        tracing::info!(pods = released, "GPU queue off: its gates released");
    }
    released
}

/// An Event on a host pod (the syncer shows it on the tenant's pod).
async fn event(host: &Client, pod: &Pod, type_: &str, reason: &str, message: &str) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let now = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ))
    .unwrap_or_default();
    let ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}."), "namespace": ns},
        "involvedObject": {
            "apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
            "uid": pod.metadata.uid,
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": fabrik_api::QUEUE_EVENT_SOURCE},
        "reportingComponent": fabrik_api::QUEUE_EVENT_SOURCE,
    });
    let api: Api<kube::core::DynamicObject> = Api::namespaced_with(
        host.clone(),
        &ns,
        &kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
    );
    if let Ok(obj) = serde_json::from_value::<kube::core::DynamicObject>(ev) {
        if let Err(e) = api.create(&PostParams::default(), &obj).await {
            tracing::debug!(pod = %name, error = %e, "GPU queue event not written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_ledger_saved_once_is_not_written_again_until_it_holds_a_lead() {
        let every = Duration::from_secs(15);
        let (soon, later) = (Some(Duration::from_secs(3)), Some(Duration::from_secs(16)));
        let (yes, no) = (|| true, || false);
        // Never saved: now, whatever it holds.
        assert!(save_due(None, every, false, yes));
        assert!(save_due(None, every, false, no));
        // Every interval while it holds a lead, or until an empty one is saved.
        assert!(!save_due(soon, every, false, no));
        assert!(save_due(later, every, false, no));
        assert!(save_due(later, every, false, yes));
        assert!(save_due(later, every, true, no));
        // Empty, and saved empty: nothing to write.
        assert!(!save_due(later, every, true, yes));
        // The ledger is not read before the time has come.
        assert!(!save_due(soon, every, true, || unreachable!(
            "read too early"
        )));
    }

    #[test]
    fn a_waiting_pod_is_told_at_once_when_the_words_change_and_later_when_figures_do() {
        let gang = "queued by Fabrik's GPU queue: gang default/kueue/big (3 pods, admitted all \
                    together): ";
        let was = format!("{gang}waiting for its gang: 2 of 3 pods exist; #1 of 1 waiting");
        let now = format!(
            "{gang}waiting for 24 nvidia.com/gpu: 14 of 14 are free for it; #1 of 1 waiting"
        );
        assert!(!same_kind(&was, &now));
        let later = format!(
            "{gang}waiting for 24 nvidia.com/gpu: 2 of 14 are free for it; #2 of 3 waiting; \
             estimated wait about 4 min"
        );
        assert!(same_kind(&now, &later));
    }

    #[test]
    fn waiting_pods_are_told_when_a_layout_for_their_kind_could_not_be_written() {
        use fabrik_gpu::placement::model::PodRequest;
        const MIG: &str = "nvidia.com/mig-1g.18gb";
        let pod = |name: &str, resource: &str| PodRequest {
            namespace: "fabrik-t".into(),
            name: name.into(),
            requests: BTreeMap::from([(resource.to_string(), 1)]),
            ..Default::default()
        };
        let waiting = |key: &str, p: PodRequest| decide::Waiting {
            tenant: "t".into(),
            key: key.into(),
            pods: vec![p],
            needs: 1,
            priority: 0,
            arrival: 0,
            runtime: None,
        };
        let input = decide::Input {
            waiting: vec![
                waiting("fabrik-t/serve", pod("serve", MIG)),
                waiting("fabrik-t/train", pod("train", fabrik_api::RESOURCE_GPU)),
            ],
            ..Default::default()
        };
        let mut decision = Decision::default();
        for p in ["fabrik-t/serve", "fabrik-t/train"] {
            decision.waiting.insert(p.into(), "waiting for room".into());
        }
        let failed = BTreeMap::from([(
            MIG.to_string(),
            "the host refused node n1's layout: 403 Forbidden".to_string(),
        )]);
        tell_layouts(&input, &[], &failed, &mut decision);
        assert_eq!(
            decision.waiting["fabrik-t/serve"],
            "the GPU queue could not lay GPUs out for nvidia.com/mig-1g.18gb (the host refused \
             node n1's layout: 403 Forbidden); it retries on every decision; waiting for room"
        );
        // What they are told of a refusal: the status, not the host's message.
        let refused = kube::Error::Api(
            kube::core::Status::failure(
                "nodes \"n1\" is forbidden: User \"system:serviceaccount:fabrik:fabrik\" \
                 cannot patch resource \"nodes\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        );
        let told = layout_failure("n1", &refused).expect("told");
        assert!(
            told.starts_with("the host refused node n1's layout: 403 Forbidden"),
            "{told}"
        );
        assert!(!told.contains("serviceaccount"), "{told}");
        let raced = kube::Error::Api(
            kube::core::Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        );
        assert_eq!(layout_failure("n1", &raced), None);
        // Pods of another kind are not told about it.
        assert_eq!(decision.waiting["fabrik-t/train"], "waiting for room");
    }

    #[test]
    fn the_policy_configmap_sets_what_it_names_and_ignores_the_rest() {
        let cm = |pairs: &[(&str, &str)]| ConfigMap {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        };
        let defaults = Policy::default();
        let mut state = State::default();
        let p = policy_from(
            &cm(&[
                ("reclaim", "false"),
                ("starvationSeconds", "5"),
                ("reclaimGraceSeconds", "30"),
                ("fairnessHalfLifeSeconds", "0"),
                ("layoutHoldSeconds", "600"),
                ("groupWeights", "research=2, vision=1"),
            ]),
            &defaults,
            &mut state,
        );
        assert!(!p.reclaim);
        assert_eq!(p.starvation_after, 5_000_000_000);
        assert_eq!(p.reclaim_grace, 30_000_000_000);
        assert_eq!(p.fairness_half_life, 0);
        assert_eq!(p.layout_hold, 600_000_000_000);
        assert_eq!(
            p.group_weights,
            [("research".to_string(), 2), ("vision".to_string(), 1)].into()
        );
        assert!(
            state.policy_problems.is_empty(),
            "{}",
            state.policy_problems
        );
        let p = policy_from(
            &cm(&[
                ("reclaim", "maybe"),
                ("starvationSeconds", "-1"),
                ("reclaimGraceSeconds", "1.5"),
                ("fairnessHalfLifeSeconds", "a day"),
                ("layoutHoldSeconds", "3601"),
                ("cohort", "x"),
                ("groupWeights", "Research=2, vision=0, ok=3"),
            ]),
            &defaults,
            &mut state,
        );
        assert_eq!(
            (
                p.reclaim,
                p.starvation_after,
                p.reclaim_grace,
                p.fairness_half_life,
                p.layout_hold
            ),
            (
                defaults.reclaim,
                defaults.starvation_after,
                defaults.reclaim_grace,
                defaults.fairness_half_life,
                defaults.layout_hold
            )
        );
        assert_eq!(p.group_weights, [("ok".to_string(), 3)].into());
        for field in [
            "reclaim",
            "starvationSeconds",
            "reclaimGraceSeconds",
            "fairnessHalfLifeSeconds",
            "layoutHoldSeconds",
            "cohort",
            "\"Research=2\"",
            "\"vision=0\"",
        ] {
            assert!(
                state.policy_problems.contains(field),
                "{}",
                state.policy_problems
            );
        }
    }
}
