//! A training-platform chart of the workload kinds a tenant needs — a GPU Deployment with a
//! PodDisruptionBudget and an autoscaler, a DaemonSet, a pre-install hook Job (Indexed, with a
//! pod failure policy), a ResourceClaimTemplate and a Deployment whose pods claim a GPU, and a
//! `helm test` pod with an init container and a sidecar, an HTTPRoute through the host's Gateway
//! — installed into tenants with real
//! Helm 3 and Helm 4: `install --wait` (the hook Job completes, every workload turns ready),
//! `helm test` passes, and `helm uninstall` leaves nothing of the release in the tenant or on
//! the host.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use e2e::{helms, kc_ok, kubectls, Fabrik, Kubectl};

const CHART: &[(&str, &str)] = &[
    (
        "Chart.yaml",
        "apiVersion: v2\nname: trainer-platform\nversion: 0.1.0\nappVersion: \"1.0\"\n",
    ),
    (
        "templates/serving.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: "{{ .Release.Name }}-serve"}
spec:
  replicas: 2
  selector: {matchLabels: {app: "{{ .Release.Name }}-serve"}}
  template:
    metadata: {labels: {app: "{{ .Release.Name }}-serve"}}
    spec:
      containers:
      - name: main
        image: server
        resources: {limits: {nvidia.com/gpu: "1"}, requests: {cpu: 100m}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: "{{ .Release.Name }}-serve"}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: "{{ .Release.Name }}-serve"}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: "{{ .Release.Name }}-serve"}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: "{{ .Release.Name }}-serve"}
  minReplicas: 2
  maxReplicas: 2
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
"#,
    ),
    (
        "templates/route.yaml",
        r#"apiVersion: v1
kind: Service
metadata: {name: "{{ .Release.Name }}-serve"}
spec:
  selector: {app: "{{ .Release.Name }}-serve"}
  ports: [{port: 8000}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: "{{ .Release.Name }}-route"}
spec:
  parentRefs: [{name: shared, namespace: infra}]
  rules:
  - matches: [{headers: [{name: x-model, value: big}]}]
    backendRefs: [{name: "{{ .Release.Name }}-serve", port: 8000}]
"#,
    ),
    (
        "templates/agent.yaml",
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: "{{ .Release.Name }}-agent"}
spec:
  selector: {matchLabels: {app: "{{ .Release.Name }}-agent"}}
  template:
    metadata: {labels: {app: "{{ .Release.Name }}-agent"}}
    spec:
      tolerations: [{operator: Exists, effect: NoSchedule}]
      containers: [{name: agent, image: agent}]
"#,
    ),
    (
        "templates/claims.yaml",
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: "{{ .Release.Name }}-gpu"}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: "{{ .Release.Name }}-notebook"}
spec:
  replicas: 1
  selector: {matchLabels: {app: "{{ .Release.Name }}-notebook"}}
  template:
    metadata: {labels: {app: "{{ .Release.Name }}-notebook"}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: "{{ .Release.Name }}-gpu"}]
      containers:
      - {name: main, image: notebook, resources: {claims: [{name: gpu}]}}
"#,
    ),
    (
        "templates/prepare.yaml",
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: "{{ .Release.Name }}-prepare"
  annotations:
    helm.sh/hook: pre-install
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {operator: In, values: [42]}
  template:
    spec:
      restartPolicy: Never
      containers: [{name: prepare, image: tools}]
"#,
    ),
    (
        "templates/tests/smoke.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: "{{ .Release.Name }}-smoke"
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  restartPolicy: Never
  initContainers:
  - {name: wait, image: busybox}
  - {name: proxy, image: envoy, restartPolicy: Always}
  containers: [{name: check, image: busybox}]
"#,
    ),
];

fn write_chart(dir: &Path) -> Result<PathBuf> {
    let chart = dir.join("trainer-platform");
    e2e::write_files(&chart, CHART)?;
    Ok(chart)
}

/// What of release `rel` is left in the tenant, as `kind/name` lines.
fn tenant_leftovers(k: &Kubectl, cfg: &Path, rel: &str) -> Result<Vec<String>> {
    let names = kc_ok(
        k,
        cfg,
        &[
            "get",
            "deployments,replicasets,daemonsets,jobs,pods,poddisruptionbudgets,horizontalpodautoscalers,resourceclaims,resourceclaimtemplates,services,httproutes",
            "-o",
            "name",
        ],
    )?;
    Ok(names
        .lines()
        .filter(|l| l.contains(rel))
        .map(str::to_string)
        .collect())
}

/// What is left in the tenant's host namespace, as `kind/name` lines.
fn host_leftovers(k: &Kubectl, host: &Path, tenant: &str, rel: &str) -> Result<Vec<String>> {
    let ns = format!("fabrik-{tenant}");
    let names = kc_ok(
        k,
        host,
        &[
            "get",
            "pods,poddisruptionbudgets,resourceclaims,services,httproutes",
            "-n",
            &ns,
            "-o",
            "name",
        ],
    )?;
    // Services of the tenant's own (not the release's) may have copies there.
    Ok(names
        .lines()
        .filter(|l| !l.starts_with("service/") || l.contains(rel))
        .map(str::to_string)
        .collect())
}

