//! Gangs a tenant asks for with the labels its tooling already writes, translated to the gang
//! keys of `fabrik up`'s scheduler (`fabrik.dev/gang`, `fabrik.dev/gang-size`, which tenants
//! may not set themselves): all of a gang's pods are bound together or none is.
//!
//! * Kueue's plain pod groups: label `kueue.x-k8s.io/pod-group-name`, annotation
//!   `kueue.x-k8s.io/pod-group-total-count`.
//! * LeaderWorkerSet groups: labels `leaderworkerset.sigs.k8s.io/name` and
//!   `leaderworkerset.sigs.k8s.io/group-index`, annotation `leaderworkerset.sigs.k8s.io/size`
//!   (the leader and its workers).
//!
//! A gang is named within the pod's tenant namespace, so two namespaces' groups of one name
//! stay apart. A count that is not a whole number from 1 to [`MAX_GANG`] asks for no gang.
//! Groups whose size lives only in another object (the coscheduling plugin's and Volcano's
//! PodGroups) are not translated.

use serde_json::Value;

/// Kueue's pod group name label.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io/pod-group-name";
/// Kueue's pod group size annotation.
pub const KUEUE_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";
/// LeaderWorkerSet's name label.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// LeaderWorkerSet's group index label.
pub const LWS_GROUP: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// LeaderWorkerSet's group size annotation.
pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";

/// The largest gang asked for this way.
pub const MAX_GANG: usize = 10_000;

fn size(v: &Value) -> Option<usize> {
    v.as_str()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_GANG).contains(n))
}

/// The gang a tenant pod asks for, as `(name within its namespace, size)`.
pub fn gang(pod: &Value) -> Option<(String, usize)> {
    let meta = &pod["metadata"];
    let labels = &meta["labels"];
    let annotations = &meta["annotations"];
    if let Some(group) = labels[KUEUE_GROUP].as_str().filter(|g| !g.is_empty()) {
        return Some((format!("kueue/{group}"), size(&annotations[KUEUE_TOTAL])?));
    }
    let lws = labels[LWS_NAME].as_str().filter(|n| !n.is_empty())?;
    let index = labels[LWS_GROUP].as_str()?;
    Some((format!("lws/{lws}/{index}"), size(&annotations[LWS_SIZE])?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn kueue_and_leader_worker_set_groups_are_gangs() {
        assert_eq!(
            gang(&pod(
                json!({KUEUE_GROUP: "train"}),
                json!({KUEUE_TOTAL: "8"})
            )),
            Some(("kueue/train".into(), 8))
        );
        assert_eq!(
            gang(&pod(
                json!({LWS_NAME: "llm", LWS_GROUP: "2"}),
                json!({LWS_SIZE: "4"})
            )),
            Some(("lws/llm/2".into(), 4))
        );
    }

    #[test]
    fn no_count_no_gang() {
        for (labels, annotations) in [
            (json!({KUEUE_GROUP: "train"}), json!({})),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "0"})),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "-3"})),
            (
                json!({KUEUE_GROUP: "train"}),
                json!({KUEUE_TOTAL: "100001"}),
            ),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "lots"})),
            (json!({LWS_NAME: "llm"}), json!({LWS_SIZE: "4"})),
            (json!({"app": "x"}), json!({})),
        ] {
            assert_eq!(
                gang(&pod(labels.clone(), annotations.clone())),
                None,
                "{labels} {annotations}"
            );
        }
    }
}
