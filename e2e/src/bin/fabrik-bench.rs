//! `fabrik-bench`: API benchmark of the real `fabrik up` over HTTPS on loopback.
//!
//! Starts the release binary in a temporary data directory, drives it with kube-rs clients and
//! prints a markdown table: create / get / update latency, concurrent create throughput, list
//! (unpaged and paged) at two store sizes, watch fan-out delay, server RSS against the stored
//! JSON, and time to ready after a restart with many objects stored.
//!
//! Clients: the sequential phases use one `kube::Client`; every concurrent creator and every
//! watcher has its own `kube::Client` (its own TLS connection), like independent controllers.
//!
//! ```sh
//! cargo build --release -p control-plane --bin fabrik -p e2e --features bench --bin fabrik-bench
//! target/release/fabrik-bench --quick      # smoke run, well under a minute
//! target/release/fabrik-bench              # the figures in docs/benchmarks.md
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::Client;
use serde::de::IgnoredAny;
use serde::Deserialize;

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(
    name = "fabrik-bench",
    about = "API benchmark of the real `fabrik up` over HTTPS on loopback"
)]
struct Args {
    /// Smaller counts: a smoke run of every phase.
    #[arg(long)]
    quick: bool,
    /// The `fabrik` binary (default: target/release/fabrik next to this binary).
    #[arg(long, env = "FABRIK_BIN")]
    fabrik: Option<PathBuf>,
    /// Skip filling the store to the large size (RSS at the large size and the restart).
    #[arg(long)]
    skip_large: bool,
    /// Also write the markdown table to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The store of the `fabrik up` measured (`sled`, or `etcd://HOST:PORT`).
    #[arg(long, default_value = "sled")]
    store: String,
    /// Run the plan twice in one run, on sled and on an etcd member started here, and print
    /// both side by side with the ratio etcd / sled.
    #[arg(long, conflicts_with = "store")]
    compare_etcd: bool,
}

