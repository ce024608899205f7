//! ResourceQuota status: `status.hard` is `spec.hard`, `status.used` what the namespace uses of
//! each resource named there.
//!
//! Counted: `pods` (not Succeeded / Failed), `services` (and `services.loadbalancers`,
//! `services.nodeports`), `configmaps`, `secrets`, `persistentvolumeclaims`,
//! `replicationcontrollers`, `resourcequotas`, `count/<resource>[.<group>]` for the kinds in
//! [`COUNTED`]; pod `requests.<name>` / `limits.<name>` for any resource (cpu, memory,
//! `nvidia.com/gpu`, …, bare `cpu` / `memory` meaning requests) as upstream sums them (app
//! containers added, init containers as a maximum, plus overhead); claims' `requests.storage`,
//! per storage class too. Scopes `Terminating`, `NotTerminating`, `BestEffort` and
//! `NotBestEffort` narrow the pods counted. Enforcement at admission is not done here.
//!
//! Woken by changes to ResourceQuotas and to every counted kind in their namespace.

pub mod quantity;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, Pod, ResourceQuota, ResourceRequirements, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::{json, Map, Value};

use crate::shared::{shutdown, Context};

/// Kinds counted by `count/<resource>`: (resource as quota names it, group, version, kind).
pub const COUNTED: &[(&str, &str, &str, &str)] = &[
    ("pods", "", "v1", "Pod"),
    ("services", "", "v1", "Service"),
    ("configmaps", "", "v1", "ConfigMap"),
    ("secrets", "", "v1", "Secret"),
    ("persistentvolumeclaims", "", "v1", "PersistentVolumeClaim"),
    ("replicationcontrollers", "", "v1", "ReplicationController"),
    ("resourcequotas", "", "v1", "ResourceQuota"),
    ("serviceaccounts", "", "v1", "ServiceAccount"),
    ("deployments.apps", "apps", "v1", "Deployment"),
    ("replicasets.apps", "apps", "v1", "ReplicaSet"),
    ("statefulsets.apps", "apps", "v1", "StatefulSet"),
    ("daemonsets.apps", "apps", "v1", "DaemonSet"),
    ("jobs.batch", "batch", "v1", "Job"),
    ("cronjobs.batch", "batch", "v1", "CronJob"),
    (
        "ingresses.networking.k8s.io",
        "networking.k8s.io",
        "v1",
        "Ingress",
    ),
];

