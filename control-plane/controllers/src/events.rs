//! Events as upstream's controllers record them: core/v1 Events — what `kubectl get events` and
//! `kubectl describe` read — one per object, type, reason and message, whose `count` and
//! `lastTimestamp` grow when it happens again (client-go's event aggregation, in its simplest
//! form), so that a failure retried with backoff is one Event with a count, not one per retry.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Events remembered for aggregation; past this many the memory starts over (a repeat is then
/// counted from the stored Event).
const REMEMBERED: usize = 10_000;

/// Longest message kept (upstream truncates notes to 1 KiB).
const MAX_MESSAGE: usize = 1024;

/// Records Events for one component (the `source.component` and `reportingComponent`).
pub struct EventRecorder {
    client: kube::Client,
    component: String,
    /// Event name → count written, for the Events recorded by this process.
    counts: Mutex<HashMap<String, i32>>,
}

/// FNV-1a, 64-bit: a stable name for an Event's identity (object, type, reason, message).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The name of the Event for `reference` of this type, reason and message: the object's name
/// (at most 200 characters) and a hash of the rest, so a repeat finds the same Event.
pub fn event_name(reference: &ObjectReference, type_: &str, reason: &str, message: &str) -> String {
    let name: String = reference
        .name
        .as_deref()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect();
    let identity = format!(
        "{}/{}/{type_}/{reason}/{message}",
        reference.uid.as_deref().unwrap_or(""),
        reference.kind.as_deref().unwrap_or("")
    );
    format!("{name}.{:016x}", fnv1a(identity.as_bytes()))
}

impl EventRecorder {
    /// A recorder for `component` (e.g. `replicaset-controller`).
    pub fn new(client: kube::Client, component: &str) -> EventRecorder {
        EventRecorder {
            client,
            component: component.to_string(),
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `type_` (`Normal`, `Warning`) `reason` happened to `reference`: a new
    /// Event, or the same Event's count raised.
    pub async fn record(
        &self,
        reference: &ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let message: String = message.chars().take(MAX_MESSAGE).collect();
        let name = event_name(reference, type_, reason, &message);
        // Cluster-scoped objects' Events live in `default`, as upstream's.
        let namespace = reference
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Time(Timestamp::now());
        let known = self.counts.lock().ok().and_then(|c| c.get(&name).copied());
        let count = match known {
            Some(n) => n.saturating_add(1),
            None => {
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    },
                    involved_object: reference.clone(),
                    type_: Some(type_.to_string()),
                    reason: Some(reason.to_string()),
                    message: Some(message.clone()),
                    count: Some(1),
                    first_timestamp: Some(now.clone()),
                    last_timestamp: Some(now.clone()),
                    source: Some(EventSource {
                        component: Some(self.component.clone()),
                        host: None,
                    }),
                    reporting_component: Some(self.component.clone()),
                    reporting_instance: Some(self.component.clone()),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &event).await {
                    Ok(_) => {
                        self.remember(&name, 1);
                        return Ok(());
                    }
                    // Recorded by an earlier run of this process: count on from it.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        api.get(&name).await?.count.unwrap_or(1).saturating_add(1)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let patch = json!({"count": count, "lastTimestamp": now});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.remember(&name, count);
                Ok(())
            }
            // Expired or deleted meanwhile: start over.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.forget(&name);
                Box::pin(self.record(reference, type_, reason, &message)).await
            }
            Err(e) => Err(e),
        }
    }

    fn remember(&self, name: &str, count: i32) {
        if let Ok(mut c) = self.counts.lock() {
            if c.len() >= REMEMBERED && !c.contains_key(name) {
                c.clear();
            }
            c.insert(name.to_string(), count);
        }
    }

    fn forget(&self, name: &str) {
        if let Ok(mut c) = self.counts.lock() {
            c.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_has_the_same_name_and_anything_else_another() {
        let r = ObjectReference {
            kind: Some("ReplicaSet".into()),
            name: Some("web-abc".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let a = event_name(&r, "Warning", "FailedCreate", "quota");
        assert_eq!(a, event_name(&r, "Warning", "FailedCreate", "quota"));
        assert!(a.starts_with("web-abc."), "{a}");
        assert_ne!(a, event_name(&r, "Warning", "FailedCreate", "other"));
        assert_ne!(a, event_name(&r, "Normal", "FailedCreate", "quota"));
        let long = ObjectReference {
            name: Some("x".repeat(300)),
            ..r
        };
        assert!(event_name(&long, "Normal", "R", "m").len() <= 253);
    }
}
