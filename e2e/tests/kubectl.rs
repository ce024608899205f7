//! The real kubectl (oldest and newest available) against a real `fabrik up`: discovery,
//! create / apply / get (every output) / describe / edit / patch / label / annotate / scale /
//! delete / wait, namespace deletion, and a restart that keeps everything.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::{kubectls, Fabrik, Kubectl};

/// Both kubectl builds must be installed: a suite that silently tests fewer is not honest.
fn both_kubectls() -> Vec<Kubectl> {
    let ks = kubectls();
    assert!(
        ks.len() >= 2,
        "expected kubectl 1.27 and 1.35 in .tools/bin (run scripts/install-test-deps.sh); found {ks:?}"
    );
    ks
}

/// Runs `scenario` once per kubectl build, each against a fresh server.
fn each_kubectl(scenario: impl Fn(&Fabrik, &Kubectl) -> Result<()>) {
    for k in both_kubectls() {
        let f = Fabrik::start().expect("fabrik up starts");
        if let Err(e) = scenario(&f, &k) {
            panic!(
                "kubectl {}: {e:#}\n--- server log ---\n{}",
                k.version,
                f.log()
            );
        }
    }
}

fn write(f: &Fabrik, name: &str, contents: &str) -> Result<String> {
    let path = f.data_dir().join(name);
    std::fs::write(&path, contents)?;
    Ok(path.display().to_string())
}

fn deployment(image_b: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports: [{{containerPort: 80}}]
        env: [{{name: A, value: "1"}}]
      - name: sidecar
        image: {image_b}
        args: ["sleep", "3600"]
"#
    )
}

