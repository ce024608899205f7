//! `syncer-bench`: how fast the syncer turns tenant pods into host pods, and host pod status
//! back into tenant pod status, in one `fabrik up --nodes 0` (release build).
//!
//! No simulated nodes run: the bench plays the kubelet on the host (fed by the bench's host
//! watch, it marks each pending host pod Running and Ready through `pods/status`, `--kubelets`
//! at a time, as the kubelets of several nodes would).
//!
//! Phases:
//!
//! 1. **Latency, down.** One tenant (`lat`), a few warm-up pods, then `--latency-pods`
//!    sequential pods: from sending the tenant create to a host watch (all tenant pods on the
//!    host, label `fabrik.dev/tenant`) delivering the host pod.
//! 2. **Latency, up.** For each of those pods, in turn: the bench marks the host pod Running
//!    (status patch), and the time until a watch on the tenant's pods sees it Running.
//! 3. **Burst, down.** `TENANTS × PODS` pods created through the tenants' own kubeconfigs by
//!    `--clients` concurrent workers, interleaved across tenants; time until the host watch has
//!    seen every host pod.
//! 4. **Burst, up.** A watch per tenant on its pods, then the kubelet stand-in starts; time
//!    until every tenant pod is seen Running, and per pod from the host status patch being sent
//!    to the tenant watch seeing the pod Running.
//!
//! `--timeout-s` bounds each burst phase; a phase that does not finish reports how far it got.
//!
//! The server's RSS (`VmRSS`, peak `VmHWM`) and CPU time come from `/proc/PID/`.
//!
//! **`--real-host`**: the same phases against a real Kubernetes control plane instead
//! (etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, from
//! [`e2e::real_host::RealHost`]; the binaries from `FABRIK_K8S_BIN_DIR` or `../shared/k8s`,
//! `etcd` and `zstd` on `PATH`). The bench creates the chart's Tenant CRD there and runs
//! `fabrik serve --host-kubeconfig <admin kubeconfig>` (admin rights: the least-privilege
//! setup is `e2e/tests/real_host.rs`'s business); each tenant's kubeconfig is read from its
//! host Secret `fabrik-kubeconfig` in `fabrik-<tenant>`. The real host has a scheduler but no
//! nodes: host pods stay unbound, and the kubelet stand-in's status patch is what turns them
//! Running, as on Fabrik's host. The server readings are `fabrik serve`'s; the control
//! plane's own RSS and CPU time are printed after the table.
//!
//! `--keep-log FILE` copies the server's log there at the end; the count of its WARN and
//! ERROR lines is printed either way.
//!
//! ```sh
//! cargo build --release -p control-plane --bin fabrik -p e2e --features bench --bin syncer-bench
//! target/release/syncer-bench              # 100 tenants × 100 pods
//! target/release/syncer-bench 10 100       # 10 tenants × 100 pods
//! target/release/syncer-bench 10 100 --real-host
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use fabrik_api::tenant::{Tenant, TenantSpec};
use fabrik_api::{ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, LABEL_TENANT};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::{watch, Semaphore};

/// Command-line flags.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "syncer-bench",
    about = "Syncer benchmark: tenant pod → host pod and host status → tenant status"
)]
struct Args {
    /// Tenants in the burst.
    #[arg(default_value_t = 100)]
    tenants: usize,
    /// Pods per tenant in the burst.
    #[arg(default_value_t = 100)]
    pods: usize,
    /// Concurrent creating workers in the burst.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Sequential pods timed in the latency phases.
    #[arg(long, default_value_t = 200)]
    latency_pods: usize,
    /// Untimed pods created first in the latency tenant.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Status patches the kubelet stand-in makes at a time.
    #[arg(long, default_value_t = 16)]
    kubelets: usize,
    /// Seconds each burst phase may take before the bench reports what it got.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// The `fabrik` binary (default: `fabrik` next to this binary).
    #[arg(long, env = "FABRIK_BIN")]
    fabrik: Option<PathBuf>,
    /// Run against a real kube-apiserver with `fabrik serve`, not `fabrik up --nodes 0`.
    #[arg(long)]
    real_host: bool,
    /// Copy the server's log (`fabrik up` or `fabrik serve`) to this file at the end.
    #[arg(long, value_name = "FILE")]
    keep_log: Option<PathBuf>,
}

