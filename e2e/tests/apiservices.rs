//! Local APIServices with real kubectl, in a tenant and in the host of `fabrik up`: one per
//! served group version (`v1.`, `v1.apps`, …) as upstream's autoregister controller keeps
//! them, one per CRD group version while a CRD serves it (crdRegistration), none for the
//! built-in `metrics.k8s.io` — and an APIService a user registered is never touched.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{kc, kc_apply_ok, kc_ok, kubectls, Fabrik, Kubectl};
use serde_json::Value;

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

/// `kubectl get apiservices` as `name → (SERVICE, AVAILABLE)`.
fn table(k: &Kubectl, cfg: &Path) -> Result<Vec<(String, String, String)>> {
    let out = kc_ok(k, cfg, &["get", "apiservices", "--no-headers"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            Some((
                cols.next()?.to_string(),
                cols.next()?.to_string(),
                cols.next()?.to_string(),
            ))
        })
        .collect())
}

fn object(k: &Kubectl, cfg: &Path, name: &str) -> Result<Value> {
    Ok(serde_json::from_str(&kc_ok(
        k,
        cfg,
        &["get", "apiservice", name, "-o", "json"],
    )?)?)
}

fn exists(k: &Kubectl, cfg: &Path, name: &str) -> Result<bool> {
    let out = kc(k, cfg, &["get", "apiservice", name, "-o", "name"])?;
    if out.status.success() {
        return Ok(true);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("NotFound") || err.contains("not found") {
        return Ok(false);
    }
    bail!("kubectl get apiservice {name}: {err}")
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.stuff.test.fabrik.dev}
spec:
  group: stuff.test.fabrik.dev
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1alpha1
    served: false
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// A user's registration of a group version the CRD also serves, and of another group.
const REGISTERED: &str = r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.stuff.test.fabrik.dev}
spec:
  group: stuff.test.fabrik.dev
  version: v1beta1
  service: {namespace: default, name: stuff-api, port: 8443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 500
  versionPriority: 7
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.flavors.test.fabrik.dev}
spec:
  group: flavors.test.fabrik.dev
  version: v1
  service: {namespace: default, name: flavors, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
"#;

const METRICS: &str = r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {namespace: kube-system, name: metrics-server}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#;

/// The spec of each user registration (to see that nothing changed it).
fn registered_specs(k: &Kubectl, cfg: &Path) -> Result<Vec<Value>> {
    [
        "v1beta1.stuff.test.fabrik.dev",
        "v1.flavors.test.fabrik.dev",
    ]
    .iter()
    .map(|n| Ok(object(k, cfg, n)?["spec"].clone()))
    .collect()
}

/// Everything this test checks in one cluster (`cfg`: its admin kubeconfig).
fn check_cluster(k: &Kubectl, cfg: &Path, which: &str) -> Result<()> {
    // The built-in group versions, Local and available, as `kubectl get apiservices` shows.
    let want = [
        "v1.",
        "v1.apps",
        "v1.batch",
        "v1.rbac.authorization.k8s.io",
        "v2.autoscaling",
        "v1.apiextensions.k8s.io",
    ];
    poll(&format!("{which}: the Local APIServices"), || {
        let rows = table(k, cfg)?;
        Ok(want.iter().all(|w| {
            rows.iter()
                .any(|(n, s, a)| n == w && s == "Local" && a == "True")
        }))
    })?;
    let rows = table(k, cfg)?;
    assert!(
        rows.iter().all(|(n, _, _)| !n.ends_with(".metrics.k8s.io")),
        "{which}: a Local APIService for the built-in metrics API: {rows:?}"
    );
    assert!(
        rows.iter().all(|(_, s, a)| s == "Local" && a == "True"),
        "{which}: {rows:?}"
    );
    let apps = object(k, cfg, "v1.apps")?;
    assert_eq!(apps["spec"]["group"], "apps", "{apps}");
    assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800, "{apps}");
    assert_eq!(apps["spec"]["versionPriority"], 15, "{apps}");
    assert!(apps["spec"]["service"].is_null(), "{apps}");
    let cond = &apps["status"]["conditions"][0];
    assert_eq!(cond["type"], "Available");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "Local");
    assert_eq!(cond["message"], "Local APIServices are always available");
    let core = object(k, cfg, "v1.")?;
    assert_eq!(core["spec"]["groupPriorityMinimum"], 18000, "{core}");
    assert_eq!(core["spec"]["versionPriority"], 1, "{core}");
    let batch = object(k, cfg, "v1.batch")?;
    assert_eq!(batch["spec"]["groupPriorityMinimum"], 17400, "{batch}");

    // The user's registrations, then a CRD serving one of their group versions and another.
    kc_apply_ok(k, cfg, REGISTERED)?;
    let before = registered_specs(k, cfg)?;
    kc_apply_ok(k, cfg, CRD)?;
    poll(&format!("{which}: the CRD's group version"), || {
        exists(k, cfg, "v1.stuff.test.fabrik.dev")
    })?;
    let crd = object(k, cfg, "v1.stuff.test.fabrik.dev")?;
    assert_eq!(crd["spec"]["group"], "stuff.test.fabrik.dev", "{crd}");
    assert_eq!(crd["spec"]["groupPriorityMinimum"], 1000, "{crd}");
    assert_eq!(crd["spec"]["versionPriority"], 100, "{crd}");
    assert_eq!(crd["status"]["conditions"][0]["reason"], "Local", "{crd}");
    let rows = table(k, cfg)?;
    assert!(
        rows.iter()
            .any(|(n, s, a)| n == "v1.stuff.test.fabrik.dev" && s == "Local" && a == "True"),
        "{rows:?}"
    );
    // Not served: none.
    assert!(!exists(k, cfg, "v1alpha1.stuff.test.fabrik.dev")?);
    // The user's registration of v1beta1 stays theirs.
    let theirs = rows
        .iter()
        .find(|(n, _, _)| n == "v1beta1.stuff.test.fabrik.dev")
        .cloned();
    assert_eq!(
        theirs.map(|(_, s, _)| s),
        Some("default/stuff-api".to_string()),
        "{rows:?}"
    );

    // The CRD goes: so does its Local APIService; the user's stay as they were.
    kc_ok(
        k,
        cfg,
        &[
            "delete",
            "crd",
            "gizmos.stuff.test.fabrik.dev",
            "--wait=true",
        ],
    )?;
    poll(&format!("{which}: the CRD's group version gone"), || {
        Ok(!exists(k, cfg, "v1.stuff.test.fabrik.dev")?)
    })?;
    assert_eq!(registered_specs(k, cfg)?, before);

    // metrics-server's chart registers v1beta1.metrics.k8s.io itself: a create, no
    // AlreadyExists — and it takes over the group from the built-in API.
    kc_ok(
        k,
        cfg,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
    )?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("metrics.yaml");
    std::fs::write(&file, METRICS)?;
    kc_ok(k, cfg, &["create", "-f", &file.display().to_string()])?;
    let taken = kc(
        k,
        cfg,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
    )?;
    assert!(
        !taken.status.success(),
        "{which}: the built-in metrics API answered over the registered APIService"
    );
    kc_ok(k, cfg, &["delete", "apiservice", "v1beta1.metrics.k8s.io"])?;
    kc_ok(
        k,
        cfg,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
    )?;
    kc_ok(
        k,
        cfg,
        &[
            "delete",
            "apiservice",
            "v1beta1.stuff.test.fabrik.dev",
            "v1.flavors.test.fabrik.dev",
        ],
    )?;
    Ok(())
}

