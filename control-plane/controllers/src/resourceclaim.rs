//! ResourceClaims of pods (`resource.k8s.io/v1`), as upstream's resourceclaim controller:
//!
//! - **Templates become claims.** For every claim of a pod that names a
//!   `resourceClaimTemplateName`, a ResourceClaim is created from the template (named
//!   `<pod>-<claim>-<random>`, owned by the pod, annotated
//!   `resource.kubernetes.io/pod-claim-name`) and written into the pod's
//!   `status.resourceClaimStatuses`, where the scheduler and kubelet look for it. The
//!   garbage collector deletes it with the pod.
//! - **Claims of finished pods go**: one generated for a pod that finished (or is gone) is
//!   deleted once no running pod holds it.
//! - **Claims are released** ([`Config::releases`], where this cluster's own scheduler
//!   allocates them): `status.reservedFor` loses pods that are gone or finished; a claim
//!   reserved for nobody loses its allocation (its devices are free again).
//!
//! In a tenant the claims' status is the host's (the syncer copies it), so the last part does
//! not run there.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::shared::{brief, controller_ref, owner_ref, pod_is_active, shutdown, Context};

/// The annotation naming the pod's claim a generated ResourceClaim is for.
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// Errors of the resourceclaim controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{op}: {why}", why = brief(.source))]
    Api {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A pod names a template that does not exist.
    #[error("resource claim template {0:?} not found")]
    NoTemplate(String),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn api(op: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let op = op.into();
    move |source| Error::Api { op, source }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// What the controller does besides creating claims from templates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Release claims (drop reservations of finished pods, and the allocation of a claim
    /// reserved for nobody): where this cluster allocates its own claims.
    pub releases: bool,
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
) {
    let ctx = Context::new(client.clone(), "resourceclaim-controller");
    let stop = shutdown(shutdown_signal);
    let pods = Controller::new(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .graceful_shutdown_on(stop.clone())
        .run(
            reconcile_pod,
            |pod, e, ctx: Arc<Context>| {
                ctx.failed_as(pod.as_ref(), "FailedResourceClaimCreation", e)
            },
            ctx.clone(),
        )
        .for_each(|_| async {});
    let releases = config.releases;
    let claims = Controller::new(
        Api::<ResourceClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<Pod>::all(client),
        watcher::Config::default(),
        // A pod's change can release the claims it uses.
        |pod| {
            let ns = pod.namespace().unwrap_or_default();
            claim_names(&pod)
                .into_iter()
                .map(move |name| ObjectRef::new(&name).within(&ns))
                .collect::<Vec<_>>()
        },
    )
    .graceful_shutdown_on(stop)
    .run(
        move |claim, ctx| reconcile_claim(claim, ctx, releases),
        |claim, e, ctx: Arc<Context>| ctx.failed(claim.as_ref(), e),
        ctx,
    )
    .for_each(|_| async {});
    futures::join!(pods, claims);
}

/// The claim objects a pod uses, by name: named ones and those of its status.
fn claim_names(pod: &Pod) -> Vec<String> {
    let mut out: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|c| c.resource_claim_name.clone())
        .collect();
    out.extend(
        pod.status
            .iter()
            .flat_map(|s| s.resource_claim_statuses.iter().flatten())
            .filter_map(|s| s.resource_claim_name.clone()),
    );
    out
}

/// The claims of `pod` that come from templates and are not in its status yet:
/// `(claim name in the pod, template)`.
pub fn missing_claims(pod: &Pod) -> Vec<(String, String)> {
    let done: Vec<&str> = pod
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .map(|s| s.name.as_str())
        .collect();
    pod.spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter(|c| c.resource_claim_name.is_none() && !done.contains(&c.name.as_str()))
        .filter_map(|c| {
            c.resource_claim_template_name
                .clone()
                .map(|t| (c.name.clone(), t))
        })
        .collect()
}

/// The `generateName` of a claim for `pod`'s claim `claim` (upstream's, at most 57 characters
/// so that the random suffix fits).
pub fn generate_name(pod: &str, claim: &str) -> String {
    let mut p: String = pod.chars().take(28).collect();
    let c: String = claim.chars().take(28).collect();
    p.push('-');
    p.push_str(&c);
    p.push('-');
    p
}

async fn reconcile_pod(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action> {
    let missing = missing_claims(&pod);
    if missing.is_empty() || !pod_is_active(&pod) {
        return Ok(Action::await_change());
    }
    let ns = pod.namespace().unwrap_or_default();
    let pod_name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let claims: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(ctx.client.clone(), &ns);
    // Claims made earlier for this pod whose name did not reach its status (a write lost).
    let existing = claims
        .list(&ListParams::default())
        .await
        .map_err(api("listing resource claims"))?
        .items;
    let mut made: BTreeMap<String, String> = BTreeMap::new();
    for c in &existing {
        let ours = controller_ref(&c.metadata).is_some_and(|r| r.uid == uid);
        if let (true, Some(for_claim)) = (ours, c.annotations().get(POD_CLAIM_NAME)) {
            made.insert(for_claim.clone(), c.name_any());
        }
    }
    let mut statuses = Vec::new();
    for (claim, template) in missing {
        let name = match made.get(&claim) {
            Some(name) => name.clone(),
            None => {
                let t = match templates.get_opt(&template).await {
                    Ok(Some(t)) => t,
                    Ok(None) => return Err(Error::NoTemplate(template)),
                    Err(e) => return Err(api("reading the resource claim template")(e)),
                };
                let spec = t.spec.clone().unwrap_or_default();
                let mut annotations = spec
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.clone())
                    .unwrap_or_default();
                annotations.insert(POD_CLAIM_NAME.into(), claim.clone());
                let object = ResourceClaim {
                    metadata: ObjectMeta {
                        generate_name: Some(generate_name(&pod_name, &claim)),
                        namespace: Some(ns.clone()),
                        labels: spec.metadata.as_ref().and_then(|m| m.labels.clone()),
                        annotations: Some(annotations),
                        owner_references: Some(vec![owner_ref(pod.as_ref())]),
                        ..ObjectMeta::default()
                    },
                    spec: spec.spec.clone(),
                    status: None,
                };
                let created = claims
                    .create(&PostParams::default(), &object)
                    .await
                    .map_err(api(format!(
                        "creating a resource claim from template {template}"
                    )))?;
                created.name_any()
            }
        };
        statuses.push(json!({"name": claim, "resourceClaimName": name}));
    }
    // Strategic merge: `resourceClaimStatuses` is a map keyed by name.
    let patch = json!({"status": {"resourceClaimStatuses": statuses}});
    match Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &pod_name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(api("recording the pod's resource claims")(e)),
    }
    ctx.succeeded(pod.as_ref());
    Ok(Action::await_change())
}

