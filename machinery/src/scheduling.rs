//! Scheduling predicates as upstream defines them, on JSON objects: whether a toleration
//! tolerates a taint (`ToleratesTaint`) and whether a node selector term — label expressions
//! and `metadata.name` fields — selects a node. One implementation for the simulated
//! scheduler, the DaemonSet controller and the syncer's node pool.

use std::collections::BTreeMap;

use serde_json::Value;

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// Whether `toleration` tolerates `taint` (both as JSON): the effect matches or is empty, the
/// key matches or is empty with `Exists`, and with `Equal` (the default) the value matches.
pub fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = text(toleration, "effect");
    if !effect.is_empty() && effect != text(taint, "effect") {
        return false;
    }
    let key = text(toleration, "key");
    if !key.is_empty() && key != text(taint, "key") {
        return false;
    }
    match text(toleration, "operator") {
        "Exists" => true,
        "Equal" | "" => !key.is_empty() && text(toleration, "value") == text(taint, "value"),
        _ => false,
    }
}

/// Whether a taint keeps new pods off its node (`NoSchedule`, `NoExecute`).
pub fn blocks_scheduling(taint: &Value) -> bool {
    matches!(text(taint, "effect"), "NoSchedule" | "NoExecute")
}

/// Whether one requirement (`key`, `operator`, `values`) holds for `value` (None: the label is
/// absent).
fn requirement_holds(requirement: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = requirement["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match text(requirement, "operator") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if op == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether a node selector term (`matchExpressions` on labels, `matchFields` on
/// `metadata.name`) selects the node `name` with `labels`. An empty term selects nothing, as
/// upstream.
pub fn term_selects(term: &Value, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let fields = term["matchFields"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_holds(r, labels.get(text(r, "key")).map(String::as_str)))
        && fields
            .iter()
            .all(|r| text(r, "key") == "metadata.name" && requirement_holds(r, Some(name)))
}

/// Whether a pod's required node affinity (`spec.affinity.nodeAffinity
/// .requiredDuringSchedulingIgnoredDuringExecution`, as JSON; Null when there is none) admits
/// the node: any of its terms selects it.
pub fn required_affinity_selects(
    required: &Value,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    match required["nodeSelectorTerms"].as_array() {
        None => true,
        Some(terms) => terms.iter().any(|t| term_selects(t, name, labels)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerations_as_upstream() {
        let taint = json!({"key": "gpu", "value": "a100", "effect": "NoSchedule"});
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(tolerates(
            &json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}),
            &taint
        ));
        assert!(tolerates(&json!({"key": "gpu", "value": "a100"}), &taint));
        assert!(!tolerates(&json!({"key": "gpu", "value": "h100"}), &taint));
        assert!(!tolerates(
            &json!({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}),
            &taint
        ));
        assert!(
            !tolerates(&json!({"value": "a100"}), &taint),
            "Equal needs a key"
        );
        assert!(blocks_scheduling(&taint));
        assert!(!blocks_scheduling(
            &json!({"key": "k", "effect": "PreferNoSchedule"})
        ));
    }

    #[test]
    fn terms_select_by_labels_and_name() {
        let labels: BTreeMap<String, String> = [
            ("pool".to_string(), "a".to_string()),
            ("gen".to_string(), "9".to_string()),
        ]
        .into();
        let pin =
            json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]});
        assert!(term_selects(&pin, "n1", &labels));
        assert!(!term_selects(&pin, "n2", &labels));
        let exprs = json!({"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["a", "b"]},
            {"key": "gen", "operator": "Gt", "values": ["8"]},
            {"key": "spot", "operator": "DoesNotExist"}]});
        assert!(term_selects(&exprs, "n2", &labels));
        assert!(
            !term_selects(&json!({}), "n1", &labels),
            "an empty term selects nothing"
        );
        let required = json!({"nodeSelectorTerms": [pin, exprs]});
        assert!(required_affinity_selects(&required, "n9", &labels));
        assert!(required_affinity_selects(&Value::Null, "n9", &labels));
        let other_pool: BTreeMap<String, String> = [("pool".to_string(), "c".to_string())].into();
        assert!(!required_affinity_selects(&required, "n9", &other_pool));
    }
}
