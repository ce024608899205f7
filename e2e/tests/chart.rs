//! The Helm chart in `helm/fabrik`, with Helm 3 and Helm 4: it lints; it renders for the
//! default (sled, one replica) and the HA (etcd, three replicas, OIDC, ServiceMonitor) values,
//! and a `fabrik up` host accepts every rendered object (`kubectl apply --dry-run=server`);
//! it installs onto a `fabrik up` host (the Tenant CRD from `crds/` included) and uninstalls;
//! the values schema refuses wrong values naming the field; the chart's CRD is the one
//! generated from `api/` (`FABRIK_UPDATE_CHART_CRD=1` rewrites it); and every flag the chart
//! gives `fabrik serve` is one the binary has.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};
use e2e::{fabrik_bin, helms, kubectls, repo_root, Fabrik, Helm, Kubectl};
use fabrik_api::tenant::Tenant;
use kube::CustomResourceExt;
use serde_json::Value;

fn chart() -> PathBuf {
    repo_root().join("helm").join("fabrik")
}

fn crd_file() -> PathBuf {
    chart().join("crds").join("tenants.fabrik.dev.yaml")
}

/// Runs Helm with its state in `home`, against `kubeconfig` when given.
fn helm(h: &Helm, home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new(&h.path);
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .env("HELM_CACHE_HOME", home.join("helm-cache"))
        .env("HELM_CONFIG_HOME", home.join("helm-config"))
        .env("HELM_DATA_HOME", home.join("helm-data"))
        .stdin(Stdio::null());
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    Ok(cmd.output()?)
}

