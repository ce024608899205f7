//! The Job controller: runs pods from the template until `completions` succeed
//! (`parallelism` at a time; Indexed mode gives each pod a completion index), fails the Job
//! past `backoffLimit` failed pods or `activeDeadlineSeconds`, and deletes it
//! `ttlSecondsAfterFinished` after it finished. What training frameworks lean on too
//! ([`policy`]): a `podFailurePolicy` (first matching rule: `FailJob` fails the Job at once,
//! reason `PodFailurePolicy`; `Ignore` does not count the failure; `FailIndex` fails the pod's
//! index; `Count`), `backoffLimitPerIndex` / `maxFailedIndexes` for Indexed Jobs (`status.failedIndexes`;
//! the Job fails with `FailedIndexes` once every index is done, or `MaxFailedIndexesExceeded`),
//! and a `successPolicy` (reason `SuccessPolicy`, the remaining pods stopped).
//!
//! As Kubernetes 1.31+ does, the outcome is first recorded as an interim condition
//! (`SuccessCriteriaMet` / `FailureTarget`), remaining pods are deleted, then the terminal
//! condition (`Complete` / `Failed`) is added. Status: active, ready, succeeded, failed,
//! completedIndexes, failedIndexes, startTime, completionTime.
//!
//! Counting differs from upstream in one way: without pod tracking finalizers, succeeded and
//! failed counts are the maximum of what the status says and the terminal pods that exist (a
//! terminal pod deleted before it was seen is not counted).

pub mod plan;
pub mod policy;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::replicaset::plan::pod_from_template;
use crate::shared::{controller_ref, owner_ref, pod_is_active, shutdown, Context};
use plan::{Outcome, Step, INDEX_KEY};

