//! Admission webhook figures (issue "extension-apis"), against a real `fabrik up` and the test
//! webhook of `e2e::webhook` on this machine (`--local-backends`):
//!
//! 1. latency of a ConfigMap create in a tenant, sequential, without webhooks and with one
//!    mutating (`/label`) plus one validating (`/allow`) webhook on loopback — p50 / p99 and the
//!    difference, against the time the webhook itself takes per call (measured inside it);
//! 2. `TENANTS` tenants, each with one webhook configured: the control plane's CPU while they
//!    sit idle (configurations are read per request: nothing polls or watches for them).
//!
//! ```text
//! cargo build --release -p control-plane --bin fabrik -p e2e --bin webhook-bench
//! FABRIK_BIN=target/release/fabrik target/release/webhook-bench [CREATES] [TENANTS]
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::webhook::TestWebhook;
use e2e::Fabrik;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Creates `n` ConfigMaps named `<prefix>-<i>` one after another; their latencies, sorted.
async fn creates(client: &kube::Client, prefix: &str, n: usize) -> Result<Vec<Duration>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("{prefix}-{i}")},
            "data": {"k": "v"},
        }))?;
        let start = Instant::now();
        api.create(&PostParams::default(), &cm).await?;
        out.push(start.elapsed());
    }
    out.sort();
    Ok(out)
}

fn webhook_configs(ca: &str) -> Vec<serde_json::Value> {
    let hook = |name: &str, path: &str| {
        json!({
            "name": name,
            "clientConfig": {"service": {"namespace": "default", "name": "hook", "path": path},
                             "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    };
    vec![
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-label"},
               "webhooks": [hook("label.bench.fabrik.dev", "/label")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-allow"},
               "webhooks": [hook("allow.bench.fabrik.dev", "/allow")]}),
    ]
}

async fn apply(client: &kube::Client, obj: &serde_json::Value) -> Result<()> {
    let kind = obj["kind"].as_str().unwrap_or("");
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural,
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    api.patch(
        name,
        &PatchParams::apply("bench").force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

async fn local_service(client: &kube::Client, port: u16) -> Result<()> {
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hook", "annotations": {"sim.fabrik.dev/local-port": port.to_string()}},
        "spec": {"ports": [{"port": 443}]}});
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), "default");
    api.patch(
        "hook",
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&svc),
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let tenants: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let server = TestWebhook::start(&["hook.default.svc"])?;
    let port = server.port.to_string();
    let f = Fabrik::start_with(&["--local-backends", &port, "--nodes", "0"])?;
    let cfg = f.data_dir().join("tenants").join("demo.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cfg.exists() {
        if Instant::now() > deadline {
            bail!("the demo tenant's kubeconfig did not appear");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = client_of(&cfg).await.context("tenant client")?;
    local_service(&client, server.port).await?;
    // Warm up (connections, caches), then measure.
    creates(&client, "warm", 50).await?;
    let without = creates(&client, "plain", n).await?;
    for c in webhook_configs(&server.ca_bundle()) {
        apply(&client, &c).await?;
    }
    creates(&client, "warm-hooked", 50).await?;
    let before = server.received().len();
    let with = creates(&client, "hooked", n).await?;
    let calls = server.received().len() - before;
    if calls != 2 * n {
        bail!("expected {} webhook calls, saw {calls}", 2 * n);
    }
    let own = server.handling_times();
    let mut own: Vec<Duration> = own[own.len().saturating_sub(2 * n)..].to_vec();
    own.sort();
    println!("ConfigMap create in a tenant, {n} sequential (ms):");
    println!(
        "  no webhooks            p50 {:.2}  p99 {:.2}",
        ms(percentile(&without, 0.5)),
        ms(percentile(&without, 0.99))
    );
    println!(
        "  mutating + validating  p50 {:.2}  p99 {:.2}",
        ms(percentile(&with, 0.5)),
        ms(percentile(&with, 0.99))
    );
    println!(
        "  added                  p50 {:.2}  p99 {:.2}",
        ms(percentile(&with, 0.5)) - ms(percentile(&without, 0.5)),
        ms(percentile(&with, 0.99)) - ms(percentile(&without, 0.99))
    );
    println!(
        "  the webhook's own time per call  p50 {:.3}  p99 {:.3}",
        ms(percentile(&own, 0.5)),
        ms(percentile(&own, 0.99))
    );

    // Idle cost: tenants, each with one webhook configured.
    let host = f.client().await?;
    let pid = f.pid().context("fabrik pid")?;
    for i in 0..tenants {
        let out = f.fabrik_cli(&["tenant", "create", &format!("idle-{i}")])?;
        if !out.status.success() {
            bail!("tenant create: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let tenants_api: Api<DynamicObject> = Api::all_with(
        host.clone(),
        &ApiResource {
            group: "fabrik.dev".into(),
            version: "v1alpha1".into(),
            api_version: "fabrik.dev/v1alpha1".into(),
            kind: "Tenant".into(),
            plural: "tenants".into(),
        },
    );
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let ready = tenants_api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|t| t.data["status"]["phase"] == "Ready")
            .count();
        if ready > tenants {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ready} tenants Ready");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for i in 0..tenants {
        let cfg = f
            .data_dir()
            .join("tenants")
            .join(format!("idle-{i}.kubeconfig"));
        let c = client_of(&cfg).await?;
        for obj in webhook_configs(&server.ca_bundle()) {
            apply(&c, &obj).await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu0 = e2e::procfs::cpu_seconds(pid).context("cpu")?;
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let cpu1 = e2e::procfs::cpu_seconds(pid).context("cpu")?;
    println!(
        "{tenants} tenants with a mutating and a validating webhook each, idle {}s: {:.3} CPU-seconds ({:.2} % of a core)",
        window.as_secs(),
        cpu1 - cpu0,
        100.0 * (cpu1 - cpu0) / window.as_secs_f64()
    );
    Ok(())
}
