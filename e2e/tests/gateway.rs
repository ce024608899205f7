//! Gateway API in a tenant (issue: workloads, item 6): a Tenant that opts into HTTPRoutes and
//! GRPCRoutes gets the host's Gateway API CRDs; its routes reach the host attached only to the
//! host Gateways its spec allows, with backends rewritten to its host Services (weights and
//! header matches kept), and the status written by `fabrik up`'s simulated Gateway controller
//! comes back. Hostile routes (another tenant's hostname, extension filters, non-Service
//! backends) are refused at admission with the field named.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{kc, kc_apply, kc_apply_ok, kc_ok, kubectls, poll_until, Fabrik, Kubectl};
use fabrik_api::naming::host_name;
use serde_json::{json, Value};

const TENANT: &str = "gw";
const HOST_NS: &str = "fabrik-gw";
const WAIT: Duration = Duration::from_secs(60);

const TENANT_SPEC: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: gw}
spec:
  quota: {pods: 10}
  sync: {extraKinds: [httproutes.gateway.networking.k8s.io, grpcroutes.gateway.networking.k8s.io]}
  isolation:
    gateways: [infra/shared]
    routeHostnames: ["*.gw.example.com"]
"#;

const SERVICES: &str = r#"apiVersion: v1
kind: Service
metadata: {name: llm-a}
spec: {selector: {app: llm-a}, ports: [{port: 8000}]}
---
apiVersion: v1
kind: Service
metadata: {name: llm-b}
spec: {selector: {app: llm-b}, ports: [{port: 8000}]}
---
apiVersion: v1
kind: Service
metadata: {name: triton}
spec: {selector: {app: triton}, ports: [{port: 8001}]}
"#;

/// The inference case: a header match choosing the model, a 90/10 split between two versions.
const ROUTE: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm}
spec:
  parentRefs: [{name: shared, namespace: infra, sectionName: http}]
  hostnames: [llm.gw.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v1}, headers: [{name: x-model, value: big}]}]
    backendRefs:
    - {name: llm-a, port: 8000, weight: 90}
    - {name: llm-b, port: 8000, weight: 10}
"#;

const GRPC_ROUTE: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: infer}
spec:
  parentRefs: [{name: shared, namespace: infra}]
  hostnames: [grpc.gw.example.com]
  rules:
  - matches: [{method: {service: inference.GRPCInferenceService}}]
    backendRefs: [{name: triton, port: 8001}]
"#;

fn get(k: &Kubectl, cfg: &Path, args: &[&str]) -> Result<Option<Value>> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = kc(k, cfg, &all)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("NotFound") || err.contains("not found") {
            return Ok(None);
        }
        bail!("kubectl {args:?}: {err}");
    }
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}

fn wait_for(k: &Kubectl, cfg: &Path, what: &str, args: &[&str]) -> Result<Value> {
    let mut found = None;
    poll_until(what, WAIT, || {
        found = get(k, cfg, args)?;
        Ok(found.is_some())
    })?;
    found.ok_or_else(|| anyhow::anyhow!("{what}"))
}

fn condition<'a>(entry: &'a Value, ty: &str) -> Option<&'a str> {
    entry["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)?["status"]
        .as_str()
}

/// `kubectl apply` refused, with every `wanted` text in the refusal.
fn refused(k: &Kubectl, cfg: &Path, yaml: &str, wanted: &[&str]) -> Result<()> {
    let out = kc_apply(k, cfg, yaml)?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        bail!("admitted: {yaml}");
    }
    for w in wanted {
        if !err.contains(w) {
            bail!("the refusal does not say {w:?}: {err}");
        }
    }
    Ok(())
}

