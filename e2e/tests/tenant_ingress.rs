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
  isolation:
    ingressClasses: [public]
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
    // No class named: the tenant's first allowed class, never the host's default.
    assert_eq!(v["spec"]["ingressClassName"], "public", "{v}");
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

/// A spec change applies to a running tenant: extra kinds asked for later are synced from
/// then on, and a privilege granted later is admitted (the syncer restarts with the new
/// policy).
#[test]
fn extra_kinds_and_policy_follow_spec_changes() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = kubectls().pop().expect("a kubectl");
    let host = f.kubeconfig();
    let dir = tempfile::tempdir()?;
    let tenant = dir.path().join("tenant.yaml");
    std::fs::write(
        &tenant,
        "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {name: late}\nspec: {}\n",
    )?;
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
            "tenant/late",
            "--for=jsonpath={.status.phase}=Ready",
            "--timeout=60s",
        ],
    )?)?;
    let cfg = dir.path().join("late.kubeconfig");
    let printed = f.fabrik_cli(&["tenant", "kubeconfig", "late"])?;
    if !printed.status.success() {
        bail!(
            "fabrik tenant kubeconfig: {}",
            String::from_utf8_lossy(&printed.stderr)
        );
    }
    std::fs::write(&cfg, &printed.stdout)?;

    // Before: a privileged pod is refused, and an Ingress stays in the tenant.
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: priv}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    securityContext: {privileged: true}\n",
    )?;
    let refused = kc(&k, &cfg, &["apply", "-f", &pod.display().to_string()])?;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("privileged"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let ingress = dir.path().join("ingress.yaml");
    std::fs::write(&ingress, INGRESS)?;
    ok(kc(
        &k,
        &cfg,
        &["apply", "-f", &ingress.display().to_string()],
    )?)?;
    let host_ingress = || {
        kc(
            &k,
            &host,
            &[
                "get",
                "ingress",
                "-n",
                "fabrik-late",
                "shop-x-default-x-late",
            ],
        )
        .map(|o| o.status.success())
    };
    // A ConfigMap created after the Ingress reaching the host shows the syncer has caught up;
    // the Ingress must not be there.
    ok(kc(
        &k,
        &cfg,
        &["create", "configmap", "marker", "--from-literal=a=b"],
    )?)?;
    poll("the marker ConfigMap on the host", || {
        Ok(kc(
            &k,
            &host,
            &[
                "get",
                "configmap",
                "-n",
                "fabrik-late",
                "marker-x-default-x-late",
            ],
        )?
        .status
        .success())
    })?;
    assert!(
        !host_ingress()?,
        "an Ingress was synced without being asked for"
    );

    // After: both follow the spec.
    ok(kc(
        &k,
        &host,
        &[
            "patch",
            "tenant",
            "late",
            "--type=merge",
            "-p",
            r#"{"spec":{"sync":{"extraKinds":["ingresses.networking.k8s.io"]},"isolation":{"allow":["privileged"],"ingressClasses":["public"]}}}"#,
        ],
    )?)?;
    poll("the host Ingress after the spec change", host_ingress)?;
    poll("the privileged pod admitted after the spec change", || {
        Ok(kc(&k, &cfg, &["apply", "-f", &pod.display().to_string()])?
            .status
            .success())
    })?;
    Ok(())
}
