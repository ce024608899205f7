//! The CronJob controller: creates a Job named `<cronjob>-<scheduled minutes since the epoch>`
//! (a controller ownerReference to the CronJob) at each scheduled time, honouring `suspend`,
//! `startingDeadlineSeconds` and `concurrencyPolicy` (`Allow`, `Forbid`, `Replace`); only the
//! most recent missed time runs. Keeps `successfulJobsHistoryLimit` (3) succeeded and
//! `failedJobsHistoryLimit` (1) failed Jobs. Status: `active`, `lastScheduleTime`,
//! `lastSuccessfulTime`.
//!
//! Times are read in `spec.timeZone`, a `CRON_TZ=` prefix, or else the server's local zone.
//! No polling: each reconcile asks to be woken at the next scheduled time; Job changes wake it
//! too. A schedule or zone that does not parse is a Warning Event and no retry until the
//! CronJob changes.

pub mod plan;
pub mod schedule;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::shared::{controller_ref, owner_ref, shutdown, Context};
use plan::{Decision, Finished};
use schedule::Schedule;

/// Errors of the CronJob controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CronJob has no namespace (never for a served one).
    #[error("cronjob has no namespace")]
    NoNamespace,
    /// Listing Jobs failed.
    #[error("failed to list jobs: {why}", why = crate::shared::brief(.0))]
    ListJobs(#[source] kube::Error),
    /// Creating a Job failed.
    #[error("failed to create job {0}: {why}", why = crate::shared::brief(.1))]
    CreateJob(String, #[source] kube::Error),
    /// Deleting a Job (replaced, or out of the history) failed.
    #[error("failed to delete job {0}: {why}", why = crate::shared::brief(.1))]
    DeleteJob(String, #[source] kube::Error),
    /// Writing the status failed.
    #[error("failed to update status: {why}", why = crate::shared::brief(.0))]
    Status(#[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the CronJob controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "cronjob-controller");
    Controller::new(
        Api::<CronJob>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(Api::<Job>::all(client), watcher::Config::default())
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        reconcile,
        |c, e, ctx: Arc<Context>| ctx.failed(c.as_ref(), e),
        ctx,
    )
    .for_each(|_| async {})
    .await;
}

/// The schedule and zone of `cj`, or the reason and message of a Warning.
fn parse(cj: &CronJob) -> std::result::Result<(Schedule, TimeZone), (&'static str, String)> {
    let spec = cj.spec.clone();
    let schedule = Schedule::parse(&spec.schedule).map_err(|e| {
        (
            "UnparseableSchedule",
            format!("unparseable schedule: {:?} : {e}", spec.schedule),
        )
    })?;
    let tz = match spec.time_zone.as_deref() {
        Some(name) => schedule::zone_named(name).map_err(|e| {
            (
                "UnknownTimeZone",
                format!("invalid timeZone: {name:?}: {e}"),
            )
        })?,
        None => TimeZone::try_system().unwrap_or(TimeZone::UTC),
    };
    Ok((schedule, tz))
}

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cj.namespace().ok_or(Error::NoNamespace)?;
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = cj.name_any();
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = cj.uid().unwrap_or_default();
    let all = jobs_api
        .list(&ListParams::default())
        .await
        .map_err(Error::ListJobs)?
        .items;
    let owned: Vec<&Job> = all
        .iter()
        .filter(|j| controller_ref(&j.metadata).is_some_and(|r| r.uid == uid))
        .collect();
    let mut active: Vec<&Job> = owned
        .iter()
        .copied()
        .filter(|j| plan::finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
        .collect();
    let names: Vec<String> = owned.iter().map(|j| j.name_any()).collect();
    let old = cj.status.clone().unwrap_or_default();
    let mut status = CronJobStatus {
        active: None,
        last_schedule_time: old.last_schedule_time.clone(),
        last_successful_time: owned
            .iter()
            .filter(|j| plan::finished(j) == Some(Finished::Succeeded))
            .filter_map(|j| j.status.as_ref().and_then(|s| s.completion_time.clone()))
            .chain(old.last_successful_time.clone())
            .max_by_key(|t| t.0),
    };

    let now = Timestamp::now();
    let (schedule, tz) = match parse(&cj) {
        Ok(p) => p,
        Err((reason, message)) => {
            ctx.publish(cj.as_ref(), EventType::Warning, reason, &message);
            return Ok(Action::await_change());
        }
    };
    let mut created = None;
    match plan::decide(&cj, &schedule, &tz, active.len(), &names, now) {
        Decision::Wait => {}
        Decision::Skip(at, reason) => {
            let message = if reason == "JobAlreadyActive" {
                format!("Not starting job because prior execution is running and concurrency policy is Forbid (scheduled at {at})")
            } else {
                format!("Missed scheduled time to start a job: {at}")
            };
            ctx.publish(cj.as_ref(), EventType::Warning, reason, &message);
        }
        Decision::Start { at, replace } => {
            if replace {
                for j in &active {
                    delete_job(&jobs_api, &j.name_any()).await?;
                    ctx.publish(
                        cj.as_ref(),
                        EventType::Normal,
                        "SuccessfulDelete",
                        &format!("Deleted job {}", j.name_any()),
                    );
                }
                active.clear();
            }
            let job = plan::job_for(&cj, at, owner_ref(cj.as_ref()));
            let job_name = job.name_any();
            match jobs_api.create(&PostParams::default(), &job).await {
                Ok(j) => {
                    ctx.publish(
                        cj.as_ref(),
                        EventType::Normal,
                        "SuccessfulCreate",
                        &format!("Created job {job_name}"),
                    );
                    created = Some(j);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(Error::CreateJob(job_name, e)),
            }
            status.last_schedule_time = Some(Time(at));
        }
    }
    let mut refs: Vec<ObjectReference> = active.iter().map(|j| reference(j)).collect();
    refs.extend(created.iter().map(reference));
    status.active = (!refs.is_empty()).then_some(refs);

    // History limits.
    let spec = cj.spec.clone();
    let finished: Vec<(String, Option<Timestamp>, Finished)> = owned
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| {
            let t = j
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .or(j.metadata.creation_timestamp.as_ref())
                .map(|t| t.0);
            plan::finished(j).map(|f| (j.name_any(), t, f))
        })
        .collect();
    let limit = |v: Option<i32>, default: i32| v.unwrap_or(default).max(0) as usize;
    for doomed in plan::history_to_delete(
        &finished,
        limit(spec.successful_jobs_history_limit, 3),
        limit(spec.failed_jobs_history_limit, 1),
    ) {
        delete_job(&jobs_api, &doomed).await?;
        ctx.publish(
            cj.as_ref(),
            EventType::Normal,
            "SawCompletedJob",
            &format!("Deleted job {doomed} (history limit)"),
        );
    }

    if cj.status.as_ref() != Some(&status) {
        Api::<CronJob>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": {
                    "active": status.active,
                    "lastScheduleTime": status.last_schedule_time,
                    "lastSuccessfulTime": status.last_successful_time,
                }})),
            )
            .await
            .map_err(Error::Status)?;
    }
    ctx.succeeded(cj.as_ref());
    let suspended = spec.suspend == Some(true);
    Ok(match plan::next_wake(&schedule, &tz, now) {
        Some(d) if !suspended => Action::requeue(d),
        _ => Action::await_change(),
    })
}

async fn delete_job(api: &Api<Job>, name: &str) -> Result<()> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::DeleteJob(name.to_string(), e)),
    }
}
