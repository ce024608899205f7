//! An operator chart of the shape real charts have — a CRD with two versions, a Deployment
//! and Service, a validating and a mutating webhook and an APIService for the operator, the
//! RBAC aggregated API servers bind to, and a `helm test` pod — installed into a tenant with
//! real Helm 3 and Helm 4: install --wait, the webhooks called for the CRD's objects, `helm
//! test`, and `helm uninstall` leaving nothing of the release behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{helms, kc_ok, kubectls, Fabrik, Kubectl};

use e2e::kc_apply as apply;

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(90), check)
}

const CHART: &[(&str, &str)] = &[
    (
        "Chart.yaml",
        "apiVersion: v2\nname: gadget-operator\nversion: 0.1.0\nappVersion: \"1.0\"\n",
    ),
    (
        "crds/gadgets.yaml",
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.fixture.fabrik.dev}
spec:
  group: fixture.fabrik.dev
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
"#,
    ),
    (
        "templates/operator.yaml",
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: "{{ .Release.Name }}-operator"}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "{{ .Release.Name }}-operator"
  labels: {app: "{{ .Release.Name }}-operator"}
spec:
  replicas: 1
  selector: {matchLabels: {app: "{{ .Release.Name }}-operator"}}
  template:
    metadata: {labels: {app: "{{ .Release.Name }}-operator"}}
    spec:
      serviceAccountName: "{{ .Release.Name }}-operator"
      containers:
      - name: operator
        image: example.com/gadget-operator:1.0
        ports: [{containerPort: 9443}]
---
apiVersion: v1
kind: Service
metadata: {name: "{{ .Release.Name }}-operator"}
spec:
  selector: {app: "{{ .Release.Name }}-operator"}
  ports: [{port: 443, targetPort: 9443}]
"#,
    ),
    (
        "templates/webhooks.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: "{{ .Release.Name }}-validate"}
webhooks:
- name: validate.gadgets.fixture.fabrik.dev
  clientConfig:
    service: {namespace: "{{ .Release.Namespace }}", name: "{{ .Release.Name }}-operator", path: /validate}
  rules:
  - {apiGroups: [fixture.fabrik.dev], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [gadgets]}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: "{{ .Release.Name }}-mutate"}
webhooks:
- name: mutate.gadgets.fixture.fabrik.dev
  clientConfig:
    service: {namespace: "{{ .Release.Namespace }}", name: "{{ .Release.Name }}-operator", path: /mutate}
  rules:
  - {apiGroups: [fixture.fabrik.dev], apiVersions: ["*"], operations: [CREATE], resources: [gadgets]}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1, v1beta1]
"#,
    ),
    (
        "templates/apiservice.yaml",
        r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.stats.fixture.fabrik.dev}
spec:
  group: stats.fixture.fabrik.dev
  version: v1alpha1
  service: {namespace: "{{ .Release.Namespace }}", name: "{{ .Release.Name }}-operator"}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "{{ .Release.Name }}-auth-delegator"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects: [{kind: ServiceAccount, name: "{{ .Release.Name }}-operator", namespace: "{{ .Release.Namespace }}"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "{{ .Release.Name }}-auth-reader", namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{kind: ServiceAccount, name: "{{ .Release.Name }}-operator", namespace: "{{ .Release.Namespace }}"}]
"#,
    ),
    (
        "templates/tests/connection.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: "{{ .Release.Name }}-test"
  annotations: {"helm.sh/hook": test}
spec:
  restartPolicy: Never
  containers:
  - {name: probe, image: busybox, command: [wget, "-q", "{{ .Release.Name }}-operator:443"]}
"#,
    ),
];

fn write_chart(dir: &Path) -> Result<PathBuf> {
    let chart = dir.join("gadget-operator");
    e2e::write_files(&chart, CHART)?;
    Ok(chart)
}