/// Where the tenants' admin kubeconfigs are.
enum Kubeconfigs {
    /// `fabrik up` writes `DATA/tenants/<tenant>.kubeconfig`.
    Files(PathBuf),
    /// `fabrik serve` keeps it in the host Secret `fabrik-kubeconfig` (key `kubeconfig`) in
    /// the tenant's namespace `fabrik-<tenant>`.
    HostSecrets,
}

/// What the bench runs against: everything that differs between the two hosts.
struct Target {
    /// A client of the host, allowed to create Tenants and to patch every host pod's status.
    host: Client,
    /// Where the tenants' kubeconfigs come from.
    kubeconfigs: Kubeconfigs,
    /// The Fabrik server (`fabrik up` or `fabrik serve`): its RSS and CPU time are reported.
    pid: u32,
    /// Other processes whose RSS and CPU time are printed after the table (the real host's
    /// control plane).
    others: Vec<(&'static str, u32)>,
}

/// Set when the bench is done: watches that end then are not errors.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Prints a watch error, unless the bench is stopping.
fn watch_error(what: &str, e: &watcher::Error) {
    if !STOPPING.load(Ordering::Relaxed) {
        eprintln!("{what}: {e}");
    }
}

/// Namespace of the benchmark's pods in every tenant.
const NS: &str = "default";

/// The tenant of the latency phases.
const LAT_TENANT: &str = "lat";

/// What the watches saw, by `tenant/namespace/name` of the tenant pod.
#[derive(Default)]
struct Track {
    /// First time the host watch delivered the host pod.
    host_seen: HashMap<String, Instant>,
    /// First time the host watch delivered the host pod Running.
    host_running: HashMap<String, Instant>,
    /// When the kubelet stand-in sent the status patch marking the host pod Running.
    host_marked: HashMap<String, Instant>,
    /// First time a tenant watch delivered the tenant pod Running.
    tenant_running: HashMap<String, Instant>,
}

/// The watches' findings and a change counter to wait on.
struct Shared {
    track: Mutex<Track>,
    changes: watch::Sender<u64>,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            track: Mutex::new(Track::default()),
            changes: watch::Sender::new(0),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Track) -> R) -> R {
        let mut t = self.track.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut t)
    }

    fn bump(&self) {
        self.changes.send_modify(|c| *c = c.wrapping_add(1));
    }

    /// Waits until `done` holds or `deadline` passes; returns whether it holds.
    async fn wait_until(&self, deadline: Instant, mut done: impl FnMut(&Track) -> bool) -> bool {
        let mut rx = self.changes.subscribe();
        loop {
            if self.with(|t| done(t)) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            match tokio::time::timeout(deadline - now, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.with(|t| done(t)),
            }
        }
    }
}

