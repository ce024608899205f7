//! Cluster behaviour figures (issue "cluster-behaviour"), against a real `fabrik up`:
//!
//! 1. CRD created → first custom object accepted (p50/p99 over 20 CRDs);
//! 2. a 100-replica Deployment rolled out with the test kubelet (seconds, API calls);
//! 3. control-plane CPU while 10,000 objects sit idle (target: ~0 — no polling);
//! 4. `helm install --wait` of the `helm create` chart, Helm 3 and Helm 4 (seconds).
//!
//! ```text
//! cargo build --release -p control-plane --bin fabrik -p e2e --features bench --bin cluster-bench
//! FABRIK_BIN=target/release/fabrik target/release/cluster-bench
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::{helms, Fabrik, FakeKubelet};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// Total API requests served so far, from `/metrics`.
async fn api_requests(client: &kube::Client) -> Result<u64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

/// CPU seconds (user + system) the process has used, from /proc.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> { Ok(fields.get(i).context("field")?.parse::<f64>()?) };
    // Fields after the command: state is 0, utime 11, stime 12.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

async fn crd_to_first_object(client: &kube::Client) -> Result<Vec<Duration>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut times = Vec::new();
    for i in 0..20 {
        let group = format!("bench{i}.example.com");
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}
        });
        let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
        let ar = ApiResource {
            group: group.clone(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "first"}, "spec": {"size": 3}
        }))?;
        let start = Instant::now();
        crds.create(&PostParams::default(), &crd).await?;
        loop {
            match widgets.create(&PostParams::default(), &obj).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => bail!("creating the first widget: {e}"),
            }
            if start.elapsed() > Duration::from_secs(10) {
                bail!("CRD {group} not served within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(start.elapsed());
    }
    Ok(times)
}

#[tokio::main]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let client = f.client().await?;

    // 1. CRD → first object (the CRD's create request sent → the first object's create
    // answered 201; retried every millisecond while the resource is not served yet).
    let mut times = crd_to_first_object(&client).await?;
    times.sort();
    println!(
        "CRD created → first object accepted: p50 {:?}  p99 {:?} (20 CRDs)",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
    );

    // 2. A 100-replica rollout with the test kubelet.
    let kubelet = FakeKubelet::start(&f.kubeconfig())?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let before = api_requests(&client).await?;
    let start = Instant::now();
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "hundred"},
        "spec": {"replicas": 100, "selector": {"matchLabels": {"app": "hundred"}},
            "template": {"metadata": {"labels": {"app": "hundred"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))?;
    deployments.create(&PostParams::default(), &deploy).await?;
    loop {
        let d = deployments.get("hundred").await?;
        if d.status.as_ref().and_then(|s| s.available_replicas) == Some(100) {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            bail!("rollout not done in 300 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rollout = start.elapsed();
    let calls = api_requests(&client).await? - before;
    println!("100-replica Deployment rolled out: {rollout:?}, {calls} API requests (controllers + test kubelet + this poll)");
    drop(kubelet);

    // 3. Idle CPU with 10,000 objects.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut tasks = Vec::new();
    for w in 0..16 {
        let cms = cms.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..9_900).step_by(16) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("idle-{i}")}, "data": {"k": "v"}}))?;
                cms.create(&PostParams::default(), &cm).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Let the controllers settle, then measure 30 s of idleness.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = f.pid().context("pid")?;
    let cpu0 = cpu_seconds(pid)?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let cpu = cpu_seconds(pid)? - cpu0;
    println!(
        "idle control plane with 10,000 objects (9,900 ConfigMaps + a 100-pod Deployment): {:.2} CPU-seconds in 30 s = {:.2} % of a core",
        cpu,
        cpu / 30.0 * 100.0
    );

    // 4. helm install --wait of the `helm create` chart.
    let kubelet = FakeKubelet::start(&f.kubeconfig())?;
    let dir = tempfile::tempdir()?;
    for helm in helms() {
        let chart = dir.path().join(format!("demo{}", helm.major));
        let out = Command::new(&helm.path)
            .arg("create")
            .arg(&chart)
            .output()?;
        if !out.status.success() {
            bail!("helm create: {}", String::from_utf8_lossy(&out.stderr));
        }
        let start = Instant::now();
        let out = Command::new(&helm.path)
            .args(["install", &format!("demo{}", helm.major)])
            .arg(&chart)
            .args(["--wait", "--timeout", "120s"])
            .env("KUBECONFIG", f.kubeconfig())
            .env("HOME", dir.path())
            .output()?;
        if !out.status.success() {
            bail!(
                "helm {} install: {}",
                helm.major,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        println!(
            "helm {} install --wait (helm create chart): {:?}",
            helm.major,
            start.elapsed()
        );
    }
    drop(kubelet);
    Ok(())
}
