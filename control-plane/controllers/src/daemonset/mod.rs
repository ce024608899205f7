//! The DaemonSet controller: one pod per Node that its `nodeSelector` and required node
//! affinity select, whose `NoSchedule` / `NoExecute` taints the pod tolerates and that is not
//! cordoned. Pods are pinned to their node by required node affinity (`metadata.name In
//! [node]`, as upstream since 1.12) and bound by the scheduler — the host's, for a tenant's.
//!
//! Pods on nodes that no longer fit (not selected, an untolerated `NoExecute` taint) are
//! deleted; a `NoSchedule` taint or cordoning keeps existing pods. `RollingUpdate` replaces
//! pods at an old template while fewer than `maxUnavailable` nodes are unavailable; `OnDelete`
//! only creates missing pods. Templates are recorded as ControllerRevisions; pods carry
//! `controller-revision-hash` and `pod-template-generation`.
//!
//! Woken by changes to DaemonSets, the pods they own and Nodes.

pub mod plan;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::replicaset::plan::pod_from_template;
use crate::revision::{self, HASH_LABEL};
use crate::shared::{controller_ref, owner_ref, pod_is_ready, pod_phase, shutdown, Context};
use plan::{NodeState, PodState, Step};

/// Label with the DaemonSet generation a pod was created from.
pub const GENERATION_LABEL: &str = "pod-template-generation";

/// Errors of the DaemonSet controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The DaemonSet has no namespace (never for a served one).
    #[error("daemonset has no namespace")]
    NoNamespace,
    /// Listing nodes or pods failed.
    #[error("failed to list {0}: {why}", why = crate::shared::brief(.1))]
    List(&'static str, #[source] kube::Error),
    /// Recording the revision failed.
    #[error(transparent)]
    Revision(#[from] revision::Error),
    /// Creating a pod failed.
    #[error("failed to create pod on node {0}: {why}", why = crate::shared::brief(.1))]
    CreatePod(String, #[source] kube::Error),
    /// Deleting a pod failed.
    #[error("failed to delete pod {0}: {why}", why = crate::shared::brief(.1))]
    DeletePod(String, #[source] kube::Error),
    /// Writing the status failed.
    #[error("failed to update status: {why}", why = crate::shared::brief(.0))]
    Status(#[source] kube::Error),
}

impl Error {
    /// The reason of the Warning Event a failure publishes (upstream's).
    fn reason(&self) -> &'static str {
        match self {
            Error::CreatePod(..) => "FailedCreate",
            Error::DeletePod(..) => "FailedDelete",
            _ => "ReconcileError",
        }
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the DaemonSet controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "daemonset-controller");
    let controller = Controller::new(
        Api::<DaemonSet>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .owns(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .watches(
            Api::<Node>::all(client),
            watcher::Config::default(),
            move |_node| {
                store
                    .state()
                    .iter()
                    .map(|ds| ObjectRef::from_obj(ds.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |d, e, ctx: Arc<Context>| ctx.failed_as(d.as_ref(), e.reason(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action> {
    let ns = ds.namespace().ok_or(Error::NoNamespace)?;
    let spec = &ds.spec;
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ds.name_any();
    let owner = owner_ref(ds.as_ref());
    let revs: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    let collisions = ds.status.as_ref().and_then(|s| s.collision_count);
    let (current, existing) =
        revision::ensure(&revs, &owner, &selector_labels, &spec.template, collisions).await?;
    let hash = revision::hash_of(&name, &current.name).to_string();

    let nodes = Api::<Node>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List("nodes", e))?
        .items;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = ds.uid().unwrap_or_default();
    let all = pods_api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List("pods", e))?
        .items;
    let mut by_node: BTreeMap<String, Vec<PodState>> = BTreeMap::new();
    for p in all
        .iter()
        .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
    {
        let node = p.spec.as_ref().and_then(plan::node_of).unwrap_or_default();
        by_node.entry(node).or_default().push(PodState {
            name: p.name_any(),
            updated: p.labels().get(HASH_LABEL) == Some(&hash),
            ready: pod_is_ready(p),
            terminating: p.metadata.deletion_timestamp.is_some(),
            finished: matches!(pod_phase(p), "Succeeded" | "Failed"),
        });
    }
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let mut states: Vec<NodeState> = nodes
        .iter()
        .map(|n| NodeState {
            name: n.name_any(),
            fit: plan::fit(&pod_spec, n),
            pods: by_node.remove(&n.name_any()).unwrap_or_default(),
        })
        .collect();
    // Pods on nodes that are gone (or on no node) do not belong anywhere.
    let gone = plan::Fit {
        should_run: false,
        may_stay: false,
    };
    states.extend(by_node.into_iter().map(|(node, pods)| NodeState {
        name: node,
        fit: gone,
        pods,
    }));

    let strategy = spec.update_strategy.as_ref();
    let rolling = strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let desired = states.iter().filter(|n| n.fit.should_run).count() as i32;
    let max_unavailable = plan::max_unavailable(
        strategy
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref()),
        desired,
    );
    for step in plan::next_steps(&states, rolling, max_unavailable) {
        match step {
            Step::Create(node) => {
                let mut pod = pod_from_template(&spec.template, &ns, &name, owner.clone());
                let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.insert(HASH_LABEL.into(), hash.clone());
                labels.insert(
                    GENERATION_LABEL.into(),
                    ds.metadata.generation.unwrap_or(1).to_string(),
                );
                if let Some(s) = pod.spec.as_mut() {
                    plan::pin_to_node(s, &node);
                }
                match pods_api.create(&PostParams::default(), &pod).await {
                    Ok(p) => ctx.publish(
                        ds.as_ref(),
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created pod: {}", p.name_any()),
                    ),
                    Err(e) => return Err(Error::CreatePod(node, e)),
                }
            }
            Step::Delete(pod) => match pods_api.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => ctx.publish(
                    ds.as_ref(),
                    EventType::Normal,
                    "SuccessfulDelete",
                    &format!("Deleted pod: {pod}"),
                ),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::DeletePod(pod, e)),
            },
        }
    }

    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    revision::delete(
        &revs,
        &revision::prune(&existing, &[current.name.as_str()], limit),
    )
    .await?;

    let status = plan::status(&ds, &states);
    if ds.status.as_ref() != Some(&status) {
        Api::<DaemonSet>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(Error::Status)?;
    }
    ctx.succeeded(ds.as_ref());
    Ok(Action::await_change())
}
