//! Tenant clusters on one host, with the real kubectl and the `fabrik tenant` CLI: objects of a
//! tenant land on the host only in its namespace, translated; its pods run; another tenant
//! sees nothing of it on any path; credentials of one tenant are anonymous on another's
//! endpoint; deletion tears everything down; a crash and restart converge without lost or
//! duplicated host pods.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::{kc, kc_ok, kubectls, Fabrik};

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

fn create_tenant(f: &Fabrik, name: &str) -> Result<PathBuf> {
    f.create_tenant(name, &["--gpus", "4", "--pods", "20"])
}

const APP: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: fast}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: s3cret}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        envFrom: [{configMapRef: {name: settings}}]
        env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: creds, key: token}}}]
"#;

#[test]
fn tenants_are_isolated_and_their_pods_run_on_the_host() {
    let k = kubectls().pop().expect("kubectl");
    let f = Fabrik::start().expect("fabrik up");
    let run = || -> Result<()> {
        let host = f.kubeconfig();
        let a = create_tenant(&f, "a")?;
        let b = create_tenant(&f, "b")?;
        let app = f.data_dir().join("app.yaml");
        std::fs::write(&app, APP)?;
        kc_ok(&k, &a, &["apply", "-f", &app.display().to_string()])?;

        // Host: translated objects, only in fabrik-a, labelled.
        poll("2 host pods of tenant a running", 60, || {
            let out = kc_ok(
                &k,
                &host,
                &[
                    "get",
                    "pods",
                    "-n",
                    "fabrik-a",
                    "-l",
                    "fabrik.dev/tenant=a,fabrik.dev/namespace=default",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase} {end}",
                ],
            )?;
            Ok(out.split_whitespace().filter(|p| *p == "Running").count() == 2)
        })?;
        let names = kc_ok(
            &k,
            &host,
            &[
                "get",
                "configmaps,secrets,services",
                "-n",
                "fabrik-a",
                "-o",
                "name",
            ],
        )?;
        for want in [
            "configmap/settings-x-default-x-a",
            "secret/creds-x-default-x-a",
            "service/web-x-default-x-a",
        ] {
            if !names.lines().any(|l| l == want) {
                bail!("host lacks {want}: {names}");
            }
        }
        let env = kc_ok(&k, &host, &["get", "pods", "-n", "fabrik-a", "-o", "jsonpath={.items[0].spec.containers[0].env[?(@.valueFrom)].valueFrom.secretKeyRef.name} {.items[0].spec.containers[0].envFrom[0].configMapRef.name}"])?;
        if env != "creds-x-default-x-a settings-x-default-x-a" {
            bail!("references not rewritten: {env}");
        }
        let elsewhere = kc_ok(
            &k,
            &host,
            &[
                "get",
                "pods",
                "-A",
                "-l",
                "fabrik.dev/tenant=a",
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace} {end}",
            ],
        )?;
        if elsewhere.split_whitespace().any(|ns| ns != "fabrik-a") {
            bail!("tenant a's pods outside fabrik-a: {elsewhere}");
        }

        // Tenant a: its pods turn Running and are bound to the host's nodes.
        poll("tenant a's pods running", 60, || {
            let out = kc_ok(
                &k,
                &a,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase} {end}",
                ],
            )?;
            Ok(out.split_whitespace().filter(|p| *p == "Running").count() == 2)
        })?;

        // Tenant b sees nothing of a, on namespaced and cluster-wide lists.
        for args in [
            &["get", "pods", "-A", "-o", "name"][..],
            &[
                "get",
                "configmaps,secrets,services,deployments",
                "-A",
                "-o",
                "name",
            ],
            &["get", "--raw", "/api/v1/pods"],
        ] {
            let out = kc_ok(&k, &b, args)?;
            if out.contains("web") || out.contains("settings") || out.contains("creds") {
                bail!("tenant b sees tenant a's objects through {args:?}: {out}");
            }
        }
        // b's credentials on a's endpoint are anonymous: 401.
        let b_text = std::fs::read_to_string(&b)?;
        let b_on_a = f.data_dir().join("b-on-a.kubeconfig");
        std::fs::write(&b_on_a, b_text.replace("/clusters/b", "/clusters/a"))?;
        let out = kc(&k, &b_on_a, &["get", "pods"])?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !(err.contains("Unauthorized") || err.contains("401")) {
            bail!("b's credentials on /clusters/a: {err}");
        }
        // An unknown tenant is a 404, never another cluster.
        let nowhere = f.data_dir().join("nowhere.kubeconfig");
        std::fs::write(&nowhere, b_text.replace("/clusters/b", "/clusters/zz"))?;
        let out = kc(&k, &nowhere, &["get", "pods"])?;
        if out.status.success() {
            bail!("an unknown tenant answered");
        }

        // A hostile pod is refused at the tenant's admission with the reason.
        let out = kc(
            &k,
            &a,
            &[
                "run",
                "bad",
                "--image=x",
                "--overrides",
                r#"{"spec":{"hostNetwork":true,"containers":[{"name":"bad","image":"x","securityContext":{"privileged":true}}]}}"#,
            ],
        )?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("hostNetwork") || !err.contains("privileged") {
            bail!("hostile pod: {err}");
        }

        // Deleting in a removes the host objects.
        kc_ok(&k, &a, &["delete", "deployment", "web"])?;
        poll("host pods of tenant a removed", 60, || {
            Ok(
                kc_ok(&k, &host, &["get", "pods", "-n", "fabrik-a", "-o", "name"])?
                    .trim()
                    .is_empty(),
            )
        })?;

        // Deleting tenant a tears its host side down; its endpoint stops answering.
        let out = f.fabrik_cli(&["tenant", "delete", "a", "--wait"])?;
        if !out.status.success() {
            bail!(
                "fabrik tenant delete: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        poll("fabrik-a namespace gone", 60, || {
            Ok(!kc(&k, &host, &["get", "namespace", "fabrik-a"])?
                .status
                .success())
        })?;
        let out = kc(&k, &a, &["get", "pods"])?;
        if out.status.success() {
            bail!("a deleted tenant still answers");
        }
        let list = f.fabrik_cli(&["tenant", "list"])?;
        let list = String::from_utf8_lossy(&list.stdout);
        if list.contains("\na ") || !list.contains("b ") {
            bail!("tenant list after deleting a: {list}");
        }
        Ok(())
    };
    if let Err(e) = run() {
        panic!("{e:#}\n--- server log ---\n{}", f.log());
    }
}

