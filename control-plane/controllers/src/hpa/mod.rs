//! The HorizontalPodAutoscaler controller (`autoscaling/v2`): every [`SYNC_PERIOD`] (and on
//! every change of an autoscaler) it reads the target's `scale` subresource — any kind that
//! serves one: Deployments, ReplicaSets, StatefulSets, custom resources with a scale
//! subresource — measures each metric of the spec and scales the target to what the metrics
//! ask for, stabilized and rate-limited by `behavior` ([`replicas`]).
//!
//! Metrics come from the APIs upstream reads: `Resource` and `ContainerResource` from
//! `metrics.k8s.io` (built into every Fabrik cluster, or a registered metrics-server),
//! `Pods` and `Object` from `custom.metrics.k8s.io/v1beta2`, `External` from
//! `external.metrics.k8s.io/v1beta1` (aggregated APIs an adapter registers).
//!
//! Status as upstream writes it: current and desired replicas, each metric's current value,
//! `lastScaleTime`, and the conditions `AbleToScale`, `ScalingActive` and `ScalingLimited`.
//! A rescale is a `SuccessfulRescale` Event; a metric that cannot be read is a Warning Event
//! (once per change of the problem) and the `ScalingActive` condition.

pub mod replicas;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabrik_machinery::quantity::{Format, Quantity};
use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec, MetricTarget};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::shared::{shutdown, Context};
use replicas::{Behavior, History, Proposal, Sample, Target};

/// How often every autoscaler is evaluated (upstream's `--horizontal-pod-autoscaler-sync-period`).
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);

/// Errors of the HPA controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The autoscaler has no namespace (never for a served one).
    #[error("horizontalpodautoscaler has no namespace")]
    NoNamespace,
    /// Writing the status failed.
    #[error("failed to update status: {why}", why = crate::shared::brief(.0))]
    Status(#[source] kube::Error),
}

/// What the controller keeps between passes.
struct State {
    ctx: Arc<Context>,
    history: Mutex<HashMap<String, History>>,
    /// The last problem reported per autoscaler (a Warning Event only when it changes).
    problems: Mutex<HashMap<String, String>>,
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let state = Arc::new(State {
        ctx: Context::new(client.clone(), "horizontal-pod-autoscaler"),
        history: Mutex::default(),
        problems: Mutex::default(),
    });
    Controller::new(
        Api::<HorizontalPodAutoscaler>::all(client),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        reconcile,
        |h, e, st: Arc<State>| st.ctx.failed(h.as_ref(), e),
        state,
    )
    .for_each(|_| async {})
    .await;
}

/// One metric's outcome.
struct Measured {
    proposal: i32,
    /// The `currentMetrics` entry.
    status: Value,
    /// For the rescale Event: `cpu resource utilization (percentage of request)` etc.
    describe: String,
}

/// A condition as the status lists it.
fn condition(ty: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": if status { "True" } else { "False" },
           "reason": reason, "message": message})
}

fn milli(q: &Quantity) -> i128 {
    q.milli_value()
}

fn quantity_of(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        Quantity::from_nanos(milli * 1_000_000, Format::DecimalSI)
            .map(|q| q.to_string())
            .unwrap_or_else(|_| format!("{milli}m"))
    }
}

fn quantity_json(v: &Value) -> Option<i128> {
    Quantity::from_json(v).ok().map(|q| milli(&q))
}

/// A label selector as a query string (`k=v,k in (a,b)`).
fn selector_string(s: &LabelSelector) -> String {
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn get_json(client: &kube::Client, path: &str) -> Result<Value, String> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request::<Value>(req)
        .await
        .map_err(|e| crate::shared::brief(&e))
}

fn target_of(t: &MetricTarget, what: &str) -> Result<Target, String> {
    match t.type_.as_str() {
        "Utilization" => t
            .average_utilization
            .map(|u| Target::Utilization(u as i64))
            .ok_or_else(|| format!("{what}: averageUtilization is not set")),
        "AverageValue" => t
            .average_value
            .as_ref()
            .and_then(|q| q.0.parse::<Quantity>().ok())
            .map(|q| Target::AverageValue(milli(&q)))
            .ok_or_else(|| format!("{what}: averageValue is not a quantity")),
        other => Err(format!("{what}: target type {other} is not supported here")),
    }
}

