//! Admission webhook and API aggregation figures (issue "extension-apis"), against a real `fabrik up` and the test
//! webhook of `e2e::webhook` on this machine (`--local-backends`):
//!
//! 1. latency of a ConfigMap create in a tenant, sequential, without webhooks and with one
//!    mutating (`/label`) plus one validating (`/allow`) webhook on loopback — p50 / p99 and the
//!    difference, against the time the webhook itself takes per call (measured inside it);
//! 2. a list through an aggregated API (the test API server of `e2e::aggregated`) against the
//!    same list sent to it directly: the proxy's added latency;
//! 3. `TENANTS` tenants idle, then each with a mutating and a validating webhook configured:
//!    the control plane's CPU and RSS while they sit idle, before and after (configurations
//!    are read per request: nothing polls or watches for them).
//!
//! ```text
//! cargo build --release -p control-plane --bin fabrik -p e2e --features bench --bin webhook-bench
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

/// The server's CPU over 20 s of idleness (after 5 s to settle), and its RSS.
async fn idle(pid: u32, label: &str) -> Result<()> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu0 = e2e::procfs::cpu_seconds(pid).context("cpu")?;
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let cpu1 = e2e::procfs::cpu_seconds(pid).context("cpu")?;
    let (rss, _) = e2e::procfs::memory_mib(pid);
    println!(
        "{label}, idle {}s: {:.3} CPU-seconds ({:.2} % of a core), RSS {rss:.0} MiB",
        window.as_secs(),
        cpu1 - cpu0,
        100.0 * (cpu1 - cpu0) / window.as_secs_f64()
    );
    Ok(())
}

/// A list through the tenant's aggregation layer against the same list sent to the backend
/// directly (same TLS, one connection kept): p50 / p99 of both and the difference.
async fn aggregated_overhead(
    client: &kube::Client,
    api: &e2e::aggregated::TestApiServer,
    n: usize,
) -> Result<()> {
    let group = e2e::aggregated::GROUP;
    let svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "flavors", "annotations": {"sim.fabrik.dev/local-port": api.port.to_string()}},
        "spec": {"ports": [{"port": 443}]}});
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    services
        .patch(
            "flavors",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&svc),
        )
        .await?;
    let reg = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("v1.{group}")},
        "spec": {"group": group, "version": "v1", "caBundle": api.ca_bundle(),
                 "service": {"namespace": "default", "name": "flavors", "port": 443},
                 "groupPriorityMinimum": 1000, "versionPriority": 15}});
    let ar = ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let regs: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    regs.patch(
        &format!("v1.{group}"),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&reg),
    )
    .await?;
    let path = format!("/apis/{group}/v1/namespaces/default/flavors");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = http::Request::get(path.as_str()).body(Vec::new())?;
        if client.request_text(req).await.is_ok() {
            break;
        }
        if Instant::now() > deadline {
            bail!("the aggregated API did not become available");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let direct_client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(api.ca_pem().as_bytes())?)
        .resolve("flavors.default.svc", ([127, 0, 0, 1], api.port).into())
        .no_proxy()
        .build()?;
    let direct_url = format!("https://flavors.default.svc:{}{path}", api.port);
    let mut through = Vec::with_capacity(n);
    let mut direct = Vec::with_capacity(n);
    for _ in 0..n {
        let req = http::Request::get(path.as_str()).body(Vec::new())?;
        let start = Instant::now();
        client.request_text(req).await?;
        through.push(start.elapsed());
        let start = Instant::now();
        direct_client
            .get(&direct_url)
            .header("X-Remote-User", "bench")
            .send()
            .await?
            .bytes()
            .await?;
        direct.push(start.elapsed());
    }
    through.sort();
    direct.sort();
    println!("A list through an aggregated API, {n} sequential (ms):");
    println!(
        "  backend directly        p50 {:.2}  p99 {:.2}",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99))
    );
    println!(
        "  through the tenant      p50 {:.2}  p99 {:.2}",
        ms(percentile(&through, 0.5)),
        ms(percentile(&through, 0.99))
    );
    println!(
        "  added                   p50 {:.2}  p99 {:.2}",
        ms(percentile(&through, 0.5)) - ms(percentile(&direct, 0.5)),
        ms(percentile(&through, 0.99)) - ms(percentile(&direct, 0.99))
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    e2e::init_crypto();
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let tenants: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let server = TestWebhook::start(&["hook.default.svc"])?;
    let api = e2e::aggregated::TestApiServer::start(&["flavors.default.svc"])?;
    let port = format!(
        "{}-{}",
        server.port.min(api.port),
        server.port.max(api.port)
    );
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

    aggregated_overhead(&client, &api, n).await?;

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
    idle(pid, &format!("{tenants} tenants without webhooks")).await?;
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
    idle(
        pid,
        &format!("{tenants} tenants with a mutating and a validating webhook each"),
    )
    .await?;
    Ok(())
}