/// How much each phase does.
#[derive(Clone, Debug)]
struct Plan {
    /// Sequential create, get and update operations (one client).
    seq_ops: usize,
    /// Concurrent clients for the throughput and fill phases.
    concurrency: usize,
    /// Pods stored in the list namespace for the small and the large list.
    list_small: usize,
    list_large: usize,
    /// Timed rounds of each list at the small and the large size.
    rounds_small: usize,
    rounds_large: usize,
    /// Page size of the paged list.
    page: u32,
    /// Watchers and writes of the fan-out phase.
    watchers: usize,
    watch_writes: usize,
    /// Total pods stored for the large RSS figure and the restart.
    large_total: usize,
    /// Restarts timed on the large store.
    restarts: usize,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            seq_ops: 2_000,
            concurrency: 16,
            list_small: 1_000,
            list_large: 10_000,
            rounds_small: 50,
            rounds_large: 10,
            page: 500,
            watchers: 100,
            watch_writes: 1_000,
            large_total: 100_000,
            restarts: 3,
        }
    }

    fn quick() -> Plan {
        Plan {
            seq_ops: 200,
            concurrency: 16,
            list_small: 100,
            list_large: 1_000,
            rounds_small: 10,
            rounds_large: 5,
            page: 500,
            watchers: 20,
            watch_writes: 100,
            large_total: 5_000,
            restarts: 2,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server process

/// A `fabrik up` child process with its own temporary data directory.
struct Server {
    bin: PathBuf,
    store: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    /// Starts a fresh server; returns it and the time from spawn to kubeconfig.
    fn start(bin: &Path, store: &str) -> Result<(Server, Duration)> {
        let dir = tempfile::tempdir().context("creating the temporary data directory")?;
        let mut server = Server {
            bin: bin.to_path_buf(),
            store: store.to_string(),
            dir,
            child: None,
        };
        let ready = server.spawn()?;
        Ok((server, ready))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn kubeconfig(&self) -> PathBuf {
        self.data_dir().join("host.kubeconfig")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("fabrik.log")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let start = log.len().saturating_sub(2_000);
        log.get(start..).unwrap_or_default().to_string()
    }

    /// Spawns `fabrik up` on the data directory and waits for the kubeconfig; returns the time
    /// from spawn to the kubeconfig appearing (it is written atomically once ready).
    fn spawn(&mut self) -> Result<Duration> {
        let _ = std::fs::remove_file(self.kubeconfig());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("opening the server log")?;
        let started = Instant::now();
        let child = Command::new(&self.bin)
            .arg("up")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg("127.0.0.1:0")
            // The API server's figures: no simulated nodes scheduling the benchmark's pods.
            .arg("--nodes")
            .arg("0")
            .arg("--store")
            .arg(&self.store)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = started + Duration::from_secs(120);
        loop {
            if self.kubeconfig().exists() {
                return Ok(started.elapsed());
            }
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("fabrik up exited with {status}: {}", self.log_tail());
                }
            }
            if Instant::now() > deadline {
                bail!("fabrik up was not ready within 120 s: {}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn pid(&self) -> Result<u32> {
        self.child
            .as_ref()
            .map(Child::id)
            .context("server not running")
    }

    /// SIGTERM and wait for the exit.
    fn stop(&mut self) -> Result<()> {
        let mut child = self.child.take().context("server not running")?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!(
                        "fabrik up exited with {status} on SIGTERM: {}",
                        self.log_tail()
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("fabrik up did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A new kube-rs client (its own connection pool) from the admin kubeconfig.
    async fn client(&self) -> Result<Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(Client::try_from(config)?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Resident set and its peak, KiB, from /proc/PID/status.
fn rss_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("reading /proc/PID/status")?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
        let digits: String = line.chars().filter(char::is_ascii_digit).collect();
        digits
            .parse::<u64>()
            .with_context(|| format!("parsing {line:?}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of a process so far.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/PID/stat")?;
    // Fields after the command name (which may contain spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15, in clock ticks (USER_HZ = 100 on Linux).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .context("short /proc/PID/stat")?
            .parse::<u64>()
            .context("parsing /proc/PID/stat")
    };
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_string())
}

// ---------------------------------------------------------------------------------------------
// Objects

/// A realistic pod (about 1.2 KB of JSON as sent; the server adds defaults, uid, timestamps).
fn pod(ns: &str, name: &str, i: usize) -> Result<Pod> {
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "app": "bench-web",
                "tier": "frontend",
                "release": "r-2025-06",
                "shard": format!("s{}", i % 16),
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9102",
                "fabrik.dev/bench": "true",
            },
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/team/web-frontend:1.27.3",
                "imagePullPolicy": "IfNotPresent",
                "command": ["/usr/local/bin/web"],
                "args": ["--listen=:8080", "--log-level=info", "--config=/etc/web/config.yaml"],
                "env": [
                    {"name": "POD_ROLE", "value": "frontend"},
                    {"name": "CACHE_SIZE_MB", "value": "256"},
                    {"name": "UPSTREAM", "value": "http://api.backend.svc.cluster.local:8080"},
                    {"name": "REGION", "value": "eu-west-1"},
                ],
                "ports": [
                    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9102, "protocol": "TCP"},
                ],
                "resources": {
                    "requests": {"cpu": "250m", "memory": "256Mi"},
                    "limits": {"cpu": "1", "memory": "512Mi"},
                },
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/web", "readOnly": true},
                    {"name": "cache", "mountPath": "/var/cache/web"},
                ],
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8080},
                    "periodSeconds": 5,
                    "failureThreshold": 3,
                },
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": "web-config"}},
                {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "nodeSelector": {"fabrik.dev/pool": "general"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
            ],
        },
    });
    Ok(serde_json::from_value(value)?)
}

/// JSON size of an object as kube-rs serializes it.
fn json_len(pod: &Pod) -> Result<u64> {
    Ok(serde_json::to_vec(pod)?.len() as u64)
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
    }))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Statistics and results