/// The pods an autoscaler's target selects (running or pending, not being deleted).
async fn target_pods(client: &kube::Client, ns: &str, selector: &str) -> Result<Vec<Pod>, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| crate::shared::brief(&e))?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Failed" | "Succeeded")
                )
        })
        .collect())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pod's request of `resource` (milli-units), over `container` or all containers; none
/// when a counted container has none.
fn request(p: &Pod, resource: &str, container: Option<&str>) -> Option<i128> {
    let spec = p.spec.as_ref()?;
    let mut total = 0;
    for c in &spec.containers {
        if container.is_some_and(|n| n != c.name) {
            continue;
        }
        let q = c.resources.as_ref()?.requests.as_ref()?.get(resource)?;
        total += milli(&q.0.parse::<Quantity>().ok()?);
    }
    Some(total)
}

/// Resource and ContainerResource metrics.
async fn resource_metric(
    client: &kube::Client,
    ns: &str,
    pods: &[Pod],
    current: i32,
    metric: &MetricSpec,
) -> Result<Measured, (&'static str, String)> {
    let (name, container, target) = match (&metric.resource, &metric.container_resource) {
        (Some(r), _) => (r.name.clone(), None, r.target.clone()),
        (None, Some(c)) => (c.name.clone(), Some(c.container.clone()), c.target.clone()),
        _ => {
            return Err((
                "InvalidMetricSourceType",
                "no resource metric source".into(),
            ))
        }
    };
    let failed = |m: String| ("FailedGetResourceMetric", m);
    let target = target_of(&target, &name).map_err(failed)?;
    let usage = get_json(
        client,
        &format!("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods"),
    )
    .await
    .map_err(|e| {
        failed(format!(
            "failed to get {name} utilization: unable to get metrics for resource {name}: {e}"
        ))
    })?;
    let mut by_pod: HashMap<String, i128> = HashMap::new();
    for item in usage["items"].as_array().into_iter().flatten() {
        let pod = item["metadata"]["name"].as_str().unwrap_or("").to_string();
        let value: i128 = item["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| container.as_deref().is_none_or(|n| c["name"] == n))
            .filter_map(|c| quantity_json(&c["usage"][&name]))
            .sum();
        by_pod.insert(pod, value);
    }
    let samples: Vec<Sample> = pods
        .iter()
        .map(|p| Sample {
            ready: ready(p),
            value: by_pod.get(&p.name_any()).copied(),
            request: request(p, &name, container.as_deref()),
        })
        .collect();
    let Proposal {
        replicas,
        average,
        utilization,
    } = replicas::per_pod(current, &samples, target, &name)
        .map_err(|e| failed(format!("failed to get {name} utilization: {e}")))?;
    let mut current_value = json!({"averageValue": quantity_of(average)});
    if let Some(u) = utilization {
        current_value["averageUtilization"] = json!(u);
    }
    let (field, source) = match &container {
        Some(c) => (
            "containerResource",
            json!({"name": name, "container": c, "current": current_value}),
        ),
        None => ("resource", json!({"name": name, "current": current_value})),
    };
    let describe = match target {
        Target::Utilization(_) => format!("{name} resource utilization (percentage of request)"),
        Target::AverageValue(_) => format!("{name} resource"),
    };
    Ok(Measured {
        proposal: replicas,
        status: json!({"type": metric.type_, field: source}),
        describe,
    })
}

/// Pods metrics (custom metrics API, per pod).
async fn pods_metric(
    client: &kube::Client,
    ns: &str,
    pods: &[Pod],
    selector: &str,
    current: i32,
    metric: &MetricSpec,
) -> Result<Measured, (&'static str, String)> {
    let source = metric.pods.as_ref().ok_or((
        "InvalidMetricSourceType",
        "no pods metric source".to_string(),
    ))?;
    let name = &source.metric.name;
    let failed = |m: String| ("FailedGetPodsMetric", m);
    let target = target_of(&source.target, name).map_err(failed)?;
    let mut path = format!(
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{name}?labelSelector={}",
        encode(selector)
    );
    if let Some(s) = &source.metric.selector {
        path.push_str(&format!(
            "&metricLabelSelector={}",
            encode(&selector_string(s))
        ));
    }
    let list = get_json(client, &path)
        .await
        .map_err(|e| failed(format!("unable to get metric {name}: {e}")))?;
    let by_pod: HashMap<String, i128> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some((
                i["describedObject"]["name"].as_str()?.to_string(),
                quantity_json(&i["value"])?,
            ))
        })
        .collect();
    let samples: Vec<Sample> = pods
        .iter()
        .map(|p| Sample {
            ready: true,
            value: by_pod.get(&p.name_any()).copied(),
            request: None,
        })
        .collect();
    let p = replicas::per_pod(current, &samples, target, name)
        .map_err(|e| failed(format!("unable to get metric {name}: {e}")))?;
    Ok(Measured {
        proposal: p.replicas,
        status: json!({"type": "Pods", "pods": {"metric": {"name": name},
                       "current": {"averageValue": quantity_of(p.average)}}}),
        describe: format!("pods metric {name}"),
    })
}

