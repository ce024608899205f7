//! The ReplicaSet controller: keeps `spec.replicas` active pods matching the selector.
//!
//! Pods are created from the template (generateName `<rs>-`, a controller ownerReference with
//! `blockOwnerDeletion`), orphans matching the selector are adopted and owned pods that stopped
//! matching are released, surplus pods are deleted in upstream's order (unscheduled, pending,
//! not ready first). Status: replicas, fullyLabeled / ready / available replicas (honouring
//! `minReadySeconds`), observedGeneration, and the `ReplicaFailure` condition.
//!
//! Woken by changes to ReplicaSets and to pods (owned ones, and orphans its selector matches).
//! Each reconcile reads the namespace's pods from the server (consistent reads: no
//! expectations bookkeeping needed).

pub mod plan;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::shared::{
    controller_ref, owner_ref, selector_matches, set_controller, shutdown, Context,
};

/// Errors of the ReplicaSet controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ReplicaSet has no namespace (never for a served ReplicaSet).
    #[error("replicaset has no namespace")]
    NoNamespace,
    /// Listing the namespace's pods failed.
    #[error("failed to list pods: {why}", why = crate::shared::brief(.0))]
    ListPods(#[source] kube::Error),
    /// Creating a pod failed.
    #[error("failed to create pod: {why}", why = crate::shared::brief(.0))]
    CreatePod(#[source] kube::Error),
    /// Deleting a pod failed.
    #[error("failed to delete pod {0}: {why}", why = crate::shared::brief(.1))]
    DeletePod(String, #[source] kube::Error),
    /// Adopting or releasing a pod failed.
    #[error("failed to update the owner references of pod {0}: {why}", why = crate::shared::brief(.1))]
    ClaimPod(String, #[source] kube::Error),
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

/// Runs the ReplicaSet controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "replicaset-controller");
    let controller = Controller::new(
        Api::<ReplicaSet>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .watches(
            Api::<Pod>::all(client),
            watcher::Config::default(),
            move |pod| owners_of(&store, &pod),
        )
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |rs, e, ctx: Arc<Context>| ctx.failed_as(rs.as_ref(), e.reason(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// The ReplicaSets a pod change concerns: its controller if that is a ReplicaSet; for an
/// orphan, every ReplicaSet of its namespace whose selector matches it.
fn owners_of(store: &Store<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    let ns = pod.namespace().unwrap_or_default();
    match controller_ref(&pod.metadata) {
        Some(r) if r.kind == "ReplicaSet" && r.api_version == "apps/v1" => {
            vec![ObjectRef::new(&r.name).within(&ns)]
        }
        Some(_) => vec![],
        None => {
            let labels = pod.labels();
            store
                .state()
                .iter()
                .filter(|rs| rs.namespace().as_deref() == Some(ns.as_str()))
                .filter(|rs| {
                    !crate::shared::selector_is_empty(&rs.spec.selector)
                        && selector_matches(&rs.spec.selector, labels)
                })
                .map(|rs| ObjectRef::from_obj(rs.as_ref()))
                .collect()
        }
    }
}

async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Context>) -> Result<Action> {
    let ns = rs.namespace().ok_or(Error::NoNamespace)?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = pods_api
        .list(&ListParams::default())
        .await
        .map_err(Error::ListPods)?
        .items;
    let uid = rs.uid().unwrap_or_default();
    let deleting = rs.meta().deletion_timestamp.is_some();
    let spec = &rs.spec;
    let claim = crate::shared::claim(&uid, deleting, &spec.selector, &pods);
    let owner = owner_ref(rs.as_ref());
    for pod in &claim.adopt {
        set_controller(&pods_api, *pod, Some(&owner))
            .await
            .map_err(|e| Error::ClaimPod(pod.name_any(), e))?;
    }
    for pod in &claim.release {
        set_controller(&pods_api, *pod, None)
            .await
            .map_err(|e| Error::ClaimPod(pod.name_any(), e))?;
    }
    let owned: Vec<&Pod> = claim
        .owned
        .iter()
        .chain(claim.adopt.iter())
        .copied()
        .collect();
    let active: Vec<&Pod> = owned
        .iter()
        .copied()
        .filter(|p| crate::shared::pod_is_active(p))
        .collect();

    let mut failure = None;
    if !deleting {
        let diff = plan::diff(spec.replicas.unwrap_or(1), active.len());
        let result = if diff > 0 {
            create_pods(&ctx, &rs, &pods_api, diff as usize).await
        } else if diff < 0 {
            delete_pods(&ctx, &rs, &pods_api, &active, diff.unsigned_abs() as usize).await
        } else {
            Ok(())
        };
        if let Err(e) = result {
            let reason = match e {
                Error::CreatePod(_) => "FailedCreate",
                _ => "FailedDelete",
            };
            failure = Some((reason, e.to_string(), e));
        }
    }

    let (status, recheck) = plan::status(
        &rs,
        &owned,
        failure.as_ref().map(|(r, m, _)| (*r, m.clone())),
        Timestamp::now(),
    );
    if rs.status.as_ref() != Some(&status) {
        Api::<ReplicaSet>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(Error::Status)?;
    }
    if let Some((_, _, e)) = failure {
        return Err(e);
    }
    ctx.succeeded(rs.as_ref());
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

async fn create_pods(ctx: &Context, rs: &ReplicaSet, api: &Api<Pod>, n: usize) -> Result<()> {
    let Some(template) = rs.spec.template.as_ref() else {
        return Ok(());
    };
    let ns = rs.namespace().unwrap_or_default();
    let pod = plan::pod_from_template(template, &ns, &rs.name_any(), owner_ref(rs));
    let pp = PostParams::default();
    for batch in plan::batches(n) {
        let results = futures::future::join_all((0..batch).map(|_| api.create(&pp, &pod))).await;
        for r in results {
            match r {
                Ok(p) => ctx.publish(
                    rs,
                    EventType::Normal,
                    "SuccessfulCreate",
                    &format!("Created pod: {}", p.name_any()),
                ),
                Err(e) => return Err(Error::CreatePod(e)),
            }
        }
    }
    Ok(())
}

async fn delete_pods(
    ctx: &Context,
    rs: &ReplicaSet,
    api: &Api<Pod>,
    active: &[&Pod],
    n: usize,
) -> Result<()> {
    let victims = plan::pick_for_deletion(active, n);
    let results = futures::future::join_all(victims.iter().map(|p| async move {
        let name = p.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(name),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(name),
            Err(e) => Err(Error::DeletePod(name, e)),
        }
    }))
    .await;
    for r in results {
        let name = r?;
        ctx.publish(
            rs,
            EventType::Normal,
            "SuccessfulDelete",
            &format!("Deleted pod: {name}"),
        );
    }
    Ok(())
}
