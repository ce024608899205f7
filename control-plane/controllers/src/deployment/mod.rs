//! The Deployment controller: one ReplicaSet per pod template (named `<deployment>-<hash>`,
//! label `pod-template-hash`), rolled with `RollingUpdate` (maxSurge / maxUnavailable) or
//! `Recreate`, revisions in `deployment.kubernetes.io/revision`, old ReplicaSets pruned past
//! `revisionHistoryLimit`, and the status `kubectl rollout status` reads.
//!
//! `kubectl rollout undo` copies an old ReplicaSet's template into the Deployment: that
//! ReplicaSet becomes the new one again and gets the next revision. `restart` changes a
//! template annotation (a new template, so a new ReplicaSet); `pause` sets `spec.paused`, which
//! stops rollouts (scaling still applies).
//!
//! Each reconcile takes one step (grow the new ReplicaSet, or shrink old ones) and waits for
//! the ReplicaSets' status to change before the next.

pub mod hash;
pub mod rolling;
pub mod status;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::shared::{
    claim, controller_ref, owner_ref, selector_is_empty, selector_matches, set_controller,
    shutdown, Context,
};
use status::NewReplicaSet;

/// Label that tells the ReplicaSets of a Deployment apart.
pub const HASH_LABEL: &str = "pod-template-hash";
/// Revision annotation on Deployments and their ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of a Deployment that are not copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Errors of the Deployment controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Deployment has no namespace (never for a served one).
    #[error("deployment has no namespace")]
    NoNamespace,
    /// maxSurge / maxUnavailable cannot be read.
    #[error("invalid rolling update parameters: {0}")]
    Strategy(#[source] rolling::Error),
    /// Listing ReplicaSets failed.
    #[error("failed to list replicasets: {why}", why = crate::shared::brief(.0))]
    List(#[source] kube::Error),
    /// Creating the new ReplicaSet failed.
    #[error("failed to create replicaset: {why}", why = crate::shared::brief(.0))]
    Create(#[source] kube::Error),
    /// Scaling, annotating, adopting or deleting a ReplicaSet failed.
    #[error("failed to update replicaset {0}: {why}", why = crate::shared::brief(.1))]
    Update(String, #[source] kube::Error),
    /// Writing the Deployment (status or revision annotation) failed.
    #[error("failed to update deployment: {why}", why = crate::shared::brief(.0))]
    Deployment(#[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the Deployment controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "deployment-controller");
    let controller = Controller::new(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .watches(
            Api::<ReplicaSet>::all(client),
            watcher::Config::default(),
            move |rs| owners_of(&store, &rs),
        )
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |d, e, ctx: Arc<Context>| ctx.failed(d.as_ref(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

fn owners_of(store: &Store<Deployment>, rs: &ReplicaSet) -> Vec<ObjectRef<Deployment>> {
    let ns = rs.namespace().unwrap_or_default();
    match controller_ref(&rs.metadata) {
        Some(r) if r.kind == "Deployment" && r.api_version == "apps/v1" => {
            vec![ObjectRef::new(&r.name).within(&ns)]
        }
        Some(_) => vec![],
        None => store
            .state()
            .iter()
            .filter(|d| d.namespace().as_deref() == Some(ns.as_str()))
            .filter(|d| {
                !selector_is_empty(&d.spec.selector)
                    && selector_matches(&d.spec.selector, rs.labels())
            })
            .map(|d| ObjectRef::from_obj(d.as_ref()))
            .collect(),
    }
}

/// The revision of a ReplicaSet (0 when unset or unreadable).
pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Whether `rs_template` is `template` apart from the hash label.
pub fn same_template(rs_template: Option<&PodTemplateSpec>, template: &PodTemplateSpec) -> bool {
    let Some(t) = rs_template else { return false };
    let mut a = serde_json::to_value(t).unwrap_or(Value::Null);
    let mut b = serde_json::to_value(template).unwrap_or(Value::Null);
    for v in [&mut a, &mut b] {
        if let Some(labels) = v
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.remove(HASH_LABEL);
            if labels.is_empty() {
                if let Some(m) = v.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                    m.remove("labels");
                }
            }
        }
        if v.pointer("/metadata")
            .and_then(Value::as_object)
            .is_some_and(|m| m.is_empty())
        {
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
            }
        }
    }
    a == b
}

/// The annotations a Deployment's ReplicaSet carries: the Deployment's (less the controller's
/// own) plus revision and replica counts.
pub fn rs_annotations(d: &Deployment, revision: i64, max_surge: i32) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = d
        .annotations()
        .iter()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let desired = d.spec.replicas.unwrap_or(1);
    out.insert(REVISION.into(), revision.to_string());
    out.insert(DESIRED.into(), desired.to_string());
    out.insert(MAX_REPLICAS.into(), (desired + max_surge).to_string());
    out
}

/// Old ReplicaSets to delete past `limit`: scaled to zero and empty, lowest revision first.
pub fn history_to_prune<'a>(olds: &[&'a ReplicaSet], limit: i32) -> Vec<&'a ReplicaSet> {
    let mut idle: Vec<&ReplicaSet> = olds
        .iter()
        .copied()
        .filter(|rs| {
            rs.spec.replicas.unwrap_or(0) == 0
                && rs.status.as_ref().is_none_or(|s| s.replicas == 0)
                && rs.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let excess = idle.len().saturating_sub(limit.max(0) as usize);
    idle.sort_by_key(|rs| revision(rs));
    idle.into_iter().take(excess).collect()
}

struct Round<'a> {
    ctx: &'a Context,
    d: &'a Deployment,
    api: Api<ReplicaSet>,
}

impl Round<'_> {
    async fn scale(&self, rs: &mut ReplicaSet, replicas: i32, max_surge: i32) -> Result<()> {
        if rs.spec.replicas == Some(replicas) {
            return Ok(());
        }
        let name = rs.name_any();
        let desired = self.d.spec.replicas.unwrap_or(1);
        let patch = json!({
            "metadata": {"annotations": {
                DESIRED: desired.to_string(),
                MAX_REPLICAS: (desired + max_surge).to_string(),
            }},
            "spec": {"replicas": replicas},
        });
        let updated = self
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::Update(name.clone(), e))?;
        let verb = if replicas > rs.spec.replicas.unwrap_or(0) {
            "up"
        } else {
            "down"
        };
        self.ctx.publish(
            self.d,
            EventType::Normal,
            "ScalingReplicaSet",
            &format!(
                "Scaled {verb} replica set {name} from {} to {replicas}",
                rs.spec.replicas.unwrap_or(0)
            ),
        );
        *rs = updated;
        Ok(())
    }

    /// Creates the new ReplicaSet, or finds it under its name. `Ok(None)`: a hash collision
    /// (the status' collisionCount was bumped; the change wakes the next round).
    async fn create_new(
        &self,
        replicas: i32,
        revision: i64,
        max_surge: i32,
    ) -> Result<Option<ReplicaSet>> {
        let d = self.d;
        let collisions = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = hash::template_hash(&d.spec.template, collisions);
        let mut template = d.spec.template.clone();
        let tm = template.metadata.get_or_insert_with(ObjectMeta::default);
        tm.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = d.spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let name = format!("{}-{hash}", d.name_any());
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: d.namespace(),
                labels: tm.labels.clone(),
                annotations: Some(rs_annotations(d, revision, max_surge)),
                owner_references: Some(vec![owner_ref(d)]),
                ..ObjectMeta::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: d.spec.min_ready_seconds,
                selector,
                template: Some(template),
            },
            status: None,
        };
        match self.api.create(&PostParams::default(), &rs).await {
            Ok(created) => {
                self.ctx.publish(
                    d,
                    EventType::Normal,
                    "ScalingReplicaSet",
                    &format!("Scaled up replica set {name} from 0 to {replicas}"),
                );
                Ok(Some(created))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = self.api.get(&name).await.map_err(Error::Create)?;
                let ours = controller_ref(&existing.metadata)
                    .is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref());
                if ours && same_template(existing.spec.template.as_ref(), &d.spec.template) {
                    return Ok(Some(existing));
                }
                let count = collisions.unwrap_or(0).saturating_add(1);
                Api::<Deployment>::namespaced(
                    self.ctx.client.clone(),
                    &d.namespace().unwrap_or_default(),
                )
                .patch_status(
                    &d.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"collisionCount": count}})),
                )
                .await
                .map_err(Error::Deployment)?;
                Ok(None)
            }
            Err(e) => Err(Error::Create(e)),
        }
    }
}

