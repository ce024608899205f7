//! Service addresses and DNS of tenant pods, on Fabrik's own host with simulated pods whose
//! network is in 127.0.0.0/8 (so the test sends each query from a pod's own address, as the pod
//! would): a tenant Service's cluster IP is its host copy's; each tenant's pods resolve their
//! own cluster's names (Services, headless Services and their StatefulSet pods, SRV, the
//! `kubernetes` Service) and only those; a stranger is refused; the service environment names
//! the tenant's Services. The same on a real Kubernetes host: `real_host.rs`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::dns::{self, ResponseCode, Type};
use e2e::{kc_ok, kubectls, Fabrik, Kubectl};
use serde_json::Value;

fn poll<T>(what: &str, secs: u64, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn create_tenant(f: &Fabrik, name: &str) -> Result<PathBuf> {
    f.create_tenant(name, &["--pods", "20"])
}

fn apply(k: &Kubectl, kubeconfig: &Path, yaml: &str) -> Result<()> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), yaml)?;
    kc_ok(
        k,
        kubeconfig,
        &["apply", "-f", &file.path().display().to_string()],
    )?;
    Ok(())
}

fn json(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    Ok(serde_json::from_str(&kc_ok(k, kubeconfig, &all)?)?)
}

/// The IP of the running pod `name` (tenant view), once it has one.
fn pod_ip(k: &Kubectl, kubeconfig: &Path, name: &str) -> Result<IpAddr> {
    poll(&format!("pod {name} running with an IP"), 120, || {
        let p = json(k, kubeconfig, &["get", "pod", name])?;
        let ip = p["status"]["podIP"]
            .as_str()
            .filter(|_| p["status"]["phase"] == "Running");
        Ok(ip.and_then(|ip| ip.parse().ok()))
    })
}

fn cluster_ip(k: &Kubectl, kubeconfig: &Path, ns: &str, name: &str) -> Result<String> {
    let s = json(k, kubeconfig, &["get", "svc", "-n", ns, name])?;
    s["spec"]["clusterIP"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("service {ns}/{name} has no clusterIP: {s}"))
}

const SERVICES: &str = r#"apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
"#;

const WORKLOADS: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: client, labels: {app: web}}
spec:
  containers: [{name: c, image: busybox}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: pg, image: postgres}]
"#;

#[test]
fn tenant_pods_resolve_their_own_cluster_names() {
    let f = Fabrik::start_with(&[
        "--nodes",
        "1",
        "--pod-network",
        "127.244",
        "--dns-listen",
        "127.0.0.1:0",
    ])
    .expect("fabrik up");
    if let Err(e) = scenario(&f) {
        panic!("{e:#}\n--- fabrik up log (tail):\n{}", tail(&f.log(), 60));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn scenario(f: &Fabrik) -> Result<()> {
    let k = kubectls().pop().context("kubectl")?;
    let host = f.kubeconfig();
    let server = dns::address_in_log(&f.log()).context("fabrik up printed no tenant DNS")?;
    let a = create_tenant(f, "dns-a")?;
    let b = create_tenant(f, "dns-b")?;

    // Services first, so that the pods' service environment can name them.
    apply(&k, &a, SERVICES)?;
    apply(&k, &b, SERVICES)?;
    let web_a = cluster_ip(&k, &a, "default", "web")?;
    let web_b = cluster_ip(&k, &b, "default", "web")?;
    if web_a == web_b {
        bail!("two tenants' Services share the address {web_a}");
    }
    // The address the tenant shows is its host copy's.
    let host_copy = cluster_ip(&k, &host, "fabrik-dns-a", "web-x-default-x-dns-a")?;
    if host_copy != web_a {
        bail!("tenant dns-a shows web at {web_a}, its host copy is at {host_copy}");
    }
    let api_a = cluster_ip(&k, &a, "default", "kubernetes")?;

    apply(&k, &a, WORKLOADS)?;
    apply(&k, &b, WORKLOADS)?;
    let client_a = pod_ip(&k, &a, "client")?;
    let db_a = pod_ip(&k, &a, "db-0")?;
    let client_b = pod_ip(&k, &b, "client")?;

    // What tenant dns-a's pods resolve. A view follows its tenant within moments of a change.
    let ask = |source: IpAddr, name: &str, qtype: Type| dns::query(server, source, name, qtype);
    let want = |source: IpAddr, name: &str, qtype: Type, answers: Vec<String>| -> Result<()> {
        poll(
            &format!("{name} {qtype} from {source} = {answers:?}"),
            30,
            || {
                let r = ask(source, name, qtype)?;
                Ok((r.code == ResponseCode::NoError && r.answers == answers).then_some(()))
            },
        )
        .with_context(|| format!("last answer: {:?}", ask(source, name, qtype)))
    };
    let fqdn = "web.default.svc.cluster.local.";
    want(client_a, fqdn, Type::A, vec![web_a.clone()])?;
    want(
        client_a,
        "WEB.Default.svc.cluster.local.",
        Type::A,
        vec![web_a.clone()],
    )?;
    want(
        client_a,
        "kubernetes.default.svc.cluster.local.",
        Type::A,
        vec![api_a],
    )?;
    want(
        client_a,
        "db.default.svc.cluster.local.",
        Type::A,
        vec![db_a.to_string()],
    )?;
    want(
        client_a,
        "db-0.db.default.svc.cluster.local.",
        Type::A,
        vec![db_a.to_string()],
    )?;
    want(
        client_a,
        "_http._tcp.web.default.svc.cluster.local.",
        Type::SRV,
        vec![format!("0 100 80 {fqdn}")],
    )?;
    let dashed = client_a.to_string().replace('.', "-");
    want(
        client_a,
        &format!("{dashed}.default.pod.cluster.local."),
        Type::A,
        vec![client_a.to_string()],
    )?;
    let missing = ask(client_a, "nothere.default.svc.cluster.local.", Type::A)?;
    if missing.code != ResponseCode::NXDomain {
        bail!("a missing Service answered {missing:?}");
    }
    // Tenant dns-b's pod, the same name: its own Service.
    want(client_b, fqdn, Type::A, vec![web_b.clone()])?;
    // dns-a's pod IP means nothing to dns-b.
    let other = ask(
        client_b,
        &format!("{dashed}.default.pod.cluster.local."),
        Type::A,
    )?;
    if other.code != ResponseCode::NXDomain {
        bail!("tenant dns-b resolved dns-a's pod: {other:?}");
    }
    // No tenant's pod: refused, whatever the name.
    let stranger = ask("127.0.0.1".parse()?, fqdn, Type::A)?;
    if stranger.code != ResponseCode::Refused || !stranger.answers.is_empty() {
        bail!("a stranger was answered: {stranger:?}");
    }

    // The service environment of the host pod names the tenant's Services.
    let hp = json(
        &k,
        &host,
        &[
            "get",
            "pod",
            "-n",
            "fabrik-dns-a",
            "client-x-default-x-dns-a",
        ],
    )?;
    let env = &hp["spec"]["containers"][0]["env"];
    let value = |name: &str| {
        env.as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    if value("WEB_SERVICE_HOST").as_deref() != Some(web_a.as_str())
        || value("WEB_SERVICE_PORT_HTTP").as_deref() != Some("80")
    {
        bail!("the host pod's service environment does not name web at {web_a}: {env}");
    }
    if value("DB_SERVICE_HOST").is_some() {
        bail!("a headless Service got service environment: {env}");
    }
    if hp["spec"]["enableServiceLinks"] != false {
        bail!(
            "the host pod links the host namespace's Services: {}",
            hp["spec"]
        );
    }
    Ok(())
}