#[test]
fn routes_reach_the_allowed_gateways_with_their_backends_and_status_comes_back() {
    let f = Fabrik::start_with(&["--nodes", "0"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let host = f.kubeconfig();
        // fabrik up's host serves the Gateway API with its simulated implementation.
        kc_ok(
            &k,
            &host,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/gateways.gateway.networking.k8s.io",
                "crd/httproutes.gateway.networking.k8s.io",
            ],
        )?;
        poll_until("the GatewayClass fabrik", WAIT, || {
            Ok(get(&k, &host, &["get", "gatewayclass", "fabrik"])?.is_some())
        })?;
        kc_apply_ok(
            &k,
            &host,
            &e2e::host_gateways("fabrik", &["shared", "private"]),
        )?;
        kc_apply_ok(&k, &host, TENANT_SPEC)?;
        kc_ok(
            &k,
            &host,
            &[
                "wait",
                &format!("tenant/{TENANT}"),
                "--for=jsonpath={.status.phase}=Ready",
                "--timeout=60s",
            ],
        )?;
        let printed = f.fabrik_cli(&["tenant", "kubeconfig", TENANT])?;
        if !printed.status.success() {
            bail!("{}", String::from_utf8_lossy(&printed.stderr));
        }
        let t = f.data_dir().join("gw.kubeconfig");
        std::fs::write(&t, &printed.stdout)?;

        // The tenant has the host's CRDs.
        poll_until("the tenant's Gateway API CRDs", WAIT, || {
            Ok(kc(
                &k,
                &t,
                &["get", "crd", "grpcroutes.gateway.networking.k8s.io"],
            )?
            .status
            .success())
        })?;
        kc_ok(
            &k,
            &t,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/httproutes.gateway.networking.k8s.io",
                "crd/grpcroutes.gateway.networking.k8s.io",
                "crd/referencegrants.gateway.networking.k8s.io",
            ],
        )?;
        kc_apply_ok(&k, &t, SERVICES)?;
        for svc in ["llm-a", "llm-b", "triton"] {
            wait_for(
                &k,
                &host,
                "a host Service",
                &[
                    "get",
                    "service",
                    &host_name(svc, "default", TENANT),
                    "-n",
                    HOST_NS,
                ],
            )?;
        }
        kc_apply_ok(&k, &t, ROUTE)?;
        kc_apply_ok(&k, &t, GRPC_ROUTE)?;

        // The host copy: the allowed parent, the backends rewritten, the split and match kept.
        let hname = host_name("llm", "default", TENANT);
        let h = wait_for(
            &k,
            &host,
            "the host HTTPRoute",
            &["get", "httproute", &hname, "-n", HOST_NS],
        )?;
        let spec = &h["spec"];
        assert_eq!(spec["parentRefs"][0]["namespace"], "infra", "{h}");
        assert_eq!(spec["parentRefs"][0]["name"], "shared", "{h}");
        assert_eq!(spec["hostnames"], json!(["llm.gw.example.com"]), "{h}");
        let backends = &spec["rules"][0]["backendRefs"];
        assert_eq!(
            backends[0]["name"],
            host_name("llm-a", "default", TENANT),
            "{h}"
        );
        assert_eq!(backends[0]["weight"], 90, "{h}");
        assert_eq!(
            backends[1]["name"],
            host_name("llm-b", "default", TENANT),
            "{h}"
        );
        assert_eq!(backends[1]["weight"], 10, "{h}");
        assert_eq!(
            spec["rules"][0]["matches"][0]["headers"][0]["name"], "x-model",
            "{h}"
        );
        assert_eq!(h["metadata"]["labels"]["fabrik.dev/tenant"], TENANT, "{h}");
        let g = wait_for(
            &k,
            &host,
            "the host GRPCRoute",
            &[
                "get",
                "grpcroute",
                &host_name("infer", "default", TENANT),
                "-n",
                HOST_NS,
            ],
        )?;
        assert_eq!(
            g["spec"]["rules"][0]["backendRefs"][0]["name"],
            host_name("triton", "default", TENANT),
            "{g}"
        );

        // The host controller's verdict, back in the tenant under the tenant's parentRef.
        let mut last = Value::Null;
        poll_until(
            "the tenant route Accepted with its refs resolved",
            WAIT,
            || {
                last = get(&k, &t, &["get", "httproute", "llm"])?.unwrap_or_default();
                let parents = last["status"]["parents"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                Ok(parents.iter().any(|p| {
                    p["parentRef"]["name"] == "shared"
                        && p["controllerName"] == "fabrik.dev/simulated-gateway"
                        && condition(p, "Accepted") == Some("True")
                        && condition(p, "ResolvedRefs") == Some("True")
                }))
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}: {last}"))?;
        poll_until("the tenant GRPCRoute Accepted", WAIT, || {
            let g = get(&k, &t, &["get", "grpcroute", "infer"])?.unwrap_or_default();
            Ok(g["status"]["parents"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| condition(p, "Accepted") == Some("True")))
        })?;

        // Hostile routes are refused with the field named.
        refused(
            &k,
            &t,
            &ROUTE
                .replace("name: llm}", "name: steal}")
                .replace("llm.gw.example.com", "bank.example.com"),
            &["spec.hostnames[0]", "bank.example.com"],
        )?;
        refused(
            &k,
            &t,
            &ROUTE.replace("name: llm}", "name: ext}").replace(
                "  - matches:",
                "  - filters: [{type: ExtensionRef, extensionRef: {group: x.io, kind: Auth, name: a}}]\n    matches:",
            ),
            &["spec.rules[0].filters[0].type", "ExtensionRef"],
        )?;
        refused(
            &k,
            &t,
            &ROUTE.replace("name: llm}", "name: pool}").replace(
                "{name: llm-b, port: 8000, weight: 10}",
                "{group: inference.networking.k8s.io, kind: InferencePool, name: p, weight: 10}",
            ),
            &["spec.rules[0].backendRefs[1]", "InferencePool"],
        )?;
        // A Gateway the tenant was not given: the route stays in the tenant, an Event says why.
        kc_apply_ok(
            &k,
            &t,
            &ROUTE
                .replace("name: llm}", "name: elsewhere}")
                .replace("name: shared", "name: private"),
        )?;
        poll_until("the Event about the unsynced route", WAIT, || {
            let events = get(&k, &t, &["get", "events"])?.unwrap_or_default();
            Ok(events["items"].as_array().into_iter().flatten().any(|e| {
                e["involvedObject"]["name"] == "elsewhere"
                    && e["reason"] == "RouteNotSynced"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("infra/shared"))
            }))
        })?;
        let elsewhere = host_name("elsewhere", "default", TENANT);
        if get(&k, &host, &["get", "httproute", &elsewhere, "-n", HOST_NS])?.is_some() {
            bail!("a route for a Gateway the tenant was not given reached the host");
        }

        // Deleting the tenant route deletes its host copy.
        kc_ok(&k, &t, &["delete", "httproute", "llm"])?;
        poll_until("the host HTTPRoute gone", WAIT, || {
            Ok(get(&k, &host, &["get", "httproute", &hname, "-n", HOST_NS])?.is_none())
        })?;
        Ok(())
    });
}