#[test]
fn local_apiservices_in_a_tenant_and_the_host() -> Result<()> {
    let mut f = Fabrik::start()?;
    let cfg = f.create_tenant("apis", &[])?;
    let ks = kubectls();
    let k = &ks[0];
    check_cluster(k, &cfg, "tenant")?;
    check_cluster(k, &f.kubeconfig(), "host")?;
    // Every kubectl the tests drive reads the table alike.
    for k in &ks[1..] {
        let rows = table(k, &cfg)?;
        assert!(
            rows.iter()
                .any(|(n, s, a)| n == "v1.apps" && s == "Local" && a == "True"),
            "kubectl {}: {rows:?}",
            k.version
        );
    }

    // A built-in one is kept as upstream keeps it ("onstart"): deleted, it stays deleted until
    // the next start, which brings it back.
    kc_ok(k, &cfg, &["delete", "apiservice", "v1.batch"])?;
    std::thread::sleep(Duration::from_secs(2));
    assert!(!exists(k, &cfg, "v1.batch")?);
    f.restart()?;
    // The tenant again, at the server's new address.
    poll("the tenant back after a restart", || {
        let printed = f.fabrik_cli(&["tenant", "kubeconfig", "apis"])?;
        if !printed.status.success() {
            return Ok(false);
        }
        std::fs::write(&cfg, &printed.stdout)?;
        Ok(kc(k, &cfg, &["get", "namespace", "default"])?
            .status
            .success())
    })?;
    poll("v1.batch back after a restart", || {
        exists(k, &cfg, "v1.batch")
    })?;
    Ok(())
}