/// Object and External metrics (one value for the whole target).
async fn whole_metric(
    client: &kube::Client,
    ns: &str,
    current: i32,
    metric: &MetricSpec,
) -> Result<Measured, (&'static str, String)> {
    let (reason, name, target, path, field, extra) = if let Some(o) = &metric.object {
        let d = &o.described_object;
        let (group, version) = match d.api_version.as_deref().unwrap_or("v1").split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (
                String::new(),
                d.api_version.clone().unwrap_or_else(|| "v1".into()),
            ),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, &d.kind);
        let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| {
                (
                    "FailedGetObjectMetric",
                    format!("unable to find {}: {e}", d.kind),
                )
            })?;
        // The custom metrics API names objects by group resource: `services`, `ingresses.networking.k8s.io`.
        let resource = if group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{group}", ar.plural)
        };
        let mut path = format!(
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/{resource}/{}/{}",
            d.name, o.metric.name
        );
        if let Some(s) = &o.metric.selector {
            path.push_str(&format!(
                "?metricLabelSelector={}",
                encode(&selector_string(s))
            ));
        }
        (
            "FailedGetObjectMetric",
            o.metric.name.clone(),
            o.target.clone(),
            path,
            "object",
            json!({"describedObject": d, "metric": {"name": o.metric.name}}),
        )
    } else if let Some(e) = &metric.external {
        let mut path = format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{}",
            e.metric.name
        );
        if let Some(s) = &e.metric.selector {
            path.push_str(&format!("?labelSelector={}", encode(&selector_string(s))));
        }
        (
            "FailedGetExternalMetric",
            e.metric.name.clone(),
            e.target.clone(),
            path,
            "external",
            json!({"metric": {"name": e.metric.name}}),
        )
    } else {
        return Err(("InvalidMetricSourceType", "no metric source".into()));
    };
    let list = get_json(client, &path)
        .await
        .map_err(|e| (reason, format!("unable to get metric {name}: {e}")))?;
    let value: i128 = match list["items"].as_array() {
        Some(items) if !items.is_empty() => items
            .iter()
            .filter_map(|i| quantity_json(&i["value"]))
            .sum(),
        // An Object metric answers one MetricValue.
        _ => quantity_json(&list["value"]).ok_or((
            reason,
            format!("unable to get metric {name}: no value returned"),
        ))?,
    };
    let (average, target_value) = match target.type_.as_str() {
        "AverageValue" => (
            true,
            target
                .average_value
                .as_ref()
                .and_then(|q| q.0.parse::<Quantity>().ok()),
        ),
        "Value" => (
            false,
            target
                .value
                .as_ref()
                .and_then(|q| q.0.parse::<Quantity>().ok()),
        ),
        other => {
            return Err((
                reason,
                format!("{name}: target type {other} is not supported"),
            ))
        }
    };
    let target_value = target_value
        .map(|q| milli(&q))
        .ok_or((reason, format!("{name}: the target is not a quantity")))?;
    let proposal = replicas::whole(current, value, target_value, average);
    let mut source = extra;
    source["current"] = if average {
        json!({"averageValue": quantity_of(value / i128::from(current.max(1)))})
    } else {
        json!({"value": quantity_of(value)})
    };
    Ok(Measured {
        proposal,
        status: json!({"type": metric.type_, field: source}),
        describe: format!("{} metric {name}", field),
    })
}

