//! A Tenant's quota is checked at the tenant's own admission, across all its namespaces: going
//! over it fails at `kubectl` with a message naming the quota, instead of a host pod left
//! pending; changing the Tenant's quota takes effect.

use std::path::Path;

use anyhow::{bail, Result};
use e2e::{kubectls, Fabrik};

fn kc(k: &e2e::Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?)
}

fn gpu_pod(name: &str, ns: &str, gpus: u32) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"containers":[{{"name":"c","image":"cuda","resources":{{"limits":{{"nvidia.com/gpu":"{gpus}"}}}}}}]}}}}"#
    )
}

fn create(
    k: &e2e::Kubectl,
    cfg: &Path,
    dir: &Path,
    name: &str,
    body: &str,
) -> Result<std::process::Output> {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, body)?;
    kc(k, cfg, &["create", "-f", &file.display().to_string()])
}

#[test]
fn tenant_quota_is_enforced_at_the_tenant_admission() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.data_dir().join("q.kubeconfig");
    let out = f.fabrik_cli(&[
        "tenant",
        "create",
        "quotas",
        "--gpus",
        "2",
        "--pods",
        "3",
        "--wait",
        "--kubeconfig-out",
        &cfg.display().to_string(),
    ])?;
    if !out.status.success() {
        bail!("tenant create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dir = tempfile::tempdir()?;
    let ok = kc(&k, &cfg, &["create", "namespace", "other"])?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = create(&k, &cfg, dir.path(), "two", &gpu_pod("two", "default", 2))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // GPUs are counted across namespaces.
    let out = create(&k, &cfg, dir.path(), "more", &gpu_pod("more", "other", 1))?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exceeded the quota of tenant \"quotas\"")
            && err.contains("requests.nvidia.com/gpu=2"),
        "{err}"
    );
    // Pods: three in all.
    for (i, ns) in ["default", "other"].iter().enumerate() {
        let out = kc(
            &k,
            &cfg,
            &["run", &format!("cpu{i}"), "-n", ns, "--image", "busybox"],
        )?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = kc(&k, &cfg, &["run", "fourth", "--image", "busybox"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pods=3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Raising the quota on the host lets the pod in.
    let host = f.kubectl_ok(
        &k,
        &[
            "patch",
            "tenant",
            "quotas",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"quota":{"pods":4}}}"#,
        ],
    )?;
    assert!(host.contains("patched"), "{host}");
    let start = std::time::Instant::now();
    loop {
        let out = kc(&k, &cfg, &["run", "fourth", "--image", "busybox"])?;
        if out.status.success() {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            bail!(
                "raised quota not applied: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// A Deployment over the tenant's quota does not make its ReplicaSet controller spin: the
/// refusal is retried with backoff (a handful of attempts, not thousands), the ReplicaSet's
/// `ReplicaFailure` condition is written once and not rewritten per attempt (each rewrite
/// woke the controller again at once), and it reads as the server's message, not a debug
/// dump of the Status.
#[test]
fn an_over_quota_deployment_is_retried_with_backoff() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.create_tenant("spin", &["--pods", "1"])?;
    let ok = kc(
        &k,
        &cfg,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=2",
        ],
    )?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let rs = |k: &e2e::Kubectl| -> Result<serde_json::Value> {
        let out = e2e::kc_ok(k, &cfg, &["get", "rs", "-l", "app=web", "-o", "json"])?;
        let list: serde_json::Value = serde_json::from_str(&out)?;
        Ok(list["items"][0].clone())
    };
    // Settled: one pod ready, the second refused.
    let start = std::time::Instant::now();
    let settled = loop {
        let r = rs(&k)?;
        let failed = r["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "ReplicaFailure");
        if failed && r["status"]["readyReplicas"] == 1 {
            break r;
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            bail!("the ReplicaSet did not settle: {r}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let condition = settled["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ReplicaFailure")
        .cloned()
        .unwrap_or_default();
    let message = condition["message"].as_str().unwrap_or("");
    assert!(
        message.contains("exceeded the quota of tenant \"spin\"")
            && !message.contains("ErrorResponse"),
        "{condition}"
    );
    // A window of 8 s: the ReplicaSet is not rewritten, and the attempts are few.
    std::thread::sleep(std::time::Duration::from_secs(8));
    let later = rs(&k)?;
    assert_eq!(
        later["metadata"]["resourceVersion"], settled["metadata"]["resourceVersion"],
        "the ReplicaSet was rewritten while nothing changed: {later}"
    );
    // The controllers record core/v1 Events, as upstream's (what `kubectl get events` and
    // `kubectl describe` show): one per distinct failure, its count raised on each retry.
    let events: serde_json::Value = serde_json::from_str(&e2e::kc_ok(
        &k,
        &cfg,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=FailedCreate",
            "-o",
            "json",
        ],
    )?)?;
    let attempts: u64 = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["count"].as_u64().unwrap_or(1))
        .sum();
    let describe = e2e::kc_ok(&k, &cfg, &["describe", "rs", "-l", "app=web"])?;
    assert!(
        describe.contains("FailedCreate") && describe.contains("exceeded the quota"),
        "kubectl describe shows the failure: {describe}"
    );
    let elapsed = start.elapsed().as_secs();
    assert!(
        (1..=12).contains(&attempts),
        "{attempts} failed creates in {elapsed} s (backoff 0.5 s doubling): {events}"
    );
    Ok(())
}