/// Everything of release `rel` that `helm uninstall` must remove, as `kind/name` lines.
fn leftovers(k: &Kubectl, cfg: &Path, rel: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (what, ns) in [
        ("validatingwebhookconfigurations,mutatingwebhookconfigurations,apiservices,clusterrolebindings", None),
        ("deployments,replicasets,pods,services,serviceaccounts", Some("default")),
        ("rolebindings", Some("kube-system")),
    ] {
        let mut args = vec!["get", what, "-o", "name"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        let names = kc_ok(k, cfg, &args)?;
        out.extend(
            names
                .lines()
                .filter(|l| l.contains(rel))
                .map(str::to_string),
        );
    }
    Ok(out)
}

#[test]
fn an_operator_chart_with_webhooks_and_an_apiservice_installs_tests_and_uninstalls() {
    let hs = helms();
    assert_eq!(hs.len(), 2, "Helm 3 and 4 in .tools/bin: {hs:?}");
    let f = Fabrik::start().expect("fabrik up");
    let k = &kubectls()[0];
    let chart = write_chart(&f.data_dir()).expect("chart");
    let chart_path = chart.display().to_string();
    for h in hs {
        let run = || -> Result<()> {
            let tenant = format!("charts{}", h.major);
            let cfg = f.create_tenant(&tenant, &[])?;
            let home = f.data_dir().join(format!("helm{}", h.major));
            std::fs::create_dir_all(&home)?;
            let rel = format!("gadgets{}", h.major);
            let out = h.run_ok(
                &home,
                &cfg,
                &["install", &rel, &chart_path, "--wait", "--timeout", "90s"],
            )?;
            if !out.contains("STATUS: deployed") {
                bail!("install: {out}");
            }
            // The webhooks are called for the CRD's objects (the operator's pods run on
            // simulated nodes, which answer for them), at either version.
            let out = apply(
                k,
                &cfg,
                "apiVersion: fixture.fabrik.dev/v1\nkind: Gadget\nmetadata: {name: first}\nspec: {size: 3}\n",
            )?;
            if !out.status.success() {
                bail!("gadget: {}", String::from_utf8_lossy(&out.stderr));
            }
            let beta = kc_ok(
                k,
                &cfg,
                &[
                    "get",
                    "gadgets.v1beta1.fixture.fabrik.dev",
                    "first",
                    "-o",
                    "jsonpath={.apiVersion}",
                ],
            )?;
            if beta != "fixture.fabrik.dev/v1beta1" {
                bail!("v1beta1 view: {beta}");
            }
            // The operator's APIService is registered; its backend runs on simulated nodes,
            // whose simulation serves the group with no resources: available, and listed.
            poll("the APIService's condition", || {
                let c = kc_ok(
                    k,
                    &cfg,
                    &[
                        "get",
                        "apiservice",
                        "v1alpha1.stats.fixture.fabrik.dev",
                        "-o",
                        "jsonpath={.status.conditions[0].status}",
                    ],
                )?;
                Ok(c == "True")
            })?;
            let doc = kc_ok(
                k,
                &cfg,
                &["get", "--raw", "/apis/stats.fixture.fabrik.dev/v1alpha1"],
            )?;
            if !doc.contains("\"resources\":[]") {
                bail!("simulated discovery: {doc}");
            }
            let versions = kc_ok(k, &cfg, &["api-versions"])?;
            if !versions.contains("stats.fixture.fabrik.dev/v1alpha1") {
                bail!("api-versions: {versions}");
            }
            let tested = h.run_ok(&home, &cfg, &["test", &rel, "--timeout", "60s"])?;
            if !tested.contains("Succeeded") {
                bail!("helm test: {tested}");
            }
            kc_ok(k, &cfg, &["delete", "gadget", "first"])?;
            h.run_ok(
                &home,
                &cfg,
                &["uninstall", &rel, "--wait", "--timeout", "60s"],
            )?;
            kc_ok(
                k,
                &cfg,
                &[
                    "delete",
                    "pod",
                    &format!("{rel}-test"),
                    "--ignore-not-found",
                ],
            )?;
            poll("nothing of the release left", || {
                Ok(leftovers(k, &cfg, &rel)?.is_empty())
            })
            .map_err(|e| {
                anyhow::anyhow!("{e}: {:?}", leftovers(k, &cfg, &rel).unwrap_or_default())
            })?;
            Ok(())
        };
        if let Err(e) = run() {
            panic!("helm {}: {e:#}\n--- server log ---\n{}", h.major, f.log());
        }
    }
}