async fn reconcile(hpa: Arc<HorizontalPodAutoscaler>, st: Arc<State>) -> Result<Action, Error> {
    let ns = hpa.namespace().ok_or(Error::NoNamespace)?;
    let key = format!("{ns}/{}", hpa.name_any());
    if hpa.metadata.deletion_timestamp.is_some() {
        if let Ok(mut h) = st.history.lock() {
            h.remove(&key);
        }
        return Ok(Action::await_change());
    }
    let client = st.ctx.client.clone();
    let spec = hpa.spec.clone();
    let status = hpa.status.clone().unwrap_or_default();
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let target = &spec.scale_target_ref;
    let reference = format!("{}/{}", target.kind, target.name);

    // The target's scale.
    let api_version = target.api_version.clone().unwrap_or_else(|| "v1".into());
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &target.kind);
    let scale = match kube::discovery::pinned_kind(&client, &gvk).await {
        Ok((ar, _)) => {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            api.get_scale(&target.name)
                .await
                .map_err(|e| crate::shared::brief(&e))
                .map(|s| (api, s))
        }
        Err(e) => Err(format!(
            "the server could not find {api_version} {}: {e}",
            target.kind
        )),
    };
    let (api, scale) = match scale {
        Ok(s) => s,
        Err(e) => {
            let message =
                format!("the HPA controller was unable to get the target's current scale: {e}");
            st.problem(&hpa, &key, "FailedGetScale", &message);
            let conditions = vec![condition("AbleToScale", false, "FailedGetScale", &message)];
            write_status(
                &st,
                &hpa,
                &ns,
                json!({
                    "currentReplicas": status.current_replicas.unwrap_or(0),
                    "desiredReplicas": status.desired_replicas,
                    "conditions": conditions,
                }),
            )
            .await?;
            return Ok(Action::requeue(SYNC_PERIOD));
        }
    };
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let selector = scale.status.as_ref().and_then(|s| s.selector.clone());
    let mut conditions = vec![condition(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    )];
    if current == 0 && min > 0 {
        conditions.push(condition(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
        ));
        write_status(
            &st,
            &hpa,
            &ns,
            json!({
                "currentReplicas": 0, "desiredReplicas": 0, "conditions": conditions,
            }),
        )
        .await?;
        return Ok(Action::requeue(SYNC_PERIOD));
    }

    // Every metric's proposal.
    let pods = match &selector {
        Some(sel) => target_pods(&client, &ns, sel).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let mut measured: Vec<Measured> = Vec::new();
    let mut problems: Vec<(&'static str, String)> = Vec::new();
    for metric in spec.metrics.iter().flatten() {
        let outcome = match metric.type_.as_str() {
            "Resource" | "ContainerResource" | "Pods" if selector.is_none() => Err((
                "InvalidSelector",
                format!("the target {reference} has no selector in its scale subresource"),
            )),
            "Resource" | "ContainerResource" => {
                resource_metric(&client, &ns, &pods, current, metric).await
            }
            "Pods" => {
                pods_metric(
                    &client,
                    &ns,
                    &pods,
                    selector.as_deref().unwrap_or(""),
                    current,
                    metric,
                )
                .await
            }
            "Object" | "External" => whole_metric(&client, &ns, current, metric).await,
            other => Err((
                "InvalidMetricSourceType",
                format!("unknown metric source type {other:?}"),
            )),
        };
        match outcome {
            Ok(m) => measured.push(m),
            Err(p) => problems.push(p),
        }
    }
    let best = measured.iter().max_by_key(|m| m.proposal);
    let Some(best) = best else {
        let (reason, message) = problems
            .first()
            .cloned()
            .unwrap_or(("FailedGetResourceMetric", "no metrics".into()));
        st.problem(&hpa, &key, reason, &message);
        conditions.push(condition("ScalingActive", false, reason, &message));
        write_status(
            &st,
            &hpa,
            &ns,
            json!({
                "currentReplicas": current,
                "desiredReplicas": status.desired_replicas,
                "currentMetrics": status.current_metrics,
                "lastScaleTime": status.last_scale_time,
                "conditions": conditions,
            }),
        )
        .await?;
        return Ok(Action::requeue(SYNC_PERIOD));
    };
    // A metric that could not be read never lets the others scale down.
    let mut desired = best.proposal;
    if !problems.is_empty() && desired < current {
        desired = current;
    }
    if problems.is_empty() {
        st.resolved(&key);
    } else if let Some((reason, message)) = problems.first() {
        st.problem(&hpa, &key, reason, message);
    }

    let behavior = serde_json::to_value(&spec.behavior).unwrap_or(Value::Null);
    let rules = Behavior::of(&behavior);
    let now = Instant::now();
    let (next, reason, message) = {
        let mut all = st.history.lock().unwrap_or_else(|e| e.into_inner());
        let h = all.entry(key.clone()).or_default();
        replicas::normalize(h, now, current, desired, min, max, &rules)
    };
    let mut last_scale = serde_json::to_value(&status.last_scale_time).unwrap_or(Value::Null);
    if next != current {
        let patch = json!({"spec": {"replicas": next}});
        match api
            .patch_scale(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                if let Ok(mut all) = st.history.lock() {
                    all.entry(key.clone())
                        .or_default()
                        .scaled(now, current, next);
                }
                let direction = if next > current { "above" } else { "below" };
                st.ctx.publish(
                    hpa.as_ref(),
                    EventType::Normal,
                    "SuccessfulRescale",
                    &format!(
                        "New size: {next}; reason: {} {direction} target",
                        best.describe
                    ),
                );
                last_scale = json!(jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string());
                conditions[0] = condition(
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    &format!("the HPA controller was able to update the target scale to {next}"),
                );
            }
            Err(e) => {
                let message = format!("New size: {next}; error: {}", crate::shared::brief(&e));
                st.problem(&hpa, &key, "FailedRescale", &message);
                conditions[0] = condition("AbleToScale", false, "FailedUpdateScale", &message);
            }
        }
    } else {
        conditions[0] = condition(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        );
    }
    conditions.push(condition(
        "ScalingActive",
        true,
        "ValidMetricFound",
        &format!(
            "the HPA was able to successfully calculate a replica count from {}",
            best.describe
        ),
    ));
    let limited = matches!(
        reason,
        "TooManyReplicas" | "TooFewReplicas" | "ScaleUpLimit" | "ScaleDownLimit"
    );
    conditions.push(condition("ScalingLimited", limited, reason, &message));
    let metrics: Vec<Value> = measured.into_iter().map(|m| m.status).collect();
    write_status(
        &st,
        &hpa,
        &ns,
        json!({
            "currentReplicas": current,
            "desiredReplicas": next,
            "currentMetrics": metrics,
            "lastScaleTime": last_scale,
            "conditions": conditions,
        }),
    )
    .await?;
    st.ctx.succeeded(hpa.as_ref());
    Ok(Action::requeue(SYNC_PERIOD))
}