fn poll(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn discovery_api_resources_versions_and_explain() {
    each_kubectl(|f, k| {
        let res = f.kubectl_ok(k, &["api-resources"])?;
        for needle in [
            "pods",
            "po",
            "deployments",
            "deploy",
            "leases",
            "resourceslices",
            "endpointslices",
            "cronjobs",
            "priorityclasses",
        ] {
            if !res.split_whitespace().any(|w| w == needle) {
                bail!("api-resources lacks {needle}:\n{res}");
            }
        }
        let names = f.kubectl_ok(k, &["api-resources", "--namespaced=false", "-o", "name"])?;
        if !names.lines().any(|l| l == "namespaces") || names.lines().any(|l| l == "pods") {
            bail!("cluster-scoped list wrong:\n{names}");
        }
        let versions = f.kubectl_ok(k, &["api-versions"])?;
        for gv in [
            "v1",
            "apps/v1",
            "batch/v1",
            "rbac.authorization.k8s.io/v1",
            "resource.k8s.io/v1",
            "policy/v1",
        ] {
            if !versions.lines().any(|l| l == gv) {
                bail!("api-versions lacks {gv}:\n{versions}");
            }
        }
        let explain = f.kubectl_ok(k, &["explain", "deployment.spec.replicas"])?;
        if !explain.contains("replicas") || !explain.contains("integer") {
            bail!("explain output unexpected:\n{explain}");
        }
        let explain = f.kubectl_ok(k, &["explain", "pods.spec.containers.env"])?;
        if !explain.contains("valueFrom") {
            bail!("explain of a nested list lacks its fields:\n{explain}");
        }
        Ok(())
    });
}

#[test]
fn create_apply_twice_and_every_output_format() {
    each_kubectl(|f, k| {
        let file = write(f, "deploy.yaml", &deployment("busybox:1.36", 2))?;
        let out = f.kubectl_ok(k, &["apply", "-f", &file])?;
        if !out.contains("deployment.apps/web created") {
            bail!("first apply: {out}");
        }
        // Change one container of two; the other keeps everything, including its env.
        let file = write(f, "deploy.yaml", &deployment("busybox:1.37", 3))?;
        let out = f.kubectl_ok(k, &["apply", "-f", &file])?;
        if !out.contains("configured") {
            bail!("second apply: {out}");
        }
        let images = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[*].image}",
            ],
        )?;
        if images != "nginx:1.25 busybox:1.37" {
            bail!("images after apply: {images}");
        }
        let env = f.kubectl_ok(k, &["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value} {.spec.replicas} {.metadata.generation}"])?;
        if env != "1 3 2" {
            bail!("env / replicas / generation after apply: {env}");
        }
        // Applying the same file again changes nothing (no new generation).
        f.kubectl_ok(k, &["apply", "-f", &file])?;
        let gen = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.metadata.generation}",
            ],
        )?;
        if gen != "2" {
            bail!("an unchanged apply bumped generation to {gen}");
        }
        let wide = f.kubectl_ok(k, &["get", "deploy", "-o", "wide"])?;
        let header = wide.lines().next().unwrap_or("");
        for col in [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ] {
            if !header.contains(col) {
                bail!("-o wide lacks {col}: {wide}");
            }
        }
        if !wide.contains("nginx,sidecar") || !wide.contains("app=web") {
            bail!("-o wide row: {wide}");
        }
        let yaml = f.kubectl_ok(k, &["get", "deploy", "web", "-o", "yaml"])?;
        if !yaml.contains("kind: Deployment")
            || !yaml.contains("kubectl.kubernetes.io/last-applied-configuration")
        {
            bail!("-o yaml: {yaml}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&f.kubectl_ok(k, &["get", "deploy", "web", "-o", "json"])?)?;
        if json["spec"]["template"]["spec"]["containers"][1]["args"]
            != serde_json::json!(["sleep", "3600"])
        {
            bail!("-o json: {json}");
        }
        let cc = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "-o",
                "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas",
            ],
        )?;
        if !cc
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["web", "3"])
        {
            bail!("custom-columns: {cc}");
        }
        for i in 0..5 {
            f.kubectl_ok(
                k,
                &[
                    "create",
                    "configmap",
                    &format!("cm-{i}"),
                    "--from-literal=k=v",
                ],
            )?;
        }
        let chunked = f.kubectl_ok(k, &["get", "configmaps", "--chunk-size=2", "-o", "name"])?;
        let names: Vec<&str> = chunked
            .lines()
            .filter(|l| l.starts_with("configmap/cm-"))
            .collect();
        if names.len() != 5 {
            bail!("--chunk-size=2 listed {names:?}");
        }
        let table = f.kubectl_ok(k, &["get", "configmaps", "--chunk-size=2"])?;
        if table.lines().filter(|l| l.starts_with("NAME")).count() != 1
            || table.lines().filter(|l| l.starts_with("cm-")).count() != 5
        {
            bail!("paged table: {table}");
        }
        Ok(())
    });
}

