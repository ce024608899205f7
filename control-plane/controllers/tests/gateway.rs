//! The simulated Gateway controller run in-process over HTTPS against a real `fabrik up` (which
//! may run its own copy too: both compute the same statuses, and a conflicting write is
//! skipped) and against a real kube-apiserver (which checks the CRDs' schemas and the statuses
//! as upstream does). It installs the CRDs and the GatewayClass, then attaches routes and
//! resolves their references as the cluster changes, and stops writing once the statuses are
//! right.

use std::time::Duration;

use anyhow::Result;
use e2e::real_host::RealHost;
use e2e::Fabrik;
use fabrik_controllers::gateway;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::common::wait_for;

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: version.into(),
        api_version: format!("gateway.networking.k8s.io/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The `(status, reason)` of condition `ty` in `conditions`.
fn condition(conditions: &Value, ty: &str) -> Option<(String, String)> {
    conditions
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
}

fn is(c: Option<(String, String)>, status: &str, reason: &str) -> bool {
    c.is_some_and(|(s, r)| s == status && r == reason)
}

async fn create(api: &Api<DynamicObject>, v: Value) -> Result<DynamicObject> {
    Ok(api
        .create(&PostParams::default(), &serde_json::from_value(v)?)
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_and_routes_get_the_status_of_a_gateway_controller() -> Result<()> {
    e2e::init_crypto();
    let fabrik = Fabrik::start_with(&["--nodes", "0"])?;
    let client = fabrik.client().await?;
    with_controller(&client).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crds_and_statuses_pass_a_real_api_servers_validation() -> Result<()> {
    e2e::init_crypto();
    let host = tokio::task::spawn_blocking(RealHost::start).await??;
    let client = host.admin_client().await?;
    with_controller(&client).await
}

async fn with_controller(client: &kube::Client) -> Result<()> {
    let controller = tokio::spawn(gateway::run(client.clone(), std::future::pending()));
    let result = scenario(client).await;
    controller.abort();
    result
}

async fn scenario(client: &kube::Client) -> Result<()> {
    let classes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("v1", "GatewayClass", "gatewayclasses"),
    );
    wait_for("GatewayClass fabrik Accepted", 120, || async {
        let Some(c) = classes.get_opt(gateway::CLASS_NAME).await.ok().flatten() else {
            return Ok(None);
        };
        assert_eq!(c.data["spec"]["controllerName"], gateway::CONTROLLER_NAME);
        Ok(is(
            condition(&c.data["status"]["conditions"], "Accepted"),
            "True",
            "Accepted",
        )
        .then_some(()))
    })
    .await?;

    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    for (name, labels) in [("apps", json!({"team": "a"})), ("other", json!({}))] {
        create(
            &namespaces,
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}}),
        )
        .await?;
    }
    let service = |ns: &str, name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"port": 80}]}})
    };
    let services = |ns: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        )
    };
    create(&services("apps"), service("apps", "web")).await?;

    let gateways: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Gateway", "gateways"),
    );
    create(
        &gateways,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw"},
            "spec": {"gatewayClassName": "fabrik",
                "addresses": [{"value": "198.18.1.10"}],
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                    "hostname": "*.example.com",
                    "allowedRoutes": {"namespaces": {"from": "Selector",
                        "selector": {"matchLabels": {"team": "a"}}}}}]}}),
    )
    .await?;
    let routes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "apps",
        &resource("v1", "HTTPRoute", "httproutes"),
    );
    create(
        &routes,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "web"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "default"}],
                "hostnames": ["web.example.com"],
                "rules": [{"backendRefs": [{"name": "web", "port": 80},
                    {"name": "api", "namespace": "other", "port": 80}]}]}}),
    )
    .await?;
    let grpc: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "apps",
        &resource("v1", "GRPCRoute", "grpcroutes"),
    );
    create(
        &grpc,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
            "metadata": {"name": "rpc"},
            "spec": {"parentRefs": [{"name": "gw", "namespace": "default", "sectionName": "grpc"}],
                "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
    )
    .await?;

    // The cross-namespace backend is not granted yet.
    let parent = |r: &DynamicObject| r.data["status"]["parents"][0].clone();
    wait_for("the route Accepted, its refs not permitted", 60, || async {
        let p = parent(&routes.get("web").await?);
        Ok((p["controllerName"] == gateway::CONTROLLER_NAME
            && is(condition(&p["conditions"], "Accepted"), "True", "Accepted")
            && is(
                condition(&p["conditions"], "ResolvedRefs"),
                "False",
                "RefNotPermitted",
            ))
        .then_some(()))
    })
    .await?;
    wait_for("the GRPCRoute without a matching listener", 60, || async {
        let p = parent(&grpc.get("rpc").await?);
        Ok(is(
            condition(&p["conditions"], "Accepted"),
            "False",
            "NoMatchingParent",
        )
        .then_some(()))
    })
    .await?;
    let gw = wait_for("the Gateway Programmed with its route", 60, || async {
        let g = gateways.get("gw").await?;
        let s = &g.data["status"];
        Ok((is(
            condition(&s["conditions"], "Programmed"),
            "True",
            "Programmed",
        ) && s["listeners"][0]["attachedRoutes"] == 1)
            .then_some(g))
    })
    .await?;
    assert_eq!(
        gw.data["status"]["addresses"],
        json!([{"type": "IPAddress", "value": "198.18.1.10"}])
    );

    // Granted, then the Service appears: resolved.
    let grants: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "other",
        &resource("v1beta1", "ReferenceGrant", "referencegrants"),
    );
    create(
        &grants,
        json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": "apps-routes"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                    "namespace": "apps"}],
                "to": [{"group": "", "kind": "Service"}]}}),
    )
    .await?;
    wait_for("the granted backend not found", 60, || async {
        let p = parent(&routes.get("web").await?);
        Ok(is(
            condition(&p["conditions"], "ResolvedRefs"),
            "False",
            "BackendNotFound",
        )
        .then_some(()))
    })
    .await?;
    create(&services("other"), service("other", "api")).await?;
    let route = wait_for("the route's refs resolved", 60, || async {
        let r = routes.get("web").await?;
        Ok(is(
            condition(&parent(&r)["conditions"], "ResolvedRefs"),
            "True",
            "ResolvedRefs",
        )
        .then_some(r))
    })
    .await?;

    // Settled: no more writes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = routes.get("web").await?;
    assert_eq!(again.resource_version(), route.resource_version());
    Ok(())
}
