//! Quota bypasses a hostile tenant tried (issue 12, items 3, 5 and 13), each refused at the
//! tenant's admission, and each checked **on the host**: no host pod holds more GPUs than the
//! tenant's quota, none carries a negative or fractional device count or a limit above what
//! was admitted, and no host Service takes a node port or a load balancer the Tenant does not
//! allow.
//!
//! Needs `target/debug/fabrik` (`cargo build -p control-plane --bin fabrik`) and kubectl.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::kc;
use e2e::{kubectls, Fabrik, Kubectl};
use serde_json::{json, Value};

fn create(
    k: &Kubectl,
    cfg: &Path,
    dir: &Path,
    name: &str,
    body: &Value,
) -> Result<std::process::Output> {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, body.to_string())?;
    kc(k, cfg, &["create", "-f", &file.display().to_string()])
}

fn gpu(n: &str) -> Value {
    json!({"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}})
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn tenant(f: &Fabrik, name: &str, extra: &[&str]) -> Result<std::path::PathBuf> {
    f.create_tenant(name, extra)
}

/// The host's objects of `kind` in the tenant's host namespace.
fn host_items(f: &Fabrik, k: &Kubectl, kind: &str, tenant: &str) -> Result<Vec<Value>> {
    let ns = fabrik_api::tenant::host_namespace(tenant);
    let text = f.kubectl_ok(k, &["get", kind, "-n", &ns, "-o", "json"])?;
    let list: Value = serde_json::from_str(&text).context("host list")?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// Every GPU quantity (requests and limits, every kind of container) of a host pod, in whole
/// devices; None for one that is not a whole non-negative number.
fn host_pod_gpus(pod: &Value) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            for field in ["requests", "limits"] {
                for (k, v) in c["resources"][field].as_object().into_iter().flatten() {
                    if k.contains("gpu") || k.starts_with("nvidia.com/") {
                        let text = v
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string());
                        out.push(text.parse::<i64>().ok().filter(|n| *n >= 0));
                    }
                }
            }
        }
    }
    out
}

/// The GPUs a host pod holds while running: app containers and sidecars together (the largest
/// of limits and requests per container), as a node would allocate them.
fn host_pod_running_gpus(pod: &Value) -> i64 {
    let per = |c: &Value| {
        ["requests", "limits"]
            .iter()
            .flat_map(|f| c["resources"][*f].as_object().into_iter().flatten())
            .filter(|(k, _)| k.contains("gpu") || k.starts_with("nvidia.com/"))
            .filter_map(|(_, v)| {
                v.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .or(v.as_i64())
            })
            .max()
            .unwrap_or(0)
    };
    let app: i64 = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(per)
        .sum();
    let sidecars: i64 = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .map(per)
        .sum();
    app + sidecars
}

