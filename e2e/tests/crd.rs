//! CustomResourceDefinitions through the real kubectl: a CRD is served (discovery, OpenAPI,
//! tables with its printer columns), custom objects are defaulted, validated (schema and CEL)
//! and pruned, scale and status work, deleting the CRD deletes its objects; real operators'
//! CRDs are accepted and established.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::{kubectls, repo_root, Fabrik, Kubectl};

fn newest() -> Kubectl {
    kubectls()
        .pop()
        .expect("kubectl installed by scripts/install-test-deps.sh")
}

/// Polls for up to 75 s: what the CRD controller does is bounded by its own periodic pass
/// (30 s) should a store-watch wakeup ever be missed, plus margin. Usually it takes well under
/// a second. (A woken controller could list the revision before its event until stop 38: the
/// "lost wakeup" of stops 25–27.)
fn poll(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(75);
    while !check()? {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn established(f: &Fabrik, k: &Kubectl, name: &str) -> Result<bool> {
    let out = f.kubectl(
        k,
        &[
            "get",
            "crd",
            name,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#,
        ],
    )?;
    Ok(String::from_utf8_lossy(&out.stdout) == "True")
}

fn stderr_of(f: &Fabrik, k: &Kubectl, args: &[&str]) -> Result<String> {
    let out = f.kubectl(k, args)?;
    if out.status.success() {
        bail!("kubectl {args:?} succeeded but should have failed");
    }
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn custom_resources_end_to_end() {
    let k = newest();
    let f = Fabrik::start().expect("fabrik up");
    let run = || -> Result<()> {
        let crd = repo_root().join("e2e/testdata/widget-crd.yaml");
        f.kubectl_ok(&k, &["apply", "-f", &crd.display().to_string()])?;
        poll("the CRD to be established", || {
            established(&f, &k, "widgets.example.com")
        })?;
        let res = f.kubectl_ok(&k, &["api-resources", "--api-group=example.com"])?;
        if !res.contains("widgets") || !res.contains("wd") {
            bail!("api-resources: {res}");
        }
        let explain = f.kubectl_ok(&k, &["explain", "widget.spec.size"])?;
        if !explain.contains("size") {
            bail!("explain: {explain}");
        }

        let w = f.data_dir().join("w.yaml");
        std::fs::write(&w, "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: small\n  settings: {anything: [1, 2]}\n  bogus: dropped\n")?;
        // Strict validation (kubectl's default) refuses the unknown field...
        let err = stderr_of(&f, &k, &["apply", "-f", &w.display().to_string()])?;
        if !err.contains("bogus") {
            bail!("unknown field not named: {err}");
        }
        // ...and without validation it is pruned, while preserve-unknown-fields keeps its subtree.
        f.kubectl_ok(
            &k,
            &["apply", "--validate=false", "-f", &w.display().to_string()],
        )?;
        let got = f.kubectl_ok(&k, &["get", "widget", "w1", "-o", "jsonpath={.spec.replicas} {.spec.maxReplicas} {.spec.settings.anything[1]} {.spec.bogus}"])?;
        if got.trim() != "1 10 2" {
            bail!("defaults / pruning: {got:?}");
        }
        let table = f.kubectl_ok(&k, &["get", "wd"])?;
        let header = table.lines().next().unwrap_or("");
        for col in ["NAME", "SIZE", "REPLICAS", "AGE"] {
            if !header.contains(col) {
                bail!("printer columns: {table}");
            }
        }
        if !table
            .lines()
            .any(|l| l.split_whitespace().take(3).collect::<Vec<_>>() == ["w1", "small", "1"])
        {
            bail!("table row: {table}");
        }
        let all = f.kubectl_ok(&k, &["get", "all", "-o", "name"])?;
        if !all.contains("widget.example.com/w1") {
            bail!("category all: {all}");
        }

        // Schema and CEL validation.
        let err = stderr_of(
            &f,
            &k,
            &[
                "patch",
                "widget",
                "w1",
                "--type=merge",
                "-p",
                r#"{"spec":{"size":"huge"}}"#,
            ],
        )?;
        if !err.contains("Unsupported value") || !err.contains("huge") {
            bail!("enum: {err}");
        }
        let err = stderr_of(
            &f,
            &k,
            &[
                "patch",
                "widget",
                "w1",
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":50}}"#,
            ],
        )?;
        if !err.contains("replicas must not exceed maxReplicas") {
            bail!("CEL: {err}");
        }
        let err = stderr_of(
            &f,
            &k,
            &[
                "patch",
                "widget",
                "w1",
                "-p",
                r#"{"spec":{"size":"large"}}"#,
            ],
        )?;
        if !err.contains("UnsupportedMediaType")
            && !err.contains("unknown format")
            && !err.contains("not supported")
        {
            bail!("strategic merge patch on a custom resource: {err}");
        }

        // Scale and status subresources.
        f.kubectl_ok(&k, &["scale", "widget", "w1", "--replicas=3"])?;
        let got = f.kubectl_ok(
            &k,
            &["get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"],
        )?;
        if got != "3" {
            bail!("scale: {got}");
        }
        f.kubectl_ok(
            &k,
            &[
                "patch",
                "widget",
                "w1",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"replicas":3},"spec":{"size":"large"}}"#,
            ],
        )?;
        let got = f.kubectl_ok(
            &k,
            &[
                "get",
                "widget",
                "w1",
                "-o",
                "jsonpath={.status.replicas} {.spec.size}",
            ],
        )?;
        if got != "3 small" {
            bail!("status subresource: {got}");
        }
        // The second served version reads the same object.
        let got = f.kubectl_ok(
            &k,
            &[
                "get",
                "widgets.v1beta1.example.com",
                "w1",
                "-o",
                "jsonpath={.apiVersion} {.spec.size}",
            ],
        )?;
        if got != "example.com/v1beta1 small" {
            bail!("v1beta1 view: {got}");
        }

        // Deleting the CRD deletes its objects and stops serving it. (Under a loaded suite the
        // deletion has twice taken just over 30 s — one idle period of the CRD controller, as if
        // its wakeup for the deletion was lost; open, see the closing note of stop 25. The
        // bound here is the controller's own retry period plus margin.)
        f.kubectl_ok(
            &k,
            &["delete", "crd", "widgets.example.com", "--timeout=75s"],
        )?;
        poll("the CRD to disappear", || {
            Ok(!f
                .kubectl(&k, &["get", "crd", "widgets.example.com"])?
                .status
                .success())
        })?;
        let res = f.kubectl_ok(&k, &["api-resources", "--api-group=example.com"])?;
        if res.contains("widgets") {
            bail!("still served after deletion: {res}");
        }
        // Re-creating it finds no old objects. (Bounded like the deletion above: under a loaded
        // suite this once took longer than 20 s — the same open CRD-controller latency.)
        f.kubectl_ok(&k, &["apply", "-f", &crd.display().to_string()])?;
        e2e::poll_until(
            "the CRD to be established again",
            Duration::from_secs(75),
            || established(&f, &k, "widgets.example.com"),
        )?;
        let left = f.kubectl_ok(&k, &["get", "widgets", "-A", "-o", "name"])?;
        if !left.trim().is_empty() {
            bail!("objects survived their CRD: {left}");
        }
        Ok(())
    };
    if let Err(e) = run() {
        panic!("{e:#}\n--- server log ---\n{}", f.log());
    }
}

/// Whether a `kubectl get crds -o name` line is one of the Gateway API CRDs `fabrik up`'s host
/// installs for its simulated Gateway implementation.
fn is_fabrik_up_gateway_api(line: &str) -> bool {
    line.ends_with(".gateway.networking.k8s.io")
}

#[test]
fn invalid_crds_are_refused() {
    let k = newest();
    let f = Fabrik::start().expect("fabrik up");
    let bad = f.data_dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: wrong.example.com\nspec:\n  group: example.com\n  scope: Galaxy\n  names: {plural: things, kind: Thing}\n  versions:\n  - name: v1\n    served: true\n    storage: false\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec: {type: object, properties: {n: {type: int}}}\n",
    )
    .expect("write");
    let out = f
        .kubectl(&k, &["apply", "-f", &bad.display().to_string()])
        .expect("kubectl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an invalid CRD was accepted");
    for needle in ["metadata.name", "spec.scope", "storage version", "type"] {
        assert!(err.contains(needle), "{needle} not in {err}");
    }
    // Only Fabrik's own CRDs exist: the Tenant CRD, and the Gateway API of `fabrik up`'s
    // simulated implementation.
    let crds = f
        .kubectl_ok(&k, &["get", "crds", "-o", "name"])
        .expect("list");
    let others: Vec<&str> = crds
        .lines()
        .filter(|l| !is_fabrik_up_gateway_api(l))
        .collect();
    assert_eq!(
        others,
        ["customresourcedefinition.apiextensions.k8s.io/tenants.fabrik.dev"],
        "something was stored: {crds}"
    );
}

