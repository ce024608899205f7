//! Benchmark: the standalone `fabrik-node-agent` (simulated backend) — its RSS and CPU idle and
//! while metering 8 GPUs × 7 MIG slices at 1 Hz (target ≤ 20 MiB, ≤ 1 % of a core), and the
//! time from a desired-layout change to the new inventory being published.
//!
//! ```sh
//! # debug
//! cargo build -p control-plane --bin fabrik -p node-agent --bin fabrik-node-agent --example agent_bench
//! target/debug/examples/agent_bench --seconds 30
//! # release (the numbers to quote)
//! cargo build --release -p control-plane --bin fabrik -p node-agent --bin fabrik-node-agent --example agent_bench
//! FABRIK_BIN=target/release/fabrik AGENT_BIN=target/release/fabrik-node-agent \
//!   target/release/examples/agent_bench --seconds 30
//! ```
//!
//! `FABRIK_BIN` defaults to `target/debug/fabrik` (as the e2e harness), `AGENT_BIN` to the
//! `fabrik-node-agent` beside `FABRIK_BIN`. `--seconds N` (default 30) is each sampling window.
//!
//! Steps: `fabrik up --nodes 0` (no simulated nodes, kubelets or scheduler in it); a simulation
//! file with 8 × H200-141GB; the agent with `--interval-ms 1000 --metrics-addr 127.0.0.1:<free>
//! --usage-publish-interval 15` on node `bench-node-0`, until the Node shows 8 whole GPUs.
//! 1. idle: RSS (VmRSS, peak of 1 s samples) and CPU (utime+stime over the window).
//! 2. layout change: the Node annotation `fabrik.dev/gpu-layout` set to `mode: mig, geometry:
//!    all-1g.18gb` (the agent reads it each pass; there is no CRD); timed until the layout status
//!    annotation says applied, allocatable `nvidia.com/mig-1g.18gb` = 56, and the ResourceSlice
//!    holds 56 devices (polled every 20 ms).
//! 3. metering: 56 pods bound to the node (`spec.nodeName`), each with limits
//!    `nvidia.com/mig-1g.18gb: 1` and one MIG device from the ResourceSlice written as the
//!    scheduler would (`fabrik.dev/gpu-ids` = device name, `fabrik.dev/gpu-devices` = its UUID;
//!    the agent uses the UUIDs for utilization and busy GPUs). No kubelet runs here, so this
//!    program sets them Running through `pods/status`. Once `/metrics` shows 56 growing
//!    `fabrik_gpu_allocated_seconds_total` series, RSS and CPU are sampled again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "bench-node-0";
const PROFILE: &str = "1g.18gb";
const MIG_TOTAL: usize = 56;
const SIM: &str = "gpus:\n  - model: H200-141GB\n    count: 8\n    numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]\n    migCapable: true\nnvlink: {all: true}\nutilization: 0.6\n";

/// The agent process, killed (SIGKILL) and reaped on drop — also on error and on Ctrl-C.
struct AgentGuard {
    child: Child,
    log: PathBuf,
}

impl AgentGuard {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the log's tail if the agent has exited.
    fn check(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("agent exited with {status}; log tail:\n{}", self.tail());
        }
        Ok(())
    }

    fn log_lines(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().map(String::from).collect()
    }

    /// Fails if the agent exited, or with "`what` not within 60 s" once 60 s passed `since`.
    fn in_time(&mut self, since: Instant, what: &str) -> Result<()> {
        self.check()?;
        if since.elapsed() >= Duration::from_secs(60) {
            bail!("{what} not within 60 s; agent log:\n{}", self.tail());
        }
        Ok(())
    }

    fn tail(&self) -> String {
        let lines = self.log_lines();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// VmRSS in KiB and utime+stime in seconds.
fn proc_stat(pid: u32) -> Option<(u64, f64)> {
    let (rss, _) = e2e::procfs::memory_kib(pid)?;
    Some((rss, e2e::procfs::cpu_seconds(pid)?))
}

/// Samples the agent once a second for `secs`: (peak RSS MiB, CPU % of one core).
async fn sample(agent: &mut AgentGuard, secs: u64) -> Result<(f64, f64)> {
    let pid = agent.pid();
    let (rss0, cpu0) = proc_stat(pid).context("reading /proc for the agent")?;
    let start = Instant::now();
    let mut peak = rss0;
    for _ in 0..secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        agent.check()?;
        let (rss, _) = proc_stat(pid).context("reading /proc for the agent")?;
        peak = peak.max(rss);
    }
    let (rss, cpu1) = proc_stat(pid).context("reading /proc for the agent")?;
    peak = peak.max(rss);
    let wall = start.elapsed().as_secs_f64();
    Ok((peak as f64 / 1024.0, (cpu1 - cpu0) / wall * 100.0))
}

