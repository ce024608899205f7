//! Tenant usage: a GPU pod of the `demo` tenant runs on a simulated node of `fabrik up`; its
//! node publishes the GPU-seconds it metered (`fabrik-gpu-usage-<node>` in `fabrik-system`),
//! and the control plane reports pods, GPUs and GPU-seconds in `Tenant demo`'s
//! `status.usage`. Once the pod is deleted the GPUs go back to 0; GPU-seconds never go down. A
//! pod that runs to completion (as long as its command sleeps) is metered from its containers'
//! start to their stop, as the simulated kubelet records them, within 0.1 %.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::Fabrik;
use fabrik_api::tenant::{Tenant, TenantUsage};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, PostParams};

const DEADLINE: Duration = Duration::from_secs(45);

async fn client_of(path: &std::path::Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Polls `check` every 200 ms until it returns Some, or fails at the deadline with `what` and
/// the last value seen.
async fn poll<T, F, Fut>(what: &str, deadline: Instant, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(seen) => last = seen,
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn allocation(host: &kube::Client, query: &str) -> Result<serde_json::Value, kube::Error> {
    let req = http::Request::get(format!("/opencost/allocation?{query}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    host.request(req).await
}

async fn usage(tenants: &Api<Tenant>) -> Result<Option<TenantUsage>, String> {
    let t = tenants.get("demo").await.map_err(|e| e.to_string())?;
    Ok(t.status.and_then(|s| s.usage))
}

#[tokio::test]
async fn gpu_pod_usage_reaches_tenant_status() -> Result<()> {
    e2e::init_crypto();
    let f = Fabrik::start_with(&[
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--usage-publish-interval",
        "1",
        "--gpu-hour-price",
        "*=3.5",
    ])?;
    let deadline = Instant::now() + DEADLINE;
    let host = f.client().await?;
    let tenants: Api<Tenant> = Api::all(host.clone());

    // The demo tenant's kubeconfig appears once it serves.
    let demo_cfg = f.data_dir().join("tenants").join("demo.kubeconfig");
    poll("the demo tenant's kubeconfig", deadline, || {
        let exists = demo_cfg.exists();
        async move { Ok(exists.then_some(())) }
    })
    .await?;
    let demo = client_of(&demo_cfg).await.context("demo kubeconfig")?;
    let pods: Api<Pod> = Api::namespaced(demo, "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer"},
        "spec": {"containers": [{"name": "c", "image": "cuda",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }))?;
    poll("the GPU pod to be created", deadline, || {
        let (pods, pod) = (pods.clone(), pod.clone());
        async move {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(Some(())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;

    // Running, holding one GPU, metered.
    let running = poll("usage with the GPU pod running", deadline, || {
        let tenants = tenants.clone();
        async move {
            let u = usage(&tenants).await?;
            match u {
                Some(u) if u.pods >= 1 && u.gpus == 1 && u.gpu_seconds > 0 => Ok(Some(u)),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await?;
    assert!(running.gpu_seconds_utilized <= running.gpu_seconds);

    // The OpenCost-shaped export on the host: the demo tenant's namespace, GPU-hours priced.
    let demo_alloc = poll("GPU-hours in the allocation export", deadline, || {
        let host = host.clone();
        async move {
            let doc = allocation(&host, "window=1h&aggregate=namespace")
                .await
                .map_err(|e| e.to_string())?;
            let entry = doc["data"][0]["fabrik-demo"].clone();
            match entry["gpuHours"].as_f64() {
                Some(h) if h > 0.0 => Ok(Some(entry)),
                _ => Err(doc.to_string()),
            }
        }
    })
    .await?;
    let hours = demo_alloc["gpuHours"].as_f64().context("gpuHours")?;
    let cost = demo_alloc["gpuCost"].as_f64().context("gpuCost")?;
    assert!((cost - hours * 3.5).abs() < 1e-9, "{demo_alloc}");
    assert_eq!(
        demo_alloc["properties"]["labels"]["fabrik.dev/tenant"],
        "demo"
    );
    // Bad parameters are a 400 naming them.
    for (query, names) in [
        ("window=forever", "forever"),
        ("", "window"),
        ("window=1h&aggregate=pod", "aggregate"),
    ] {
        match allocation(&host, query).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 400, "{query}: {s:?}");
                assert!(s.message.contains(names), "{query}: {}", s.message);
            }
            other => bail!("{query}: expected a 400, got {other:?}"),
        }
    }

    // The node's usage ConfigMap holds the pod's series under the tenant.
    let cms: Api<ConfigMap> = Api::namespaced(host.clone(), "fabrik-system");
    let cm = cms.get("fabrik-gpu-usage-gpu-node-0").await?;
    let doc = cm
        .data
        .as_ref()
        .and_then(|d| d.get("usage.json"))
        .context("usage.json")?;
    let doc: fabrik_api::tenant::NodeGpuUsage = serde_json::from_str(doc)?;
    assert!(doc.tenants.get("demo").is_some_and(|s| s.allocated > 0.0));
    assert!(doc
        .series
        .iter()
        .any(|s| s.tenant == "demo" && s.namespace == "default" && s.partition == "whole"));

    // Deleted: no GPU held any more; GPU-seconds kept.
    pods.delete("trainer", &DeleteParams::default()).await?;
    let after = poll("usage with the GPU pod gone", deadline, || {
        let tenants = tenants.clone();
        async move {
            let u = usage(&tenants).await?;
            match u {
                Some(u) if u.gpus == 0 => Ok(Some(u)),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await?;
    assert!(
        after.gpu_seconds >= running.gpu_seconds,
        "{after:?} after {running:?}"
    );

    // A pod that runs to completion is metered from its containers' start to their stop, as
    // the simulated kubelet reports them (with nanoseconds on the host pod), within 0.1 %. It
    // runs as long as its command sleeps, as it would on a real node; its utilized seconds are
    // a quarter of them, as its annotation says its GPU is busy.
    let deadline = Instant::now() + DEADLINE;
    let batch: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "batch", "annotations": {"sim.fabrik.dev/gpu-utilization": "25"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "cuda",
            "command": ["sh", "-c", "sleep 2.5"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }))?;
    pods.create(&PostParams::default(), &batch).await?;
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "fabrik-demo");
    let (host_name, truth) = poll("the batch pod's start and stop", deadline, || {
        let host_pods = host_pods.clone();
        async move {
            let list = host_pods
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let p = list.items.into_iter().find(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("fabrik.dev/virtual-name"))
                    == Some(&"batch".to_string())
            });
            let Some(p) = p else {
                return Err("no host pod yet".into());
            };
            let a = p.metadata.annotations.clone().unwrap_or_default();
            let at = |k: &str| {
                a.get(k)
                    .and_then(|v| v.parse::<k8s_openapi::jiff::Timestamp>().ok())
            };
            match (
                // fabrik_gpu::metering::ANNOTATION_STARTED_AT and ANNOTATION_FINISHED_AT.
                at("fabrik.dev/containers-started-at"),
                at("fabrik.dev/containers-finished-at"),
            ) {
                (Some(start), Some(stop)) => Ok(Some((
                    p.metadata.name.clone().unwrap_or_default(),
                    stop.duration_since(start).as_secs_f64(),
                ))),
                _ => Err(format!("{a:?}")),
            }
        }
    })
    .await?;
    assert!((2.5..3.5).contains(&truth), "ran {truth} s for `sleep 2.5`");
    let metered = poll("the batch pod's GPU-seconds", deadline, || {
        let (cms, host_name) = (cms.clone(), host_name.clone());
        async move {
            let cm = cms
                .get("fabrik-gpu-usage-gpu-node-0")
                .await
                .map_err(|e| e.to_string())?;
            let doc = cm
                .data
                .as_ref()
                .and_then(|d| d.get("usage.json"))
                .and_then(|d| serde_json::from_str::<fabrik_api::tenant::NodeGpuUsage>(d).ok())
                .ok_or("no usage.json")?;
            let seconds = doc
                .series
                .iter()
                .find(|s| s.pod == host_name && s.partition == "whole")
                .map(|s| (s.seconds.allocated, s.seconds.utilized));
            // As busy as the pod says its GPU is (as `kubectl top` would report it).
            match seconds {
                Some((s, u))
                    if (s - truth).abs() <= truth * 1e-3 && (u - s * 0.25).abs() <= 1e-3 =>
                {
                    Ok(Some(s))
                }
                other => Err(format!("{other:?} for {truth} s at 25 %")),
            }
        }
    })
    .await?;
    eprintln!("batch pod: ran {truth:.6} s, metered {metered:.3} GPU-s");
    Ok(())
}
