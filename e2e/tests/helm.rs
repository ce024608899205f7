//! Helm 3 (three-way strategic merge) and Helm 4 (server-side apply) against a real
//! `fabrik up`: install --wait, upgrade, history, rollback, list and uninstall of the chart
//! `helm create` makes, and of a chart that ships a CRD and an object of it. A stand-in
//! kubelet marks pods ready so `--wait` can finish.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{bail, Result};
use e2e::{helms, kubectls, repo_root, Fabrik, FakeKubelet, Helm};

fn helm(f: &Fabrik, h: &Helm, dir: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(&h.path)
        .args(args)
        .current_dir(dir)
        .env("KUBECONFIG", f.kubeconfig())
        .env("HOME", f.data_dir())
        .env("HELM_CACHE_HOME", f.data_dir().join("helm-cache"))
        .env("HELM_CONFIG_HOME", f.data_dir().join("helm-config"))
        .env("HELM_DATA_HOME", f.data_dir().join("helm-data"))
        .output()?)
}

fn helm_ok(f: &Fabrik, h: &Helm, dir: &Path, args: &[&str]) -> Result<String> {
    let out = helm(f, h, dir, args)?;
    if !out.status.success() {
        bail!(
            "helm {} {args:?}: {}\n{}",
            h.major,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn both_helms() -> Vec<Helm> {
    let hs = helms();
    assert!(
        hs.len() == 2,
        "expected Helm 3 and 4 in .tools/bin (scripts/install-test-deps.sh); found {hs:?}"
    );
    hs
}

fn each_helm(scenario: impl Fn(&Fabrik, &Helm) -> Result<()>) {
    for h in both_helms() {
        let f = Fabrik::start().expect("fabrik up");
        let _kubelet = FakeKubelet::start(&f.kubeconfig()).expect("kubelet stand-in");
        if let Err(e) = scenario(&f, &h) {
            panic!("helm {}: {e:#}\n--- server log ---\n{}", h.major, f.log());
        }
    }
}

#[test]
fn helm_create_chart_lifecycle() {
    each_helm(|f, h| {
        let k = kubectls().pop().expect("kubectl");
        let dir = f.data_dir();
        helm_ok(f, h, &dir, &["create", "web"])?;
        let out = helm_ok(
            f,
            h,
            &dir,
            &["install", "rel", "./web", "--wait", "--timeout", "60s"],
        )?;
        if !out.contains("STATUS: deployed") {
            bail!("install: {out}");
        }
        let ready = f.kubectl_ok(
            &k,
            &[
                "get",
                "deploy",
                "rel-web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ],
        )?;
        if ready != "1" {
            bail!("deployment not ready after --wait: {ready:?}");
        }
        helm_ok(
            f,
            h,
            &dir,
            &[
                "upgrade",
                "rel",
                "./web",
                "--set",
                "replicaCount=2",
                "--wait",
                "--timeout",
                "60s",
            ],
        )?;
        let replicas = f.kubectl_ok(
            &k,
            &[
                "get",
                "deploy",
                "rel-web",
                "-o",
                "jsonpath={.spec.replicas} {.status.readyReplicas}",
            ],
        )?;
        if replicas != "2 2" {
            bail!("upgrade: {replicas}");
        }
        let history = helm_ok(f, h, &dir, &["history", "rel"])?;
        if history.lines().count() != 3 {
            bail!("history: {history}");
        }
        helm_ok(
            f,
            h,
            &dir,
            &["rollback", "rel", "1", "--wait", "--timeout", "60s"],
        )?;
        let replicas = f.kubectl_ok(
            &k,
            &[
                "get",
                "deploy",
                "rel-web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        )?;
        if replicas != "1" {
            bail!("rollback: {replicas}");
        }
        let list = helm_ok(f, h, &dir, &["list"])?;
        // install (1), upgrade (2), rollback (3).
        let row: Vec<&str> = list
            .lines()
            .find(|l| l.starts_with("rel"))
            .map(|l| l.split('\t').map(str::trim).collect())
            .unwrap_or_default();
        if row.get(2) != Some(&"3") || !row.contains(&"deployed") {
            bail!("list: {list}");
        }
        let secrets = f.kubectl_ok(
            &k,
            &["get", "secrets", "-l", "owner=helm,name=rel", "-o", "name"],
        )?;
        if secrets.lines().count() != 3 {
            bail!("release secrets: {secrets}");
        }
        helm_ok(f, h, &dir, &["uninstall", "rel", "--wait"])?;
        let left = f.kubectl_ok(
            &k,
            &[
                "get",
                "deploy,svc,sa,secrets",
                "-l",
                "app.kubernetes.io/instance=rel",
                "-o",
                "name",
            ],
        )?;
        if !left.trim().is_empty() {
            bail!("uninstall left {left}");
        }
        Ok(())
    });
}

#[test]
fn chart_with_a_crd_and_its_object() {
    each_helm(|f, h| {
        let k = kubectls().pop().expect("kubectl");
        let chart = repo_root().join("e2e/testdata/crd-chart");
        let dir = f.data_dir();
        helm_ok(
            f,
            h,
            &dir,
            &[
                "install",
                "w",
                &chart.display().to_string(),
                "--wait",
                "--timeout",
                "60s",
            ],
        )?;
        let got = f.kubectl_ok(
            &k,
            &[
                "get",
                "widget",
                "w-widget",
                "-o",
                "jsonpath={.spec.size} {.spec.maxReplicas}",
            ],
        )?;
        if got != "small 10" {
            bail!("custom object: {got}");
        }
        helm_ok(
            f,
            h,
            &dir,
            &[
                "upgrade",
                "w",
                &chart.display().to_string(),
                "--set",
                "size=large",
                "--wait",
            ],
        )?;
        let got = f.kubectl_ok(
            &k,
            &["get", "widget", "w-widget", "-o", "jsonpath={.spec.size}"],
        )?;
        if got != "large" {
            bail!("upgrade of the custom object: {got}");
        }
        // An invalid value is refused by the CRD's schema and the release is not changed.
        let out = helm(
            f,
            h,
            &dir,
            &[
                "upgrade",
                "w",
                &chart.display().to_string(),
                "--set",
                "size=huge",
            ],
        )?;
        if out.status.success() {
            bail!("an invalid custom object was accepted");
        }
        let got = f.kubectl_ok(
            &k,
            &["get", "widget", "w-widget", "-o", "jsonpath={.spec.size}"],
        )?;
        if got != "large" {
            bail!("a refused upgrade changed the object: {got}");
        }
        helm_ok(f, h, &dir, &["uninstall", "w"])?;
        let left = f.kubectl_ok(&k, &["get", "widgets", "-A", "-o", "name"])?;
        if !left.trim().is_empty() {
            bail!("uninstall left {left}");
        }
        Ok(())
    });
}
