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
//! * The coscheduling plugin's PodGroups: label `scheduling.x-k8s.io/pod-group` (or the older
//!   `pod-group.scheduling.sigs.k8s.io`) naming a `scheduling.x-k8s.io` PodGroup of the pod's
//!   namespace, whose `spec.minMember` is the size.
//! * Volcano's PodGroups: annotation `scheduling.k8s.io/group-name` naming a
//!   `scheduling.volcano.sh` PodGroup, `spec.minMember` likewise.
//!
//! A gang is named within the pod's tenant namespace, so two namespaces' groups of one name
//! stay apart. A count that is not a whole number from 1 to [`MAX_GANG`] asks for no gang. A
//! pod naming a PodGroup that does not exist (yet) waits for it, unsynced, as the coscheduling
//! plugin keeps it unschedulable.

use serde_json::Value;

use crate::kinds::Kind;

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

/// The coscheduling plugin's pod group label.
pub const COSCHEDULING_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// The coscheduling plugin's older pod group label.
pub const COSCHEDULING_GROUP_OLD: &str = "pod-group.scheduling.sigs.k8s.io";
/// Volcano's pod group annotation.
pub const VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";

/// The largest gang asked for this way.
pub const MAX_GANG: usize = 10_000;

fn size(v: &Value) -> Option<usize> {
    v.as_str()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_GANG).contains(n))
}

/// The PodGroup object a tenant pod names, as `(its kind, its name)`.
pub fn pod_group(pod: &Value) -> Option<(Kind, String)> {
    let meta = &pod["metadata"];
    let named = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    named(&meta["labels"][COSCHEDULING_GROUP])
        .or_else(|| named(&meta["labels"][COSCHEDULING_GROUP_OLD]))
        .map(|g| (Kind::CoschedulingPodGroup, g))
        .or_else(|| named(&meta["annotations"][VOLCANO_GROUP]).map(|g| (Kind::VolcanoPodGroup, g)))
}

/// What a tenant pod asks of gangs, its PodGroups looked up with `group` (`(kind, name)` → the
/// object in the pod's namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// No gang.
    None,
    /// A gang: name within the pod's namespace, size.
    Gang(String, usize),
    /// A PodGroup that does not exist (yet): the pod waits; the message says for what.
    Waiting(String),
}

/// What a tenant pod asks for (see the module docs).
pub fn asked(pod: &Value, group: impl Fn(Kind, &str) -> Option<Value>) -> Asked {
    if let Some((name, size)) = gang(pod) {
        return Asked::Gang(name, size);
    }
    let Some((kind, name)) = pod_group(pod) else {
        return Asked::None;
    };
    let what = match kind {
        Kind::CoschedulingPodGroup => "scheduling.x-k8s.io",
        _ => "scheduling.volcano.sh",
    };
    match group(kind, &name) {
        None => Asked::Waiting(format!(
            "waiting for PodGroup {name:?} ({what}) in the pod's namespace: its pods are \
             scheduled together once it exists"
        )),
        Some(g) => match g["spec"]["minMember"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
        {
            Some(n) if (1..=MAX_GANG).contains(&n) => Asked::Gang(format!("{what}/{name}"), n),
            _ => Asked::None,
        },
    }
}

/// The gang a tenant pod asks for by labels alone, as `(name within its namespace, size)`.
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
    fn pod_groups_size_gangs_and_missing_ones_wait() {
        let cosched = pod(json!({COSCHEDULING_GROUP: "train"}), json!({}));
        let volcano = pod(json!({}), json!({VOLCANO_GROUP: "infer"}));
        let group = |n: u64| move |_: Kind, _: &str| Some(json!({"spec": {"minMember": n}}));
        assert_eq!(
            asked(&cosched, group(4)),
            Asked::Gang("scheduling.x-k8s.io/train".into(), 4)
        );
        assert_eq!(
            asked(&volcano, group(2)),
            Asked::Gang("scheduling.volcano.sh/infer".into(), 2)
        );
        assert!(matches!(asked(&volcano, |_, _| None), Asked::Waiting(m) if m.contains("infer")));
        assert_eq!(asked(&cosched, group(0)), Asked::None);
        assert_eq!(
            asked(&pod(json!({"app": "x"}), json!({})), |_, _| None),
            Asked::None
        );
        let old = pod(json!({COSCHEDULING_GROUP_OLD: "t"}), json!({}));
        assert_eq!(
            pod_group(&old),
            Some((Kind::CoschedulingPodGroup, "t".into()))
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
