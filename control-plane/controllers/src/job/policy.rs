//! A Job's policies, as upstream's Job controller applies them: the pod failure policy (which
//! failed pods fail the Job, fail their index, are ignored, or count toward the backoff limit)
//! and the success policy of an Indexed Job (which completed indexes make it succeed). Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyRule, SuccessPolicy};
use k8s_openapi::api::core::v1::Pod;

/// What the pod failure policy does with a failed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Fail the whole Job, with this message.
    FailJob(String),
    /// Fail the pod's index (with `backoffLimitPerIndex`), with this message.
    FailIndex(String),
    /// Not counted toward any backoff limit; a replacement is made.
    Ignore,
    /// Counted toward the backoff limit (the default).
    Count,
}

/// The first rule of `policy` a failed `pod` matches, as an action (`Count` when none does).
pub fn judge(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Action {
    let Some(policy) = policy else {
        return Action::Count;
    };
    for (i, rule) in policy.rules.iter().enumerate() {
        let Some(what) = matches(rule, pod) else {
            continue;
        };
        let message = format!("{what} matching {} rule at index {i}", rule.action);
        return match rule.action.as_str() {
            "FailJob" => Action::FailJob(message),
            "FailIndex" => Action::FailIndex(message),
            "Ignore" => Action::Ignore,
            _ => Action::Count,
        };
    }
    Action::Count
}

/// What of `pod` a rule matches, in upstream's words, or `None`.
fn matches(rule: &PodFailurePolicyRule, pod: &Pod) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let status = pod.status.as_ref()?;
    if let Some(req) = &rule.on_exit_codes {
        let statuses = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in statuses {
            if req.container_name.as_ref().is_some_and(|n| *n != c.name) {
                continue;
            }
            let Some(code) = c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code)
            else {
                continue;
            };
            // Exit code 0 never matches (upstream).
            if code == 0 {
                continue;
            }
            let listed = req.values.contains(&code);
            let hit = match req.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            };
            if hit {
                return Some(format!(
                    "Container {} for pod {ns}/{name} failed with exit code {code}",
                    c.name
                ));
            }
        }
        return None;
    }
    for want in rule.on_pod_conditions.iter().flatten() {
        let want_status = want
            .status
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("True");
        let has = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == want.type_ && c.status == want_status);
        if has {
            return Some(format!("Pod {ns}/{name} has condition {}", want.type_));
        }
    }
    None
}

/// The index of the first success policy rule the completed indexes satisfy.
pub fn succeeded_rule(policy: Option<&SuccessPolicy>, completed: &BTreeSet<i32>) -> Option<usize> {
    policy?
        .rules
        .iter()
        .position(|r| match (&r.succeeded_indexes, r.succeeded_count) {
            (Some(indexes), count) => {
                let wanted = super::plan::parse_indexes(indexes);
                let done = wanted.intersection(completed).count();
                match count {
                    Some(n) => i64::try_from(done).unwrap_or(i64::MAX) >= i64::from(n),
                    None => !wanted.is_empty() && done == wanted.len(),
                }
            }
            (None, Some(n)) => i64::try_from(completed.len()).unwrap_or(i64::MAX) >= i64::from(n),
            (None, None) => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_pod(code: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions, "containerStatuses": [
                {"name": "main", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                 "state": {"terminated": {"exitCode": code}}}]},
        }))
        .expect("pod")
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({"rules": rules})).expect("policy")
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        ]));
        assert_eq!(
            judge(Some(&p), &failed_pod(42, json!([]))),
            Action::FailJob(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
                    .into()
            )
        );
        let evicted = failed_pod(137, json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert_eq!(judge(Some(&p), &evicted), Action::Ignore);
        assert_eq!(judge(Some(&p), &failed_pod(1, json!([]))), Action::Count);
        assert_eq!(judge(None, &failed_pod(42, json!([]))), Action::Count);
        // Exit code 0 matches no NotIn rule.
        let not_in = policy(json!([{"action": "FailJob",
            "onExitCodes": {"operator": "NotIn", "values": [1]}}]));
        assert_eq!(
            judge(Some(&not_in), &failed_pod(0, json!([]))),
            Action::Count
        );
        assert!(matches!(
            judge(Some(&not_in), &failed_pod(3, json!([]))),
            Action::FailJob(_)
        ));
    }

    #[test]
    fn success_policies_need_their_indexes_or_counts() {
        let sp: SuccessPolicy = serde_json::from_value(json!({"rules": [
            {"succeededIndexes": "0-2", "succeededCount": 2},
            {"succeededIndexes": "5"},
            {"succeededCount": 4},
        ]}))
        .expect("policy");
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<i32>>();
        assert_eq!(succeeded_rule(Some(&sp), &set(&[0, 7])), None);
        assert_eq!(succeeded_rule(Some(&sp), &set(&[0, 2])), Some(0));
        assert_eq!(succeeded_rule(Some(&sp), &set(&[5])), Some(1));
        assert_eq!(succeeded_rule(Some(&sp), &set(&[3, 4, 6, 7])), Some(2));
        assert_eq!(succeeded_rule(None, &set(&[0, 1, 2])), None);
    }
}