#[test]
fn watch_describe_edit_patch_label_annotate_scale() {
    each_kubectl(|f, k| {
        let file = write(f, "deploy.yaml", &deployment("busybox:1.36", 2))?;
        f.kubectl_ok(k, &["create", "-f", &file])?;

        // get -w prints the existing object, then changes as they happen.
        let mut child = Command::new(&k.path)
            .args(["get", "pods", "-w"])
            .env("KUBECONFIG", f.kubeconfig())
            .env("HOME", f.data_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        f.kubectl_ok(k, &["run", "watched", "--image=nginx"])?;
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = Vec::new();
        while !seen.iter().any(|l: &String| l.starts_with("watched")) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    bail!("get -w never showed the new pod; saw {seen:?}");
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();

        let described = f.kubectl_ok(k, &["describe", "deploy", "web"])?;
        for needle in [
            "Name:",
            "web",
            "Replicas:",
            "2 desired",
            "StrategyType:",
            "RollingUpdate",
            "busybox:1.36",
        ] {
            if !described.contains(needle) {
                bail!("describe lacks {needle}:\n{described}");
            }
        }
        let described = f.kubectl_ok(k, &["describe", "pod", "watched"])?;
        // Pending, or Running once a simulated node has started it.
        if !described.contains("Status:")
            || !(described.contains("Pending") || described.contains("Running"))
        {
            bail!("describe pod:\n{described}");
        }

        // edit, with an editor that rewrites the file.
        let out = f.kubectl_env(
            k,
            &["edit", "deploy", "web"],
            &[("KUBE_EDITOR", "sed -i -e s/busybox:1.36/busybox:1.99/")],
        )?;
        if !out.status.success() {
            bail!("edit failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let image = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[1].image}",
            ],
        )?;
        if image != "busybox:1.99" {
            bail!("edit did not land: {image}");
        }

        // patch: strategic (merge by container name), merge, json.
        f.kubectl_ok(k, &["patch", "deploy", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.26"}]}}}}"#])?;
        let images = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[*].image}",
            ],
        )?;
        if images != "nginx:1.26 busybox:1.99" {
            bail!("strategic patch replaced the list instead of merging: {images}");
        }
        f.kubectl_ok(
            k,
            &[
                "patch",
                "deploy",
                "web",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"tier":"front"}}}"#,
            ],
        )?;
        f.kubectl_ok(
            k,
            &[
                "patch",
                "deploy",
                "web",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/spec/replicas","value":4}]"#,
            ],
        )?;
        let got = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.metadata.labels.tier} {.spec.replicas}",
            ],
        )?;
        if got != "front 4" {
            bail!("merge/json patch: {got}");
        }

        f.kubectl_ok(k, &["label", "deploy", "web", "team=gpu"])?;
        f.kubectl_ok(k, &["annotate", "deploy", "web", "owner=alice"])?;
        f.kubectl_ok(k, &["scale", "deploy", "web", "--replicas=7"])?;
        let got = f.kubectl_ok(
            k,
            &[
                "get",
                "deploy",
                "-l",
                "team=gpu",
                "-o",
                "jsonpath={.items[0].metadata.annotations.owner} {.items[0].spec.replicas}",
            ],
        )?;
        if got != "alice 7" {
            bail!("label / annotate / scale: {got}");
        }
        f.kubectl_ok(k, &["label", "deploy", "web", "team-"])?;
        let none = f.kubectl_ok(k, &["get", "deploy", "-l", "team=gpu", "-o", "name"])?;
        if !none.trim().is_empty() {
            bail!("label removal: {none}");
        }
        // A stale scale (resource version precondition) is refused.
        let out = f.kubectl(
            k,
            &[
                "scale",
                "deploy",
                "web",
                "--replicas=1",
                "--resource-version=1",
            ],
        )?;
        if out.status.success() {
            bail!("scale with a stale resource version succeeded");
        }
        Ok(())
    });
}

