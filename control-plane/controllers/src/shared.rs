//! What every controller shares: the reconcile context (client, event recorder, per-object
//! backoff), the shutdown signal, label selectors and pod / owner-reference helpers.
//!
//! Everything here except [`Context`] is pure and unit-tested.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::Resource;

/// A shutdown signal that can be cloned into every controller (kube-runtime wants `Sync`).
pub type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Turns any shutdown future into a cloneable one.
pub fn shutdown(f: impl Future<Output = ()> + Send + 'static) -> Shutdown {
    f.boxed().shared()
}

/// First retry delay after a failed reconcile.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest retry delay.
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The delay before retry number `failures` (1-based): 0.5 s doubling, capped at 5 min.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_MAX)
}

/// A kube error in a few words: an API server's refusal as its message, reason and code (not
/// the client's debug dump of the whole Status), for Events, conditions and logs.
pub fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({}, {})", s.message, s.reason, s.code),
        other => other.to_string(),
    }
}

/// What a reconcile gets: the client, an event recorder and the failure counts per object.
pub struct Context {
    /// The cluster.
    pub client: kube::Client,
    recorder: Arc<crate::events::EventRecorder>,
    /// Failures in a row and the last message, per object.
    failures: Mutex<HashMap<String, (u32, String)>>,
}

impl Context {
    /// A context for the controller called `name` (the Events' reporting controller).
    pub fn new(client: kube::Client, name: &str) -> Arc<Context> {
        let recorder = Arc::new(crate::events::EventRecorder::new(client.clone(), name));
        Arc::new(Context {
            client,
            recorder,
            failures: Mutex::new(HashMap::new()),
        })
    }

    /// Forgets the failures of `obj` after a successful reconcile.
    pub fn succeeded<K: Resource>(&self, obj: &K) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&key(obj));
        }
    }

    /// The error policy: counts the failure, publishes a Warning Event on the object
    /// (`ReconcileError`) and requeues it after the backoff delay.
    pub fn failed<K: Resource<DynamicType = ()>>(&self, obj: &K, error: &dyn Display) -> Action {
        self.failed_as(obj, "ReconcileError", error)
    }

    /// [`Context::failed`] with the Event's reason (upstream's, such as `FailedCreate`). The
    /// failure is logged when its message changes ([`failure_shape`]: not when only a name in
    /// quotes does), not on every retry.
    pub fn failed_as<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        error: &dyn Display,
    ) -> Action {
        let message = error.to_string();
        let shape = failure_shape(&message);
        let (n, changed) = match self.failures.lock() {
            Ok(mut f) => {
                let entry = f.entry(key(obj)).or_insert((0, String::new()));
                entry.0 = entry.0.saturating_add(1);
                let changed = entry.1 != shape;
                if changed {
                    entry.1 = shape;
                }
                (entry.0, changed)
            }
            Err(_) => (1, true),
        };
        if changed {
            tracing::warn!(object = %key(obj), error = %message, failures = n, "reconcile failed");
        } else {
            tracing::debug!(object = %key(obj), failures = n, "reconcile failed again");
        }
        self.publish(obj, EventType::Warning, reason, &message);
        Action::requeue(backoff_delay(n))
    }

    /// Publishes an Event on `obj` in the background (a failed Event is only logged).
    pub fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let recorder = self.recorder.clone();
        let reference = obj.object_ref(&());
        let type_ = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let (reason, note) = (reason.to_string(), note.to_string());
        tokio::spawn(async move {
            if let Err(e) = recorder.record(&reference, type_, &reason, &note).await {
                tracing::debug!(error = %e, "failed to record an event");
            }
        });
    }
}

/// `namespace/name` of an object.
pub fn key<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Whether `labels` satisfy `selector` (matchLabels and matchExpressions, as upstream).
/// An empty selector matches everything; an unknown operator matches nothing.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

/// Whether the selector selects nothing at all (upstream treats a nil/empty selector of a
/// workload as selecting nothing).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|m| m.is_empty())
}

/// The owner reference with `controller: true`, if any.
pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// A controller owner reference to `owner` (controller and blockOwnerDeletion set).
pub fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    let meta = owner.meta();
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod that still counts: not terminal and not being deleted.
pub fn pod_is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The pod's phase ("Pending" when unset).
pub fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// When the pod became Ready, if it is Ready.
pub fn pod_ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let cond = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (cond.status == "True").then(|| cond.last_transition_time.as_ref().map(|t| t.0))
}

/// Whether the pod is Ready.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod_is_active(pod) && pod_ready_since(pod).is_some()
}

/// Whether the pod has been Ready for at least `min_ready` at `now`; otherwise, when it will
/// be (None if it is not Ready).
pub fn pod_availability(pod: &Pod, min_ready: Duration, now: Timestamp) -> Availability {
    if !pod_is_active(pod) {
        return Availability::No;
    }
    match pod_ready_since(pod) {
        None => Availability::No,
        Some(_) if min_ready.is_zero() => Availability::Yes,
        Some(None) => Availability::Yes,
        Some(Some(since)) => {
            let elapsed = now.duration_since(since).unsigned_abs();
            if elapsed >= min_ready {
                Availability::Yes
            } else {
                Availability::After(min_ready - elapsed)
            }
        }
    }
}