async fn reconcile(d: Arc<Deployment>, ctx: Arc<Context>) -> Result<Action> {
    let ns = d.namespace().ok_or(Error::NoNamespace)?;
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(Error::List)?
        .items;
    let uid = d.uid().unwrap_or_default();
    let claimed = claim(&uid, false, &d.spec.selector, &listed);
    let owner = owner_ref(d.as_ref());
    for rs in &claimed.adopt {
        set_controller(&api, *rs, Some(&owner))
            .await
            .map_err(|e| Error::Update(rs.name_any(), e))?;
    }
    for rs in &claimed.release {
        set_controller(&api, *rs, None)
            .await
            .map_err(|e| Error::Update(rs.name_any(), e))?;
    }
    let mut all: Vec<ReplicaSet> = claimed
        .owned
        .iter()
        .chain(claimed.adopt.iter())
        .map(|rs| (*rs).clone())
        .collect();
    all.sort_by_key(|rs| rs.metadata.creation_timestamp.as_ref().map(|t| t.0));

    let desired = d.spec.replicas.unwrap_or(1);
    let strategy = d.spec.strategy.clone().unwrap_or_default();
    let recreate = strategy.type_.as_deref() == Some("Recreate");
    let (max_surge, max_unavailable) = if recreate {
        (0, desired)
    } else {
        let ru = strategy.rolling_update.unwrap_or_default();
        rolling::resolve(desired, ru.max_surge.as_ref(), ru.max_unavailable.as_ref())
            .map_err(Error::Strategy)?
    };
    let paused = d.spec.paused == Some(true);
    let round = Round {
        ctx: &ctx,
        d: &d,
        api: api.clone(),
    };

    let new_idx = all
        .iter()
        .position(|rs| same_template(rs.spec.template.as_ref(), &d.spec.template));
    let max_old_revision = all
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new_idx)
        .map(|(_, rs)| revision(rs))
        .max()
        .unwrap_or(0);
    let mut new_event = if new_idx.is_some() {
        NewReplicaSet::Found
    } else {
        NewReplicaSet::None
    };
    let mut new_rs = new_idx.map(|i| all.remove(i));
    let mut olds = all;

    // Revision: the new ReplicaSet always carries the highest one.
    if let Some(rs) = new_rs.as_mut() {
        if revision(rs) <= max_old_revision {
            let name = rs.name_any();
            let patch = json!({"metadata": {"annotations": rs_annotations(&d, max_old_revision + 1, max_surge)}});
            *rs = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::Update(name, e))?;
        }
    }

    let old_specs: i32 = olds.iter().map(|rs| rs.spec.replicas.unwrap_or(0)).sum();
    if !paused {
        if recreate {
            if old_specs > 0 {
                for rs in olds.iter_mut() {
                    round.scale(rs, 0, max_surge).await?;
                }
            } else if olds
                .iter()
                .all(|rs| rs.status.as_ref().is_none_or(|s| s.replicas == 0))
            {
                match new_rs.as_mut() {
                    Some(rs) => round.scale(rs, desired, max_surge).await?,
                    None => {
                        new_rs = round
                            .create_new(desired, max_old_revision + 1, max_surge)
                            .await?;
                        new_event = NewReplicaSet::Created;
                    }
                }
            }
        } else {
            match new_rs.as_mut() {
                None => {
                    let n = rolling::new_replicas(desired, max_surge, 0, old_specs);
                    new_rs = round.create_new(n, max_old_revision + 1, max_surge).await?;
                    new_event = NewReplicaSet::Created;
                }
                Some(rs) => {
                    let current = rs.spec.replicas.unwrap_or(0);
                    let n = rolling::new_replicas(desired, max_surge, current, current + old_specs);
                    if n > current {
                        round.scale(rs, n, max_surge).await?;
                    }
                }
            }
            if let Some(new) = new_rs.as_ref() {
                let olds_in: Vec<rolling::Old> = olds
                    .iter()
                    .map(|rs| rolling::Old {
                        spec: rs.spec.replicas.unwrap_or(0),
                        available: rs
                            .status
                            .as_ref()
                            .and_then(|s| s.available_replicas)
                            .unwrap_or(0),
                    })
                    .collect();
                let targets = rolling::scale_down_old(
                    desired,
                    max_unavailable,
                    new.spec.replicas.unwrap_or(0),
                    new.status
                        .as_ref()
                        .and_then(|s| s.available_replicas)
                        .unwrap_or(0),
                    &olds_in,
                );
                for (rs, t) in olds.iter_mut().zip(targets) {
                    round.scale(rs, t, max_surge).await?;
                }
            }
        }
    }
    // Scaling: with no old replicas left the new ReplicaSet simply follows spec.replicas.
    let olds_left: i32 = olds.iter().map(|rs| rs.spec.replicas.unwrap_or(0)).sum();
    if olds_left == 0 {
        if let Some(rs) = new_rs.as_mut() {
            round.scale(rs, desired, max_surge).await?;
        }
    }

    // History.
    if !paused {
        let limit = d.spec.revision_history_limit.unwrap_or(10);
        let old_refs: Vec<&ReplicaSet> = olds.iter().collect();
        for rs in history_to_prune(&old_refs, limit) {
            let name = rs.name_any();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::Update(name, e)),
            }
        }
    }

    // Revision annotation on the Deployment.
    if let Some(rs) = new_rs.as_ref() {
        let rev = revision(rs).to_string();
        if d.annotations().get(REVISION) != Some(&rev) {
            Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
                .patch(
                    &d.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {REVISION: rev}}})),
                )
                .await
                .map_err(Error::Deployment)?;
        }
    }

    let mut every: Vec<&ReplicaSet> = olds.iter().collect();
    every.extend(new_rs.iter());
    let (status, recheck) = status::status(
        &d,
        &every,
        new_rs.as_ref(),
        new_event,
        max_unavailable,
        Timestamp::now(),
    );
    if d.status.as_ref() != Some(&status) {
        Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &d.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(Error::Deployment)?;
    }
    ctx.succeeded(d.as_ref());
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(rev: i64, spec: i32, status: i32) -> ReplicaSet {
        let mut r = ReplicaSet::default();
        r.metadata.name = Some(format!("rs-{rev}"));
        r.metadata.annotations = Some(BTreeMap::from([(REVISION.to_string(), rev.to_string())]));
        r.spec.replicas = Some(spec);
        r.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            replicas: status,
            ..Default::default()
        });
        r
    }

    #[test]
    fn prunes_oldest_idle_revisions() {
        let (a, b, c, busy) = (rs(3, 0, 0), rs(1, 0, 0), rs(2, 0, 0), rs(4, 1, 1));
        let olds = vec![&a, &b, &c, &busy];
        let names =
            |v: Vec<&ReplicaSet>| -> Vec<String> { v.iter().map(|r| r.name_any()).collect() };
        assert_eq!(names(history_to_prune(&olds, 1)), vec!["rs-1", "rs-2"]);
        assert_eq!(
            names(history_to_prune(&olds, 0)),
            vec!["rs-1", "rs-2", "rs-3"]
        );
        assert!(history_to_prune(&olds, 10).is_empty());
    }

    #[test]
    fn templates_compare_without_hash_label() {
        let mut t = PodTemplateSpec::default();
        let mut with_hash = t.clone();
        with_hash.metadata = Some(ObjectMeta {
            labels: Some(BTreeMap::from([(
                HASH_LABEL.to_string(),
                "abc".to_string(),
            )])),
            ..Default::default()
        });
        assert!(same_template(Some(&with_hash), &t));
        t.metadata = Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_string(), "x".to_string())])),
            ..Default::default()
        });
        assert!(!same_template(Some(&with_hash), &t));
        assert!(!same_template(None, &t));
    }

    #[test]
    fn annotations_copied_and_revisioned() {
        let mut d = Deployment::default();
        d.spec.replicas = Some(3);
        d.metadata.annotations = Some(BTreeMap::from([
            ("kubernetes.io/change-cause".to_string(), "v2".to_string()),
            (REVISION.to_string(), "1".to_string()),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{}".to_string(),
            ),
        ]));
        let a = rs_annotations(&d, 4, 1);
        assert_eq!(
            a.get("kubernetes.io/change-cause").map(String::as_str),
            Some("v2")
        );
        assert_eq!(a.get(REVISION).map(String::as_str), Some("4"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        assert!(!a.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
    }
}