#[test]
fn delete_cascade_wait_and_namespace_deletion() {
    each_kubectl(|f, k| {
        f.kubectl_ok(k, &["create", "namespace", "team-a"])?;
        let file = write(f, "deploy.yaml", &deployment("busybox:1.36", 1))?;
        f.kubectl_ok(k, &["-n", "team-a", "create", "-f", &file])?;
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "create",
                "configmap",
                "c1",
                "--from-literal=a=b",
            ],
        )?;
        f.kubectl_ok(k, &["-n", "team-a", "run", "p1", "--image=nginx"])?;

        let out = f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "delete",
                "deploy",
                "web",
                "--cascade=foreground",
                "--wait",
            ],
        )?;
        if !out.contains("deleted") {
            bail!("delete --cascade=foreground: {out}");
        }
        f.kubectl_ok(k, &["-n", "team-a", "create", "-f", &file])?;
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "delete",
                "deploy",
                "web",
                "--cascade=orphan",
            ],
        )?;
        f.kubectl_ok(k, &["-n", "team-a", "create", "-f", &file])?;
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "delete",
                "deploy",
                "web",
                "--cascade=background",
                "--wait=true",
            ],
        )?;

        // An object held by a finalizer: delete returns, wait --for=delete waits for the finalizer.
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "patch",
                "configmap",
                "c1",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
            ],
        )?;
        f.kubectl_ok(
            k,
            &["-n", "team-a", "delete", "configmap", "c1", "--wait=false"],
        )?;
        let ts = f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "get",
                "configmap",
                "c1",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
        )?;
        if ts.is_empty() {
            bail!("a finalized object lost its deletionTimestamp");
        }
        let out = f.kubectl(
            k,
            &[
                "-n",
                "team-a",
                "wait",
                "--for=delete",
                "configmap/c1",
                "--timeout=1s",
            ],
        )?;
        if out.status.success() {
            bail!("wait --for=delete returned while a finalizer holds the object");
        }
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "patch",
                "configmap",
                "c1",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        )?;
        f.kubectl_ok(
            k,
            &[
                "-n",
                "team-a",
                "wait",
                "--for=delete",
                "configmap/c1",
                "--timeout=20s",
            ],
        )?;

        // Namespace deletion: Terminating, contents removed, then gone; kubectl waits for it.
        // Generous: the namespace controller deletes the contents, and the simulated kubelets
        // stop the pods, on a machine that runs other end-to-end tests beside this one.
        let out = f.kubectl_ok(k, &["delete", "namespace", "team-a", "--timeout=90s"])?;
        if !out.contains("deleted") {
            bail!("delete namespace: {out}");
        }
        poll(
            "namespace team-a to disappear",
            Duration::from_secs(20),
            || {
                let out = f.kubectl(k, &["get", "namespace", "team-a"])?;
                Ok(!out.status.success())
            },
        )?;
        let left = f.kubectl_ok(k, &["get", "pods,configmaps", "-n", "team-a", "-o", "name"])?;
        if !left.trim().is_empty() {
            bail!("namespace contents survived: {left}");
        }
        // Creating in a namespace that does not exist is refused.
        let out = f.kubectl(
            k,
            &[
                "-n",
                "team-a",
                "create",
                "configmap",
                "late",
                "--from-literal=a=b",
            ],
        )?;
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("not found") {
            bail!(
                "create in a deleted namespace: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    });
}

#[test]
fn restart_keeps_everything() {
    let k = both_kubectls().pop().expect("a kubectl");
    let mut f = Fabrik::start().expect("fabrik up starts");
    let file = write(&f, "deploy.yaml", &deployment("busybox:1.36", 2)).expect("write");
    f.kubectl_ok(&k, &["apply", "-f", &file]).expect("apply");
    f.kubectl_ok(&k, &["create", "namespace", "keep"])
        .expect("ns");
    f.kubectl_ok(
        &k,
        &[
            "-n",
            "keep",
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=password=hunter2",
        ],
    )
    .expect("secret");
    let snapshot = |f: &Fabrik| -> String {
        let jp = "jsonpath={range .items[*]}{.metadata.name}/{.metadata.resourceVersion}/{.metadata.uid} {end}";
        [
            f.kubectl_ok(&k, &["get", "deploy", "-n", "default", "-o", jp])
                .expect("deployments"),
            f.kubectl_ok(&k, &["get", "secrets", "-n", "keep", "-o", jp])
                .expect("secrets"),
            f.kubectl_ok(&k, &["get", "namespaces", "-o", jp])
                .expect("namespaces"),
        ]
        .concat()
    };
    // Let the controllers and simulated nodes finish the rollout first: a restart must keep
    // what was stored, and a settled object is not rewritten when the controllers resync.
    f.kubectl_ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"])
        .expect("rollout settles");
    let before = snapshot(&f);
    f.restart().expect("restart");
    let after = snapshot(&f);
    assert_eq!(
        before,
        after,
        "objects changed across a restart\n{}",
        f.log()
    );
    let pw = f
        .kubectl_ok(
            &k,
            &[
                "-n",
                "keep",
                "get",
                "secret",
                "s",
                "-o",
                "jsonpath={.data.password}",
            ],
        )
        .expect("secret");
    assert_eq!(pw, "aHVudGVyMg==");
    // Writes continue with higher resource versions after the restart.
    f.kubectl_ok(&k, &["scale", "deploy", "web", "--replicas=5"])
        .expect("scale after restart");
    let rv: u64 = f
        .kubectl_ok(
            &k,
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        )
        .expect("rv")
        .parse()
        .expect("numeric rv");
    let max_before: u64 = before
        .split_whitespace()
        .filter_map(|e| e.split('/').nth(1)?.parse().ok())
        .max()
        .unwrap_or(0);
    assert!(
        rv > max_before,
        "resourceVersion went backwards after restart: {rv} <= {max_before}"
    );
    let status = f.stop().expect("stop");
    assert!(status.success(), "SIGTERM exit: {status}");
}

/// `kubectl create <kind>` sends typed objects (protobuf from kubectl 1.35 on): each one lands
/// as the object the command describes.
#[test]
fn typed_create_commands() {
    each_kubectl(|f, k| {
        f.kubectl_ok(k, &["create", "namespace", "typed"])?;
        let n = ["-n", "typed"];
        let run = |args: &[&str]| -> Result<String> {
            let all: Vec<&str> = n.iter().chain(args.iter()).copied().collect();
            f.kubectl_ok(k, &all)
        };
        run(&[
            "create",
            "configmap",
            "cfg",
            "--from-literal=a=1",
            "--from-literal=b=two",
        ])?;
        run(&[
            "create",
            "secret",
            "generic",
            "sec",
            "--from-literal=password=s3cret",
        ])?;
        run(&[
            "create",
            "deployment",
            "dep",
            "--image=nginx:1.25",
            "--replicas=3",
            "--port=8080",
        ])?;
        run(&["create", "service", "clusterip", "svc", "--tcp=80:8080"])?;
        run(&[
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "echo",
            "hi",
        ])?;
        run(&["create", "serviceaccount", "robot"])?;
        run(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ])?;
        run(&[
            "create",
            "rolebinding",
            "read",
            "--role=reader",
            "--serviceaccount=typed:robot",
        ])?;
        f.kubectl_ok(k, &["create", "priorityclass", "high", "--value=1000"])?;
        let got = run(&[
            "get",
            "configmap",
            "cfg",
            "-o",
            "jsonpath={.data.a} {.data.b}",
        ])?;
        if got != "1 two" {
            bail!("configmap data: {got}");
        }
        let pw = run(&[
            "get",
            "secret",
            "sec",
            "-o",
            "jsonpath={.data.password} {.type}",
        ])?;
        if pw != "czNjcmV0 Opaque" {
            bail!("secret: {pw}");
        }
        let dep = run(&["get", "deploy", "dep", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort} {.spec.selector.matchLabels.app}"])?;
        if dep != "3 nginx:1.25 8080 dep" {
            bail!("deployment: {dep}");
        }
        let svc = run(&[
            "get",
            "svc",
            "svc",
            "-o",
            "jsonpath={.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.type}",
        ])?;
        if svc != "80 8080 ClusterIP" {
            bail!("service: {svc}");
        }
        let ip = run(&["get", "svc", "svc", "-o", "jsonpath={.spec.clusterIP}"])?;
        if !ip.starts_with("10.") {
            bail!("service without a cluster IP: {ip}");
        }
        let job = run(&["get", "job", "once", "-o", "jsonpath={.spec.template.spec.containers[0].command} {.spec.template.spec.restartPolicy}"])?;
        if !job.contains("echo") || !job.ends_with("Never") {
            bail!("job: {job}");
        }
        let rb = run(&[
            "get",
            "rolebinding",
            "read",
            "-o",
            "jsonpath={.roleRef.name} {.subjects[0].kind} {.subjects[0].name}",
        ])?;
        if rb != "reader ServiceAccount robot" {
            bail!("rolebinding: {rb}");
        }
        // Deleting with typed options (protobuf DeleteOptions from newer kubectl) works too.
        run(&["delete", "configmap", "cfg", "--grace-period=0"])?;
        let left = run(&["get", "configmaps", "-o", "name"])?;
        if left.contains("cfg") {
            bail!("configmap survived delete: {left}");
        }
        Ok(())
    });
}
