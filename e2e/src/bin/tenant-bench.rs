//! Tenant density: creates N tenants in one `fabrik up` (release build) and measures the
//! creation rate, the time from create to `Ready` (p50/p99), RSS per idle tenant and the number
//! of host watches; then, with those tenants idle, create → Ready of tenants created one at a
//! time (the latency a platform team sees when the control plane is not saturated).
//!
//! `target/release/tenant-bench [N] [--fabrik PATH]` (default N = 100).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fabrik_api::tenant::{Tenant, TenantQuota, TenantSpec};
use kube::api::{Api, ListParams, PostParams};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Tenants created one at a time after the burst.
const SEQUENTIAL: usize = 50;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let bin = args
        .iter()
        .position(|a| a == "--fabrik")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| e2e::repo_root().join("target/release/fabrik"));
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let mut child = Command::new(&bin)
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--nodes",
            "0",
            "--data-dir",
        ])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    let kubeconfig = data.join("tenants/demo.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kubeconfig.exists() {
        if Instant::now() > deadline {
            bail!("fabrik up did not create the demo tenant");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kc = kube::config::Kubeconfig::read_from(data.join("host.kubeconfig"))?;
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?,
    )?;
    let tenants: Api<Tenant> = Api::all(client.clone());
    let rss_before = e2e::procfs::memory_mib(pid).0;
    let cpu_start = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0);
    let start = Instant::now();
    let created = Arc::new(tokio::sync::Mutex::new(Vec::with_capacity(n)));
    let mut tasks = tokio::task::JoinSet::new();
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    for i in 0..n {
        let api = tenants.clone();
        let created = created.clone();
        let sem = sem.clone();
        tasks.spawn(async move {
            let _permit = sem.acquire().await;
            let spec = TenantSpec {
                quota: Some(TenantQuota {
                    gpus: Some(1),
                    pods: Some(10),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let t0 = Instant::now();
            let r = api
                .create(
                    &PostParams::default(),
                    &Tenant::new(&format!("t{i:04}"), spec),
                )
                .await;
            created.lock().await.push((format!("t{i:04}"), t0));
            r.map(|_| ())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let create_secs = start.elapsed().as_secs_f64();
    // Time to Ready: poll the list until every tenant reports Ready.
    let created: Vec<(String, Instant)> = created.lock().await.clone();
    let mut ready_at = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while ready_at.len() < n {
        let list = tenants.list(&ListParams::default()).await?;
        let now = Instant::now();
        for t in list.items {
            let name = t.metadata.name.clone().unwrap_or_default();
            if t.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready") {
                ready_at.entry(name).or_insert(now);
            }
        }
        if Instant::now() > deadline {
            bail!("only {} of {n} tenants Ready after 600 s", ready_at.len());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_ready_secs = start.elapsed().as_secs_f64();
    let burst_cpu = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu_start;
    let mut lat: Vec<f64> = created
        .iter()
        .filter_map(|(name, t0)| {
            ready_at
                .get(name)
                .map(|r| r.duration_since(*t0).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (cpu0, t0) = (e2e::procfs::cpu_seconds(pid).unwrap_or(0.0), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_cpu =
        (e2e::procfs::cpu_seconds(pid).unwrap_or(0.0) - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let rss_after = e2e::procfs::memory_mib(pid).0;
    // One at a time, with the N tenants idle: create → Ready of a single tenant (watched).
    let mut one: Vec<f64> = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let name = format!("s{i:03}");
        let t0 = Instant::now();
        tenants
            .create(
                &PostParams::default(),
                &Tenant::new(&name, TenantSpec::default()),
            )
            .await?;
        let ready =
            kube::runtime::wait::await_condition(tenants.clone(), &name, |t: Option<&Tenant>| {
                t.and_then(|t| t.status.as_ref())
                    .and_then(|s| s.phase.as_deref())
                    == Some("Ready")
            });
        tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .with_context(|| format!("tenant {name} not Ready within 60 s"))??;
        one.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    one.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    println!("| tenants | {n} |");
    println!(
        "| creation rate (16 concurrent clients) | {:.1} tenants/s ({n} in {create_secs:.2} s) |",
        n as f64 / create_secs
    );
    println!("| create → Ready | p50 {:.1} ms, p99 {:.1} ms (all {n} Ready after {all_ready_secs:.2} s; server CPU {burst_cpu:.1} s) |", percentile(&lat, 0.5), percentile(&lat, 0.99));
    println!(
        "| create → Ready, one at a time ({SEQUENTIAL} tenants, {n} idle alongside) | p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        percentile(&one, 0.5),
        percentile(&one, 0.99),
        one.last().copied().unwrap_or(0.0)
    );
    println!(
        "| server CPU, {} tenants idle (10 s) | {idle_cpu:.1} % of one core |",
        n + 1
    );
    println!("| RSS | {rss_before:.1} MiB with the demo tenant → {rss_after:.1} MiB with {} tenants: {:.2} MiB per idle tenant |", n + 1, (rss_after - rss_before) / n as f64);
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();
    Ok(())
}