fn key(tenant: &str, ns: &str, name: &str) -> String {
    format!("{tenant}/{ns}/{name}")
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The tenant pod a host pod copies, from its label and origin annotations.
fn origin_key(pod: &Pod) -> Option<String> {
    let tenant = pod.labels().get(LABEL_TENANT)?;
    let a = pod.annotations();
    let ns = a.get(ANNOTATION_VIRTUAL_NAMESPACE)?;
    let name = a.get(ANNOTATION_VIRTUAL_NAME)?;
    Some(key(tenant, ns, name))
}

/// One watch on every tenant pod on the host (all `fabrik-*` namespaces). Pending host pods of
/// the burst tenants are handed to the kubelet stand-in (which holds them until it starts).
async fn watch_host(
    host: Client,
    shared: Arc<Shared>,
    to_kubelet: tokio::sync::mpsc::UnboundedSender<Pod>,
) {
    let api: Api<Pod> = Api::all(host);
    let config = watcher::Config::default().labels(LABEL_TENANT);
    let mut stream = watcher(api, config).boxed();
    while let Some(ev) = stream.next().await {
        let pod = match ev {
            Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                watch_error("host watch", &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let now = Instant::now();
        let Some(k) = origin_key(&pod) else { continue };
        let running = phase(&pod) == "Running";
        let pending = matches!(phase(&pod), "" | "Pending")
            && pod.metadata.deletion_timestamp.is_none()
            && pod.labels().get(LABEL_TENANT).map(String::as_str) != Some(LAT_TENANT);
        shared.with(|t| {
            if running {
                t.host_running.entry(k.clone()).or_insert(now);
            }
            t.host_seen.entry(k).or_insert(now);
        });
        shared.bump();
        if pending {
            let _ = to_kubelet.send(pod);
        }
    }
}

/// A watch on one tenant's pods; records when each is first seen Running. `ready` is told once
/// the initial list is done.
async fn watch_tenant(
    tenant: String,
    client: Client,
    shared: Arc<Shared>,
    ready: tokio::sync::mpsc::Sender<()>,
) {
    let api: Api<Pod> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let mut ready = Some(ready);
    while let Some(ev) = stream.next().await {
        let pod = match ev {
            Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
            Ok(watcher::Event::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(()).await;
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                watch_error(&format!("tenant {tenant} watch"), &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if phase(&pod) != "Running" {
            continue;
        }
        let now = Instant::now();
        let k = key(
            &tenant,
            &pod.namespace().unwrap_or_default(),
            &pod.name_any(),
        );
        shared.with(|t| {
            t.tenant_running.entry(k).or_insert(now);
        });
        shared.bump();
    }
}

/// Starts watches on the tenants' pods and waits until each has listed.
async fn start_tenant_watches(
    clients: &[(String, Client)],
    shared: &Arc<Shared>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(clients.len().max(1));
    for (name, client) in clients {
        tasks.spawn(watch_tenant(
            name.clone(),
            client.clone(),
            shared.clone(),
            tx.clone(),
        ));
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..clients.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(())) => {}
            _ => bail!("tenant watches did not list within 120 s"),
        }
    }
    Ok(())
}

/// Marks one host pod Running (a few tries); returns whether it succeeded. The first send is
/// recorded in `shared` for the tenant pod the host pod copies.
async fn mark_running(host: &Client, pod: &Pod, shared: &Shared) -> bool {
    let Some(ns) = pod.namespace() else {
        return false;
    };
    let api: Api<Pod> = Api::namespaced(host.clone(), &ns);
    let status = e2e::running_status(pod);
    if let Some(k) = origin_key(pod) {
        let now = Instant::now();
        shared.with(|t| {
            t.host_marked.entry(k).or_insert(now);
        });
    }
    for attempt in 0..5u64 {
        match api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
        {
            Ok(_) => return true,
            Err(kube::Error::Api(s)) if s.code == 404 => return false,
            Err(e) => {
                eprintln!("kubelet: status of {}: {e}", pod.name_any());
                tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
            }
        }
    }
    false
}

/// What the kubelet stand-in did.
#[derive(Default)]
struct KubeletStats {
    patched: AtomicUsize,
    failed: AtomicUsize,
}

/// The kubelet stand-in: once `start` fires, marks every pending host pod that the host watch
/// hands it Running, `parallel` at a time. It shares the host watch (established before the
/// burst) rather than listing 10,000 pods when it starts, as a node's kubelet, watching its own
/// pods all along, would.
async fn kubelet(
    host: Client,
    parallel: usize,
    stats: Arc<KubeletStats>,
    shared: Arc<Shared>,
    mut pods: tokio::sync::mpsc::UnboundedReceiver<Pod>,
    start: tokio::sync::oneshot::Receiver<()>,
) {
    if start.await.is_err() {
        return;
    }
    let sem = Arc::new(Semaphore::new(parallel.max(1)));
    let mut started: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut work = tokio::task::JoinSet::new();
    while let Some(pod) = pods.recv().await {
        let id = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        if !started.insert(id) {
            continue;
        }
        let Ok(permit) = sem.clone().acquire_owned().await else {
            return;
        };
        let host = host.clone();
        let stats = stats.clone();
        let shared = shared.clone();
        work.spawn(async move {
            let ok = mark_running(&host, &pod, &shared).await;
            let counter = if ok { &stats.patched } else { &stats.failed };
            counter.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        });
        while work.try_join_next().is_some() {}
    }
}

/// A tenant pod: one container with small requests.
fn tenant_pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "syncer-bench"}},
        "spec": {
            "containers": [{
                "name": "app",
                "image": "registry.example/bench:1.0",
                "command": ["sleep", "infinity"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
            }],
            "terminationGracePeriodSeconds": 1
        }
    }))?)
}