/// `GET /metrics` from the agent: the number of `mig-1g.18gb` allocated-seconds series of pods
/// in `default`, and their sum.
async fn metering(port: u16) -> Result<(usize, f64)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .context("no HTTP body")?;
    let (mut n, mut sum) = (0, 0.0);
    for line in body.lines().filter(|l| {
        l.starts_with("fabrik_gpu_allocated_seconds_total{")
            && l.contains(&format!("partition=\"mig-{PROFILE}\""))
            && l.contains("namespace=\"default\"")
    }) {
        let v: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("bad metrics line {line:?}"))?;
        n += 1;
        sum += v;
    }
    Ok((n, sum))
}

fn quantity(node: &Node, key: &str) -> Option<String> {
    let q = node.status.as_ref()?.allocatable.as_ref()?.get(key)?;
    Some(q.0.clone())
}

/// Whether the layout status annotation says the MIG layout is applied.
fn mig_applied(node: &Node) -> bool {
    let status = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS))
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok());
    status.is_some_and(|s| {
        s["state"] == "applied" && s["reason"].as_str().is_some_and(|r| r.contains("mig"))
    })
}

/// The slice's MIG devices of `PROFILE`: (device name, UUID).
fn mig_devices(slice: &ResourceSlice) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for d in slice.spec.devices.iter().flatten() {
        let Some(attrs) = &d.attributes else { continue };
        let attr = |k: &str| attrs.get(k).and_then(|a| a.string.clone());
        if attr("migProfile").as_deref() == Some(PROFILE) {
            if let Some(uuid) = attr("uuid") {
                out.push((d.name.clone(), uuid));
            }
        }
    }
    out
}