/// Whether a pod counts as available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Ready for at least minReadySeconds.
    Yes,
    /// Ready, available after this much more time.
    After(Duration),
    /// Not ready (or not active).
    No,
}

/// How the objects of a namespace (pods, ReplicaSets) relate to one controller.
#[derive(Debug)]
pub struct Claim<'a, K> {
    /// Pods it controls and that still match its selector.
    pub owned: Vec<&'a K>,
    /// Orphans matching the selector, to adopt.
    pub adopt: Vec<&'a K>,
    /// Pods it controls that no longer match, to release.
    pub release: Vec<&'a K>,
}

/// Sorts `pods` into owned / to adopt / to release, as upstream's ControllerRefManager: only a
/// live controller adopts, only active orphans are adopted, and an empty selector selects
/// nothing.
pub fn claim<'a, K: Resource>(
    owner_uid: &str,
    owner_deleting: bool,
    selector: &LabelSelector,
    pods: &'a [K],
) -> Claim<'a, K> {
    let mut c = Claim {
        owned: vec![],
        adopt: vec![],
        release: vec![],
    };
    let empty = selector_is_empty(selector);
    for pod in pods {
        let labels = pod.meta().labels.clone().unwrap_or_default();
        let matches = !empty && selector_matches(selector, &labels);
        match controller_ref(pod.meta()) {
            Some(r) if r.uid == owner_uid => {
                if matches {
                    c.owned.push(pod);
                } else if !owner_deleting {
                    c.release.push(pod);
                }
            }
            Some(_) => {}
            None => {
                if matches && !owner_deleting && pod.meta().deletion_timestamp.is_none() {
                    c.adopt.push(pod);
                }
            }
        }
    }
    c
}

/// Adopts (`Some`: becomes the object's controller) or releases (`None`: the controller
/// reference is removed) an object, with its resourceVersion as precondition. A vanished
/// object is not an error.
pub async fn set_controller<K>(
    api: &kube::Api<K>,
    obj: &K,
    owner: Option<&OwnerReference>,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let meta = obj.meta();
    let name = meta.name.clone().unwrap_or_default();
    let mut refs: Vec<OwnerReference> = meta
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.controller != Some(true))
        .collect();
    if let Some(o) = owner {
        refs.retain(|r| r.uid != o.uid);
        refs.push(o.clone());
    }
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": meta.resource_version,
        "ownerReferences": if refs.is_empty() { serde_json::json!(null) } else { serde_json::json!(refs) },
    }});
    match api
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A failure's message with what it quotes left out: a retry that fails the same way for a new
/// object (a pod created under a generated name, refused again) is the same failure.
pub fn failure_shape(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for c in message.chars() {
        if c == '"' {
            quoted = !quoted;
            out.push(c);
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn a_retry_refused_the_same_way_under_a_new_name_is_the_same_failure() {
        let refused = |pod: &str, used: u32| {
            format!(
                "failed to create pod: pods \"{pod}\" is forbidden: exceeded the quota of tenant \
                 \"eval\": requested: gpus=1, used: gpus={used}, limited: gpus=8"
            )
        };
        assert_eq!(
            failure_shape(&refused("evals-5f466-sps4s", 8)),
            failure_shape(&refused("evals-5f466-n7hws", 8))
        );
        // What changes outside the quotes is a new failure.
        assert_ne!(
            failure_shape(&refused("evals-5f466-sps4s", 8)),
            failure_shape(&refused("evals-5f466-sps4s", 7))
        );
        assert_ne!(
            failure_shape("timed out"),
            failure_shape("connection refused")
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn selectors() {
        let cases = [
            (vec![("app", "a")], vec![], vec![("app", "a")], true),
            (vec![("app", "a")], vec![], vec![("app", "b")], false),
            (
                vec![],
                vec![expr("t", "In", &["x", "y"])],
                vec![("t", "y")],
                true,
            ),
            (vec![], vec![expr("t", "In", &["x"])], vec![], false),
            (vec![], vec![expr("t", "NotIn", &["x"])], vec![], true),
            (
                vec![],
                vec![expr("t", "NotIn", &["x"])],
                vec![("t", "x")],
                false,
            ),
            (
                vec![],
                vec![expr("t", "Exists", &[])],
                vec![("t", "")],
                true,
            ),
            (
                vec![],
                vec![expr("t", "DoesNotExist", &[])],
                vec![("t", "")],
                false,
            ),
            (
                vec![],
                vec![expr("t", "Bogus", &[])],
                vec![("t", "")],
                false,
            ),
            (vec![], vec![], vec![("any", "thing")], true),
        ];
        for (i, (ml, me, l, want)) in cases.into_iter().enumerate() {
            let sel = LabelSelector {
                match_labels: Some(labels(&ml)),
                match_expressions: Some(me),
            };
            assert_eq!(selector_matches(&sel, &labels(&l)), want, "case {i}");
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff_delay(1), Duration::from_millis(500));
        assert_eq!(backoff_delay(2), Duration::from_secs(1));
        assert_eq!(backoff_delay(4), Duration::from_secs(4));
        assert_eq!(backoff_delay(40), BACKOFF_MAX);
    }
}