/// Creates a tenant pod, retrying a few times; returns the number of failed attempts.
async fn create_pod(api: &Api<Pod>, pod: &Pod) -> Result<usize> {
    let mut failures = 0;
    loop {
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => return Ok(failures),
            // An earlier attempt went through after all.
            Err(kube::Error::Api(s)) if s.code == 409 && failures > 0 => return Ok(failures),
            Err(e) => {
                failures += 1;
                if failures >= 10 {
                    return Err(e).context(format!("creating pod {}", pod.name_any()));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// "p50 X ms, p99 Y ms, max Z ms" of millisecond samples.
fn summary(mut ms: Vec<f64>) -> String {
    ms.sort_by(|a, b| a.total_cmp(b));
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n = {})",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        ms.len()
    )
}

fn ms_between(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// A client for a tenant, from the kubeconfig `fabrik up` writes for it, or the host Secret
/// `fabrik serve` keeps it in.
async fn tenant_client(target: &Target, tenant: &str) -> Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let kc = match &target.kubeconfigs {
        Kubeconfigs::Files(data) => {
            let path = data.join("tenants").join(format!("{tenant}.kubeconfig"));
            while !path.exists() {
                if Instant::now() > deadline {
                    bail!("{} did not appear", path.display());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            kube::config::Kubeconfig::read_from(&path)
                .with_context(|| format!("reading {}", path.display()))?
        }
        Kubeconfigs::HostSecrets => {
            let ns = format!("fabrik-{tenant}");
            let secrets: Api<Secret> = Api::namespaced(target.host.clone(), &ns);
            let text = loop {
                let data = secrets
                    .get_opt("fabrik-kubeconfig")
                    .await
                    .with_context(|| format!("reading Secret {ns}/fabrik-kubeconfig"))?
                    .and_then(|s| s.data)
                    .and_then(|mut d| d.remove("kubeconfig"));
                if let Some(bytes) = data {
                    break String::from_utf8(bytes.0)
                        .with_context(|| format!("Secret {ns}/fabrik-kubeconfig is not UTF-8"))?;
                }
                if Instant::now() > deadline {
                    bail!("Secret {ns}/fabrik-kubeconfig with key kubeconfig did not appear");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            kube::config::Kubeconfig::from_yaml(&text)
                .with_context(|| format!("parsing the kubeconfig in {ns}/fabrik-kubeconfig"))?
        }
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Creates the tenants (16 at a time) and waits until every one is Ready.
async fn create_tenants(host: &Client, names: &[String]) -> Result<()> {
    let api: Api<Tenant> = Api::all(host.clone());
    let sem = Arc::new(Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for name in names {
        let api = api.clone();
        let sem = sem.clone();
        let name = name.clone();
        tasks.spawn(async move {
            let _permit = sem.acquire().await;
            api.create(
                &PostParams::default(),
                &Tenant::new(&name, TenantSpec::default()),
            )
            .await
            .with_context(|| format!("creating tenant {name}"))
            .map(|_| ())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let want: std::collections::HashSet<&String> = names.iter().collect();
    let mut ready = std::collections::HashSet::new();
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while ready.len() < want.len() {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "{} of {} tenants Ready after 300 s",
                    ready.len(),
                    want.len()
                )
            })?;
        let t = match ev {
            Some(Ok(watcher::Event::Apply(t))) | Some(Ok(watcher::Event::InitApply(t))) => t,
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                eprintln!("tenant watch: {e}");
                continue;
            }
            None => bail!("tenant watch ended"),
        };
        let name = t.name_any();
        if want.contains(&name)
            && t.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
        {
            ready.insert(name);
        }
    }
    Ok(())
}

async fn run(args: Args, target: Target) -> Result<()> {
    let host = target.host.clone();
    let pid = target.pid;
    let others_before: Vec<(f64, (f64, f64))> = target
        .others
        .iter()
        .map(|&(_, p)| {
            (
                e2e::procfs::cpu_seconds(p).unwrap_or(0.0),
                e2e::procfs::memory_mib(p),
            )
        })
        .collect();
    let shared = Shared::new();
    let mut background = tokio::task::JoinSet::new();
    let (to_kubelet, kubelet_pods) = tokio::sync::mpsc::unbounded_channel();
    background.spawn(watch_host(host.clone(), shared.clone(), to_kubelet));
    let (start_kubelet, kubelet_start) = tokio::sync::oneshot::channel();
    let stats = Arc::new(KubeletStats::default());
    background.spawn(kubelet(
        host.clone(),
        args.kubelets,
        stats.clone(),
        shared.clone(),
        kubelet_pods,
        kubelet_start,
    ));

    // Tenants: the latency tenant and the burst's.
    let burst_names: Vec<String> = (0..args.tenants).map(|i| format!("b{i:04}")).collect();
    let mut names = vec![LAT_TENANT.to_string()];
    names.extend(burst_names.iter().cloned());
    let rss_empty = e2e::procfs::memory_mib(pid);
    let t0 = Instant::now();
    create_tenants(&host, &names).await?;
    let tenants_ready_s = t0.elapsed().as_secs_f64();
    let lat_client = tenant_client(&target, LAT_TENANT).await?;
    let mut burst_clients = Vec::with_capacity(burst_names.len());
    for name in &burst_names {
        burst_clients.push((name.clone(), tenant_client(&target, name).await?));
    }
    println!(
        "{} tenants Ready in {tenants_ready_s:.1} s; load average {}",
        names.len(),
        e2e::procfs::loadavg()
    );
    // Let the tenants' controllers and syncers settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_tenants = e2e::procfs::memory_mib(pid);

    // Latency, down: sequential creates in the latency tenant.
    start_tenant_watches(
        &[(LAT_TENANT.to_string(), lat_client.clone())],
        &shared,
        &mut background,
    )
    .await?;
    let lat_pods: Api<Pod> = Api::namespaced(lat_client.clone(), NS);
    let mut down_ms = Vec::with_capacity(args.latency_pods);
    let mut timed = Vec::with_capacity(args.latency_pods);
    for i in 0..args.warmup + args.latency_pods {
        let name = if i < args.warmup {
            format!("warm-{i:04}")
        } else {
            format!("lat-{:04}", i - args.warmup)
        };
        let k = key(LAT_TENANT, NS, &name);
        let start = Instant::now();
        create_pod(&lat_pods, &tenant_pod(&name)?).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        if !shared
            .wait_until(deadline, |t| t.host_seen.contains_key(&k))
            .await
        {
            bail!("the host pod of {LAT_TENANT}/{NS}/{name} did not appear within 30 s");
        }
        if i >= args.warmup {
            if let Some(seen) = shared.with(|t| t.host_seen.get(&k).copied()) {
                down_ms.push(ms_between(start, seen));
            }
            timed.push(name);
        }
    }
    println!(
        "latency, tenant create → host pod: {}",
        summary(down_ms.clone())
    );

    // Latency, up: mark each host pod Running, wait for the tenant pod Running.
    let host_ns = format!("fabrik-{LAT_TENANT}");
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), &host_ns);
    let mut host_names = HashMap::new();
    for p in host_pods.list(&Default::default()).await?.items {
        if let Some(k) = origin_key(&p) {
            host_names.insert(k, p);
        }
    }
    let mut up_ms = Vec::with_capacity(timed.len());
    for name in &timed {
        let k = key(LAT_TENANT, NS, name);
        let Some(hp) = host_names.get(&k) else {
            bail!("host pod of {k} not listed");
        };
        let start = Instant::now();
        if !mark_running(&host, hp, &shared).await {
            bail!("could not mark the host pod of {k} Running");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        if !shared
            .wait_until(deadline, |t| t.tenant_running.contains_key(&k))
            .await
        {
            bail!("{k} was not Running in the tenant within 30 s of its host pod");
        }
        if let Some(r) = shared.with(|t| t.tenant_running.get(&k).copied()) {
            up_ms.push(ms_between(start, r));
        }
    }
    println!(
        "latency, host status patch sent → tenant pod Running: {}",
        summary(up_ms.clone())
    );

    // Burst, down: TENANTS × PODS creates, interleaved across tenants.
    let total = args.tenants * args.pods;
    let burst_keys: Vec<String> = (0..total)
        .map(|i| {
            key(
                &burst_names[i % args.tenants],
                NS,
                &format!("p{:05}", i / args.tenants),
            )
        })
        .collect();
    let apis: Arc<Vec<Api<Pod>>> = Arc::new(
        burst_clients
            .iter()
            .map(|(_, c)| Api::namespaced(c.clone(), NS))
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let sent_at: Arc<Mutex<HashMap<String, Instant>>> =
        Arc::new(Mutex::new(HashMap::with_capacity(total)));
    let cpu_before = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0);
    let burst_start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.clients.max(1) {
        let apis = apis.clone();
        let next = next.clone();
        let sent_at = sent_at.clone();
        let tenants = args.tenants;
        workers.spawn(async move {
            let mut failures = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<usize, anyhow::Error>(failures);
                }
                let (tenant, n) = (i % tenants, i / tenants);
                let name = format!("p{n:05}");
                let pod = tenant_pod(&name)?;
                let Some(api) = apis.get(tenant) else {
                    bail!("no client for tenant {tenant}");
                };
                let t = Instant::now();
                failures += create_pod(api, &pod).await?;
                let k = key(&format!("b{tenant:04}"), NS, &name);
                sent_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(k, t);
            }
        });
    }
    let mut create_failures = 0;
    while let Some(r) = workers.join_next().await {
        create_failures += r??;
    }
    let acked_s = burst_start.elapsed().as_secs_f64();
    println!(
        "burst: {total} tenant creates acknowledged in {acked_s:.2} s ({:.0}/s, {create_failures} retried)",
        total as f64 / acked_s
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let all_host = shared
        .wait_until(deadline, |t| {
            // The length check first: a full check per watch event would cost O(n²).
            t.host_seen.len() >= total && burst_keys.iter().all(|k| t.host_seen.contains_key(k))
        })
        .await;
    let (host_count, last_host) = shared.with(|t| {
        let seen: Vec<Instant> = burst_keys
            .iter()
            .filter_map(|k| t.host_seen.get(k).copied())
            .collect();
        (seen.len(), seen.into_iter().max())
    });
    let host_s = last_host.map_or(f64::NAN, |l| ms_between(burst_start, l) / 1000.0);
    let cpu_down = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
    let burst_down_ms: Vec<f64> = {
        let sent = sent_at.lock().unwrap_or_else(|e| e.into_inner());
        shared.with(|t| {
            burst_keys
                .iter()
                .filter_map(|k| Some(ms_between(*sent.get(k)?, *t.host_seen.get(k)?)))
                .collect()
        })
    };
    if all_host {
        println!(
            "burst: all {total} host pods seen {host_s:.2} s after the first create; server CPU {cpu_down:.1} s; per pod {}",
            summary(burst_down_ms.clone())
        );
    } else {
        println!(
            "burst: only {host_count} of {total} host pods after {:.0} s",
            burst_start.elapsed().as_secs_f64()
        );
    }
    let rss_burst = e2e::procfs::memory_mib(pid);

    // Burst, up: watches on every burst tenant, then the kubelet stand-in.
    let mut up_result = None;
    if all_host {
        start_tenant_watches(&burst_clients, &shared, &mut background).await?;
        let cpu_before = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0);
        let up_start = Instant::now();
        let _ = start_kubelet.send(());
        let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
        let all_running = shared
            .wait_until(deadline, |t| {
                t.tenant_running.len() >= total
                    && burst_keys.iter().all(|k| t.tenant_running.contains_key(k))
            })
            .await;
        let (running, last_running, last_host_running, per_pod) = shared.with(|t| {
            let seen: Vec<Instant> = burst_keys
                .iter()
                .filter_map(|k| t.tenant_running.get(k).copied())
                .collect();
            let host_seen: Vec<Instant> = burst_keys
                .iter()
                .filter_map(|k| t.host_running.get(k).copied())
                .collect();
            let per_pod: Vec<f64> = burst_keys
                .iter()
                .filter_map(|k| {
                    Some(ms_between(
                        *t.host_marked.get(k)?,
                        *t.tenant_running.get(k)?,
                    ))
                })
                .collect();
            (
                seen.len(),
                seen.into_iter().max(),
                host_seen.into_iter().max(),
                per_pod,
            )
        });
        let cpu_up = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
        // Patches whose answer is still on its way (the syncer can be faster than the reply).
        let settle = Instant::now() + Duration::from_secs(5);
        while stats.patched.load(Ordering::Relaxed) + stats.failed.load(Ordering::Relaxed) < total
            && Instant::now() < settle
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let up_s = last_running.map_or(f64::NAN, |l| ms_between(up_start, l) / 1000.0);
        let host_up_s = last_host_running.map_or(f64::NAN, |l| ms_between(up_start, l) / 1000.0);
        println!(
            "burst up: kubelet stand-in patched {} host pods ({} failed); last host pod Running at {host_up_s:.2} s",
            stats.patched.load(Ordering::Relaxed),
            stats.failed.load(Ordering::Relaxed)
        );
        if all_running {
            println!(
                "burst up: all {total} tenant pods Running {up_s:.2} s after the kubelet started; server CPU {cpu_up:.1} s; host status patch sent → tenant Running per pod {}",
                summary(per_pod.clone())
            );
        } else {
            println!(
                "burst up: only {running} of {total} tenant pods Running after {:.0} s",
                up_start.elapsed().as_secs_f64()
            );
        }
        up_result = Some((all_running, running, up_s, host_up_s, cpu_up, per_pod));
    }
    let rss_end = e2e::procfs::memory_mib(pid);

    // The table.
    let mut down_sorted = down_ms;
    down_sorted.sort_by(|a, b| a.total_cmp(b));
    let p99 = percentile(&down_sorted, 0.99);
    println!();
    println!(
        "| measurement ({} tenants × {} pods, {} clients, load average {}) | result | target | |",
        args.tenants,
        args.pods,
        args.clients,
        e2e::procfs::loadavg()
    );
    println!("| --- | --- | --- | --- |");
    println!(
        "| tenant create → host pod, sequential ({} pods after {} warm-up, {} idle tenants) | {} | p99 ≤ 50 ms | {} |",
        args.latency_pods,
        args.warmup,
        names.len(),
        summary(down_sorted.clone()),
        if p99 <= 50.0 { "pass" } else { "**miss**" }
    );
    println!(
        "| host pod status patch (Running) sent → tenant pod Running, sequential | {} | | |",
        summary(up_ms)
    );
    println!(
        "| burst: {total} tenant creates acknowledged ({} clients) | {acked_s:.2} s ({:.0} creates/s, {create_failures} retried) | | |",
        args.clients,
        total as f64 / acked_s
    );
    if all_host {
        println!(
            "| burst: first create → all {total} host pods seen | **{host_s:.2} s** (per pod {}; server CPU {cpu_down:.1} s) | | |",
            summary(burst_down_ms)
        );
    } else {
        println!(
            "| burst: first create → host pods seen | only {host_count} of {total} within {} s of the last ack | | **miss** |",
            args.timeout_s
        );
    }
    if let Some((all_running, running, up_s, host_up_s, cpu_up, per_pod)) = up_result {
        if all_running {
            println!(
                "| burst: kubelet stand-in starts → all {total} tenant pods Running | **{up_s:.2} s** (host pods all Running at {host_up_s:.2} s; host status patch sent → tenant Running per pod {}; server CPU {cpu_up:.1} s) | | |",
                summary(per_pod)
            );
            let whole = host_s + up_s;
            println!(
                "| burst: host phase + status phase | {whole:.2} s | ≤ 60 s | {} |",
                if whole <= 60.0 { "pass" } else { "**miss**" }
            );
        } else {
            println!(
                "| burst: kubelet stand-in starts → tenant pods Running | only {running} of {total} within {} s | ≤ 60 s | **miss** |",
                args.timeout_s
            );
        }
    }
    println!(
        "| server RSS (VmRSS / peak VmHWM) | start {:.0} MiB → {} tenants idle {:.0} MiB → after the host burst {:.0} MiB → end {:.0} MiB (peak {:.0} MiB) | | |",
        rss_empty.0,
        names.len(),
        rss_tenants.0,
        rss_burst.0,
        rss_end.0,
        rss_end.1
    );
    if !target.others.is_empty() {
        println!();
    }
    for (&(name, p), (cpu0, rss0)) in target.others.iter().zip(others_before) {
        let cpu = e2e::procfs::cpu_seconds(p).unwrap_or(0.0) - cpu0;
        let (rss, hwm) = e2e::procfs::memory_mib(p);
        println!(
            "{name} (pid {p}): RSS {:.0} MiB at the start → {rss:.0} MiB at the end (peak {hwm:.0} MiB); CPU {cpu:.1} s during the bench",
            rss0.0
        );
    }
    STOPPING.store(true, Ordering::Relaxed);
    background.abort_all();
    Ok(())
}

/// `line` without its ANSI escape sequences (the server's log is coloured).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a byte in '@'..='~'.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What the server logged: on failure its last lines; the count of WARN and ERROR lines (and
/// the first few of each kind); a copy at `--keep-log`.
fn report_log(name: &str, log: &str, result: &Result<()>, keep: Option<&Path>) {
    if let Err(e) = result {
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        eprintln!("{name} log (last lines, newest first):");
        for l in tail {
            eprintln!("  {l}");
        }
        eprintln!("error: {e:#}");
    }
    for level in ["WARN", "ERROR"] {
        let lines: Vec<String> = log
            .lines()
            .map(strip_ansi)
            .filter(|l| l.split_whitespace().nth(1) == Some(level))
            .collect();
        println!("{name} log: {} {level} lines", lines.len());
        for l in lines.iter().take(5) {
            println!("  {l}");
        }
    }
    if let Some(path) = keep {
        match std::fs::write(path, log) {
            Ok(()) => println!("{name} log kept at {}", path.display()),
            Err(e) => eprintln!("writing {}: {e}", path.display()),
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// The bench against `fabrik up --nodes 0`.
fn on_fabrik_host(args: Args, bin: &Path) -> Result<()> {
    let mut fabrik = e2e::Fabrik::start_with(&["--nodes", "0"])?;
    let pid = fabrik.pid().context("fabrik up is not running")?;
    println!("fabrik up: {} (pid {pid})", bin.display());
    let keep = args.keep_log.clone();
    let runtime = runtime()?;
    let result = runtime.block_on(async {
        let target = Target {
            host: fabrik.client().await?,
            kubeconfigs: Kubeconfigs::Files(fabrik.data_dir()),
            pid,
            others: Vec::new(),
        };
        run(args, target).await
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    report_log("fabrik up", &fabrik.log(), &result, keep.as_deref());
    let _ = fabrik.stop();
    result
}

/// Stops a child with SIGTERM (SIGKILL after 20 s) and waits for it.
fn stop_child(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A `fabrik serve` child, stopped when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        stop_child(&mut self.0);
    }
}

/// Starts `fabrik serve` on `host` with its admin kubeconfig and waits for `serving tenants
/// at ` in its log.
async fn start_serve(bin: &Path, host: &e2e::real_host::RealHost, log: &Path) -> Result<Serve> {
    let work = host.work_dir();
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new(bin)
        .arg("serve")
        .arg("--host-kubeconfig")
        .arg(host.admin_kubeconfig())
        .arg("--data-dir")
        .arg(work.join("serve-data"))
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {} serve", bin.display()))?;
    let mut serve = Serve(child);
    let deadline = Instant::now() + e2e::STARTUP;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(url) = text
            .lines()
            .find_map(|l| l.split("serving tenants at ").nth(1))
        {
            println!("fabrik serve: serving tenants at {url}");
            return Ok(serve);
        }
        if let Some(status) = serve.0.try_wait()? {
            bail!(
                "fabrik serve exited with {status}:\n{}",
                e2e::real_host::tail(&text, 30)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "fabrik serve did not log `serving tenants at ` within {} s:\n{}",
                e2e::STARTUP.as_secs(),
                e2e::real_host::tail(&text, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bench against a real kube-apiserver, with `fabrik serve` on it.
fn on_real_host(args: Args, bin: &Path) -> Result<()> {
    let started = Instant::now();
    let mut host = e2e::real_host::RealHost::start().context("starting the real host")?;
    let others = host.pids();
    println!(
        "real host: Kubernetes control plane at {} in {:.1} s ({})",
        host.url(),
        started.elapsed().as_secs_f64(),
        others
            .iter()
            .map(|(n, p)| format!("{n} pid {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let keep = args.keep_log.clone();
    let log = host.work_dir().join("serve.log");
    let runtime = runtime()?;
    let mut serve = None;
    let result = runtime.block_on(async {
        let admin = host.admin_client().await?;
        e2e::real_host::install_tenant_crd(&admin).await?;
        let s = start_serve(bin, &host, &log).await?;
        let pid = s.0.id();
        serve = Some(s);
        println!("fabrik serve: {} (pid {pid})", bin.display());
        let target = Target {
            host: admin,
            kubeconfigs: Kubeconfigs::HostSecrets,
            pid,
            others,
        };
        run(args, target).await
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(serve);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    report_log("fabrik serve", &text, &result, keep.as_deref());
    if result.is_err() {
        if let Err(e) = host.check_running() {
            eprintln!("real host: {e:#}");
        }
    }
    result
}

fn main() -> Result<()> {
    let args = Args::parse();
    e2e::init_crypto();
    let bin = match &args.fabrik {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("fabrik"))
            .context("no directory for the bench binary")?,
    };
    if !bin.exists() {
        bail!(
            "{} is missing: `cargo build --release -p control-plane --bin fabrik`",
            bin.display()
        );
    }
    // The harness starts `FABRIK_BIN`; set before any thread exists.
    std::env::set_var("FABRIK_BIN", &bin);
    if args.real_host {
        on_real_host(args, &bin)
    } else {
        on_fabrik_host(args, &bin)
    }
}
