//! ResourceQuota status: `status.hard` is `spec.hard`, `status.used` what the namespace uses of
//! each resource named there.
//!
//! What each object counts and which objects a quota's scopes (`scopes` and `scopeSelector`)
//! take in is [`fabrik_machinery::quota`]'s — the function quota admission charges with, so
//! that what is reported and what is enforced are the same: pods (not finished) with their
//! requests and limits as upstream computes them (sidecars added to the app containers, init
//! containers as a maximum, overhead), Services with their node ports and load balancers,
//! claims with their storage (per class too), and `count/<resource>[.<group>]` for the kinds
//! in [`COUNTED`]. Resources of other kinds are not reported. Enforcement at admission is not
//! done here.
//!
//! Woken by changes to ResourceQuotas and to every counted kind in their namespace.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use fabrik_machinery::quota;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
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
    #[error("failed to list {0}: {why}", why = crate::shared::brief(.1))]
    List(String, #[source] kube::Error),
    /// Writing the status failed.
    #[error("failed to update status: {why}", why = crate::shared::brief(.0))]
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

/// The kind (a [`COUNTED`] resource name) whose objects a quota resource counts, if any:
/// `requests.cpu` → `pods`, `services.nodeports` → `services`, `count/jobs.batch` →
/// `jobs.batch`, `gold.storageclass.storage.k8s.io/requests.storage` → claims.
pub fn kind_of(key: &str) -> Option<&'static str> {
    let counted = |name: &str| COUNTED.iter().map(|(r, ..)| *r).find(|r| *r == name);
    if key == "requests.storage" || key.contains(".storageclass.storage.k8s.io/") {
        return Some("persistentvolumeclaims");
    }
    if let Some(name) = key.strip_prefix("count/") {
        return counted(name);
    }
    if key == "services" || key.starts_with("services.") {
        return Some("services");
    }
    if matches!(key, "pods" | "cpu" | "memory" | "ephemeral-storage")
        || key.starts_with("hugepages-")
        || key.starts_with("requests.")
        || key.starts_with("limits.")
    {
        return Some("pods");
    }
    counted(key).filter(|r| !r.contains('.'))
}

/// What a namespace holds, as far as its quotas ask: the objects of each kind listed, by
/// [`COUNTED`] resource name (kinds not listed are not reported).
#[derive(Debug, Default)]
pub struct Objects {
    /// Objects by resource name (`pods`, `deployments.apps`); only what usage needs of them
    /// (for kinds counted by number only, their metadata).
    pub by_kind: BTreeMap<String, Vec<Value>>,
}

/// `status.used` for a quota with this spec (`spec` as JSON, for its scopes) and `hard`:
/// [`fabrik_machinery::quota`]'s usage — the one quota admission charges — of the
/// namespace's objects, for each resource of `hard` whose kind was listed.
pub fn used(
    spec: &Value,
    hard: &BTreeMap<String, Quantity>,
    objects: &Objects,
) -> BTreeMap<String, Quantity> {
    let limits: quota::Usage = hard
        .iter()
        .filter_map(|(k, q)| {
            fabrik_machinery::quantity::Quantity::from_json(&Value::String(q.0.clone()))
                .ok()
                .map(|q| (k.clone(), q))
        })
        .collect();
    let items = objects.by_kind.iter().flat_map(|(resource, objs)| {
        let (plural, group) = resource.split_once('.').unwrap_or((resource.as_str(), ""));
        objs.iter().map(move |o| (group, plural, o))
    });
    let total = quota::used(spec, &limits, items);
    hard.keys()
        .filter(|k| kind_of(k).is_some_and(|kind| objects.by_kind.contains_key(kind)))
        .map(|k| {
            let q = total
                .get(k)
                .copied()
                .unwrap_or(fabrik_machinery::quantity::Quantity::ZERO);
            (k.clone(), Quantity(q.to_string()))
        })
        .collect()
}