/// Errors of the ResourceQuota controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The quota has no namespace (never for a served one).
    #[error("resourcequota has no namespace")]
    NoNamespace,
    /// Listing a counted kind failed.
    #[error("failed to list {0}: {1}")]
    List(String, #[source] kube::Error),
    /// Writing the status failed.
    #[error("failed to update status: {0}")]
    Status(#[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn api_resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Runs the ResourceQuota controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "resourcequota-controller");
    let controller = Controller::new(
        Api::<ResourceQuota>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    let controller = COUNTED
        .iter()
        .filter(|(r, ..)| *r != "resourcequotas")
        .fold(controller, |c, (_, group, version, kind)| {
            let ar = api_resource(group, version, kind);
            let store = store.clone();
            c.watches_with(
                Api::<DynamicObject>::all_with(client.clone(), &ar),
                ar,
                watcher::Config::default(),
                move |obj| quotas_in(&store, obj.namespace().as_deref()),
            )
        });
    controller
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |q, e, ctx: Arc<Context>| ctx.failed(q.as_ref(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

fn quotas_in(store: &Store<ResourceQuota>, ns: Option<&str>) -> Vec<ObjectRef<ResourceQuota>> {
    let Some(ns) = ns else {
        return vec![];
    };
    store
        .state()
        .iter()
        .filter(|q| q.namespace().as_deref() == Some(ns))
        .map(|q| ObjectRef::from_obj(q.as_ref()))
        .collect()
}

/// What a namespace holds, as far as its quotas ask.
#[derive(Debug, Default)]
pub struct Objects {
    /// Its pods.
    pub pods: Vec<Pod>,
    /// Its services.
    pub services: Vec<Service>,
    /// Its claims.
    pub claims: Vec<PersistentVolumeClaim>,
    /// Object counts by quota resource name (`configmaps`, `deployments.apps`).
    pub counts: BTreeMap<String, usize>,
}

/// The quota resource names (`deployments.apps`) whose objects must be counted for `hard`.
pub fn needed_counts(hard: &BTreeMap<String, Quantity>) -> Vec<&'static str> {
    COUNTED
        .iter()
        .map(|(r, ..)| *r)
        .filter(|r| {
            hard.contains_key(&format!("count/{r}")) || (!r.contains('.') && hard.contains_key(*r))
        })
        .collect()
}

fn add(map: &mut BTreeMap<String, i128>, key: String, milli: i128) {
    *map.entry(key).or_insert(0) += milli;
}

fn container_amounts(r: Option<&ResourceRequirements>, prefix: &str) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    let list = match prefix {
        "requests" => r.and_then(|r| r.requests.as_ref().or(r.limits.as_ref())),
        _ => r.and_then(|r| r.limits.as_ref()),
    };
    for (name, q) in list.into_iter().flatten() {
        if let Ok(m) = quantity::parse_milli(&q.0) {
            add(&mut out, name.clone(), m);
        }
    }
    // A container's requests default to its limits resource by resource.
    if prefix == "requests" {
        if let Some(limits) = r.and_then(|r| r.limits.as_ref()) {
            for (name, q) in limits {
                if !out.contains_key(name) {
                    if let Ok(m) = quantity::parse_milli(&q.0) {
                        out.insert(name.clone(), m);
                    }
                }
            }
        }
    }
    out
}

/// A pod's effective `requests.<name>` and `limits.<name>` (app containers summed, init
/// containers as a maximum, overhead added).
pub fn pod_amounts(pod: &Pod) -> BTreeMap<String, i128> {
    let mut out = BTreeMap::new();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    for prefix in ["requests", "limits"] {
        let mut sum: BTreeMap<String, i128> = BTreeMap::new();
        for c in &spec.containers {
            for (k, v) in container_amounts(c.resources.as_ref(), prefix) {
                add(&mut sum, k, v);
            }
        }
        for c in spec.init_containers.iter().flatten() {
            for (k, v) in container_amounts(c.resources.as_ref(), prefix) {
                let e = sum.entry(k).or_insert(0);
                *e = (*e).max(v);
            }
        }
        for (k, q) in spec.overhead.iter().flatten() {
            if let Ok(m) = quantity::parse_milli(&q.0) {
                add(&mut sum, k.clone(), m);
            }
        }
        for (k, v) in sum {
            out.insert(format!("{prefix}.{k}"), v);
        }
    }
    out
}

fn best_effort(pod: &Pod) -> bool {
    pod.spec.iter().all(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .all(|c| {
                c.resources.as_ref().is_none_or(|r| {
                    r.requests.as_ref().is_none_or(|m| m.is_empty())
                        && r.limits.as_ref().is_none_or(|m| m.is_empty())
                })
            })
    })
}

/// Whether `pod` is in every one of `scopes` (unknown scopes match nothing).
pub fn pod_in_scopes(pod: &Pod, scopes: &[String]) -> bool {
    let terminating = pod
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .is_some_and(|s| s >= 0);
    scopes.iter().all(|s| match s.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        _ => false,
    })
}

/// `status.used` for `hard` given the namespace's objects (pods already narrowed to the
/// quota's scopes).
pub fn used(hard: &BTreeMap<String, Quantity>, objects: &Objects) -> BTreeMap<String, Quantity> {
    let live: Vec<&Pod> = objects
        .pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    let mut pod_sums: BTreeMap<String, i128> = BTreeMap::new();
    for p in &live {
        for (k, v) in pod_amounts(p) {
            add(&mut pod_sums, k, v);
        }
    }
    let mut storage: BTreeMap<String, i128> = BTreeMap::new();
    for c in &objects.claims {
        let class = c
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .unwrap_or_default();
        let req = c
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| quantity::parse_milli(&q.0).ok())
            .unwrap_or(0);
        add(&mut storage, "requests.storage".into(), req);
        add(&mut storage, "persistentvolumeclaims".into(), 1000);
        if !class.is_empty() {
            let prefix = format!("{class}.storageclass.storage.k8s.io/");
            add(&mut storage, format!("{prefix}requests.storage"), req);
            add(
                &mut storage,
                format!("{prefix}persistentvolumeclaims"),
                1000,
            );
        }
    }
    let count = |n: usize| (n as i128) * 1000;
    let mut out = BTreeMap::new();
    for key in hard.keys() {
        let binary = hard.get(key).is_some_and(|q| q.0.ends_with('i'));
        let milli: Option<i128> = match key.as_str() {
            "pods" | "count/pods" => Some(count(live.len())),
            "services" | "count/services" => Some(count(objects.services.len())),
            "services.loadbalancers" => Some(count(
                objects
                    .services
                    .iter()
                    .filter(|s| {
                        s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
                    })
                    .count(),
            )),
            "services.nodeports" => Some(count(
                objects
                    .services
                    .iter()
                    .filter_map(|s| s.spec.as_ref())
                    .filter(|s| matches!(s.type_.as_deref(), Some("NodePort" | "LoadBalancer")))
                    .flat_map(|s| s.ports.iter().flatten())
                    .filter(|p| p.node_port.is_some())
                    .count(),
            )),
            "cpu" | "memory" | "ephemeral-storage" => Some(
                pod_sums
                    .get(&format!("requests.{key}"))
                    .copied()
                    .unwrap_or(0),
            ),
            k if storage_key(k) => Some(storage.get(k).copied().unwrap_or(0)),
            k if k.starts_with("requests.") || k.starts_with("limits.") => {
                Some(pod_sums.get(k).copied().unwrap_or(0))
            }
            k => {
                let name = k.strip_prefix("count/").unwrap_or(k);
                objects.counts.get(name).map(|n| count(*n))
            }
        };
        if let Some(m) = milli {
            out.insert(key.clone(), Quantity(quantity::format_milli(m, binary)));
        }
    }
    out
}

