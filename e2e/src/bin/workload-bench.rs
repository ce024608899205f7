//! Workload figures (issue "workloads"), in a tenant of a real `fabrik up` with `NODES`
//! simulated nodes:
//!
//! 1. an Indexed Job of `COMPLETIONS` completions, parallelism 100 (each pod runs the
//!    simulation's default 1 s and exits 0): time from create to the `Complete` condition;
//! 2. a DaemonSet over every node of the tenant's pool: time from create to
//!    `numberReady == desiredNumberScheduled == NODES`.
//!
//! ```text
//! cargo build -p control-plane --bin fabrik -p e2e --features bench --bin workload-bench
//! target/debug/workload-bench [COMPLETIONS] [NODES]      # FABRIK_BIN=… for another build
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::Fabrik;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::json;

async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let args: Vec<String> = std::env::args().collect();
    let completions: i32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let nodes: i32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100);
    let nodes_arg = nodes.to_string();
    let f = Fabrik::start_with(&["--nodes", &nodes_arg])?;
    let cfg = f.create_tenant("bench", &[])?;
    let client = client_of(&cfg).await?;

    // 1. The Indexed Job.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "indexed"},
        "spec": {"completions": completions, "parallelism": 100, "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}}}
    }))?;
    let start = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let job_time = loop {
        let j = jobs.get("indexed").await?;
        let status = j.status.unwrap_or_default();
        let done = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"));
        if let Some(c) = done {
            if c.type_ != "Complete" {
                bail!("the Job failed: {:?}", c.message);
            }
            break start.elapsed();
        }
        if start.elapsed() > Duration::from_secs(1800) {
            bail!("the Job did not complete: {:?} succeeded", status.succeeded);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // 2. The DaemonSet.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client, "default");
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "everywhere"},
        "spec": {"selector": {"matchLabels": {"app": "everywhere"}},
            "template": {"metadata": {"labels": {"app": "everywhere"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]}}}
    }))?;
    let start = Instant::now();
    daemonsets.create(&PostParams::default(), &ds).await?;
    let (ds_time, desired) = loop {
        let status = daemonsets
            .get("everywhere")
            .await?
            .status
            .unwrap_or_default();
        if status.desired_number_scheduled > 0
            && status.number_ready == status.desired_number_scheduled
        {
            break (start.elapsed(), status.desired_number_scheduled);
        }
        if start.elapsed() > Duration::from_secs(900) {
            bail!(
                "the DaemonSet did not turn ready: {} of {}",
                status.number_ready,
                status.desired_number_scheduled
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("| workload | size | time |");
    println!("| --- | --- | --- |");
    println!(
        "| Indexed Job, parallelism 100 | {completions} completions | {:.1} s to Complete |",
        job_time.as_secs_f64()
    );
    println!(
        "| DaemonSet | {desired} nodes ({nodes} simulated) | {:.1} s to all Ready |",
        ds_time.as_secs_f64()
    );
    Ok(())
}
