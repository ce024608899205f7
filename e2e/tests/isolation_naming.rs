//! Hostile-tenant checks of the host naming and of tenant names (issue isolation-2, items 2 and
//! 10): objects whose old host names collided each get a host copy of their own, a pod is given
//! its own namespace's Secret and never another namespace's, host copies named by the earlier
//! scheme are migrated on restart, and a tenant can neither take nor delete a host namespace it
//! did not create.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::{kc, kc_ok};
use e2e::{kubectls, Fabrik, Kubectl};
use fabrik_api::naming::{host_name, legacy_host_name};

fn poll(what: &str, secs: u64, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn apply(k: &Kubectl, kubeconfig: &Path, dir: &Path, yaml: &str) -> Result<String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("apply-{n}.yaml"));
    std::fs::write(&file, yaml)?;
    kc_ok(k, kubeconfig, &["apply", "-f", &file.display().to_string()])
}

fn create_tenant(f: &Fabrik, name: &str) -> Result<PathBuf> {
    f.create_tenant(name, &["--pods", "20"])
}

/// A host object's JSON, or None when it does not exist.
fn host_get(k: &Kubectl, host: &Path, kind: &str, name: &str) -> Result<Option<serde_json::Value>> {
    let out = kc(
        k,
        host,
        &["get", kind, name, "-n", "fabrik-n", "-o", "json"],
    )?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("NotFound") || err.contains("not found") {
            return Ok(None);
        }
        bail!("kubectl get {kind} {name}: {err}");
    }
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}

fn secret(ns: &str, name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         stringData: {{owner: {value}}}\n"
    )
}

fn pod(ns: &str, name: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  containers: [{{name: c, image: busybox}}]\n  \
         volumes: [{{name: s, secret: {{secretName: {secret}}}}}]\n"
    )
}

/// The decoded `owner` key of a host Secret.
fn owner(s: &serde_json::Value) -> Option<String> {
    use base64::Engine;
    let b = s["data"]["owner"].as_str()?;
    let raw = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
    String::from_utf8(raw).ok()
}

