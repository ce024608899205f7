//! The StatefulSet controller: pods `<name>-<ordinal>` with stable hostnames
//! (`hostname` = pod name, `subdomain` = `serviceName`) and claims
//! `<template>-<name>-<ordinal>` from `volumeClaimTemplates`.
//!
//! `OrderedReady` creates one pod at a time in ascending order, each after its predecessors are
//! Running and Ready, and deletes from the highest ordinal down; `Parallel` does both at once.
//! `RollingUpdate` replaces pods at an old revision from the highest ordinal down to the
//! `partition`, one at a time; `OnDelete` only creates missing pods at the update revision.
//! Templates are recorded as ControllerRevisions; pods carry `controller-revision-hash`.
//! Claims are never deleted by default; `persistentVolumeClaimRetentionPolicy` `whenDeleted:
//! Delete` makes the StatefulSet their owner (garbage collection deletes them with it) and
//! `whenScaled: Delete` deletes the claims of ordinals removed by a scale-down.
//!
//! Woken by changes to StatefulSets and the pods they own.

pub mod plan;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::revision;
use crate::shared::{controller_ref, owner_ref, shutdown, Context};
use plan::{Input, PodState, Step};

/// Errors of the StatefulSet controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The StatefulSet has no namespace (never for a served one).
    #[error("statefulset has no namespace")]
    NoNamespace,
    /// Listing pods or claims failed.
    #[error("failed to list {0}: {why}", why = crate::shared::brief(.1))]
    List(&'static str, #[source] kube::Error),
    /// Recording the revision failed.
    #[error(transparent)]
    Revision(#[from] revision::Error),
    /// Creating a claim failed.
    #[error("failed to create claim {0}: {why}", why = crate::shared::brief(.1))]
    CreateClaim(String, #[source] kube::Error),
    /// Deleting a claim failed.
    #[error("failed to delete claim {0}: {why}", why = crate::shared::brief(.1))]
    DeleteClaim(String, #[source] kube::Error),
    /// Creating a pod failed.
    #[error("failed to create pod {0}: {why}", why = crate::shared::brief(.1))]
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
            Error::CreateClaim(..) => "FailedCreate",
            Error::DeleteClaim(..) => "FailedDelete",
            _ => "ReconcileError",
        }
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the StatefulSet controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "statefulset-controller");
    Controller::new(
        Api::<StatefulSet>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Pod>::all(client), watcher::Config::default())
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        reconcile,
        |s, e, ctx: Arc<Context>| ctx.failed_as(s.as_ref(), e.reason(), e),
        ctx,
    )
    .for_each(|_| async {})
    .await;
}

async fn reconcile(sts: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action> {
    let ns = sts.namespace().ok_or(Error::NoNamespace)?;
    let spec = &sts.spec;
    if sts.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = sts.name_any();
    let owner = owner_ref(sts.as_ref());
    let revs: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    let (update, existing) = revision::ensure(
        &revs,
        &owner,
        &selector_labels,
        &spec.template,
        sts.status.as_ref().and_then(|s| s.collision_count),
    )
    .await?;
    let update_hash = revision::hash_of(&name, &update.name).to_string();
    let current_revision = sts
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .filter(|c| existing.iter().any(|(n, _)| n == c))
        .unwrap_or_else(|| update.name.clone());
    let current_hash = revision::hash_of(&name, &current_revision).to_string();

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = sts.uid().unwrap_or_default();
    let all = pods_api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List("pods", e))?
        .items;
    let owned: Vec<&Pod> = all
        .iter()
        .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let by_ordinal: BTreeMap<i32, PodState> = owned
        .iter()
        .filter_map(|p| plan::ordinal_of(&name, &p.name_any()).map(|o| (o, PodState::of(p))))
        .collect();

    let replicas = spec.replicas.unwrap_or(1);
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let start = plan::start_ordinal(&sts);
    let input = Input {
        start,
        replicas,
        parallel: spec.pod_management_policy.as_deref() == Some("Parallel"),
        rolling,
        partition,
        update_hash: &update_hash,
        pods: &by_ordinal,
    };
    let steps = plan::next_steps(&input);
    let (delete_with_set, delete_on_scale) = plan::retention(&sts);
    for step in steps {
        match step {
            Step::Create(ordinal) => {
                let claim_owner = delete_with_set.then(|| owner.clone());
                create_claims(&ctx, &sts, ordinal, claim_owner).await?;
                let pod = plan::pod_for(&sts, ordinal, &update_hash, owner.clone());
                let pod_name = pod.name_any();
                match pods_api.create(&PostParams::default(), &pod).await {
                    Ok(_) => ctx.publish(
                        sts.as_ref(),
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("create Pod {pod_name} in StatefulSet {name} successful"),
                    ),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(Error::CreatePod(pod_name, e)),
                }
            }
            Step::Delete(pod_name) => {
                match pods_api.delete(&pod_name, &DeleteParams::default()).await {
                    Ok(_) => ctx.publish(
                        sts.as_ref(),
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("delete Pod {pod_name} in StatefulSet {name} successful"),
                    ),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(Error::DeletePod(pod_name, e)),
                }
            }
        }
    }
    if delete_on_scale {
        delete_scaled_claims(&ctx, &sts, &by_ordinal, start + replicas.max(0)).await?;
    }

    let limit = spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let prune = revision::prune(
        &existing,
        &[current_revision.as_str(), update.name.as_str()],
        limit,
    );
    revision::delete(&revs, &prune).await?;

    let status = plan::status(
        &sts,
        &owned,
        &current_revision,
        &current_hash,
        &update.name,
        &update_hash,
        sts.status.as_ref().and_then(|s| s.collision_count),
    );
    if sts.status.as_ref() != Some(&status) {
        Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(Error::Status)?;
    }
    ctx.succeeded(sts.as_ref());
    Ok(Action::await_change())
}

/// Creates the claims of `ordinal` that do not exist yet.
async fn create_claims(
    ctx: &Context,
    sts: &StatefulSet,
    ordinal: i32,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Result<()> {
    let ns = sts.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for claim in plan::claims_for(sts, ordinal, owner) {
        let claim_name = claim.name_any();
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => ctx.publish(
                sts,
                EventType::Normal,
                "SuccessfulCreate",
                &format!(
                    "create Claim {claim_name} Pod {}-{ordinal} in StatefulSet {} success",
                    sts.name_any(),
                    sts.name_any()
                ),
            ),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::CreateClaim(claim_name, e)),
        }
    }
    Ok(())
}

/// `whenScaled: Delete`: deletes the claims of ordinals at or above `end` whose pod is gone.
async fn delete_scaled_claims(
    ctx: &Context,
    sts: &StatefulSet,
    pods: &BTreeMap<i32, PodState>,
    end: i32,
) -> Result<()> {
    let ns = sts.namespace().unwrap_or_default();
    let name = sts.name_any();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let templates: Vec<String> = sts
        .spec
        .volume_claim_templates
        .iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .collect();
    if templates.is_empty() {
        return Ok(());
    }
    let claims = api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List("persistentvolumeclaims", e))?
        .items;
    for claim in claims {
        let cname = claim.name_any();
        let doomed = templates.iter().any(|t| {
            cname
                .strip_prefix(&format!("{t}-"))
                .and_then(|rest| plan::ordinal_of(&name, rest))
                .is_some_and(|o| o >= end && !pods.contains_key(&o))
        });
        if doomed && claim.metadata.deletion_timestamp.is_none() {
            match api.delete(&cname, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::DeleteClaim(cname, e)),
            }
        }
    }
    Ok(())
}