fn storage_key(k: &str) -> bool {
    k == "requests.storage"
        || k == "persistentvolumeclaims"
        || k == "count/persistentvolumeclaims"
        || (k.contains(".storageclass.storage.k8s.io/"))
}

async fn list<K>(api: Api<K>, what: &str) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List(what.to_string(), e))?
        .items)
}

async fn reconcile(quota: Arc<ResourceQuota>, ctx: Arc<Context>) -> Result<Action> {
    let ns = quota.namespace().ok_or(Error::NoNamespace)?;
    let spec = quota.spec.clone().unwrap_or_default();
    let hard = spec.hard.clone().unwrap_or_default();
    let client = ctx.client.clone();
    let mut objects = Objects::default();
    let needs = |p: &str| hard.keys().any(|k| k.starts_with(p));
    if hard.keys().any(|k| {
        k == "pods"
            || k == "count/pods"
            || k == "cpu"
            || k == "memory"
            || k == "ephemeral-storage"
            || ((k.starts_with("requests.") || k.starts_with("limits.")) && !storage_key(k))
    }) {
        let scopes = spec.scopes.clone().unwrap_or_default();
        objects.pods = list(Api::<Pod>::namespaced(client.clone(), &ns), "pods")
            .await?
            .into_iter()
            .filter(|p| pod_in_scopes(p, &scopes))
            .collect();
    }
    if needs("services") || needs("count/services") {
        objects.services =
            list(Api::<Service>::namespaced(client.clone(), &ns), "services").await?;
    }
    if hard.keys().any(|k| storage_key(k)) {
        objects.claims = list(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns),
            "persistentvolumeclaims",
        )
        .await?;
    }
    for resource in needed_counts(&hard) {
        if matches!(resource, "pods" | "services" | "persistentvolumeclaims") {
            continue;
        }
        let Some((_, group, version, kind)) = COUNTED.iter().find(|(r, ..)| *r == resource) else {
            continue;
        };
        let ar = api_resource(group, version, kind);
        let n = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| Error::List(resource.to_string(), e))?
            .items
            .len();
        objects.counts.insert(resource.to_string(), n);
    }
    let used = used(&hard, &objects);
    let old = quota.status.clone().unwrap_or_default();
    if old.hard.as_ref() != Some(&hard) || old.used.as_ref() != Some(&used) {
        let patch = json!({"status": {
            "hard": merge_map(old.hard.as_ref(), &hard),
            "used": merge_map(old.used.as_ref(), &used),
        }});
        Api::<ResourceQuota>::namespaced(client, &ns)
            .patch_status(
                &quota.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(Error::Status)?;
    }
    ctx.succeeded(quota.as_ref());
    Ok(Action::await_change())
}