#[test]
fn real_operator_crds_are_established() {
    let k = newest();
    let f = Fabrik::start().expect("fabrik up");
    let dir = repo_root().join("../shared/testdata/crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the shared test data must be beside the repository)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the shared CRDs, found {files:?}"
    );
    for file in &files {
        // Server-side validation of huge CRDs: apply with create (client-side apply stores the
        // whole object in an annotation, which is too large for some of these CRDs upstream too).
        let out = f
            .kubectl(&k, &["create", "-f", &file.display().to_string()])
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let names = f
        .kubectl_ok(&k, &["get", "crds", "-o", "name"])
        .expect("list");
    // Every shared CRD, plus Fabrik's own Tenant CRD (and its simulated Gateway API's).
    assert_eq!(
        names
            .lines()
            .filter(|l| !is_fabrik_up_gateway_api(l))
            .count(),
        files.len() + 1,
        "{names}"
    );
    for name in names.lines() {
        let name = name.trim_start_matches("customresourcedefinition.apiextensions.k8s.io/");
        poll(name, || established(&f, &k, name)).unwrap_or_else(|e| panic!("{e}\n{}", f.log()));
    }
    let explain = f
        .kubectl_ok(&k, &["explain", "jobsets.spec.replicatedJobs"])
        .expect("explain a real CRD");
    assert!(explain.contains("replicatedJobs"), "{explain}");
}
