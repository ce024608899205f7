//! Server-side apply with the real kubectl: managedFields, conflicts naming manager and field,
//! `--force-conflicts`, removal of fields an applier stops sending, `kubectl diff`, apply to
//! status, and malformed apply configurations.

use anyhow::{bail, Result};
use e2e::{kubectls, Fabrik, Kubectl};

fn write(f: &Fabrik, name: &str, contents: &str) -> Result<String> {
    let p = f.data_dir().join(name);
    std::fs::write(&p, contents)?;
    Ok(p.display().to_string())
}

fn cm(data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  labels: {{team: a}}\ndata:\n{data}")
}

fn run(f: &Fabrik, k: &Kubectl) -> Result<()> {
    let file = write(f, "cm.yaml", &cm("  a: \"1\"\n  b: \"1\"\n"))?;
    f.kubectl_ok(k, &["apply", "--server-side", "-f", &file])?;
    let managers = f.kubectl_ok(
        k,
        &[
            "get",
            "cm",
            "ssa",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager} {.metadata.managedFields[*].operation}",
        ],
    )?;
    if managers != "kubectl Apply" {
        bail!("managedFields after apply: {managers}");
    }
    // Another manager changes a field the applier owns: the next apply conflicts...
    f.kubectl_ok(
        k,
        &[
            "patch",
            "cm",
            "ssa",
            "--type=merge",
            "-p",
            r#"{"data":{"a":"2"}}"#,
            "--field-manager=ops",
        ],
    )?;
    let file = write(f, "cm.yaml", &cm("  a: \"3\"\n  b: \"1\"\n"))?;
    let out = f.kubectl(k, &["apply", "--server-side", "-f", &file])?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success()
        || !err.contains("conflict")
        || !err.contains("\"ops\"")
        || !err.contains(".data.a")
    {
        bail!("expected a conflict naming ops and .data.a: {err}");
    }
    let a = f.kubectl_ok(k, &["get", "cm", "ssa", "-o", "jsonpath={.data.a}"])?;
    if a != "2" {
        bail!("a conflicting apply changed the object: {a}");
    }
    // ...unless forced, which takes ownership.
    f.kubectl_ok(
        k,
        &["apply", "--server-side", "--force-conflicts", "-f", &file],
    )?;
    let a = f.kubectl_ok(k, &["get", "cm", "ssa", "-o", "jsonpath={.data.a}"])?;
    if a != "3" {
        bail!("forced apply: {a}");
    }
    // Fields the applier stops sending are removed.
    let file = write(f, "cm.yaml", &cm("  a: \"3\"\n"))?;
    f.kubectl_ok(k, &["apply", "--server-side", "-f", &file])?;
    let b = f.kubectl_ok(k, &["get", "cm", "ssa", "-o", "jsonpath={.data.b}"])?;
    if !b.is_empty() {
        bail!("a field dropped from the configuration survived: {b}");
    }
    // kubectl diff shows what an apply would change, and changes nothing.
    let file2 = write(f, "cm2.yaml", &cm("  a: \"4\"\n"))?;
    let out = f.kubectl(k, &["diff", "--server-side", "-f", &file2])?;
    let diff = String::from_utf8_lossy(&out.stdout);
    if !diff.contains("-  a: \"3\"") || !diff.contains("+  a: \"4\"") {
        bail!("diff: {diff} {}", String::from_utf8_lossy(&out.stderr));
    }
    let a = f.kubectl_ok(k, &["get", "cm", "ssa", "-o", "jsonpath={.data.a}"])?;
    if a != "3" {
        bail!("diff changed the object: {a}");
    }
    // Malformed configurations are refused with a Status, nothing stored.
    let bad = write(
        f,
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata: [1, 2\n",
    )?;
    let out = f.kubectl(k, &["apply", "--server-side", "-f", &bad])?;
    if out.status.success() {
        bail!("malformed YAML was applied");
    }
    Ok(())
}

#[test]
fn server_side_apply_with_kubectl() {
    for k in kubectls() {
        let f = Fabrik::start().expect("fabrik up");
        if let Err(e) = run(&f, &k) {
            panic!("kubectl {}: {e:#}\n{}", k.version, f.log());
        }
    }
}

#[test]
fn apply_to_status_and_deployments() {
    let k = kubectls().pop().expect("kubectl");
    let f = Fabrik::start().expect("fabrik up");
    let file = write(&f, "d.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n").expect("write");
    f.kubectl_ok(&k, &["apply", "--server-side", "-f", &file])
        .expect("apply");
    f.kubectl_ok(&k, &["scale", "deploy", "web", "--replicas=4"])
        .expect("scale");
    let file = write(&f, "d.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n").expect("write");
    let out = f
        .kubectl(&k, &["apply", "--server-side", "-f", &file])
        .expect("kubectl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(".spec.replicas"),
        "scale then apply should conflict on replicas: {err}"
    );
    // Apply to /status with its own manager: an external load balancer's (its class keeps
    // `fabrik up`'s simulated one away).
    let status = write(&f, "s.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: lb\nspec:\n  type: LoadBalancer\n  loadBalancerClass: example.com/lb\n  ports: [{port: 80}]\n").expect("write");
    f.kubectl_ok(&k, &["apply", "--server-side", "-f", &status])
        .expect("service");
    let st = write(&f, "st.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: lb\nstatus:\n  loadBalancer:\n    ingress: [{ip: 192.0.2.10}]\n").expect("write");
    f.kubectl_ok(
        &k,
        &[
            "apply",
            "--server-side",
            "--subresource=status",
            "--field-manager=lb-controller",
            "-f",
            &st,
        ],
    )
    .expect("status apply");
    let got = f
        .kubectl_ok(
            &k,
            &[
                "get",
                "svc",
                "lb",
                "-o",
                "jsonpath={.status.loadBalancer.ingress[0].ip} {.spec.type}",
            ],
        )
        .expect("get");
    assert_eq!(got, "192.0.2.10 LoadBalancer");
    let mf = f
        .kubectl_ok(
            &k,
            &[
                "get",
                "svc",
                "lb",
                "--show-managed-fields",
                "-o",
                "jsonpath={range .metadata.managedFields[*]}{.manager}/{.subresource};{end}",
            ],
        )
        .expect("mf");
    assert!(mf.contains("lb-controller/status"), "{mf}");
}