#[test]
fn crash_and_restart_converge() {
    let k = kubectls().pop().expect("kubectl");
    let mut f = Fabrik::start().expect("fabrik up");
    let run = |f: &mut Fabrik| -> Result<()> {
        let demo = f.data_dir().join("tenants/demo.kubeconfig");
        poll("the demo tenant's kubeconfig", 30, || Ok(demo.exists()))?;
        poll("the demo tenant answering", 30, || {
            Ok(kc(&k, &demo, &["get", "ns"])?.status.success())
        })?;
        kc_ok(
            &k,
            &demo,
            &[
                "create",
                "deployment",
                "job",
                "--image=busybox",
                "--replicas=3",
            ],
        )?;
        let host = f.kubeconfig();
        let host_pods = |hk: &Path| -> Result<Vec<String>> {
            let out = kc_ok(
                &k,
                hk,
                &[
                    "get",
                    "pods",
                    "-n",
                    "fabrik-demo",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
                ],
            )?;
            Ok(out.split_whitespace().map(str::to_string).collect())
        };
        poll("3 host pods running", 60, || {
            Ok(host_pods(&host)?
                .iter()
                .filter(|p| p.ends_with("=Running"))
                .count()
                == 3)
        })?;
        let before: Vec<String> = host_pods(&host)?;
        f.crash_and_restart().context("restart after SIGKILL")?;
        let host = f.kubeconfig();
        poll("the demo tenant answering again", 60, || {
            Ok(kc(&k, &demo, &["get", "pods"])?.status.success())
        })?;
        // Converged: the same three host pods, nothing lost, nothing duplicated.
        poll("host pods settled", 60, || {
            Ok(host_pods(&host)?.len() == 3
                && host_pods(&host)?.iter().all(|p| p.ends_with("=Running")))
        })?;
        let after = host_pods(&host)?;
        if before != after {
            bail!("host pods changed across a crash: {before:?} -> {after:?}");
        }
        let tenant_pods = kc_ok(&k, &demo, &["get", "pods", "-o", "name"])?;
        if tenant_pods.lines().count() != 3 {
            bail!("tenant pods after a crash: {tenant_pods}");
        }
        Ok(())
    };
    if let Err(e) = run(&mut f) {
        panic!("{e:#}\n--- server log ---\n{}", f.log());
    }
}

