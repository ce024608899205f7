//! Workloads in a tenant as on a real cluster (issue workloads): a DaemonSet runs a pod on
//! every node of the tenant's pool — placed by the host's scheduler through upstream's node
//! affinity pin, with the tolerations charts carry admitted.

use anyhow::{bail, Result};
use e2e::{kc, kc_ok, kubectls, Fabrik};

const DAEMONSET: &str = r#"{"apiVersion": "apps/v1", "kind": "DaemonSet",
  "metadata": {"name": "agent"},
  "spec": {"selector": {"matchLabels": {"app": "agent"}},
    "template": {"metadata": {"labels": {"app": "agent"}},
      "spec": {"tolerations": [{"operator": "Exists"},
          {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "a", "image": "busybox"}]}}}}"#;

fn json(text: &str) -> Result<serde_json::Value> {
    Ok(serde_json::from_str(text)?)
}

#[test]
fn a_daemonset_runs_a_pod_on_every_node_of_the_tenant_s_pool() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "3"])?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.create_tenant("ds", &[])?;
    // The tenant sees its pool's nodes before any of its pods runs.
    let host_nodes = json(&kc_ok(
        &k,
        &f.kubeconfig(),
        &["get", "nodes", "-o", "json"],
    )?)?;
    let mut want: Vec<String> = host_nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    want.sort();
    assert_eq!(want.len(), 3, "{host_nodes}");
    let names = |cfg: &std::path::Path| -> Result<Vec<String>> {
        let nodes = json(&kc_ok(&k, cfg, &["get", "nodes", "-o", "json"])?)?;
        let mut n: Vec<String> = nodes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        n.sort();
        Ok(n)
    };
    let start = std::time::Instant::now();
    while names(&cfg)? != want {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            bail!("the tenant sees {:?}, not its pool {want:?}", names(&cfg)?);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("ds.json");
    std::fs::write(&file, DAEMONSET)?;
    let out = kc(&k, &cfg, &["apply", "-f", &file.display().to_string()])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let start = std::time::Instant::now();
    let status = loop {
        let ds = json(&kc_ok(&k, &cfg, &["get", "ds", "agent", "-o", "json"])?)?;
        let s = ds["status"].clone();
        if s["desiredNumberScheduled"] == 3 && s["numberReady"] == 3 && s["numberAvailable"] == 3 {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            bail!("the DaemonSet did not become ready: {s}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(status["currentNumberScheduled"], 3, "{status}");
    // One pod per node, bound by the host's scheduler where the pin says.
    let pods = json(&kc_ok(
        &k,
        &cfg,
        &["get", "pods", "-l", "app=agent", "-o", "json"],
    )?)?;
    let mut placed: Vec<String> = Vec::new();
    for p in pods["items"].as_array().into_iter().flatten() {
        let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_string();
        let pin = &p["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            ["matchFields"][0]["values"][0];
        assert_eq!(pin.as_str(), Some(node.as_str()), "{p}");
        placed.push(node);
    }
    placed.sort();
    assert_eq!(placed, want);
    // The host pods carry the pin, not the tenant's tolerations.
    let host_pods = json(&kc_ok(
        &k,
        &f.kubeconfig(),
        &["get", "pods", "-n", "fabrik-ds", "-o", "json"],
    )?)?;
    let host_pods: Vec<&serde_json::Value> = host_pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(host_pods.len(), 3);
    for p in host_pods {
        let tolerations = p["spec"]["tolerations"].to_string();
        assert!(!tolerations.contains("control-plane"), "{tolerations}");
        assert!(
            p["spec"]["affinity"]["nodeAffinity"].is_object(),
            "pinned on the host: {}",
            p["spec"]
        );
    }
    // A DaemonSet whose pods the tenant may not run (a node exporter's host network) is
    // refused at once, naming the field — not admitted with pods that never come.
    let hostile = DAEMONSET
        .replace("\"agent\"", "\"exporter\"")
        .replace("\"tolerations\"", "\"hostNetwork\": true, \"tolerations\"");
    let file = dir.path().join("exporter.json");
    std::fs::write(&file, hostile)?;
    let out = kc(&k, &cfg, &["apply", "-f", &file.display().to_string()])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "admitted: {err}");
    assert!(err.contains("spec.template.spec.hostNetwork"), "{err}");
    Ok(())
}

/// A Job in a tenant completes on simulated nodes: pods that do not restart `Always` exit 0
/// after a short simulated run (as KWOK's default stages), so Jobs, Helm hooks and `helm test`
/// pods finish.
#[test]
fn a_job_in_a_tenant_completes() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.create_tenant("jobs", &[])?;
    let out = kc(
        &k,
        &cfg,
        &[
            "create",
            "job",
            "once",
            "--image=busybox",
            "--",
            "echo",
            "done",
        ],
    )?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kc(
        &k,
        &cfg,
        &[
            "wait",
            "--for=condition=Complete",
            "job/once",
            "--timeout=60s",
        ],
    )?;
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let job = json(&kc_ok(&k, &cfg, &["get", "job", "once", "-o", "json"])?)?;
    assert_eq!(job["status"]["succeeded"], 1, "{}", job["status"]);
    let pods = json(&kc_ok(
        &k,
        &cfg,
        &["get", "pods", "-l", "job-name=once", "-o", "json"],
    )?)?;
    assert_eq!(pods["items"][0]["status"]["phase"], "Succeeded", "{pods}");
    Ok(())
}

/// `type: LoadBalancer` Services get an address on `fabrik up` (its simulated pool,
/// 198.18.0.0/24 by default): on the host, and in a tenant through its host copy — so charts
/// that wait for a load balancer (ingress controllers) finish.
#[test]
fn load_balancer_services_get_an_address() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let address = |cfg: &std::path::Path, ns: &str, name: &str| -> Result<String> {
        let start = std::time::Instant::now();
        loop {
            let svc = json(&kc_ok(
                &k,
                cfg,
                &["get", "svc", name, "-n", ns, "-o", "json"],
            )?)?;
            if let Some(ip) = svc["status"]["loadBalancer"]["ingress"][0]["ip"].as_str() {
                return Ok(ip.to_string());
            }
            if start.elapsed() > std::time::Duration::from_secs(30) {
                bail!("no load balancer address: {}", svc["status"]);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let host = f.kubeconfig();
    kc_ok(
        &k,
        &host,
        &["create", "service", "loadbalancer", "edge", "--tcp=80:8080"],
    )?;
    let host_ip = address(&host, "default", "edge")?;
    assert_eq!(host_ip, "198.18.0.1");

    let cfg = f.create_tenant("lb", &["--load-balancers", "1", "--node-ports", "1"])?;
    kc_ok(
        &k,
        &cfg,
        &["create", "service", "loadbalancer", "web", "--tcp=80:8080"],
    )?;
    let tenant_ip = address(&cfg, "default", "web")?;
    assert!(
        tenant_ip.starts_with("198.18.0.") && tenant_ip != host_ip,
        "{tenant_ip}"
    );
    Ok(())
}
