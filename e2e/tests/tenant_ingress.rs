//! A Tenant that asks for Ingresses in `spec.sync.extraKinds` gets its Ingresses on the host
//! (references rewritten, annotations kept off); a kind the syncer cannot copy safely is named
//! in the Tenant's `SyncConfigured` condition instead of being silently ignored.

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

fn ok(out: std::process::Output) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn poll(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if check()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("timed out waiting for {what}")
}

const TENANT: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: web}
spec:
  sync:
    extraKinds: [ingresses.networking.k8s.io, widgets.example.com]
"#;

const INGRESS: &str = r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations: {nginx.ingress.kubernetes.io/server-snippet: "location / { return 200; }"}
spec:
  rules:
  - host: shop.web.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: shop, port: {number: 80}}}}
"#;

#[test]
fn ingresses_sync_when_asked_and_unknown_kinds_are_reported() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = kubectls().pop().expect("a kubectl");
    let host = f.kubeconfig();
    let dir = tempfile::tempdir()?;
    let tenant = dir.path().join("tenant.yaml");
    std::fs::write(&tenant, TENANT)?;
    ok(kc(
        &k,
        &host,
        &["apply", "-f", &tenant.display().to_string()],
    )?)?;
    ok(kc(
        &k,
        &host,
        &[
            "wait",
            "tenant/web",
            "--for=jsonpath={.status.phase}=Ready",
            "--timeout=60s",
        ],
    )?)?;
    let message = ok(kc(
        &k,
        &host,
        &[
            "get",
            "tenant",
            "web",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"SyncConfigured\")].status} {.status.conditions[?(@.type==\"SyncConfigured\")].message}",
        ],
    )?)?;
    assert!(
        message.starts_with("False ")
            && message.contains("widgets.example.com")
            && message.contains("supported: ingresses.networking.k8s.io"),
        "{message}"
    );

    let cfg = dir.path().join("web.kubeconfig");
    let printed = f.fabrik_cli(&["tenant", "kubeconfig", "web"])?;
    if !printed.status.success() {
        bail!(
            "fabrik tenant kubeconfig: {}",
            String::from_utf8_lossy(&printed.stderr)
        );
    }
    std::fs::write(&cfg, &printed.stdout)?;
    let ingress = dir.path().join("ingress.yaml");
    std::fs::write(&ingress, INGRESS)?;
    ok(kc(
        &k,
        &cfg,
        &["apply", "-f", &ingress.display().to_string()],
    )?)?;
    let mut seen = String::new();
    poll("the host Ingress", || {
        let out = kc(
            &k,
            &host,
            &[
                "get",
                "ingress",
                "-n",
                "fabrik-web",
                "shop-x-default-x-web",
                "-o",
                "json",
            ],
        )?;
        seen = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok(out.status.success())
    })?;
    let v: serde_json::Value = serde_json::from_str(&seen)?;
    assert_eq!(
        v["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        "shop-x-default-x-web"
    );
    assert!(
        v["metadata"]["annotations"]["nginx.ingress.kubernetes.io/server-snippet"].is_null(),
        "{v}"
    );
    // Deleting it in the tenant removes the host copy.
    ok(kc(&k, &cfg, &["delete", "ingress", "shop"])?)?;
    poll("the host Ingress gone", || {
        let out = kc(
            &k,
            &host,
            &["get", "ingress", "-n", "fabrik-web", "-o", "name"],
        )?;
        Ok(out.status.success() && out.stdout.is_empty())
    })
}