fn agent_bin() -> PathBuf {
    std::env::var_os("AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| e2e::fabrik_bin().with_file_name("fabrik-node-agent"))
}

fn start_agent(dir: &Path, kubeconfig: &Path, metrics_port: u16) -> Result<AgentGuard> {
    let bin = agent_bin();
    ensure!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p node-agent --bin fabrik-node-agent`",
        bin.display()
    );
    let sim = dir.join("node.yaml");
    std::fs::write(&sim, SIM)?;
    let log = dir.join("agent.log");
    let out = std::fs::File::create(&log)?;
    let child = Command::new(&bin)
        .args(["--backend", "simulated", "--node-name", NODE])
        .args(["--interval-ms", "1000", "--usage-publish-interval", "15"])
        .arg("--sim-file")
        .arg(&sim)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{metrics_port}"))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(AgentGuard { child, log })
}

fn parse_seconds() -> Result<u64> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(30),
        [flag, n] if flag == "--seconds" => Ok(n.parse().context("--seconds N")?),
        _ => bail!("usage: agent_bench [--seconds N]   (default 30)"),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let secs = parse_seconds()?;
    // Ctrl-C drops the benchmark future, and with it the guards: no child outlives this.
    tokio::select! {
        r = run(secs) => r,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}

async fn run(secs: u64) -> Result<()> {
    // Dropped last to first: the agent is killed, then `fabrik up` (e2e::Fabrik's Drop).
    let fabrik = e2e::Fabrik::start_with(&["--nodes", "0"])?;
    e2e::init_crypto();
    let client = fabrik.client().await?;
    let dir = tempfile::tempdir()?;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut agent = start_agent(dir.path(), &fabrik.kubeconfig(), metrics_port)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice_name = format!("{NODE}-gpu.nvidia.com");

    // Registered with 8 whole GPUs.
    let started = Instant::now();
    loop {
        agent.in_time(started, "node registered with 8 GPUs")?;
        let n = nodes.get_opt(NODE).await?;
        if n.and_then(|n| quantity(&n, "nvidia.com/gpu")).as_deref() == Some("8") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let registered = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await; // let start-up settle
    let idle = sample(&mut agent, secs).await?;

    // Layout change → status applied, allocatable, ResourceSlice.
    let layout = format!("mode: mig\ngeometry: all-{PROFILE}\n");
    let patch = json!({"metadata": {"annotations": {fabrik_api::ANNOTATION_GPU_LAYOUT: layout}}});
    let t0 = Instant::now();
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("setting the layout annotation")?;
    let (mut t_applied, mut t_alloc, mut t_slice) = (None, None, None);
    let want = MIG_TOTAL.to_string();
    while t_applied.is_none() || t_alloc.is_none() || t_slice.is_none() {
        agent.in_time(t0, "MIG layout published")?;
        let n = nodes.get(NODE).await?;
        if t_applied.is_none() && mig_applied(&n) {
            t_applied = Some(t0.elapsed());
        }
        let alloc = quantity(&n, &format!("nvidia.com/mig-{PROFILE}"));
        if t_alloc.is_none() && alloc.as_deref() == Some(want.as_str()) {
            t_alloc = Some(t0.elapsed());
        }
        if t_slice.is_none() {
            if let Some(s) = slices.get_opt(&slice_name).await? {
                if mig_devices(&s).len() == MIG_TOTAL {
                    t_slice = Some(t0.elapsed());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 56 pods, one MIG device each, bound to the node and set Running (the kubelet's part).
    let devices = mig_devices(&slices.get(&slice_name).await?);
    ensure!(devices.len() == MIG_TOTAL, "{} MIG devices", devices.len());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let now = "2026-01-01T00:00:00Z";
    for (i, (name, uuid)) in devices.iter().enumerate() {
        let pod_name = format!("mig-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "labels": {"app": "agent-bench"}, "annotations": {
                fabrik_api::ANNOTATION_GPU_IDS: name, fabrik_api::ANNOTATION_GPU_DEVICES: uuid}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "example.com/c:1",
                "resources": {"limits": {format!("nvidia.com/mig-{PROFILE}"): "1"}}}]},
        }))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {pod_name}"))?;
        let status = json!({"status": {
            "phase": "Running", "podIP": format!("10.244.0.{}", 10 + i), "hostIP": "10.0.0.10",
            "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": "c", "image": "example.com/c:1", "imageID": "",
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}}}],
        }});
        pods.patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("setting pod {pod_name} Running"))?;
    }

    // Metering active: 56 series, and their sum growing.
    let t_pods = Instant::now();
    let mut last: Option<f64> = None;
    loop {
        agent.in_time(t_pods, "metering of 56 pods")?;
        let (n, sum) = metering(metrics_port).await?;
        if n == MIG_TOTAL && last.is_some_and(|l| sum > l) {
            break;
        }
        last = (n == MIG_TOTAL).then_some(sum);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let metering_active = t_pods.elapsed();
    let (_, before) = metering(metrics_port).await?;
    let t_window = Instant::now();
    let busy = sample(&mut agent, secs).await?;
    let (_, after) = metering(metrics_port).await?;
    let window = t_window.elapsed().as_secs_f64();

    // The usage ConfigMap (written at most every 15 s, when changed).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), fabrik_api::tenant::USAGE_NAMESPACE);
    let cm_name = fabrik_api::tenant::usage_configmap_name(NODE);
    let usage_cm = cms.get_opt(&cm_name).await?.map_or("absent".into(), |cm| {
        cm.data
            .as_ref()
            .and_then(|d| d.get(fabrik_api::tenant::USAGE_DATA_KEY))
            .and_then(|j| serde_json::from_str::<fabrik_api::tenant::NodeGpuUsage>(j).ok())
            .map_or("unreadable".into(), |d| {
                format!("{} series", d.series.len())
            })
    });
    let warnings = agent
        .log_lines()
        .iter()
        .filter(|l| l.contains("WARN"))
        .count();

    let t = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.3} s", d.as_secs_f64()));
    let (peak, cpu) = (idle.0.max(busy.0), idle.1.max(busy.1));
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "fabrik-node-agent {}: node {NODE}, 8 × H200-141GB simulated, --interval-ms 1000, \
         {secs} s windows; registered with 8 GPUs after {:.2} s\n
| phase | agent RSS (MiB, peak) | CPU (% of one core) |
| --- | ---: | ---: |
| idle (8 whole GPUs, no pods) | {:.1} | {:.2} |
| metering 8 × 7 MIG slices, {MIG_TOTAL} pods | {:.1} | {:.2} |

| layout change whole → all-{PROFILE} (annotation written at t = 0) | time |
| --- | ---: |
| layout status `applied` | {} |
| allocatable nvidia.com/mig-{PROFILE} = {MIG_TOTAL} | {} |
| ResourceSlice with {MIG_TOTAL} MIG devices | {} |

metering active {:.2} s after the pods were Running; {:.1} MIG-seconds accrued in {:.1} s \
         (expected ≈ {:.1}); usage ConfigMap {cm_name}: {usage_cm}; agent log: {warnings} warnings
targets: RSS ≤ 20 MiB {} ({peak:.1} MiB); CPU ≤ 1 % of a core {} ({cpu:.2} %)",
        agent_bin().display(),
        registered.as_secs_f64(),
        idle.0,
        idle.1,
        busy.0,
        busy.1,
        t(t_applied),
        t(t_alloc),
        t(t_slice),
        metering_active.as_secs_f64(),
        after - before,
        window,
        window * MIG_TOTAL as f64,
        verdict(peak <= 20.0),
        verdict(cpu <= 1.0)
    );
    Ok(())
}