/// Errors of the Job controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Job has no namespace (never for a served Job).
    #[error("job has no namespace")]
    NoNamespace,
    /// Listing pods failed.
    #[error("failed to list pods: {why}", why = crate::shared::brief(.0))]
    ListPods(#[source] kube::Error),
    /// Creating a pod failed.
    #[error("failed to create pod: {why}", why = crate::shared::brief(.0))]
    CreatePod(#[source] kube::Error),
    /// Deleting a pod failed.
    #[error("failed to delete pod {0}: {why}", why = crate::shared::brief(.1))]
    DeletePod(String, #[source] kube::Error),
    /// Writing the status failed.
    #[error("failed to update status: {why}", why = crate::shared::brief(.0))]
    Status(#[source] kube::Error),
    /// Deleting the finished Job (TTL) failed.
    #[error("failed to delete finished job: {why}", why = crate::shared::brief(.0))]
    Delete(#[source] kube::Error),
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

/// Runs the Job controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "job-controller");
    Controller::new(Api::<Job>::all(client.clone()), watcher::Config::default())
        .owns(Api::<Pod>::all(client), watcher::Config::default())
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |j, e, ctx: Arc<Context>| ctx.failed_as(j.as_ref(), e.reason(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

fn has_condition(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn add_condition(status: &mut JobStatus, type_: &str, reason: &str, message: &str, now: Timestamp) {
    if has_condition(status, type_) {
        return;
    }
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(JobCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        });
}

/// When a finished Job may be deleted.
fn finished_at(status: &JobStatus) -> Option<Timestamp> {
    status.completion_time.as_ref().map(|t| t.0).or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Failed" || c.type_ == "Complete") && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
    })
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action> {
    let ns = job.namespace().ok_or(Error::NoNamespace)?;
    let Some(spec) = job.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let old = job.status.clone().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);

    // Finished: only the TTL is left to honour.
    if has_condition(&old, "Complete") || has_condition(&old, "Failed") {
        let (Some(ttl), Some(at)) = (spec.ttl_seconds_after_finished, finished_at(&old)) else {
            return Ok(Action::await_change());
        };
        let expires = Duration::from_secs(ttl.max(0) as u64);
        let elapsed = now.duration_since(at).unsigned_abs();
        if elapsed < expires {
            return Ok(Action::requeue(expires - elapsed));
        }
        let dp = DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
            ..DeleteParams::default()
        };
        return match jobs.delete(&job.name_any(), &dp).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
            Err(e) => Err(Error::Delete(e)),
        };
    }

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = job.uid().unwrap_or_default();
    let all = pods_api
        .list(&ListParams::default())
        .await
        .map_err(Error::ListPods)?
        .items;
    let pods: Vec<&Pod> = all
        .iter()
        .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let observed = plan::observe(&pods, &old, spec);

    let start = old.start_time.as_ref().map(|t| t.0).unwrap_or(now);
    let mut recheck = None;
    let deadline_passed = match spec.active_deadline_seconds {
        Some(s) => {
            let limit = Duration::from_secs(s.max(0) as u64);
            let elapsed = now.duration_since(start).unsigned_abs();
            if elapsed >= limit {
                true
            } else {
                recheck = Some(limit - elapsed);
                false
            }
        }
        None => false,
    };
    // An outcome already recorded stays.
    let recorded = |type_: &str| {
        old.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            })
    };
    let step = if let Some((reason, message)) = recorded("FailureTarget") {
        Step::Finish(Outcome::Failed(known_reason(&reason), message))
    } else if let Some((reason, message)) = recorded("SuccessCriteriaMet") {
        Step::Finish(Outcome::Complete(known_reason(&reason), message))
    } else {
        plan::next_step(spec, &observed, deadline_passed)
    };

    let mut status = old.clone();
    status.start_time = Some(Time(start));
    status.succeeded = Some(observed.succeeded);
    status.failed = Some(observed.failed);
    status.ready = Some(observed.ready);
    if spec.completion_mode.as_deref() == Some("Indexed") {
        let formatted = plan::format_indexes(&observed.completed);
        status.completed_indexes = (!formatted.is_empty()).then_some(formatted);
        if spec.backoff_limit_per_index.is_some() {
            status.failed_indexes = Some(plan::format_indexes(&observed.failed_indexes));
        }
    }
    let active: Vec<&Pod> = pods.iter().copied().filter(|p| pod_is_active(p)).collect();
    let mut active_count = observed.active;
    let mut failure: Option<Error> = None;
    match &step {
        Step::Finish(outcome) => {
            let (interim, terminal, reason, message) = match outcome {
                Outcome::Complete(reason, message) => {
                    ("SuccessCriteriaMet", "Complete", *reason, message.clone())
                }
                Outcome::Failed(reason, message) => {
                    ("FailureTarget", "Failed", *reason, message.clone())
                }
            };
            add_condition(&mut status, interim, reason, &message, now);
            if let Err(e) = delete_pods(&pods_api, &active, active.len()).await {
                failure = Some(e);
            } else {
                active_count = 0;
                add_condition(&mut status, terminal, reason, &message, now);
                if terminal == "Complete" {
                    status.completion_time = Some(Time(now));
                }
                let type_ = if terminal == "Complete" {
                    EventType::Normal
                } else {
                    EventType::Warning
                };
                ctx.publish(
                    job.as_ref(),
                    type_,
                    if terminal == "Complete" {
                        "Completed"
                    } else {
                        reason
                    },
                    &message,
                );
            }
        }
        Step::Run { create, delete } => {
            if *delete > 0 {
                match delete_pods(&pods_api, &active, *delete as usize).await {
                    Ok(n) => active_count -= n,
                    Err(e) => failure = Some(e),
                }
            }
            for index in create {
                match create_pod(&job, &pods_api, *index).await {
                    Ok(p) => {
                        active_count += 1;
                        ctx.publish(
                            job.as_ref(),
                            EventType::Normal,
                            "SuccessfulCreate",
                            &format!("Created pod: {}", p.name_any()),
                        );
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
    }
    status.active = Some(active_count);
    if job.status.as_ref() != Some(&status) {
        jobs.patch_status(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map_err(Error::Status)?;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    ctx.succeeded(job.as_ref());
    Ok(recheck.map_or_else(Action::await_change, Action::requeue))
}

/// A recorded condition's reason as one of the reasons this controller writes.
fn known_reason(reason: &str) -> &'static str {
    const REASONS: &[&str] = &[
        "BackoffLimitExceeded",
        "DeadlineExceeded",
        "PodFailurePolicy",
        "FailedIndexes",
        "MaxFailedIndexesExceeded",
        "SuccessPolicy",
        "CompletionsReached",
    ];
    REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("BackoffLimitExceeded")
}

async fn delete_pods(api: &Api<Pod>, active: &[&Pod], n: usize) -> Result<i32> {
    let victims = crate::replicaset::plan::pick_for_deletion(active, n);
    let mut deleted = 0;
    for p in victims {
        let name = p.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => deleted += 1,
            Err(e) => return Err(Error::DeletePod(name, e)),
        }
    }
    Ok(deleted)
}

async fn create_pod(job: &Job, api: &Api<Pod>, index: Option<i32>) -> Result<Pod> {
    let Some(spec) = job.spec.as_ref() else {
        return Err(Error::NoNamespace);
    };
    let ns = job.namespace().unwrap_or_default();
    let prefix = match index {
        Some(i) => format!("{}-{i}", job.name_any()),
        None => job.name_any(),
    };
    let mut pod = pod_from_template(&spec.template, &ns, &prefix, owner_ref(job));
    if let Some(i) = index {
        let v = i.to_string();
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(INDEX_KEY.into(), v.clone());
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(INDEX_KEY.into(), v.clone());
        if let Some(ps) = pod.spec.as_mut() {
            if ps.hostname.is_none() {
                ps.hostname = Some(prefix.clone());
            }
            for c in ps.containers.iter_mut() {
                let env = c.env.get_or_insert_with(Vec::new);
                if !env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX") {
                    env.push(EnvVar {
                        name: "JOB_COMPLETION_INDEX".into(),
                        value: Some(v.clone()),
                        value_from: None,
                    });
                }
            }
        }
    }
    api.create(&PostParams::default(), &pod)
        .await
        .map_err(Error::CreatePod)
}
