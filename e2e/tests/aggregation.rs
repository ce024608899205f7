//! API aggregation in a tenant, with kubectl and a real aggregated API server
//! ([`e2e::aggregated::TestApiServer`]) served through `fabrik up --local-backends`: the
//! APIService becomes Available, its group joins discovery, requests reach the backend with
//! the caller's identity under the cluster's front-proxy certificate — and an APIService can
//! name only the tenant's own Services.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use e2e::aggregated::{TestApiServer, FLAVOR_FIELD_DOC, GROUP};
use e2e::{kc, kc_ok, kubectls, Fabrik, Kubectl};

use e2e::kc_apply_ok as apply_ok;

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

fn api_service(service: &str, ca: &str) -> String {
    format!(
        r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1.{GROUP}}}
spec:
  group: {GROUP}
  version: v1
  service: {{namespace: default, name: {service}, port: 443}}
  caBundle: {ca}
  groupPriorityMinimum: 1000
  versionPriority: 15
"#
    )
}

fn condition(k: &Kubectl, cfg: &Path) -> Result<String> {
    kc_ok(
        k,
        cfg,
        &[
            "get",
            "apiservice",
            &format!("v1.{GROUP}"),
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status}/{.status.conditions[?(@.type==\"Available\")].reason}",
        ],
    )
}

#[test]
fn an_aggregated_api_is_served_through_the_tenant() -> Result<()> {
    let backend = TestApiServer::start(&["flavors.default.svc"])?;
    let f = Fabrik::start_with(&["--local-backends", &backend.port.to_string()])?;
    let cfg = f.create_tenant("agg", &[])?;
    let other = f.create_tenant("bystander", &[])?;
    let k = &kubectls()[0];

    // What a backend reads to trust the front proxy, as upstream publishes it.
    let ca = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
            "-o",
            "jsonpath={.data.requestheader-client-ca-file}",
        ],
    )?;
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");
    let names = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
            "-o",
            "jsonpath={.data.requestheader-allowed-names}",
        ],
    )?;
    assert_eq!(names, r#"["front-proxy-client"]"#);
    kc_ok(k, &cfg, &["get", "clusterrole", "system:auth-delegator"])?;
    kc_ok(
        k,
        &cfg,
        &[
            "get",
            "role",
            "-n",
            "kube-system",
            "extension-apiserver-authentication-reader",
        ],
    )?;
    backend.trust(&ca)?;

    // The Service does not exist yet: unavailable, and said why.
    apply_ok(k, &cfg, &api_service("flavors", &backend.ca_bundle()))?;
    poll("ServiceNotFound", || {
        Ok(condition(k, &cfg)? == "False/ServiceNotFound")
    })?;
    let out = kc(k, &cfg, &["get", "flavors"])?;
    assert!(!out.status.success());

    apply_ok(
        k,
        &cfg,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: flavors\n  annotations: {{sim.fabrik.dev/local-port: \"{}\"}}\nspec:\n  ports: [{{port: 443}}]\n",
            backend.port
        ),
    )?;
    poll("Available", || Ok(condition(k, &cfg)? == "True/Passed"))?;

    // Discovery (aggregated, as kubectl 1.35 reads it) lists the group's resources.
    poll("the group in discovery", || {
        Ok(
            kc_ok(k, &cfg, &["api-resources", &format!("--api-group={GROUP}")])?
                .contains("flavors"),
        )
    })?;
    let groups = kc_ok(k, &cfg, &["get", "--raw", "/apis"])?;
    assert!(groups.contains(GROUP), "{groups}");

    // A list goes to the backend with the caller's identity and the front-proxy certificate.
    let flavors = kc_ok(k, &cfg, &["get", "flavors", "-n", "default", "-o", "json"])?;
    let flavors: serde_json::Value = serde_json::from_str(&flavors)?;
    let item = &flavors["items"][0];
    assert_eq!(item["metadata"]["name"], "vanilla");
    let user = item["spec"]["requestedBy"].as_str().unwrap_or("");
    assert!(!user.is_empty(), "{item}");
    assert!(
        item["spec"]["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "system:masters")),
        "{item}"
    );
    let calls = backend.calls();
    let listed = calls
        .iter()
        .find(|c| c.path.ends_with("/flavors"))
        .expect("the list reached the backend");
    assert_eq!(listed.client_cn.as_deref(), Some("front-proxy-client"));
    assert_eq!(listed.user.as_deref(), Some(user));
    // The backend's OpenAPI joins the cluster's: listed in the v3 index, and `kubectl
    // explain` reads the aggregated kind's schema through it.
    let index = kc_ok(k, &cfg, &["get", "--raw", "/openapi/v3"])?;
    assert!(index.contains(&format!("apis/{GROUP}/v1")), "{index}");
    let explained = kc_ok(
        k,
        &cfg,
        &[
            "explain",
            "flavors.spec.requestedBy",
            &format!("--api-version={GROUP}/v1"),
        ],
    )?;
    assert!(explained.contains(FLAVOR_FIELD_DOC), "{explained}");
    // ... and its group's paths and definitions join the OpenAPI v2 document (nothing else of
    // the backend's does).
    let v2 = kc_ok(k, &cfg, &["get", "--raw", "/openapi/v2"])?;
    assert!(
        v2.contains(&format!(
            "/apis/{GROUP}/v1/namespaces/{{namespace}}/flavors/{{name}}"
        )) && v2.contains("dev.fabrik.test.flavors.v1.Flavor"),
        "the aggregated paths are missing from /openapi/v2"
    );
    assert!(
        !v2.contains("not-mine"),
        "a path of another group was taken"
    );
    // A user without access is stopped here (RBAC), before the backend.
    let before = backend.calls().len();
    let denied = kc(
        k,
        &cfg,
        &["get", "flavors", "-n", "default", "--as", "nobody"],
    )?;
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    assert_eq!(backend.calls().len(), before);

    // Another tenant naming the same Service gets its own (absent) one.
    apply_ok(k, &other, &api_service("flavors", &backend.ca_bundle()))?;
    // (Bounded by the availability controller's idle recheck should a wakeup be missed: a
    // woken controller could list the revision before its event until stop 38, which once
    // delayed this past 60 s in a loaded suite.)
    e2e::poll_until(
        "the bystander's ServiceNotFound",
        Duration::from_secs(90),
        || Ok(condition(k, &other)? == "False/ServiceNotFound"),
    )?;
    let out = kc(k, &other, &["get", "--raw", &format!("/apis/{GROUP}/v1")])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unable to handle the request")
            || String::from_utf8_lossy(&out.stderr).contains("not available"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(backend
        .calls()
        .iter()
        .all(|c| c.client_cn.as_deref() == Some("front-proxy-client")));

    // Deleting the APIService removes the group.
    kc_ok(k, &cfg, &["delete", "apiservice", &format!("v1.{GROUP}")])?;
    let groups = kc_ok(k, &cfg, &["get", "--raw", "/apis"])?;
    assert!(!groups.contains(GROUP), "{groups}");
    poll("the OpenAPI index without the group", || {
        Ok(!kc_ok(k, &cfg, &["get", "--raw", "/openapi/v3"])?.contains(GROUP))
    })?;
    Ok(())
}

#[test]
fn kubectl_top_works_in_the_host_and_in_a_tenant_without_metrics_server() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("topped", &[])?;
    let k = &kubectls()[0];
    apply_ok(
        k,
        &cfg,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: busy, labels: {app: busy}}\nspec:\n  containers:\n  - name: main\n    image: busybox\n    resources: {requests: {cpu: 250m, memory: 64Mi}}\n",
    )?;
    poll("the pod running", || {
        Ok(kc_ok(
            k,
            &cfg,
            &["get", "pod", "busy", "-o", "jsonpath={.status.phase}"],
        )? == "Running")
    })?;
    // The tenant's pod, named as the tenant knows it, with what its simulated node reports.
    let mut top = String::new();
    poll("kubectl top pod", || {
        let out = kc(k, &cfg, &["top", "pod", "busy", "--no-headers"])?;
        top = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok(out.status.success() && top.contains("busy"))
    })?;
    assert!(top.contains("250m") && top.contains("64Mi"), "{top}");
    let by_label = kc_ok(k, &cfg, &["top", "pod", "-l", "app=busy", "--containers"])?;
    assert!(by_label.contains("main"), "{by_label}");
    let nodes = kc_ok(k, &cfg, &["top", "nodes", "--no-headers"])?;
    assert!(nodes.contains("gpu-node-"), "{nodes}");
    let host_nodes = f.kubectl_ok(k, &["top", "nodes", "--no-headers"])?;
    assert_eq!(host_nodes.lines().count(), 2, "{host_nodes}");
    // An APIService registered for the group takes its place (here: a backend that does not
    // exist, so the API is unavailable until it is removed).
    apply_ok(
        k,
        &cfg,
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.k8s.io}\nspec:\n  group: metrics.k8s.io\n  version: v1beta1\n  service: {namespace: kube-system, name: metrics-server}\n  insecureSkipTLSVerify: true\n  groupPriorityMinimum: 100\n  versionPriority: 100\n",
    )?;
    let out = kc(
        k,
        &cfg,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods"],
    )?;
    assert!(!out.status.success(), "the built-in API still answered");
    kc_ok(k, &cfg, &["delete", "apiservice", "v1beta1.metrics.k8s.io"])?;
    kc_ok(
        k,
        &cfg,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods"],
    )?;
    // metrics-server installed as a chart installs it: its pods run on simulated nodes, so
    // the simulation answers for them — available, and `kubectl top` keeps working.
    apply_ok(
        k,
        &cfg,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: metrics-server, namespace: kube-system}\nspec:\n  selector: {matchLabels: {k8s-app: metrics-server}}\n  template:\n    metadata: {labels: {k8s-app: metrics-server}}\n    spec:\n      containers:\n      - {name: metrics-server, image: registry.k8s.io/metrics-server/metrics-server:v0.7.2, ports: [{containerPort: 10250, name: https}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: metrics-server, namespace: kube-system}\nspec:\n  selector: {k8s-app: metrics-server}\n  ports: [{port: 443, targetPort: https, name: https}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.k8s.io}\nspec:\n  group: metrics.k8s.io\n  version: v1beta1\n  service: {namespace: kube-system, name: metrics-server}\n  insecureSkipTLSVerify: true\n  groupPriorityMinimum: 100\n  versionPriority: 100\n",
    )?;
    poll("the simulated metrics-server available", || {
        Ok(kc_ok(
            k,
            &cfg,
            &[
                "get",
                "apiservice",
                "v1beta1.metrics.k8s.io",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
            ],
        )? == "True")
    })?;
    let top = kc_ok(k, &cfg, &["top", "pod", "busy", "--no-headers"])?;
    assert!(top.contains("250m"), "{top}");
    Ok(())
}