/// Nearest-rank percentile of sorted samples.
fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50 / p99 / max of latency samples, milliseconds.
fn lat_summary(samples: &mut [Duration]) -> (f64, f64, f64) {
    samples.sort_unstable();
    let get = |p| percentile(samples, p).map(ms).unwrap_or(f64::NAN);
    (get(0.50), get(0.99), get(1.0))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One row of the results table.
struct Row {
    what: String,
    result: String,
    target: String,
    verdict: &'static str,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    /// Server RSS at phase boundaries, for the row "server RSS through the run".
    timeline: Vec<String>,
}

impl Report {
    /// Notes the server's RSS now, labelled.
    fn mark(&mut self, pid: u32, label: &str) {
        let entry = match rss_kib(pid) {
            Ok((rss, _)) => format!("{label} {:.0}", mib(rss * 1024)),
            Err(e) => format!("{label} ? ({e})"),
        };
        eprintln!("  RSS: {entry} MiB");
        self.timeline.push(entry);
    }

    fn add(&mut self, what: impl Into<String>, result: impl Into<String>) {
        self.push(what, result, "", "");
    }

    fn check(
        &mut self,
        what: impl Into<String>,
        result: impl Into<String>,
        target: impl Into<String>,
        pass: bool,
    ) {
        self.push(what, result, target, if pass { "pass" } else { "**miss**" });
    }

    fn push(
        &mut self,
        what: impl Into<String>,
        result: impl Into<String>,
        target: impl Into<String>,
        verdict: &'static str,
    ) {
        let row = Row {
            what: what.into(),
            result: result.into(),
            target: target.into(),
            verdict,
        };
        eprintln!(
            "  {}: {} {} {}",
            row.what, row.result, row.target, row.verdict
        );
        self.rows.push(row);
    }

    fn markdown(&self) -> String {
        let mut out =
            String::from("| measurement | result | target | |\n| --- | --- | --- | --- |\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.what, r.result, r.target, r.verdict
            ));
        }
        if !self.timeline.is_empty() {
            out.push_str(&format!(
                "| server RSS through the run, MiB | {} | | |\n",
                self.timeline.join(" → ")
            ));
        }
        out
    }
}

/// The first token of `text` that is a number (`p50 631 ms` → 631; thousands commas dropped).
fn first_number(text: &str) -> Option<f64> {
    text.split_whitespace().find_map(|t| {
        t.trim_end_matches([',', ';'])
            .replace(',', "")
            .parse::<f64>()
            .ok()
    })
}

/// Two reports of the same plan side by side, with the ratio of their first figures.
fn compare(sled: &Report, etcd: &Report) -> String {
    let mut out = String::from(
        "| measurement | sled | etcd | etcd / sled (first figure) |\n| --- | --- | --- | --- |\n",
    );
    for r in &sled.rows {
        let other = etcd.rows.iter().find(|o| o.what == r.what);
        let ratio = other
            .and_then(|o| Some((first_number(&r.result)?, first_number(&o.result)?)))
            .filter(|(a, _)| *a > 0.0)
            .map(|(a, b)| format!("{:.2}", b / a))
            .unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {} | {ratio} |\n",
            r.what,
            r.result,
            other.map(|o| o.result.as_str()).unwrap_or("(not reached)")
        ));
    }
    out
}

/// Counts and bytes of everything created, for the RSS comparison.
#[derive(Default)]
struct Stored {
    pods: AtomicUsize,
    /// JSON bytes of the created objects as the server returned them (what it stores).
    created_bytes: AtomicU64,
    /// JSON bytes of the objects as sent.
    sent_bytes: AtomicU64,
}