#[test]
fn a_workload_chart_installs_tests_and_uninstalls_with_nothing_left() {
    let hs = helms();
    assert_eq!(hs.len(), 2, "Helm 3 and 4 in .tools/bin: {hs:?}");
    let f = Fabrik::start().expect("fabrik up");
    let k = &kubectls()[0];
    let host = f.kubeconfig();
    let chart = write_chart(&f.data_dir()).expect("chart");
    let chart_path = chart.display().to_string();
    // The simulated Gateway controller serves the Gateway API a moment after start.
    e2e::poll_until(
        "the host's Gateway API",
        std::time::Duration::from_secs(60),
        || {
            Ok(e2e::kc(k, &host, &["get", "gateways", "-A"])?
                .status
                .success())
        },
    )
    .expect("the host's Gateway API");
    e2e::kc_apply_ok(k, &host, &e2e::host_gateways("fabrik", &["shared"]))
        .expect("the host's Gateway");
    for h in hs {
        let run = || -> Result<()> {
            let tenant = format!("platform{}", h.major);
            let cfg = f.create_tenant(&tenant, &["--gpus", "4"])?;
            // Its routes synced, through the host's shared Gateway.
            kc_ok(
                k,
                &host,
                &[
                    "patch",
                    "tenant",
                    &tenant,
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"sync":{"extraKinds":["httproutes.gateway.networking.k8s.io"]},"isolation":{"gateways":["infra/shared"]}}}"#,
                ],
            )?;
            e2e::poll_until(
                "the tenant's HTTPRoute CRD",
                std::time::Duration::from_secs(60),
                || {
                    Ok(e2e::kc(
                        k,
                        &cfg,
                        &["get", "crd", "httproutes.gateway.networking.k8s.io"],
                    )?
                    .status
                    .success())
                },
            )?;
            kc_ok(
                k,
                &cfg,
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/httproutes.gateway.networking.k8s.io",
                ],
            )?;
            let home = f.data_dir().join(format!("helm{}", h.major));
            std::fs::create_dir_all(&home)?;
            let rel = format!("train{}", h.major);
            let out = h.run_ok(
                &home,
                &cfg,
                &["install", &rel, &chart_path, "--wait", "--timeout", "120s"],
            )?;
            if !out.contains("STATUS: deployed") {
                bail!("install: {out}");
            }
            // Everything ready: the DaemonSet on each node, the claim allocated.
            let ds = kc_ok(
                k,
                &cfg,
                &[
                    "get",
                    "daemonset",
                    &format!("{rel}-agent"),
                    "-o",
                    "jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}",
                ],
            )?;
            if ds != "2/2" {
                bail!("daemonset {ds}");
            }
            let claims = kc_ok(k, &cfg, &["get", "resourceclaims", "--no-headers"])?;
            if !claims.contains("allocated,reserved") {
                bail!("claims: {claims}");
            }
            // The route reached the host Gateway and was accepted there.
            e2e::poll_until(
                "the release's route Accepted by the host Gateway",
                std::time::Duration::from_secs(60),
                || {
                    let status = kc_ok(
                        k,
                        &cfg,
                        &[
                            "get",
                            "httproute",
                            &format!("{rel}-route"),
                            "-o",
                            r#"jsonpath={.status.parents[*].conditions[?(@.type=="Accepted")].status}"#,
                        ],
                    )?;
                    Ok(status == "True")
                },
            )?;
            let out = h.run_ok(&home, &cfg, &["test", &rel, "--timeout", "90s"])?;
            if !out.contains("Phase:          Succeeded") && !out.contains("Succeeded") {
                bail!("helm test: {out}");
            }
            h.run_ok(
                &home,
                &cfg,
                &["uninstall", &rel, "--wait", "--timeout", "90s"],
            )?;
            e2e::poll_until(
                "nothing of the release left",
                std::time::Duration::from_secs(90),
                || {
                    let here = tenant_leftovers(k, &cfg, &rel)?;
                    let there = host_leftovers(k, &host, &tenant, &rel)?;
                    Ok(here.is_empty() && there.is_empty())
                },
            )
            .map_err(|e| {
                let here = tenant_leftovers(k, &cfg, &rel).unwrap_or_default();
                let there = host_leftovers(k, &host, &tenant, &rel).unwrap_or_default();
                anyhow::anyhow!("{e}: tenant {here:?}, host {there:?}")
            })?;
            Ok(())
        };
        if let Err(e) = run() {
            panic!(
                "helm {}: {e:#}\n--- fabrik up log ---\n{}",
                h.major,
                f.log()
            );
        }
    }
}
