//! HorizontalPodAutoscaler reaction times (issue "workloads"), against a real `fabrik up` with
//! its simulated GPU nodes, in a tenant:
//!
//! 1. **scale up**: a Deployment of one pod the simulated node reports at 4× the autoscaler's
//!    CPU target (the `sim.fabrik.dev/cpu-usage` annotation); time from creating the autoscaler
//!    to the Deployment asking for the maximum;
//! 2. **scale down**: the pods' usage drops (a new pod template: a rollout); time from the
//!    change to the Deployment asking for the minimum, with `stabilizationWindowSeconds: 0`
//!    (upstream's default window of 300 s would add exactly that).
//!
//! Each repeated `ROUNDS` times on fresh Deployments. The controller evaluates every
//! autoscaler on each change of it and every 15 s (upstream's sync period), so a scale-down
//! waits for the next period: expect up to 15 s plus the rollout.
//!
//! ```text
//! cargo build --release -p control-plane --bin fabrik -p e2e --features bench --bin hpa-bench
//! FABRIK_BIN=target/release/fabrik target/release/hpa-bench [ROUNDS]
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::Fabrik;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn deployment(name: &str, usage: &str) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name},
                                      "annotations": {"sim.fabrik.dev/cpu-usage": usage}},
                "spec": {"containers": [{"name": "main", "image": "nginx",
                    "resources": {"requests": {"cpu": "100m"}}}]}}}
    }))?)
}

/// Waits until the Deployment asks for `want` replicas; the time since `since`.
async fn replicas_reach(
    api: &Api<Deployment>,
    name: &str,
    want: i32,
    since: Instant,
) -> Result<Duration> {
    while since.elapsed() < Duration::from_secs(120) {
        let d = api.get(name).await?;
        if d.spec.replicas == Some(want) {
            return Ok(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{name} never reached {want} replicas")
}

/// Waits until every pod of the Deployment is running (its status says so).
async fn running(api: &Api<Deployment>, name: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        let d = api.get(name).await?;
        let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready >= 1 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{name} never ran")
}

fn summary(label: &str, mut v: Vec<Duration>) {
    v.sort();
    let s = |d: &Duration| format!("{:.2} s", d.as_secs_f64());
    println!(
        "| {label} | {} rounds | min {} | median {} | max {} |",
        v.len(),
        v.first().map(s).unwrap_or_default(),
        v.get(v.len() / 2).map(s).unwrap_or_default(),
        v.last().map(s).unwrap_or_default()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("bench", &[])?;
    let client = client_of(&cfg).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client, "default");
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let name = format!("web{i}");
        deployments
            .create(&PostParams::default(), &deployment(&name, "200m")?)
            .await?;
        running(&deployments, &name).await?;
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}
        }))?;
        let start = Instant::now();
        hpas.create(&PostParams::default(), &hpa).await?;
        ups.push(replicas_reach(&deployments, &name, 4, start).await?);
        let start = Instant::now();
        let idle = json!({"spec": {"template": {"metadata": {"annotations":
            {"sim.fabrik.dev/cpu-usage": "10m"}}}}});
        deployments
            .patch(&name, &PatchParams::default(), &Patch::Merge(&idle))
            .await?;
        downs.push(replicas_reach(&deployments, &name, 1, start).await?);
    }
    println!("| step | rounds | min | median | max |");
    println!("| --- | --- | --- | --- | --- |");
    summary("autoscaler created → Deployment at max (4)", ups);
    summary("usage drops (rollout) → Deployment at min (1)", downs);
    Ok(())
}