fn to_values<K: serde::Serialize>(items: Vec<K>) -> Vec<Value> {
    items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
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
    let kinds: std::collections::BTreeSet<&'static str> =
        hard.keys().filter_map(|k| kind_of(k)).collect();
    for resource in kinds {
        let Some((_, group, version, kind)) = COUNTED.iter().find(|(r, ..)| *r == resource) else {
            continue;
        };
        let items: Vec<Value> = match resource {
            "pods" => to_values(list(Api::<Pod>::namespaced(client.clone(), &ns), "pods").await?),
            "services" => {
                to_values(list(Api::<Service>::namespaced(client.clone(), &ns), "services").await?)
            }
            "persistentvolumeclaims" => to_values(
                list(
                    Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns),
                    "persistentvolumeclaims",
                )
                .await?,
            ),
            _ => {
                let ar = api_resource(group, version, kind);
                let n = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
                    .list_metadata(&ListParams::default())
                    .await
                    .map_err(|e| Error::List(resource.to_string(), e))?
                    .items
                    .len();
                // Counted by number only: what each counts does not depend on its fields.
                vec![Value::Null; n]
            }
        };
        objects.by_kind.insert(resource.to_string(), items);
    }
    let spec_value = serde_json::to_value(&spec).unwrap_or(Value::Null);
    let used = used(&spec_value, &hard, &objects);
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

    fn hard(keys: &[&str]) -> BTreeMap<String, Quantity> {
        keys.iter()
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
            .collect()
    }

    #[test]
    fn sums_pods_claims_and_counts() {
        let web = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                                        "limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
        ], "initContainers": [
            {"name": "i", "resources": {"requests": {"cpu": "2"}}},
            {"name": "s", "restartPolicy": "Always",
             "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}},
        ]}});
        let done = json!({"spec": {"containers": [{"name": "a",
            "resources": {"requests": {"cpu": "5"}}}]}, "status": {"phase": "Succeeded"}});
        let claim = json!({"spec": {
            "storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}});
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}});
        let objects = Objects {
            by_kind: [
                ("pods".to_string(), vec![web, done]),
                ("services".to_string(), vec![svc]),
                (
                    "persistentvolumeclaims".to_string(),
                    vec![claim.clone(), claim],
                ),
                ("configmaps".to_string(), vec![Value::Null; 3]),
            ]
            .into(),
        };
        let hard = hard(&[
            "pods",
            "count/pods",
            "requests.cpu",
            "requests.memory",
            "limits.cpu",
            "requests.nvidia.com/gpu",
            "limits.memory",
            "services",
            "services.nodeports",
            "services.loadbalancers",
            "configmaps",
            "count/configmaps",
            "requests.storage",
            "persistentvolumeclaims",
            "fast.storageclass.storage.k8s.io/requests.storage",
            "count/deployments.apps",
        ]);
        let used = used(&json!({}), &hard, &objects);
        let want = [
            ("pods", "1"),
            ("count/pods", "2"),
            // max(sidecar 0 + init 2, 0.5 of app containers)
            ("requests.cpu", "2"),
            ("requests.memory", "128Mi"),
            ("limits.cpu", "1"),
            // The sidecar's GPU adds to the app container's.
            ("requests.nvidia.com/gpu", "2"),
            ("limits.memory", "0"),
            ("services", "1"),
            ("services.nodeports", "2"),
            ("services.loadbalancers", "0"),
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
    fn scopes_are_admissions() {
        let best = json!({"spec": {"containers": [{"name": "a"}]}});
        let classy = json!({"spec": {"priorityClassName": "high", "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        let objects = Objects {
            by_kind: [("pods".to_string(), vec![best, classy])].into(),
        };
        let hard = hard(&["pods"]);
        let count = |spec: Value| used(&spec, &hard, &objects)["pods"].clone();
        assert_eq!(count(json!({})), q("2"));
        assert_eq!(count(json!({"scopes": ["BestEffort"]})), q("1"));
        // scopeSelector is honoured, as at admission.
        assert_eq!(
            count(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}})),
            q("1")
        );
        assert_eq!(count(json!({"scopes": ["NoSuchScope"]})), q("0"));
    }

    #[test]
    fn keys_map_to_kinds() {
        for (key, kind) in [
            ("requests.cpu", Some("pods")),
            ("cpu", Some("pods")),
            ("requests.nvidia.com/gpu", Some("pods")),
            ("services.nodeports", Some("services")),
            ("requests.storage", Some("persistentvolumeclaims")),
            (
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
                Some("persistentvolumeclaims"),
            ),
            ("count/jobs.batch", Some("jobs.batch")),
            ("secrets", Some("secrets")),
            ("count/widgets.example.com", None),
        ] {
            assert_eq!(kind_of(key), kind, "{key}");
        }
    }
}