fn helm_ok(h: &Helm, home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Result<String> {
    let out = helm(h, home, kubeconfig, args)?;
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

fn kc_ok(k: &Kubectl, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", home)
        .env("KUBECACHEDIR", home.join("kube-cache"))
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Values for several replicas on etcd, with OIDC, a ServiceMonitor and simulated GPUs.
const HA_VALUES: &str = r#"
image: {repository: registry.example.com/fabrik, tag: "1.2.3", pullPolicy: Always}
controlPlane:
  replicas: 3
  storage:
    mode: etcd
    etcd:
      endpoints: ["https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379", "http://etcd-2.etcd:2379/"]
  publicUrl: https://fabrik.example.com
  tlsSans: [fabrik.internal.example.com]
oidc:
  issuerUrl: https://keycloak.example.com/realms/fabrik
  clientId: fabrik
  usernameClaim: email
  groupsClaim: groups
  groupsPrefix: "oidc:"
  caBundle: |
    -----BEGIN CERTIFICATE-----
    MIIB
    -----END CERTIFICATE-----
  requiredClaims: {hd: example.com}
nodeAgent:
  backend: simulated
  simulation:
    gpus: [{model: H100-80GB, count: 8}]
serviceMonitor: {enabled: true, labels: {release: prometheus}}
"#;

/// Values with OIDC on one sled replica.
const OIDC_VALUES: &str = r#"
oidc:
  issuerUrl: https://keycloak.example.com/realms/fabrik
  clientId: fabrik
  usernameClaim: email
  usernamePrefix: "-"
  groupsClaim: groups
  groupsPrefix: "oidc:"
  caBundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
  requiredClaims: {hd: example.com}
"#;

/// A ServiceMonitor CRD as small as the dry run needs (the Prometheus Operator's is larger).
const SERVICE_MONITOR_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn docs(rendered: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(rendered) {
        let v: Value = serde::Deserialize::deserialize(doc).context("rendered YAML")?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn args_of(deploy: &Value, container: usize) -> Vec<String> {
    deploy["spec"]["template"]["spec"]["containers"][container]["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn kinds(objs: &[Value]) -> BTreeSet<String> {
    objs.iter()
        .filter_map(|o| o["kind"].as_str().map(str::to_string))
        .collect()
}

/// The `--flags` `fabrik serve --help` lists.
fn serve_flags() -> Result<BTreeSet<String>> {
    help_flags(fabrik_bin(), &["serve", "--help"])
}

/// The `--flags` `fabrik-node-agent --help` lists (the binary beside `fabrik`).
fn agent_flags() -> Result<BTreeSet<String>> {
    let bin = fabrik_bin().with_file_name("fabrik-node-agent");
    help_flags(bin, &["--help"])
}

fn help_flags(bin: std::path::PathBuf, args: &[&str]) -> Result<BTreeSet<String>> {
    let out = Command::new(&bin)
        .args(args)
        .output()
        .with_context(|| format!("{} {}", bin.display(), args.join(" ")))?;
    if !out.status.success() {
        bail!("{} {} failed", bin.display(), args.join(" "));
    }
    let help = String::from_utf8_lossy(&out.stdout);
    let re = regex::Regex::new(r"--[a-z][a-z0-9-]*")?;
    Ok(re
        .find_iter(&help)
        .map(|m| m.as_str().to_string())
        .collect())
}

fn check_default(objs: &[Value]) -> Result<()> {
    let want: BTreeSet<String> = [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "Deployment",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if kinds(objs) != want {
        bail!(
            "default render has kinds {:?}, expected {want:?}",
            kinds(objs)
        );
    }
    let deploy = find(objs, "Deployment", "rel-fabrik").context("Deployment rel-fabrik")?;
    if deploy["spec"]["replicas"] != 1 || deploy["spec"]["strategy"]["type"] != "Recreate" {
        bail!("sled: one replica, Recreate: {}", deploy["spec"]);
    }
    let args = args_of(deploy, 0);
    for want in [
        "serve",
        "--data-dir=/var/lib/fabrik",
        "--public-url=https://rel-fabrik.fabrik-system.svc",
        "--serving-ca-secret=fabrik-system/rel-fabrik-serving-ca",
        "--tls-san=rel-fabrik.fabrik-system.svc",
    ] {
        if !args.iter().any(|a| a == want) {
            bail!("default args lack {want}: {args:?}");
        }
    }
    if args
        .iter()
        .any(|a| a.starts_with("--store") || a.starts_with("--oidc"))
    {
        bail!("default args: {args:?}");
    }
    let pod = &deploy["spec"]["template"]["spec"];
    if pod["volumes"][0]["persistentVolumeClaim"]["claimName"] != "rel-fabrik-data" {
        bail!("the data volume is not the PVC: {}", pod["volumes"]);
    }
    if deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        != format!("ghcr.io/fabrik-dev/fabrik:{}", env!("CARGO_PKG_VERSION"))
    {
        bail!("image: {}", pod["containers"][0]["image"]);
    }
    let ds = find(objs, "DaemonSet", "rel-fabrik-node-agent").context("node agent")?;
    let spec = &ds["spec"]["template"]["spec"];
    if spec["nodeSelector"]["nvidia.com/gpu.present"] != "true" {
        bail!("node agent node selector: {}", spec["nodeSelector"]);
    }
    let agent_args = args_of(ds, 0);
    for want in [
        "--backend=nvml",
        "--kubeconfig=/etc/fabrik-node-agent/kubeconfig",
        "--state-dir=/var/lib/fabrik-node-agent",
    ] {
        if !agent_args.iter().any(|a| a == want) {
            bail!("node agent args lack {want}: {agent_args:?}");
        }
    }
    // The agent's kubeconfig is one kube-rs reads: the in-cluster address, the pod's token.
    let cm = find(objs, "ConfigMap", "rel-fabrik-node-agent").context("agent ConfigMap")?;
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(cm["data"]["kubeconfig"].as_str().unwrap_or_default())
            .context("the node agent's kubeconfig")?;
    let user = kubeconfig
        .auth_infos
        .first()
        .and_then(|a| a.auth_info.as_ref())
        .and_then(|a| a.token_file.clone());
    if user.as_deref() != Some("/var/run/secrets/kubernetes.io/serviceaccount/token") {
        bail!("node agent kubeconfig user: {user:?}");
    }
    let volumes = spec["volumes"].to_string();
    if !volumes.contains("libnvidia-ml.so.1") || !volumes.contains("/var/lib/fabrik-node-agent") {
        bail!("node agent host mounts: {volumes}");
    }
    // Least privilege: no wildcard anywhere, and the tenant manager cannot touch RBAC.
    for o in objs
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        let rules = o["rules"].to_string();
        if rules.contains("\"*\"") || rules.contains("rbac.authorization.k8s.io") {
            bail!("{}: over-broad rules {rules}", o["metadata"]["name"]);
        }
    }
    Ok(())
}

fn check_ha(objs: &[Value]) -> Result<()> {
    let deploy = find(objs, "Deployment", "rel-fabrik").context("Deployment rel-fabrik")?;
    if deploy["spec"]["replicas"] != 3 || !deploy["spec"]["strategy"].is_null() {
        bail!("HA: three replicas, rolling: {}", deploy["spec"]);
    }
    let args = args_of(deploy, 0);
    for want in [
        "--store=etcd://etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379",
        "--lease-namespace=fabrik-system",
        "--public-url=https://fabrik.example.com",
        "--tls-san=fabrik.internal.example.com",
        "--oidc-issuer-url=https://keycloak.example.com/realms/fabrik",
        "--oidc-client-id=fabrik",
        "--oidc-username-claim=email",
        "--oidc-groups-claim=groups",
        "--oidc-groups-prefix=oidc:",
        "--oidc-ca-file=/etc/fabrik/oidc/ca.crt",
        "--oidc-required-claim=hd=example.com",
    ] {
        if !args.iter().any(|a| a == want) {
            bail!("HA args lack {want}: {args:?}");
        }
    }
    if deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        != "registry.example.com/fabrik:1.2.3"
    {
        bail!(
            "image from values: {}",
            deploy["spec"]["template"]["spec"]["containers"][0]
        );
    }
    if objs.iter().any(|o| o["kind"] == "PersistentVolumeClaim") {
        bail!("HA renders a PVC");
    }
    for (kind, name) in [
        ("PodDisruptionBudget", "rel-fabrik"),
        ("ServiceMonitor", "rel-fabrik-node-agent"),
        ("ConfigMap", "rel-fabrik-oidc-ca"),
        ("Service", "rel-fabrik-node-agent-metrics"),
    ] {
        if find(objs, kind, name).is_none() {
            bail!("HA render lacks {kind} {name}");
        }
    }
    let ds = find(objs, "DaemonSet", "rel-fabrik-node-agent").context("node agent")?;
    let agent_args = args_of(ds, 0);
    if !agent_args.iter().any(|a| a == "--backend=simulated")
        || !agent_args
            .iter()
            .any(|a| a == "--sim-file=/etc/fabrik-node-agent/simulation.yaml")
    {
        bail!("simulated node agent args: {agent_args:?}");
    }
    Ok(())
}

fn render(h: &Helm, home: &Path, extra: &[&str]) -> Result<String> {
    let chart = chart().display().to_string();
    let mut args = vec!["template", "rel", &chart, "--namespace", "fabrik-system"];
    args.extend_from_slice(extra);
    helm_ok(h, home, None, &args)
}

#[test]
fn chart_crd_is_the_generated_one() {
    let generated = Tenant::crd();
    if std::env::var_os("FABRIK_UPDATE_CHART_CRD").is_some() {
        let yaml = serde_yaml_ng::to_string(&generated).expect("CRD to YAML");
        let text = format!(
            "# Generated from api/src/tenant.rs: do not edit. Regenerate with\n\
             # FABRIK_UPDATE_CHART_CRD=1 cargo test -p e2e --test suite chart::chart_crd_is_the_generated_one\n{yaml}"
        );
        std::fs::write(crd_file(), text).expect("write the chart's CRD");
    }
    let text =
        std::fs::read_to_string(crd_file()).expect("helm/fabrik/crds/tenants.fabrik.dev.yaml");
    let in_chart: Value = serde_yaml_ng::from_str(&text).expect("the chart's CRD is YAML");
    let want = serde_json::to_value(&generated).expect("CRD to JSON");
    assert!(
        in_chart == want,
        "helm/fabrik/crds/tenants.fabrik.dev.yaml differs from the CRD generated from api/; \
         regenerate it with FABRIK_UPDATE_CHART_CRD=1 cargo test -p e2e --test suite \
         chart::chart_crd_is_the_generated_one"
    );
}

#[test]
fn chart_lints_renders_and_matches_the_binary() {
    let home = tempfile::tempdir().expect("tempdir");
    let values = home.path().join("ha.yaml");
    std::fs::write(&values, HA_VALUES).expect("values");
    let oidc = home.path().join("oidc.yaml");
    std::fs::write(&oidc, OIDC_VALUES).expect("values");
    let flags = serve_flags().expect("fabrik serve --help");
    let agent_flags = agent_flags().expect("fabrik-node-agent --help");
    assert!(flags.contains("--host-kubeconfig"), "{flags:?}");
    for h in both_helms() {
        let run = || -> Result<()> {
            let chart = chart().display().to_string();
            let lint = helm_ok(&h, home.path(), None, &["lint", "--strict", &chart])?;
            if !lint.contains("0 chart(s) failed") {
                bail!("lint: {lint}");
            }
            helm_ok(
                &h,
                home.path(),
                None,
                &[
                    "lint",
                    "--strict",
                    &chart,
                    "-f",
                    &values.display().to_string(),
                ],
            )?;
            let default = docs(&render(&h, home.path(), &[])?)?;
            check_default(&default)?;
            let ha = docs(&render(
                &h,
                home.path(),
                &["-f", &values.display().to_string()],
            )?)?;
            check_ha(&ha)?;
            // Every flag given to `fabrik serve` (sled with and without OIDC, and etcd) is one
            // it has.
            let with_oidc = docs(&render(
                &h,
                home.path(),
                &["-f", &oidc.display().to_string()],
            )?)?;
            for objs in [&default, &with_oidc, &ha] {
                let deploy = find(objs, "Deployment", "rel-fabrik").context("Deployment")?;
                for arg in args_of(deploy, 0).iter().filter(|a| a.starts_with("--")) {
                    let flag = arg.split('=').next().unwrap_or(arg);
                    if !flags.contains(flag) {
                        bail!("the chart passes {flag}, which `fabrik serve` does not have");
                    }
                }
                // And every flag given to the node agent is one it has.
                let ds = find(objs, "DaemonSet", "rel-fabrik-node-agent").context("agent")?;
                for arg in args_of(ds, 0).iter().filter(|a| a.starts_with("--")) {
                    let flag = arg.split('=').next().unwrap_or(arg);
                    if !agent_flags.contains(flag) {
                        bail!("the chart passes {flag}, which `fabrik-node-agent` does not have");
                    }
                }
                // Agents publish usage where the control plane reads it.
                let usage = "--usage-namespace=fabrik-system";
                if !args_of(deploy, 0).iter().any(|a| a == usage)
                    || !args_of(ds, 0).iter().any(|a| a == usage)
                {
                    bail!("control plane and agents must both get {usage}");
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            panic!("helm {}: {e:#}", h.major);
        }
    }
}

#[test]
fn invalid_values_are_refused_naming_the_field() {
    let home = tempfile::tempdir().expect("tempdir");
    let cases: [(&str, &[&str]); 6] = [
        ("controlPlane.replicas=two", &["replicas"]),
        ("controlPlane.storage.mode=tape", &["mode"]),
        ("controlPlane.replicas=2", &["mode", "etcd"]),
        ("controlPlane.replica=1", &["replica"]),
        ("oidc.issuerUrl=https://id.example.com", &["clientId"]),
        ("image.pullPolicy=Sometimes", &["pullPolicy"]),
    ];
    for h in both_helms() {
        for (set, fields) in cases {
            let chart = chart().display().to_string();
            let out = helm(
                &h,
                home.path(),
                None,
                &["template", "rel", &chart, "--set", set],
            )
            .expect("helm");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "helm {} accepted --set {set}",
                h.major
            );
            for f in fields {
                assert!(
                    err.contains(f),
                    "helm {} --set {set}: the error does not name {f}: {err}",
                    h.major
                );
            }
        }
    }
}

/// `helm template` output accepted by the host's server-side dry run; then `helm install` and
/// `helm uninstall` with both Helms on a `fabrik up` host without its own control plane (so
/// that the chart's `crds/` installs the Tenant CRD).
#[test]
fn chart_dry_runs_and_installs_on_a_fabrik_host() {
    let k = kubectls().pop().expect("kubectl in .tools/bin");
    let up = Fabrik::start_with(&["--no-tenant-manager", "--nodes", "0"]).expect("fabrik up");
    let home = tempfile::tempdir().expect("tempdir");
    let run = || -> Result<()> {
        let host = up.kubeconfig();
        let home = home.path();
        let [h3, h4] =
            <[Helm; 2]>::try_from(both_helms()).map_err(|_| anyhow::anyhow!("two Helms"))?;
        let values = home.join("ha.yaml");
        std::fs::write(&values, HA_VALUES)?;
        let sm = home.join("sm-crd.yaml");
        std::fs::write(&sm, SERVICE_MONITOR_CRD)?;
        kc_ok(&k, home, &host, &["apply", "-f", &sm.display().to_string()])?;
        // As with any API server, a new CRD is served once Established (asynchronously).
        kc_ok(
            &k,
            home,
            &host,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=75s",
                "crd/servicemonitors.monitoring.coreos.com",
            ],
        )?;
        kc_ok(&k, home, &host, &["create", "namespace", "fabrik-system"])?;
        for (name, extra) in [
            ("default", vec![]),
            ("ha", vec!["-f".to_string(), values.display().to_string()]),
        ] {
            let mut args = vec!["--include-crds"];
            args.extend(extra.iter().map(String::as_str));
            let rendered = render(&h4, home, &args)?;
            let file = home.join(format!("{name}.yaml"));
            std::fs::write(&file, rendered)?;
            let out = kc_ok(
                &k,
                home,
                &host,
                &[
                    "apply",
                    "--dry-run=server",
                    "-f",
                    &file.display().to_string(),
                ],
            )?;
            if !out.contains("deployment.apps/rel-fabrik created (server dry run)") {
                bail!("{name}: dry run: {out}");
            }
        }
        // The dry run wrote nothing.
        let crds = kc_ok(&k, home, &host, &["get", "crds", "-o", "name"])?;
        if crds.contains("tenants.fabrik.dev") {
            bail!("the dry run created the Tenant CRD");
        }

        let chart = chart().display().to_string();
        for (h, ns) in [(&h3, "fabrik-h3"), (&h4, "fabrik-h4")] {
            let out = helm_ok(
                h,
                home,
                Some(&host),
                &["install", "fab", &chart, "-n", ns, "--create-namespace"],
            )?;
            if !out.contains("STATUS: deployed") || !out.contains("/clusters/<tenant>") {
                bail!("helm {} install: {out}", h.major);
            }
            for (kind, name) in [
                ("deployment", "fab-fabrik"),
                ("service", "fab-fabrik"),
                ("serviceaccount", "fab-fabrik"),
                ("persistentvolumeclaim", "fab-fabrik-data"),
                ("daemonset", "fab-fabrik-node-agent"),
                ("configmap", "fab-fabrik-node-agent"),
            ] {
                kc_ok(&k, home, &host, &["get", kind, name, "-n", ns])?;
            }
            for name in ["fab-fabrik", "fab-fabrik-node-agent"] {
                kc_ok(&k, home, &host, &["get", "clusterrole", name])?;
                kc_ok(&k, home, &host, &["get", "clusterrolebinding", name])?;
            }
            kc_ok(
                &k,
                home,
                &host,
                &[
                    "get",
                    "rolebinding",
                    "-n",
                    "default",
                    "fab-fabrik-node-agent-events",
                ],
            )?;
            let sa = kc_ok(
                &k,
                home,
                &host,
                &[
                    "get",
                    "deployment",
                    "fab-fabrik",
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.spec.template.spec.serviceAccountName}",
                ],
            )?;
            if sa != "fab-fabrik" {
                bail!("service account {sa:?}");
            }
            let list = helm_ok(h, home, Some(&host), &["list", "-n", ns])?;
            if !list.contains("fab") || !list.contains("deployed") {
                bail!("helm {} list: {list}", h.major);
            }
            // Helm 3 installs the CRD from crds/; Helm 4 finds it there and leaves it.
            kc_ok(&k, home, &host, &["get", "crd", "tenants.fabrik.dev"])?;
            kc_ok(&k, home, &host, &["get", "tenants"])?;
            helm_ok(h, home, Some(&host), &["uninstall", "fab", "-n", ns])?;
            let out = Command::new(&k.path)
                .arg("--kubeconfig")
                .arg(&host)
                .args(["get", "clusterrole", "fab-fabrik"])
                .env("HOME", home)
                .output()?;
            if out.status.success() {
                bail!("helm {} uninstall left the ClusterRole", h.major);
            }
            // The sled volume outlives the release (helm.sh/resource-policy: keep).
            kc_ok(
                &k,
                home,
                &host,
                &["get", "pvc", "fab-fabrik-data", "-n", ns],
            )?;
        }
        Ok(())
    };
    if let Err(e) = run() {
        panic!("{e:#}\n--- fabrik up log ---\n{}", up.log());
    }
}