fn poll<T>(what: &str, secs: u64, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn quota_bypasses_are_refused_and_absent_on_the_host() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl");
    let cfg = tenant(&f, "quota", &["--gpus", "1", "--pods", "20"])?;
    let dir = tempfile::tempdir()?;
    let sidecar = |n: &str| json!({"name": "side", "image": "cuda", "restartPolicy": "Always", "resources": gpu(n)});
    // (name, object, what the refusal says)
    let hostile: Vec<(&str, Value, &str)> = vec![
        // Item 5: a sidecar's GPU runs alongside the app container's.
        (
            "sidecar",
            pod(
                "sidecar",
                json!({"initContainers": [sidecar("1")],
            "containers": [{"name": "main", "image": "cuda", "resources": gpu("1")}]}),
            ),
            "exceeded the quota of tenant \"quota\"",
        ),
        (
            "negative",
            pod(
                "negative",
                json!({"containers": [
            {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "-3"}}},
            {"name": "more", "image": "cuda", "resources": gpu("4")}]}),
            ),
            "must be greater than or equal to 0",
        ),
        (
            "fraction",
            pod(
                "fraction",
                json!({"containers": [
            {"name": "main", "image": "cuda", "resources": gpu("500m")}]}),
            ),
            "must be an integer",
        ),
        (
            "unequal",
            pod(
                "unequal",
                json!({"containers": [
            {"name": "main", "image": "cuda", "resources":
                {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}}]}),
            ),
            "must be equal to nvidia.com/gpu limit of 4",
        ),
        (
            "requests-only",
            pod(
                "requests-only",
                json!({"containers": [
            {"name": "main", "image": "cuda", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}),
            ),
            "Limit must be set for non overcommitable resources",
        ),
        (
            "init-policy",
            pod(
                "init-policy",
                json!({"initContainers": [
            {"name": "i", "image": "cuda", "restartPolicy": "OnFailure", "resources": gpu("1")}],
            "containers": [{"name": "main", "image": "cuda"}]}),
            ),
            "Unsupported value",
        ),
        (
            "template",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "template"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "t"}}, "template": {
                "metadata": {"labels": {"app": "t"}}, "spec": {"containers": [
                    {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "-1"}}}]}}}}),
            "must be greater than or equal to 0",
        ),
        // Items 3 and 13: node ports and load balancers, none unless the Tenant allows them.
        (
            "nodeport",
            service(
                "nodeport",
                json!({"type": "NodePort", "ports": [{"port": 80}]}),
            ),
            "services.nodeports",
        ),
        (
            "lb",
            service(
                "lb",
                json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
            ),
            "exceeded the quota of tenant \"quota\"",
        ),
        (
            "lb-no-ports",
            service(
                "lb-no-ports",
                json!({"type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
            ),
            "services.loadbalancers",
        ),
    ];
    // The tenant's legitimate use first: one GPU, one ClusterIP Service.
    let ok = create(
        &k,
        &cfg,
        dir.path(),
        "one",
        &pod(
            "one",
            json!({"containers": [
        {"name": "main", "image": "cuda", "resources": gpu("1")}]}),
        ),
    )?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = create(
        &k,
        &cfg,
        dir.path(),
        "web",
        &service("web", json!({"ports": [{"port": 80}]})),
    )?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for (name, obj, want) in &hostile {
        let out = create(&k, &cfg, dir.path(), name, obj)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: admitted");
        assert!(err.contains(want), "{name}: {err}");
    }
    // A ClusterIP Service turned NodePort by an update takes node ports too.
    let out = kc(
        &k,
        &cfg,
        &[
            "patch",
            "service",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"type":"NodePort"}}"#,
        ],
    )?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("services.nodeports"),
        "update: {err}"
    );

    // On the host: the legitimate pod and Service are synced (the syncer runs) ...
    let pods = poll("the tenant's pod on the host", 30, || {
        let pods = host_items(&f, &k, "pods", "quota")?;
        Ok(pods
            .iter()
            .any(|p| !host_pod_gpus(p).is_empty())
            .then_some(pods))
    })?;
    poll("the tenant's Service on the host", 30, || {
        Ok((!host_items(&f, &k, "services", "quota")?.is_empty()).then_some(()))
    })?;
    // ... and nothing hostile is: one GPU in all, only whole non-negative counts.
    let gpu_pods: Vec<&Value> = pods
        .iter()
        .filter(|p| !host_pod_gpus(p).is_empty())
        .collect();
    assert_eq!(gpu_pods.len(), 1, "host GPU pods: {gpu_pods:#?}");
    let total: i64 = gpu_pods.iter().map(|p| host_pod_running_gpus(p)).sum();
    assert_eq!(total, 1, "GPUs on the host for a 1-GPU tenant");
    for p in &gpu_pods {
        assert!(host_pod_gpus(p).iter().all(|n| *n == Some(1)), "{p:#}");
    }
    let services = host_items(&f, &k, "services", "quota")?;
    for s in &services {
        let ty = s["spec"]["type"].as_str().unwrap_or("ClusterIP");
        assert!(
            ty != "NodePort" && ty != "LoadBalancer",
            "host Service {s:#}"
        );
    }
    // The host's own quota for the namespace allows none either.
    let rq = f.kubectl_ok(
        &k,
        &[
            "get",
            "resourcequota",
            "fabrik-quota",
            "-n",
            &fabrik_api::tenant::host_namespace("quota"),
            "-o",
            "json",
        ],
    )?;
    let rq: Value = serde_json::from_str(&rq)?;
    assert_eq!(rq["spec"]["hard"]["services.nodeports"], "0", "{rq:#}");
    assert_eq!(rq["spec"]["hard"]["services.loadbalancers"], "0", "{rq:#}");
    Ok(())
}

#[test]
fn node_ports_and_load_balancers_up_to_what_the_tenant_allows() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl");
    let cfg = tenant(&f, "ports", &["--node-ports", "2", "--load-balancers", "1"])?;
    let dir = tempfile::tempdir()?;
    // (name, service spec, admitted)
    let cases = [
        (
            "np",
            json!({"type": "NodePort", "ports": [{"port": 80}]}),
            true,
        ),
        // A load balancer holds a node port per port too: 2 of 2 now.
        (
            "lb",
            json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
            true,
        ),
        (
            "np2",
            json!({"type": "NodePort", "ports": [{"port": 81}]}),
            false,
        ),
        (
            "lb2",
            json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80}]}),
            false,
        ),
        ("plain", json!({"ports": [{"port": 80}]}), true),
    ];
    for (name, spec, admitted) in cases {
        let out = create(&k, &cfg, dir.path(), name, &service(name, spec))?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), admitted, "{name}: {err}");
        if !admitted {
            assert!(
                err.contains("exceeded the quota of tenant \"ports\""),
                "{name}: {err}"
            );
        }
    }
    // Deleting one frees its node port.
    let out = kc(&k, &cfg, &["delete", "service", "np"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = create(
        &k,
        &cfg,
        dir.path(),
        "np3",
        &service("np3", json!({"type": "NodePort", "ports": [{"port": 82}]})),
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rq = f.kubectl_ok(
        &k,
        &[
            "get",
            "resourcequota",
            "fabrik-quota",
            "-n",
            &fabrik_api::tenant::host_namespace("ports"),
            "-o",
            "json",
        ],
    )?;
    let rq: Value = serde_json::from_str(&rq)?;
    assert_eq!(rq["spec"]["hard"]["services.nodeports"], "2", "{rq:#}");
    assert_eq!(rq["spec"]["hard"]["services.loadbalancers"], "1", "{rq:#}");
    // The host never holds more than the Tenant allows.
    let host = host_items(&f, &k, "services", "ports")?;
    let node_ports: usize = host
        .iter()
        .filter(|s| {
            matches!(
                s["spec"]["type"].as_str(),
                Some("NodePort" | "LoadBalancer")
            )
        })
        .map(|s| s["spec"]["ports"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(node_ports <= 2, "host node ports: {host:#?}");
    Ok(())
}
