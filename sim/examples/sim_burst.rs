//! Benchmark: a burst of GPU pods on `fabrik up`'s simulated nodes.
//!
//! ```sh
//! cargo build --release -p control-plane --bin fabrik
//! FABRIK_BIN=target/release/fabrik cargo run --release -p fabrik-sim --example sim_burst -- 2 8
//! ```
//!
//! Starts `fabrik up --nodes N --gpus-per-node G`, waits for the nodes, then creates at once
//! pods asking for 64 GPUs in all (sizes 8, 4, 2, 1 repeating: 8+4+2+1 = 15 per round, the rest
//! as 1-GPU pods), and reports how long until every pod is either Running or reported
//! unschedulable, and the allocation ratio (GPUs allocated / GPUs on the nodes). Also prints the
//! `fabrik up` process's RSS and CPU time while idle with its nodes.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;

fn sizes(total: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut left = total;
    for s in [8, 4, 2, 1].iter().cycle() {
        if left == 0 {
            break;
        }
        let s = (*s).min(left);
        out.push(s);
        left -= s;
    }
    out
}

fn proc_stat(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit(')').next()?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((rss_kib, (utime + stime) / 100.0))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes: u32 = args.first().map(|s| s.parse()).transpose()?.unwrap_or(2);
    let gpus: u32 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(8);
    let fabrik = e2e::Fabrik::start_with(&[
        "--nodes",
        &nodes.to_string(),
        "--gpus-per-node",
        &gpus.to_string(),
    ])?;
    e2e::init_crypto();
    let client = fabrik.client().await?;
    let node_api: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = node_api.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get("nvidia.com/gpu"))
                    .is_some()
            })
            .count();
        if ready == usize::try_from(nodes)? {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "nodes did not register");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = fabrik_pid(&fabrik);
    let idle_before = pid.and_then(proc_stat);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_after = pid.and_then(proc_stat);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let burst = sizes(64);
    let started = Instant::now();
    for (i, g) in burst.iter().enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("burst-{i}"), "labels": {"app": "burst"}},
            "spec": {"containers": [{"name": "c", "image": "example.com/c:1",
                "resources": {"limits": {"nvidia.com/gpu": g.to_string()}}}]},
        }))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .context("create")?;
    }
    let created = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (running, allocated) = loop {
        let list = pods
            .list(&ListParams::default().labels("app=burst"))
            .await?
            .items;
        let mut settled = 0;
        let mut running = 0;
        let mut allocated = 0u32;
        for (p, g) in list.iter().map(|p| {
            let n: u32 = p
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix("burst-"))
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| burst.get(i).copied())
                .unwrap_or(0);
            (p, n)
        }) {
            let st = p.status.as_ref();
            if st.and_then(|s| s.phase.as_deref()) == Some("Running") {
                settled += 1;
                running += 1;
                allocated += g;
            } else if st.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False")
            }) {
                settled += 1;
            }
        }
        if settled == burst.len() {
            break (running, allocated);
        }
        anyhow::ensure!(Instant::now() < deadline, "burst did not settle");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let settled = started.elapsed();
    let capacity = nodes * gpus;
    println!(
        "nodes {nodes} x {gpus} GPUs; burst: {} pods asking for 64 GPUs (created in {:.2} s)",
        burst.len(),
        created.as_secs_f64()
    );
    println!(
        "settled in {:.2} s: {running} pods Running, {} unschedulable; GPUs allocated {allocated}/{capacity} = {:.1} %",
        settled.as_secs_f64(),
        burst.len() - running,
        100.0 * f64::from(allocated) / f64::from(capacity)
    );
    if let (Some((rss, cpu0)), Some((_, cpu1))) = (idle_before, idle_after) {
        println!(
            "fabrik up idle with its nodes: RSS {:.1} MiB, CPU {:.2} % of a core (10 s)",
            rss as f64 / 1024.0,
            (cpu1 - cpu0) / 10.0 * 100.0
        );
    }
    Ok(())
}

/// The `fabrik up` process: the one whose command line names this data directory.
fn fabrik_pid(fabrik: &e2e::Fabrik) -> Option<u32> {
    let dir = fabrik.data_dir();
    let dir = dir.to_str()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains(" up") || cmd.contains("\0up\0"))
            .then_some(())
            .filter(|_| cmd.contains(dir))
            .map(|_| pid)
    })
}