/// Clients that build absolute paths drop a kubeconfig's `/clusters/<name>` prefix, and a
/// tenant's pods use in-cluster configuration (the server's address and a bearer token): both
/// reach their tenant without the prefix — by the CA of the client certificate, or by the
/// issuer of the token — and never the host.
#[test]
fn a_tenant_is_reached_without_its_path_prefix() {
    let f = Fabrik::start().expect("fabrik up");
    let run = || -> Result<()> {
        let demo = f.data_dir().join("tenants/demo.kubeconfig");
        poll("the demo tenant's kubeconfig", 60, || Ok(demo.exists()))?;
        let first = kubectls().pop().context("kubectl")?;
        poll("the demo tenant answering", 60, || {
            Ok(kc(&first, &demo, &["get", "ns"])?.status.success())
        })?;
        kc_ok(&first, &demo, &["create", "namespace", "only-in-demo"])?;
        // The same credentials with the prefix cut off the server URL.
        let text = std::fs::read_to_string(&demo)?;
        if !text.contains("/clusters/demo") {
            bail!("the demo kubeconfig names no /clusters/demo: {text}");
        }
        let bare = f.data_dir().join("demo-bare.kubeconfig");
        std::fs::write(&bare, text.replace("/clusters/demo", ""))?;
        for k in kubectls() {
            // Absolute paths with the tenant's kubeconfig (kubectl drops the prefix).
            for path in ["/readyz", "/livez", "/version", "/openapi/v2"] {
                kc_ok(&k, &demo, &["get", "--raw", path])
                    .with_context(|| format!("kubectl {} get --raw {path}", k.version))?;
            }
            let list = kc_ok(&k, &demo, &["get", "--raw", "/api/v1/namespaces?limit=500"])?;
            if !list.contains("only-in-demo") || list.contains("fabrik-demo") {
                bail!(
                    "kubectl {}: /api/v1/namespaces is not the tenant's: {list}",
                    k.version
                );
            }
            let names = kc_ok(&k, &bare, &["get", "ns", "-o", "name"])?;
            if !names.contains("namespace/only-in-demo") || names.contains("fabrik-demo") {
                bail!("kubectl {}: without the prefix: {names}", k.version);
            }
        }
        // In-cluster configuration: the server's address, the tenant's token.
        kc_ok(
            &first,
            &demo,
            &[
                "create",
                "rolebinding",
                "robot-view",
                "--clusterrole=view",
                "--serviceaccount=default:default",
            ],
        )?;
        kc_ok(&first, &demo, &["create", "configmap", "marker"])?;
        let token = kc_ok(&first, &demo, &["create", "token", "default"])?;
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .context("server in the kubeconfig")?
            .replace("/clusters/demo", "");
        let as_pod = |args: &[&str]| {
            let mut all = vec![
                "--kubeconfig=/dev/null",
                "--insecure-skip-tls-verify",
                "--server",
                &server,
                "--token",
                token.trim(),
            ];
            all.extend_from_slice(args);
            std::process::Command::new(&first.path).args(&all).output()
        };
        let out = as_pod(&["get", "configmaps", "-n", "default", "-o", "name"])?;
        let listed = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !listed.contains("configmap/marker") {
            bail!(
                "the tenant's token without the prefix: {listed} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The token is the tenant's: the tenant refuses what its RBAC does not grant (403
        // naming the service account), the host never sees it.
        let out = as_pod(&["get", "nodes"])?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("system:serviceaccount:default:default") {
            bail!("listing nodes with the tenant's token: {err}");
        }
        Ok(())
    };
    if let Err(e) = run() {
        panic!("{e:#}\n--- server log ---\n{}", f.log());
    }
}