impl State {
    /// Reports `message` as a Warning Event when it is new for this autoscaler.
    fn problem(&self, hpa: &HorizontalPodAutoscaler, key: &str, reason: &str, message: &str) {
        let new = self
            .problems
            .lock()
            .map(|mut p| p.insert(key.to_string(), message.to_string()).as_deref() != Some(message))
            .unwrap_or(true);
        if new {
            tracing::info!(hpa = key, reason, message, "autoscaler cannot scale");
            self.ctx.publish(hpa, EventType::Warning, reason, message);
        }
    }

    fn resolved(&self, key: &str) {
        if let Ok(mut p) = self.problems.lock() {
            p.remove(key);
        }
    }
}

/// Writes `status` (conditions keep their transition time while their status stays) when it
/// differs from what is stored.
async fn write_status(
    st: &State,
    hpa: &HorizontalPodAutoscaler,
    ns: &str,
    mut status: Value,
) -> Result<(), Error> {
    let old = serde_json::to_value(&hpa.status).unwrap_or(Value::Null);
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    if let Some(conds) = status["conditions"].as_array_mut() {
        for c in conds {
            let before = old["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["type"] == c["type"]);
            c["lastTransitionTime"] = match before {
                Some(b) if b["status"] == c["status"] => b["lastTransitionTime"].clone(),
                _ => json!(now),
            };
        }
    }
    status["observedGeneration"] = json!(hpa.metadata.generation);
    if let Some(obj) = status.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    if old == status {
        return Ok(());
    }
    // A merge patch: fields the new status leaves out are removed (`null`).
    let mut body = status;
    if let (Some(o), Some(b)) = (old.as_object(), body.as_object_mut()) {
        for k in o.keys() {
            b.entry(k.clone()).or_insert(Value::Null);
        }
    }
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(st.ctx.client.clone(), ns);
    api.patch_status(
        &hpa.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": body})),
    )
    .await
    .map_err(Error::Status)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_quantities_read_as_upstream_writes_them() {
        let s: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}))
        .expect("selector");
        assert_eq!(selector_string(&s), "app=web,tier in (a,b),!canary");
        assert_eq!(encode("a=b,c in (d)"), "a%3Db%2Cc%20in%20%28d%29");
        assert_eq!(quantity_of(2000), "2");
        assert_eq!(quantity_of(250), "250m");
    }
}
