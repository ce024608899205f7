//! Which requests an admission rule selects — upstream's `RuleWithOperations` (API groups,
//! versions, resources with their subresources, operations, scope) and the namespace and
//! object label selectors — shared by ValidatingAdmissionPolicy and the admission webhooks.

use fabrik_machinery::labels::Selector;
use serde_json::{Map, Value};

use super::Request;

/// What a rule is matched against: one resource version, subresource and operation.
#[derive(Clone, Copy, Debug)]
pub struct RuleTarget<'a> {
    /// API group.
    pub group: &'a str,
    /// Version.
    pub version: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// Subresource, if any.
    pub subresource: Option<&'a str>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'a str,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
}

impl<'a> RuleTarget<'a> {
    /// The target of an admission request, at the version it was sent in.
    pub fn of(req: &'a Request<'a>) -> RuleTarget<'a> {
        RuleTarget {
            group: &req.def.group,
            version: &req.def.version,
            resource: &req.def.plural,
            subresource: req.subresource,
            operation: req.op.as_str(),
            namespaced: req.def.namespaced,
        }
    }
}

/// The strings of a JSON list (others ignored).
pub fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn has(list: &[&str], v: &str) -> bool {
    list.iter().any(|x| *x == "*" || *x == v)
}

/// Whether one rule (`apiGroups`, `apiVersions`, `operations`, `resources`, `scope`) selects
/// `t`. Resources are upstream's forms: `pods` (not its subresources), `pods/status`, `pods/*`,
/// `*` (no subresources), `*/status` and `*/*` (a `/*` form also selects the resource itself,
/// as upstream's matcher does).
pub fn rule_matches(rule: &Value, t: &RuleTarget<'_>) -> bool {
    let resource_ok = strings(&rule["resources"]).iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        let res_ok = res == "*" || res == t.resource;
        // As upstream's matcher: `x/*` selects x's subresources and x itself.
        let sub_ok = sub == "*" || sub == t.subresource.unwrap_or("");
        res_ok && sub_ok
    });
    let scope_ok = match rule["scope"].as_str() {
        Some("Cluster") => !t.namespaced,
        Some("Namespaced") => t.namespaced,
        _ => true,
    };
    resource_ok
        && scope_ok
        && has(&strings(&rule["apiGroups"]), t.group)
        && has(&strings(&rule["apiVersions"]), t.version)
        && has(&strings(&rule["operations"]), t.operation)
}

/// Whether a label selector (`matchLabels` / `matchExpressions`; null or `{}` selects
/// everything) selects `labels`. A selector that does not parse selects nothing.
pub fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    if sel.is_null() {
        return true;
    }
    match Selector::from_label_selector(sel) {
        Ok(s) => s.matches(labels),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn target(resource: &'static str, sub: Option<&'static str>) -> RuleTarget<'static> {
        RuleTarget {
            group: "apps",
            version: "v1",
            resource,
            subresource: sub,
            operation: "CREATE",
            namespaced: true,
        }
    }

    #[test]
    fn resources_and_subresources_as_upstream() {
        let rule = |r: &str| {
            json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": [r]})
        };
        let main = target("deployments", None);
        let scale = target("deployments", Some("scale"));
        for (r, m, s) in [
            ("deployments", true, false),
            ("deployments/scale", false, true),
            ("deployments/*", true, true),
            ("*", true, false),
            ("*/scale", false, true),
            ("*/*", true, true),
            ("pods", false, false),
        ] {
            assert_eq!(rule_matches(&rule(r), &main), m, "{r}");
            assert_eq!(rule_matches(&rule(r), &scale), s, "{r}");
        }
    }

    #[test]
    fn groups_versions_operations_and_scope() {
        let t = target("deployments", None);
        let base = json!({"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                          "resources": ["*"]});
        assert!(rule_matches(&base, &t));
        for (field, value) in [
            ("apiGroups", json!([""])),
            ("apiVersions", json!(["v1beta1"])),
            ("operations", json!(["UPDATE", "DELETE"])),
            ("scope", json!("Cluster")),
        ] {
            let mut r = base.clone();
            r[field] = value;
            assert!(!rule_matches(&r, &t), "{field}");
        }
        let mut r = base.clone();
        r["scope"] = json!("Namespaced");
        assert!(rule_matches(&r, &t));
    }
}
