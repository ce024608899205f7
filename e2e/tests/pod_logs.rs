//! `kubectl logs` on the simulated nodes of `fabrik up` (what the kubelet stand-in recorded)
//! and on a tenant pod (proxied to its host pod); `exec` is refused with the reason.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::{kubectls, Fabrik};

fn kc(k: &e2e::Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?)
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn logs_of_host_and_tenant_pods() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.data_dir().join("logs.kubeconfig");
    let out = f.fabrik_cli(&[
        "tenant",
        "create",
        "logs",
        "--wait",
        "--kubeconfig-out",
        &cfg.display().to_string(),
    ])?;
    if !out.status.success() {
        bail!("tenant create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = kc(&k, &cfg, &["run", "talker", "--image", "busybox"])?;
    assert!(out.status.success(), "{}", text(&out));
    // Wait until the tenant pod runs (its host pod is on a simulated node).
    let start = Instant::now();
    loop {
        let out = kc(&k, &cfg, &["logs", "talker"])?;
        if out.status.success() && !out.stdout.is_empty() {
            let tenant_log = String::from_utf8_lossy(&out.stdout).into_owned();
            // The same log through the host.
            let host = f.kubeconfig();
            let host_log = kc(
                &k,
                &host,
                &["logs", "-n", "fabrik-logs", "talker-x-default-x-logs"],
            )?;
            assert!(host_log.status.success(), "{}", text(&host_log));
            assert_eq!(String::from_utf8_lossy(&host_log.stdout), tenant_log);
            let tail = kc(&k, &cfg, &["logs", "talker", "--tail", "1"])?;
            assert_eq!(
                String::from_utf8_lossy(&tail.stdout).lines().count(),
                1,
                "{}",
                text(&tail)
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("no log for the tenant pod: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A GPU pod of the tenant is metered, and the host's /metrics shows it under the tenant.
    let gpu = f.data_dir().join("gpu-pod.json");
    std::fs::write(
        &gpu,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"trainer"},
"spec":{"containers":[{"name":"c","image":"cuda","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}"#,
    )?;
    let out = kc(&k, &cfg, &["create", "-f", &gpu.display().to_string()])?;
    assert!(out.status.success(), "{}", text(&out));
    let start = Instant::now();
    loop {
        let out = kc(&k, &f.kubeconfig(), &["get", "--raw", "/metrics"])?;
        let body = String::from_utf8_lossy(&out.stdout);
        if body.contains("fabrik_gpu_allocated_seconds_total{tenant=\"logs\"") {
            assert!(body.contains("apiserver_request_total"), "API metrics kept");
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("the tenant's GPU pod was not metered on /metrics: {body}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // A container that does not exist.
    let out = kc(&k, &cfg, &["logs", "talker", "-c", "nope"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("container nope is not valid for pod talker"),
        "{}",
        text(&out)
    );
    // exec: refused with the reason, on the tenant and on the host.
    let out = kc(&k, &cfg, &["exec", "talker", "--", "ls"])?;
    assert!(!out.status.success());
    assert!(text(&out).contains("not proxied"), "{}", text(&out));
    let out = kc(
        &k,
        &f.kubeconfig(),
        &[
            "exec",
            "-n",
            "fabrik-logs",
            "talker-x-default-x-logs",
            "--",
            "ls",
        ],
    )?;
    assert!(!out.status.success());
    assert!(text(&out).contains("simulated node"), "{}", text(&out));
    Ok(())
}