/// A merge patch turning `old` into `new` (removed keys set to null).
fn merge_map(old: Option<&BTreeMap<String, Quantity>>, new: &BTreeMap<String, Quantity>) -> Value {
    let mut m = Map::new();
    for k in old.into_iter().flat_map(|o| o.keys()) {
        m.insert(k.clone(), Value::Null);
    }
    for (k, v) in new {
        m.insert(k.clone(), json!(v.0));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn sums_pods_claims_and_counts() {
        let web = pod(json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                                        "limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
        ], "initContainers": [
            {"name": "i", "resources": {"requests": {"cpu": "2"}}},
        ]}}));
        let done = pod(json!({"spec": {"containers": [{"name": "a",
            "resources": {"requests": {"cpu": "5"}}}]}, "status": {"phase": "Succeeded"}}));
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({"spec": {
            "storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}}))
        .expect("claim");
        let objects = Objects {
            pods: vec![web, done],
            services: vec![Service::default()],
            claims: vec![claim.clone(), claim],
            counts: [("configmaps".to_string(), 3)].into(),
        };
        let hard: BTreeMap<String, Quantity> = [
            "pods",
            "requests.cpu",
            "requests.memory",
            "limits.cpu",
            "requests.nvidia.com/gpu",
            "limits.memory",
            "services",
            "configmaps",
            "count/configmaps",
            "requests.storage",
            "persistentvolumeclaims",
            "fast.storageclass.storage.k8s.io/requests.storage",
            "count/deployments.apps",
        ]
        .iter()
        .map(|k| {
            (
                k.to_string(),
                q(if k.contains("memory") || k.contains("storage") {
                    "10Gi"
                } else {
                    "10"
                }),
            )
        })
        .collect();
        let used = used(&hard, &objects);
        let want = [
            ("pods", "1"),
            ("requests.cpu", "2"),
            ("requests.memory", "128Mi"),
            ("limits.cpu", "1"),
            ("requests.nvidia.com/gpu", "1"),
            ("limits.memory", "0"),
            ("services", "1"),
            ("configmaps", "3"),
            ("count/configmaps", "3"),
            ("requests.storage", "2Gi"),
            ("persistentvolumeclaims", "2"),
            ("fast.storageclass.storage.k8s.io/requests.storage", "2Gi"),
        ];
        for (k, v) in want {
            assert_eq!(used.get(k), Some(&q(v)), "{k}");
        }
        // Not counted (no list was made for it): left out rather than reported as 0.
        assert_eq!(used.get("count/deployments.apps"), None);
    }

    #[test]
    fn scopes() {
        let best = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let bounded = pod(json!({"spec": {"activeDeadlineSeconds": 5, "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}));
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(pod_in_scopes(&best, &s(&["BestEffort", "NotTerminating"])));
        assert!(!pod_in_scopes(&best, &s(&["Terminating"])));
        assert!(pod_in_scopes(
            &bounded,
            &s(&["Terminating", "NotBestEffort"])
        ));
        assert!(!pod_in_scopes(&bounded, &s(&["PriorityClass"])));
        assert_eq!(
            needed_counts(
                &[
                    ("count/jobs.batch".to_string(), q("1")),
                    ("secrets".to_string(), q("1"))
                ]
                .into()
            ),
            vec!["secrets", "jobs.batch"]
        );
    }
}