#[test]
fn host_names_are_injective_and_tenants_keep_to_their_namespaces() {
    let k = kubectls().pop().expect("kubectl");
    let mut f = Fabrik::start().expect("fabrik up");
    let run = || -> Result<()> {
        let host = f.kubeconfig();
        let t = create_tenant(&f, "n")?;
        let dir = f.data_dir();

        // (tenant namespace, name) pairs that the earlier scheme mapped onto one host name.
        let pairs: &[[(&str, &str); 2]] = &[
            [("c", "a-x-b"), ("b-x-c", "a")],
            [("c2", "a-x-b2"), ("b2-x-c2", "a")],
            [("b", "a-x-x"), ("x-b", "a-x")],
        ];
        for [(ns1, n1), (ns2, n2)] in pairs {
            assert_eq!(
                legacy_host_name(n1, ns1, "n"),
                legacy_host_name(n2, ns2, "n"),
                "the table lists collisions of the earlier scheme"
            );
            apply(&k, &t, &dir, &secret(ns1, n1, &format!("{ns1}.{n1}")))?;
            apply(&k, &t, &dir, &secret(ns2, n2, &format!("{ns2}.{n2}")))?;
        }
        for [(ns1, n1), (ns2, n2)] in pairs {
            for (ns, n) in [(ns1, n1), (ns2, n2)] {
                let hn = host_name(n, ns, "n");
                let mut found = None;
                poll(&format!("host copy of secret {ns}/{n}"), 60, || {
                    found = host_get(&k, &host, "secret", &hn)?;
                    Ok(found.is_some())
                })?;
                let s = found.context("polled")?;
                assert_eq!(
                    owner(&s).as_deref(),
                    Some(format!("{ns}.{n}").as_str()),
                    "{hn}"
                );
                assert_eq!(
                    s["metadata"]["annotations"]["fabrik.dev/virtual-namespace"],
                    **ns
                );
            }
        }

        // The pod in `b2-x-c2` mounting Secret `a` gets its own namespace's Secret, never
        // `c2/a-x-b2`; the colliding pods each get a host pod.
        apply(&k, &t, &dir, &pod("b2-x-c2", "p", "a"))?;
        apply(&k, &t, &dir, &pod("c", "a-x-b", "a-x-b"))?;
        apply(&k, &t, &dir, &pod("b-x-c", "a", "a"))?;
        let mut hp = None;
        poll("host pod of b2-x-c2/p", 60, || {
            hp = host_get(&k, &host, "pod", &host_name("p", "b2-x-c2", "n"))?;
            Ok(hp.is_some())
        })?;
        let hp = hp.context("polled")?;
        let mounted = hp["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "s")
            .and_then(|v| v["secret"]["secretName"].as_str())
            .map(str::to_string)
            .context("the host pod mounts the secret")?;
        assert_eq!(mounted, host_name("a", "b2-x-c2", "n"));
        assert_ne!(mounted, legacy_host_name("a-x-b2", "c2", "n"));
        for (ns, n) in [("c", "a-x-b"), ("b-x-c", "a")] {
            poll(&format!("host pod of {ns}/{n}"), 60, || {
                let p = host_get(&k, &host, "pod", &host_name(n, ns, "n"))?;
                Ok(p.is_some_and(|p| {
                    p["metadata"]["annotations"]["fabrik.dev/virtual-namespace"] == ns
                }))
            })?;
        }

        // A copy named by the earlier scheme (as an older release made it) is migrated away on
        // restart; the current copy stays.
        let stray = legacy_host_name("cfg", "x-legacy", "n");
        apply(&k, &t, &dir, "apiVersion: v1\nkind: Namespace\nmetadata: {name: x-legacy}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: x-legacy}\ndata: {k: v}\n")?;
        let current = host_name("cfg", "x-legacy", "n");
        assert_ne!(stray, current);
        poll("current copy of x-legacy/cfg", 60, || {
            Ok(host_get(&k, &host, "configmap", &current)?.is_some())
        })?;
        apply(&k, &host, &dir, &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {stray}\n  namespace: fabrik-n\n  \
             labels: {{fabrik.dev/tenant: \"n\", fabrik.dev/namespace: x-legacy}}\n  \
             annotations: {{fabrik.dev/virtual-name: cfg, fabrik.dev/virtual-namespace: x-legacy}}\n\
             data: {{k: v}}\n"
        ))?;
        assert!(host_get(&k, &host, "configmap", &stray)?.is_some());
        Ok(())
    };
    run().unwrap_or_else(|e| panic!("{e:#}\n{}", f.log()));
    f.restart().expect("restart");
    let after = || -> Result<()> {
        let host = f.kubeconfig();
        let stray = legacy_host_name("cfg", "x-legacy", "n");
        poll("the stray copy deleted", 60, || {
            Ok(host_get(&k, &host, "configmap", &stray)?.is_none())
        })?;
        assert!(host_get(&k, &host, "configmap", &host_name("cfg", "x-legacy", "n"))?.is_some());
        Ok(())
    };
    after().unwrap_or_else(|e| panic!("{e:#}\n{}", f.log()));
}

#[test]
fn tenants_cannot_take_or_delete_namespaces_they_did_not_create() {
    let k = kubectls().pop().expect("kubectl");
    let f = Fabrik::start().expect("fabrik up");
    let run = || -> Result<()> {
        let host = f.kubeconfig();
        let dir = f.data_dir();
        // The CLI refuses the reserved name with the reason.
        let out = f.fabrik_cli(&["tenant", "create", "system"])?;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("reserved"), "{err}");

        // A platform namespace with data, then Tenants (written directly, as GitOps would)
        // that would take it and Fabrik's own namespace.
        apply(&k, &host, &dir, "apiVersion: v1\nkind: Namespace\nmetadata: {name: fabrik-billing}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ledger, namespace: fabrik-billing}\ndata: {total: '42'}\n")?;
        kc_ok(&k, &host, &["create", "namespace", "fabrik-system"]).ok();
        kc_ok(
            &k,
            &host,
            &[
                "create",
                "configmap",
                "keep",
                "-n",
                "fabrik-system",
                "--from-literal=a=b",
            ],
        )?;
        // A reserved name is refused where the Tenant is written (the host's admission on
        // `fabrik up`; on a real host the manager reports it `Failed`).
        let err = apply(
            &k,
            &host,
            &dir,
            "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {name: system}\nspec: {}\n",
        )
        .expect_err("a reserved tenant name");
        assert!(format!("{err:#}").contains("reserved"), "{err:#}");
        // A Tenant whose host namespace exists and is not its own: stored, reported `Failed`.
        apply(
            &k,
            &host,
            &dir,
            "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {name: billing}\nspec: {}\n",
        )?;
        poll("tenant billing refused", 60, || {
            let phase = kc_ok(
                &k,
                &host,
                &["get", "tenant", "billing", "-o", "jsonpath={.status.phase}"],
            )?;
            Ok(phase == "Failed")
        })?;
        let ns = kc_ok(
            &k,
            &host,
            &["get", "namespace", "fabrik-billing", "-o", "json"],
        )?;
        let ns: serde_json::Value = serde_json::from_str(&ns)?;
        assert!(
            ns["metadata"]["labels"].get("fabrik.dev/tenant").is_none(),
            "{ns}"
        );
        // Deleting the Tenant deletes neither namespace nor its data.
        kc_ok(
            &k,
            &host,
            &[
                "delete",
                "tenant",
                "billing",
                "--wait=true",
                "--timeout=60s",
            ],
        )?;
        for (ns, cm) in [("fabrik-billing", "ledger"), ("fabrik-system", "keep")] {
            let phase = kc_ok(
                &k,
                &host,
                &["get", "namespace", ns, "-o", "jsonpath={.status.phase}"],
            )?;
            assert_eq!(phase, "Active", "{ns}");
            kc_ok(&k, &host, &["get", "configmap", cm, "-n", ns])?;
        }
        Ok(())
    };
    run().unwrap_or_else(|e| panic!("{e:#}\n{}", f.log()));
}