/// A consumer of a claim that still uses it: a pod of that UID that exists and is not finished.
fn in_use(pods: &BTreeMap<String, Pod>, uid: &str) -> bool {
    pods.get(uid).is_some_and(|p| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        !matches!(phase, Some("Succeeded" | "Failed"))
    })
}

async fn reconcile_claim(
    claim: Arc<ResourceClaim>,
    ctx: Arc<Context>,
    releases: bool,
) -> Result<Action> {
    let ns = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let claims: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let status = claim.status.clone().unwrap_or_default();
    let reserved = status.reserved_for.clone().unwrap_or_default();
    let owner = controller_ref(&claim.metadata)
        .filter(|r| r.kind == "Pod")
        .cloned();
    if reserved.is_empty() && status.allocation.is_none() && owner.is_none() {
        return Ok(Action::await_change());
    }
    let pods: BTreeMap<String, Pod> = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map_err(api("listing pods"))?
        .items
        .into_iter()
        .filter_map(|p| p.uid().map(|u| (u, p)))
        .collect();
    let keep: Vec<_> = reserved
        .iter()
        .filter(|r| r.resource != "pods" || in_use(&pods, &r.uid))
        .cloned()
        .collect();
    // A claim generated for a pod that finished (or is gone) goes once no one holds it.
    if let Some(owner) = &owner {
        let generated = claim.annotations().contains_key(POD_CLAIM_NAME);
        if generated && keep.is_empty() && !in_use(&pods, &owner.uid) {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: claim.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match claims.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api("deleting a finished pod's resource claim")(e)),
            }
            return Ok(Action::await_change());
        }
    }
    let unchanged =
        keep.len() == reserved.len() && (!keep.is_empty() || status.allocation.is_none());
    if !releases || unchanged {
        return Ok(Action::await_change());
    }
    // Guarded by the resourceVersion: a scheduler reserving the claim meanwhile wins.
    let mut patch = json!({
        "metadata": {"resourceVersion": claim.resource_version()},
        "status": {"reservedFor": if keep.is_empty() { serde_json::Value::Null } else { json!(keep) }},
    });
    if keep.is_empty() {
        patch["status"]["allocation"] = serde_json::Value::Null;
    }
    match claims
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return Ok(Action::requeue(std::time::Duration::from_millis(100)))
        }
        Err(e) => return Err(api("releasing the resource claim")(e)),
    }
    ctx.succeeded(claim.as_ref());
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_claims_are_missing_until_recorded() {
        let mut pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "shared", "resourceClaimName": "s"}]}}))
        .expect("pod");
        assert_eq!(
            missing_claims(&pod),
            vec![("gpu".to_string(), "t".to_string())]
        );
        pod.status = serde_json::from_value(json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]}))
        .expect("status");
        assert!(missing_claims(&pod).is_empty());
        assert_eq!(
            claim_names(&pod),
            vec!["s".to_string(), "p-gpu-abcde".to_string()]
        );
    }

    #[test]
    fn generated_names_leave_room_for_the_suffix() {
        let long = "x".repeat(80);
        let n = generate_name(&long, &long);
        assert_eq!(n.len(), 58);
        assert_eq!(generate_name("p", "gpu"), "p-gpu-");
    }

    #[test]
    fn finished_pods_do_not_use_claims() {
        let pods: BTreeMap<String, Pod> = [("u1", "Running"), ("u2", "Succeeded")]
            .into_iter()
            .map(|(u, phase)| {
                let p: Pod = serde_json::from_value(json!({"metadata": {"uid": u},
                    "status": {"phase": phase}}))
                .expect("pod");
                (u.to_string(), p)
            })
            .collect();
        assert!(in_use(&pods, "u1"));
        assert!(!in_use(&pods, "u2"));
        assert!(!in_use(&pods, "u3"));
    }
}