impl Stored {
    fn record(&self, sent: u64, created: u64) {
        self.pods.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(sent, Ordering::Relaxed);
        self.created_bytes.fetch_add(created, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------------
// Phases

/// Sequential create, get, update with one client.
async fn sequential(
    client: &Client,
    plan: &Plan,
    stored: &Stored,
    report: &mut Report,
) -> Result<()> {
    let ns = "bench-seq";
    create_namespace(client, ns).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();

    let mut created = Vec::with_capacity(plan.seq_ops);
    let mut lat = Vec::with_capacity(plan.seq_ops);
    for i in 0..plan.seq_ops {
        let p = pod(ns, &format!("seq-{i:06}"), i)?;
        let sent = json_len(&p)?;
        let t = Instant::now();
        let c = api.create(&pp, &p).await.context("create")?;
        lat.push(t.elapsed());
        stored.record(sent, json_len(&c)?);
        created.push(c);
    }
    let (p50, p99, max) = lat_summary(&mut lat);
    report.check(
        format!("create, sequential, 1 client ({} ops)", plan.seq_ops),
        format!("p50 {p50:.2} ms, p99 {p99:.2} ms (max {max:.1})"),
        "p99 ≤ 5 ms",
        p99 <= 5.0,
    );

    lat.clear();
    for i in 0..plan.seq_ops {
        let name = format!("seq-{i:06}");
        let t = Instant::now();
        let got = api.get(&name).await.context("get")?;
        lat.push(t.elapsed());
        if got.metadata.name.as_deref() != Some(name.as_str()) {
            bail!("get {name} returned {:?}", got.metadata.name);
        }
    }
    let (p50, p99, max) = lat_summary(&mut lat);
    report.check(
        format!("get, sequential, 1 client ({} ops)", plan.seq_ops),
        format!("p50 {p50:.2} ms, p99 {p99:.2} ms (max {max:.1})"),
        "p99 ≤ 5 ms",
        p99 <= 5.0,
    );

    lat.clear();
    for mut obj in created {
        let name = obj
            .metadata
            .name
            .clone()
            .context("created pod without a name")?;
        obj.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("updated".to_string(), "yes".to_string());
        let t = Instant::now();
        api.replace(&name, &pp, &obj).await.context("update")?;
        lat.push(t.elapsed());
    }
    let (p50, p99, max) = lat_summary(&mut lat);
    report.add(
        format!("update (PUT), sequential, 1 client ({} ops)", plan.seq_ops),
        format!("p50 {p50:.2} ms, p99 {p99:.2} ms (max {max:.1})"),
    );
    Ok(())
}

/// What a batch of concurrent creates did.
struct Batch {
    count: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    server_cpu: Duration,
}

/// Creates `count` pods named `{prefix}-{index}` (indices from `first`) in `ns` with one worker
/// per client, each pulling the next index from a shared counter.
async fn create_many(
    clients: &[Client],
    pid: u32,
    ns: &str,
    prefix: &str,
    first: usize,
    count: usize,
    stored: &Arc<Stored>,
) -> Result<Batch> {
    let next = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_time(pid)?;
    let started = Instant::now();
    let mut workers = Vec::with_capacity(clients.len());
    for client in clients {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let next = Arc::clone(&next);
        let stored = Arc::clone(stored);
        let ns = ns.to_string();
        let prefix = prefix.to_string();
        workers.push(tokio::spawn(async move {
            let pp = PostParams::default();
            let mut lat = Vec::new();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= count {
                    break;
                }
                let i = first + k;
                let p = pod(&ns, &format!("{prefix}-{i:06}"), i)?;
                let sent = json_len(&p)?;
                let t = Instant::now();
                let c = api
                    .create(&pp, &p)
                    .await
                    .with_context(|| format!("create {prefix}-{i:06}"))?;
                lat.push(t.elapsed());
                stored.record(sent, json_len(&c)?);
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut latencies = Vec::with_capacity(count);
    for w in workers {
        latencies.extend(w.await.context("create worker panicked")??);
    }
    let elapsed = started.elapsed();
    let server_cpu = cpu_time(pid)?.saturating_sub(cpu0);
    Ok(Batch {
        count,
        elapsed,
        latencies,
        server_cpu,
    })
}

impl Batch {
    fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }

    fn describe(&mut self) -> String {
        let rate = self.rate();
        let cpu_per_op = self.server_cpu.as_secs_f64() * 1e6 / self.count as f64;
        let (p50, p99, _) = lat_summary(&mut self.latencies);
        format!(
            "{rate:.0} creates/s ({} in {:.1} s; per-request p50 {p50:.1} ms, p99 {p99:.1} ms; server CPU {cpu_per_op:.0} µs/create)",
            self.count,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Just enough of a list response: the continue token and the item count.
#[derive(Deserialize)]
struct ListPage {
    #[serde(default)]
    metadata: ListPageMeta,
    #[serde(default)]
    items: Vec<IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct ListPageMeta {
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// One full list of the namespace's pods (all pages when `page` is set); returns items seen.
/// The body is read whole and scanned for items, not decoded into typed pods, so the figure is
/// the server's and the transport's, not kube-rs's decoding.
async fn list_once(client: &Client, ns: &str, page: Option<u32>) -> Result<usize> {
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/pods"));
    let mut items = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default();
        if let Some(limit) = page {
            lp = lp.limit(limit);
        }
        if let Some(t) = token.as_deref() {
            lp = lp.continue_token(t);
        }
        let text = client
            .request_text(request.list(&lp)?)
            .await
            .context("list")?;
        let parsed: ListPage = serde_json::from_str(&text).context("decoding a list response")?;
        items += parsed.items.len();
        match parsed.metadata.continue_token.filter(|t| !t.is_empty()) {
            Some(t) if page.is_some() => token = Some(t),
            _ => return Ok(items),
        }
    }
}

async fn list_bench(
    client: &Client,
    ns: &str,
    expected: usize,
    rounds: usize,
    page: u32,
    report: &mut Report,
) -> Result<()> {
    for (label, paging) in [
        ("unpaged".to_string(), None),
        (format!("paged, limit={page}"), Some(page)),
    ] {
        // One untimed round to warm caches and check the count.
        let seen = list_once(client, ns, paging).await?;
        if seen != expected {
            bail!("list {label} of {ns} returned {seen} pods, expected {expected}");
        }
        let mut lat = Vec::with_capacity(rounds);
        let started = Instant::now();
        for _ in 0..rounds {
            let t = Instant::now();
            list_once(client, ns, paging).await?;
            lat.push(t.elapsed());
        }
        let items_per_s = (expected * rounds) as f64 / started.elapsed().as_secs_f64();
        let (p50, p99, _) = lat_summary(&mut lat);
        report.add(
            format!("list {expected} pods, {label} ({rounds} rounds)"),
            format!("p50 {p50:.1} ms, p99 {p99:.1} ms per full list; {items_per_s:.0} items/s"),
        );
    }
    Ok(())
}

/// Watch fan-out: `watchers` watches (one client each) on one namespace; one client makes
/// `writes` sequential creates; each event's delay is measured from the write's acknowledgement.
async fn watch_fanout(
    server: &Server,
    client: &Client,
    plan: &Plan,
    stored: &Stored,
    report: &mut Report,
) -> Result<()> {
    let ns = "bench-watch";
    create_namespace(client, ns).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("list without resourceVersion")?;
    let writes = plan.watch_writes;

    let mut tasks = Vec::with_capacity(plan.watchers);
    for _ in 0..plan.watchers {
        let wapi: Api<Pod> = Api::namespaced(server.client().await?, ns);
        // `watch` returns once the response head has arrived: the watch is established.
        let stream = wapi
            .watch(&WatchParams::default().timeout(280), &rv)
            .await
            .context("watch")?;
        tasks.push(tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            let mut arrivals: Vec<Option<Instant>> = vec![None; writes];
            let mut got = 0;
            let deadline = Instant::now() + Duration::from_secs(240);
            while got < writes {
                let left = deadline.saturating_duration_since(Instant::now());
                let next = match tokio::time::timeout(left, stream.next()).await {
                    Ok(Some(ev)) => ev,
                    Ok(None) | Err(_) => break,
                };
                if let Ok(WatchEvent::Added(p)) = next {
                    let now = Instant::now();
                    let idx = p
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| n.strip_prefix("w-"))
                        .and_then(|n| n.parse::<usize>().ok());
                    if let Some(slot) = idx.and_then(|i| arrivals.get_mut(i)) {
                        if slot.is_none() {
                            *slot = Some(now);
                            got += 1;
                        }
                    }
                }
            }
            arrivals
        }));
    }

    let pp = PostParams::default();
    let mut sent_at = Vec::with_capacity(writes);
    let mut acked_at = Vec::with_capacity(writes);
    let started = Instant::now();
    for i in 0..writes {
        let p = pod(ns, &format!("w-{i:06}"), i)?;
        let sent = json_len(&p)?;
        sent_at.push(Instant::now());
        let c = api.create(&pp, &p).await.context("create (watched)")?;
        acked_at.push(Instant::now());
        stored.record(sent, json_len(&c)?);
    }
    let writes_done = started.elapsed();

    let mut from_ack: Vec<f64> = Vec::with_capacity(writes * plan.watchers);
    let mut from_send: Vec<f64> = Vec::with_capacity(writes * plan.watchers);
    let mut before_ack = 0usize;
    let mut missing = 0usize;
    let mut last = started;
    for t in tasks {
        let arrivals = t.await.context("watcher panicked")?;
        for (i, a) in arrivals.iter().enumerate() {
            let (Some(a), Some(&ack), Some(&sent)) = (a, acked_at.get(i), sent_at.get(i)) else {
                missing += 1;
                continue;
            };
            last = last.max(*a);
            if *a < ack {
                before_ack += 1;
                from_ack.push(-ms(ack - *a));
            } else {
                from_ack.push(ms(*a - ack));
            }
            from_send.push(ms(*a - sent));
        }
    }
    let total = from_ack.len();
    let events_per_s = total as f64 / (last - started).as_secs_f64();
    from_ack.sort_unstable_by(f64::total_cmp);
    from_send.sort_unstable_by(f64::total_cmp);
    let pct = |v: &[f64], p| percentile(v, p).unwrap_or(f64::NAN);
    report.add(
        format!("watch fan-out: {} watchers × {writes} sequential creates", plan.watchers),
        format!(
            "delay after ack p50 {:.2} ms, p99 {:.2} ms (from send: p50 {:.2}, p99 {:.2}); {total} events, {events_per_s:.0} events/s; writes took {:.1} s ({:.0}/s); {before_ack} events arrived before the ack; {missing} missing",
            pct(&from_ack, 0.50),
            pct(&from_ack, 0.99),
            pct(&from_send, 0.50),
            pct(&from_send, 0.99),
            writes_done.as_secs_f64(),
            writes as f64 / writes_done.as_secs_f64(),
        ),
    );
    if missing > 0 {
        bail!("{missing} watch events never arrived");
    }
    Ok(())
}

/// RSS now against the stored JSON, and the target 30 MiB + 2 × stored JSON.
fn rss_row(pid: u32, stored: &Stored, report: &mut Report) -> Result<()> {
    std::thread::sleep(Duration::from_millis(500));
    let (rss, hwm) = rss_kib(pid)?;
    let pods = stored.pods.load(Ordering::Relaxed);
    let created = stored.created_bytes.load(Ordering::Relaxed);
    let sent = stored.sent_bytes.load(Ordering::Relaxed);
    let rss_b = rss * 1024;
    let target = 30 * 1024 * 1024 + 2 * created;
    report.check(
        format!("server RSS with {pods} pods stored"),
        format!(
            "{:.1} MiB (peak {:.1} MiB); stored JSON {:.1} MiB ({:.0} B/pod as created, {:.0} B/pod as sent)",
            mib(rss_b),
            mib(hwm * 1024),
            mib(created),
            created as f64 / pods.max(1) as f64,
            sent as f64 / pods.max(1) as f64,
        ),
        format!("≤ {:.1} MiB", mib(target)),
        rss_b <= target,
    );
    Ok(())
}

async fn clients(server: &Server, n: usize) -> Result<Vec<Client>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(server.client().await?);
    }
    Ok(out)
}

async fn run(args: &Args, store: &str, plan: &Plan, report: &mut Report) -> Result<()> {
    let bin = match &args.fabrik {
        Some(b) => b.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("fabrik"))
            .context("no directory for the fabrik binary")?,
    };
    if !bin.exists() {
        bail!(
            "{} is missing: `cargo build --release -p control-plane --bin fabrik`",
            bin.display()
        );
    }
    let stored = Arc::new(Stored::default());

    let (mut server, ready) = Server::start(&bin, store)?;
    report.add(
        "start to ready, empty data dir",
        format!("{:.0} ms", ms(ready)),
    );
    let pid = server.pid()?;
    let client = server.client().await?;
    let workers = clients(&server, plan.concurrency).await?;
    let (rss, _) = rss_kib(pid)?;
    report.add("server RSS, empty", format!("{:.1} MiB", mib(rss * 1024)));
    report.mark(pid, "empty");

    eprintln!("throughput + lists (load {})", loadavg());
    let ns = "bench-list";
    create_namespace(&client, ns).await?;
    let mut b = create_many(&workers, pid, ns, "p", 0, plan.list_small, &stored).await?;
    report.add(
        format!(
            "create, {} concurrent clients, into an empty namespace",
            plan.concurrency
        ),
        b.describe(),
    );
    report.mark(pid, &format!("{} created", plan.list_small));
    list_bench(
        &client,
        ns,
        plan.list_small,
        plan.rounds_small,
        plan.page,
        report,
    )
    .await?;
    report.mark(pid, &format!("listed {}", plan.list_small));
    let rest = plan.list_large - plan.list_small;
    let mut b = create_many(&workers, pid, ns, "p", plan.list_small, rest, &stored).await?;
    let rate = b.rate();
    report.check(
        format!("create, {} concurrent clients", plan.concurrency),
        b.describe(),
        "≥ 2,000 creates/s",
        rate >= 2_000.0,
    );
    report.mark(pid, &format!("{} created", plan.list_large));
    list_bench(
        &client,
        ns,
        plan.list_large,
        plan.rounds_large,
        plan.page,
        report,
    )
    .await?;
    report.mark(pid, &format!("listed {}", plan.list_large));
    rss_row(pid, &stored, report)?;

    eprintln!("sequential latency (load {})", loadavg());
    sequential(&client, plan, &stored, report).await?;
    report.mark(pid, "sequential done");

    eprintln!("watch fan-out (load {})", loadavg());
    watch_fanout(&server, &client, plan, &stored, report).await?;
    report.mark(pid, "watch done");

    if args.skip_large {
        return Ok(());
    }
    let have = stored.pods.load(Ordering::Relaxed);
    if have < plan.large_total {
        eprintln!("filling to {} pods (load {})", plan.large_total, loadavg());
        let ns = "bench-fill";
        create_namespace(&client, ns).await?;
        let mut b =
            create_many(&workers, pid, ns, "f", 0, plan.large_total - have, &stored).await?;
        report.add(
            format!(
                "fill to {} pods, {} concurrent clients",
                plan.large_total, plan.concurrency
            ),
            b.describe(),
        );
    }
    report.mark(pid, &format!("{} stored", plan.large_total));
    rss_row(pid, &stored, report)?;
    drop(workers);
    drop(client);

    eprintln!("restarts (load {})", loadavg());
    let pods = stored.pods.load(Ordering::Relaxed);
    let mut times = Vec::with_capacity(plan.restarts);
    for _ in 0..plan.restarts {
        server.stop()?;
        times.push(server.spawn()?);
        let c = server.client().await?;
        let api: Api<Pod> = Api::namespaced(c, "bench-seq");
        api.get("seq-000000").await.context("get after restart")?;
    }
    let worst = times.iter().copied().max().unwrap_or_default();
    let list: Vec<String> = times.iter().map(|t| format!("{:.0}", ms(*t))).collect();
    report.check(
        format!(
            "start to ready with {pods} pods stored ({} restarts)",
            plan.restarts
        ),
        format!("{} ms", list.join(", ")),
        "≤ 2 s",
        worst <= Duration::from_secs(2),
    );
    let restarted = server.pid()?;
    report.mark(restarted, "restarted");
    let (rss, _) = rss_kib(restarted)?;
    report.add(
        format!("server RSS after restart with {pods} pods stored"),
        format!("{:.1} MiB", mib(rss * 1024)),
    );
    server.stop()?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    e2e::init_crypto();
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    eprintln!(
        "fabrik-bench ({} mode, {cores} cores, load {})",
        if args.quick { "quick" } else { "full" },
        loadavg()
    );
    let started = Instant::now();
    let mode = if args.quick { "quick" } else { "full" };
    if args.compare_etcd {
        let etcd = e2e::etcd::Etcd::start()?;
        let mut sled = Report::default();
        eprintln!("== on sled");
        run(&args, "sled", &plan, &mut sled).await?;
        let mut on_etcd = Report::default();
        eprintln!("== on etcd");
        let outcome = run(&args, &etcd.store_flag(), &plan, &mut on_etcd).await;
        let mut table = compare(&sled, &on_etcd);
        table.push_str(&format!(
            "\n{mode} mode, {cores} cores, {:.0} s in all, load average at the end {}\n",
            started.elapsed().as_secs_f64(),
            loadavg()
        ));
        println!("{table}");
        if let Some(path) = &args.out {
            std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
        }
        if outcome.is_err() {
            eprintln!("etcd log:\n{}", etcd.log());
        }
        return outcome;
    }
    let mut report = Report::default();
    let outcome = run(&args, &args.store, &plan, &mut report).await;
    let mut table = report.markdown();
    table.push_str(&format!(
        "\n{} mode, {cores} cores, {:.0} s in all, load average at the end {}\n",
        if args.quick { "quick" } else { "full" },
        started.elapsed().as_secs_f64(),
        loadavg()
    ));
    println!("{table}");
    if let Some(path) = &args.out {
        std::fs::write(path, &table).with_context(|| format!("writing {}", path.display()))?;
    }
    outcome
}
