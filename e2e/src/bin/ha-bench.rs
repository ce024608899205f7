//! `ha-bench`: memory of idle tenants on one `fabrik serve` replica, sled against etcd.
//!
//! For each store (`sled` under the data directory, then a one-member etcd it starts itself) it
//! starts a bare host (`fabrik up --no-tenant-manager --nodes 0`) and one `fabrik serve`
//! replica, reads the replica's RSS, creates N tenants with 16 concurrent clients, waits until
//! all are Ready, waits 5 s and reads the RSS again; it prints a markdown table.
//!
//! ```sh
//! cargo build -p control-plane --bin fabrik -p e2e --features bench --bin ha-bench
//! target/debug/ha-bench 100
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::etcd::{free_port, Etcd};
use e2e::ha::{Replica, ReplicaConfig};
use e2e::{init_crypto, Fabrik};
use fabrik_api::tenant::{Tenant, TenantSpec};
use futures::StreamExt;
use kube::api::{Api, PostParams};

/// Resident set size of a process, in KiB.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")
}

/// One measurement: RSS before and after N idle tenants, and the time to all Ready.
struct Figures {
    before_kib: u64,
    after_kib: u64,
    ready: Duration,
}

async fn measure(store: &str, n: usize) -> Result<Figures> {
    let up = Fabrik::start_with(&["--no-tenant-manager", "--nodes", "0"])?;
    let work = tempfile::tempdir()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let public = format!("https://{addr}");
    let kubeconfig = up.kubeconfig();
    let replica = Replica::start(
        &ReplicaConfig {
            host_kubeconfig: &kubeconfig,
            store,
            public_url: &public,
            work: work.path(),
            extra: &[],
        },
        "r0",
        addr,
    )?;
    let pid = replica.pid().context("replica pid")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_kib = rss_kib(pid)?;
    let host = up.client().await?;
    let tenants: Api<Tenant> = Api::all(host);
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let tenants = tenants.clone();
            async move {
                tenants
                    .create(
                        &PostParams::default(),
                        &Tenant::new(&format!("t{i}"), TenantSpec::default()),
                    )
                    .await
            }
        })
        .buffer_unordered(16)
        .for_each(|r| async move {
            if let Err(e) = r {
                eprintln!("create failed: {e}");
            }
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = tenants.list(&Default::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|t| t.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"))
            .count();
        if ready == n {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "{ready} of {n} tenants Ready after 600 s: {}",
                replica.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_kib = rss_kib(pid)?;
    Ok(Figures {
        before_kib,
        after_kib,
        ready,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    init_crypto();
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().context("usage: ha-bench [TENANTS]")?,
        None => 100,
    };
    let etcd = Etcd::start()?;
    let mut rows = Vec::new();
    for (label, store) in [("sled", "sled".to_string()), ("etcd", etcd.store_flag())] {
        eprintln!("measuring {n} tenants on {label}…");
        let f = measure(&store, n).await?;
        rows.push((label, f));
    }
    println!("| store | tenants | all Ready after | RSS before → after | RSS per idle tenant |");
    println!("| --- | --- | --- | --- | --- |");
    for (label, f) in rows {
        let per = (f.after_kib.saturating_sub(f.before_kib)) as f64 / 1024.0 / n as f64;
        println!(
            "| {label} | {n} | {:.1} s | {} → {} MiB | {per:.2} MiB |",
            f.ready.as_secs_f64(),
            f.before_kib / 1024,
            f.after_kib / 1024
        );
    }
    Ok(())
}
