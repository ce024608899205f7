//! `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration`: upstream's defaults
//! and validation (`admissionregistration.k8s.io/v1`), so a configuration the server would
//! call wrongly is refused when written, with the field named.

use std::collections::BTreeSet;

use fabrik_machinery::validation::{self as names, FieldError};
use serde_json::{json, Value};

use crate::strategy::{
    default_field, duplicate, field_required, forbidden, invalid, not_supported, required,
    too_many, Strategy,
};

/// The longest `timeoutSeconds` (and the default).
pub const MAX_TIMEOUT_SECONDS: i64 = 30;
/// The default `timeoutSeconds`.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// The most `matchConditions` one webhook may have.
pub const MAX_MATCH_CONDITIONS: usize = 64;
/// The AdmissionReview versions the server sends, in preference order.
pub const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Which of the two kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// `ValidatingWebhookConfiguration`.
    Validating,
    /// `MutatingWebhookConfiguration` (with `reinvocationPolicy`).
    Mutating,
}

/// The strategy of one of the two kinds.
pub struct WebhookConfigStrategy(pub HookKind);

impl Strategy for WebhookConfigStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.default(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        self.default(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate(self.0, obj)
    }
}

impl WebhookConfigStrategy {
    /// Upstream's v1 defaults.
    fn default(&self, obj: &mut Value) {
        let Some(hooks) = obj["webhooks"].as_array_mut() else {
            return;
        };
        for hook in hooks {
            if !hook.is_object() {
                continue;
            }
            default_field(hook, &["failurePolicy"], json!("Fail"));
            default_field(hook, &["matchPolicy"], json!("Equivalent"));
            default_field(hook, &["namespaceSelector"], json!({}));
            default_field(hook, &["objectSelector"], json!({}));
            default_field(hook, &["timeoutSeconds"], json!(DEFAULT_TIMEOUT_SECONDS));
            if self.0 == HookKind::Mutating {
                default_field(hook, &["reinvocationPolicy"], json!("Never"));
            }
            if hook["clientConfig"]["service"].is_object() {
                default_field(hook, &["clientConfig", "service", "port"], json!(443));
            }
            for rule in hook["rules"].as_array_mut().into_iter().flatten() {
                if rule.is_object() {
                    default_field(rule, &["scope"], json!("*"));
                }
            }
        }
    }
}

/// Validates a configuration of `kind`.
pub fn validate(kind: HookKind, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(hooks) = obj["webhooks"].as_array() else {
        if !obj["webhooks"].is_null() {
            errs.push(invalid("webhooks", "", "must be a list"));
        }
        return errs;
    };
    let mut seen = BTreeSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        let name = hook["name"].as_str().unwrap_or("");
        if name.is_empty() {
            errs.push(required(format!("{path}.name")));
        } else {
            for m in fully_qualified_name(name) {
                errs.push(invalid(format!("{path}.name"), name, m));
            }
            if !seen.insert(name) {
                errs.push(duplicate(format!("{path}.name"), name));
            }
        }
        validate_hook(kind, hook, &path, &mut errs);
    }
    errs
}

/// Upstream `IsFullyQualifiedName`: a DNS subdomain of at least three segments.
fn fully_qualified_name(name: &str) -> Vec<String> {
    let mut out = names::dns1123_subdomain(name);
    if name.split('.').count() < 3 {
        out.push("should be a domain with at least three segments separated by dots".into());
    }
    out
}

fn one_of(hook: &Value, field: &str, path: &str, supported: &[&str], errs: &mut Vec<FieldError>) {
    match &hook[field] {
        Value::Null => errs.push(required(format!("{path}.{field}"))),
        Value::String(s) if supported.contains(&s.as_str()) => {}
        other => errs.push(not_supported(
            format!("{path}.{field}"),
            other.as_str().unwrap_or(""),
            supported,
        )),
    }
}

fn validate_hook(kind: HookKind, hook: &Value, path: &str, errs: &mut Vec<FieldError>) {
    one_of(hook, "failurePolicy", path, &["Fail", "Ignore"], errs);
    one_of(hook, "matchPolicy", path, &["Equivalent", "Exact"], errs);
    if kind == HookKind::Mutating {
        one_of(
            hook,
            "reinvocationPolicy",
            path,
            &["IfNeeded", "Never"],
            errs,
        );
    }
    // v1 accepts only webhooks without side effects (or without them on dry runs).
    one_of(hook, "sideEffects", path, &["None", "NoneOnDryRun"], errs);
    match hook["timeoutSeconds"].as_i64() {
        Some(t) if (1..=MAX_TIMEOUT_SECONDS).contains(&t) => {}
        Some(t) => errs.push(invalid(
            format!("{path}.timeoutSeconds"),
            &t.to_string(),
            format!("the timeout value must be between 1 and {MAX_TIMEOUT_SECONDS} seconds"),
        )),
        None => errs.push(required(format!("{path}.timeoutSeconds"))),
    }
    validate_review_versions(hook, path, errs);
    validate_client_config(&hook["clientConfig"], &format!("{path}.clientConfig"), errs);
    for (i, rule) in hook["rules"].as_array().into_iter().flatten().enumerate() {
        validate_rule(rule, &format!("{path}.rules[{i}]"), errs);
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        let v = &hook[sel];
        if !v.is_null() {
            if let Err(e) = fabrik_machinery::labels::Selector::from_label_selector(v) {
                errs.push(invalid(format!("{path}.{sel}"), "", e.to_string()));
            }
        }
    }
    validate_match_conditions(hook, path, errs);
}

fn validate_review_versions(hook: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let field = format!("{path}.admissionReviewVersions");
    let Some(versions) = hook["admissionReviewVersions"].as_array() else {
        errs.push(field_required(
            &field,
            &format!(
                "must specify one of {}",
                REVIEW_VERSIONS.map(|v| format!("\"{v}\"")).join(", ")
            ),
        ));
        return;
    };
    let mut seen = BTreeSet::new();
    let mut known = false;
    for (i, v) in versions.iter().enumerate() {
        let v = v.as_str().unwrap_or("");
        for m in names::dns1035_label(v) {
            errs.push(invalid(format!("{field}[{i}]"), v, m));
        }
        if !seen.insert(v) {
            errs.push(duplicate(format!("{field}[{i}]"), v));
        }
        known |= REVIEW_VERSIONS.contains(&v);
    }
    if !known {
        errs.push(invalid(
            field,
            &format!("{versions:?}"),
            format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.map(|v| format!("\"{v}\"")).join(", ")
            ),
        ));
    }
}

/// Validates a `clientConfig` (exactly one of `url` and `service`) at `path`.
pub fn validate_client_config(cc: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match (cc["url"].as_str(), cc["service"].is_object()) {
        (Some(_), true) => errs.push(invalid(
            path,
            "",
            "exactly one of url or service is required",
        )),
        (None, false) => errs.push(field_required(
            path,
            "exactly one of url or service is required",
        )),
        (Some(url), false) => {
            if let Err(m) = check_url(url) {
                errs.push(invalid(format!("{path}.url"), url, m));
            }
        }
        (None, true) => {
            let svc = &cc["service"];
            for f in ["namespace", "name"] {
                let v = svc[f].as_str().unwrap_or("");
                if v.is_empty() {
                    errs.push(required(format!("{path}.service.{f}")));
                } else {
                    for m in names::dns1123_label(v) {
                        errs.push(invalid(format!("{path}.service.{f}"), v, m));
                    }
                }
            }
            if let Some(p) = svc["path"].as_str() {
                if let Err(m) = check_path(p) {
                    errs.push(invalid(format!("{path}.service.path"), p, m));
                }
            }
            match svc["port"].as_i64() {
                Some(p) if (1..=65535).contains(&p) => {}
                Some(p) => errs.push(invalid(
                    format!("{path}.service.port"),
                    &p.to_string(),
                    "port is not valid: must be between 1 and 65535, inclusive",
                )),
                None => {}
            }
        }
    }
}

/// Upstream `ValidateWebhookURL`: an absolute `https` URL with a host, no user, query or
/// fragment.
pub fn check_url(url: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("url must be a valid URL: {e}"))?;
    if u.scheme() != "https" {
        return Err(format!(
            "'https' is the only allowed URL scheme, got {:?}",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("host must be specified".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("user information is not permitted in the URL".into());
    }
    if u.fragment().is_some() {
        return Err("fragments are not permitted in the URL".into());
    }
    if u.query().is_some() {
        return Err("query parameters are not permitted in the URL".into());
    }
    Ok(u)
}

/// Upstream's service path rules: absolute, no empty or dot segments.
fn check_path(p: &str) -> Result<(), String> {
    if p == "/" {
        return Ok(());
    }
    if !p.starts_with('/') {
        return Err("must start with a '/'".into());
    }
    for seg in p.trim_start_matches('/').split('/') {
        if seg.is_empty() {
            return Err("segment[?]: may not be empty".into());
        }
        if seg == "." || seg == ".." {
            return Err(format!("segment {seg:?}: may not be '.' or '..'"));
        }
    }
    Ok(())
}

fn validate_rule(rule: &Value, path: &str, errs: &mut Vec<FieldError>) {
    for field in ["operations", "apiGroups", "apiVersions", "resources"] {
        let list = crate::admission::rules::strings(&rule[field]);
        if list.is_empty() {
            errs.push(required(format!("{path}.{field}")));
            continue;
        }
        if list.len() > 1 && list.contains(&"*") {
            errs.push(invalid(
                format!("{path}.{field}"),
                &format!("{list:?}"),
                "if '*' is present, must not specify other values",
            ));
        }
        if field == "operations" {
            for (i, op) in list.iter().enumerate() {
                if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(op) {
                    errs.push(not_supported(
                        format!("{path}.operations[{i}]"),
                        op,
                        &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                    ));
                }
            }
        }
        if field == "apiVersions" && list.contains(&"") {
            errs.push(required(format!("{path}.apiVersions")));
        }
        if field == "resources" {
            for (i, r) in list.iter().enumerate() {
                let (res, sub) = r.split_once('/').unwrap_or((r, ""));
                if res.is_empty() || (r.contains('/') && sub.is_empty()) {
                    errs.push(required(format!("{path}.resources[{i}]")));
                }
            }
        }
    }
    if let Some(scope) = rule["scope"].as_str() {
        if !["*", "Cluster", "Namespaced"].contains(&scope) {
            errs.push(not_supported(
                format!("{path}.scope"),
                scope,
                &["*", "Cluster", "Namespaced"],
            ));
        }
    }
}

fn validate_match_conditions(hook: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(conds) = hook["matchConditions"].as_array() else {
        return;
    };
    if conds.len() > MAX_MATCH_CONDITIONS {
        errs.push(too_many(
            format!("{path}.matchConditions"),
            conds.len() as u64,
            MAX_MATCH_CONDITIONS as u64,
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in conds.iter().enumerate() {
        let p = format!("{path}.matchConditions[{i}]");
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            errs.push(required(format!("{p}.name")));
        } else {
            for m in names::qualified_name(name) {
                errs.push(invalid(format!("{p}.name"), name, m));
            }
            if !seen.insert(name) {
                errs.push(duplicate(format!("{p}.name"), name));
            }
        }
        let expr = c["expression"].as_str().unwrap_or("");
        if expr.trim().is_empty() {
            errs.push(required(format!("{p}.expression")));
            continue;
        }
        let compiled = std::panic::catch_unwind(|| cel::Program::compile(expr).map(|_| ()));
        match compiled {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errs.push(invalid(
                format!("{p}.expression"),
                expr,
                format!("compilation failed: {e}"),
            )),
            Err(_) => errs.push(invalid(
                format!("{p}.expression"),
                expr,
                "compilation failed",
            )),
        }
        if let Some(cost) = crate::cel_limits::expression_cost(expr) {
            if cost > crate::cel_limits::ESTIMATED_EXPRESSION_LIMIT {
                errs.push(forbidden(
                    format!("{p}.expression"),
                    crate::cel_limits::over_budget(
                        cost,
                        crate::cel_limits::ESTIMATED_EXPRESSION_LIMIT,
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hook: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "c"}, "webhooks": [hook]});
        WebhookConfigStrategy(HookKind::Mutating).prepare_for_create(&mut obj);
        obj
    }

    fn good() -> Value {
        json!({
            "name": "pods.policy.example.com",
            "clientConfig": {"service": {"namespace": "ns", "name": "hook", "path": "/mutate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    fn fields(hook: Value) -> Vec<String> {
        validate(HookKind::Mutating, &config(hook))
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn upstream_defaults() {
        let obj = config(good());
        let h = &obj["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        assert_eq!(h["rules"][0]["scope"], "*");
        assert!(fields(good()).is_empty(), "{:?}", fields(good()));
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("name", json!("short"), "webhooks[0].name"),
            ("sideEffects", json!("Some"), "webhooks[0].sideEffects"),
            ("sideEffects", Value::Null, "webhooks[0].sideEffects"),
            ("timeoutSeconds", json!(31), "webhooks[0].timeoutSeconds"),
            (
                "failurePolicy",
                json!("Sometimes"),
                "webhooks[0].failurePolicy",
            ),
            (
                "admissionReviewVersions",
                json!(["v2"]),
                "webhooks[0].admissionReviewVersions",
            ),
            (
                "admissionReviewVersions",
                Value::Null,
                "webhooks[0].admissionReviewVersions",
            ),
            (
                "clientConfig",
                json!({"url": "http://example.com/x"}),
                "webhooks[0].clientConfig.url",
            ),
            (
                "clientConfig",
                json!({"url": "https://example.com/x?a=b"}),
                "webhooks[0].clientConfig.url",
            ),
            (
                "clientConfig",
                json!({"url": "https://u:p@example.com/"}),
                "webhooks[0].clientConfig.url",
            ),
            ("clientConfig", json!({}), "webhooks[0].clientConfig"),
            (
                "clientConfig",
                json!({"url": "https://a.example/", "service": {"namespace": "n", "name": "s"}}),
                "webhooks[0].clientConfig",
            ),
            (
                "clientConfig",
                json!({"service": {"namespace": "n", "name": "s", "path": "x"}}),
                "webhooks[0].clientConfig.service.path",
            ),
            (
                "clientConfig",
                json!({"service": {"namespace": "n", "name": "s", "port": 70000}}),
                "webhooks[0].clientConfig.service.port",
            ),
            (
                "rules",
                json!([{"operations": ["CREATE", "*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]),
                "webhooks[0].rules[0].operations",
            ),
            (
                "rules",
                json!([{"operations": ["PATCH"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]),
                "webhooks[0].rules[0].operations[0]",
            ),
            (
                "rules",
                json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Everywhere"}]),
                "webhooks[0].rules[0].scope",
            ),
            (
                "matchConditions",
                json!([{"name": "a", "expression": "object."}]),
                "webhooks[0].matchConditions[0].expression",
            ),
            (
                "matchConditions",
                json!([{"name": "a", "expression": "true"}, {"name": "a", "expression": "true"}]),
                "webhooks[0].matchConditions[1].name",
            ),
            (
                "objectSelector",
                json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
                "webhooks[0].objectSelector",
            ),
        ];
        for (field, value, expected) in cases {
            let mut hook = good();
            hook[field] = value.clone();
            let got = fields(hook);
            assert!(
                got.iter().any(|f| f == expected),
                "{field}={value}: expected {expected}, got {got:?}"
            );
        }
    }

    #[test]
    fn names_are_unique_within_a_configuration() {
        let obj = json!({"metadata": {"name": "c"}, "webhooks": [good(), good()]});
        let mut obj = obj;
        WebhookConfigStrategy(HookKind::Validating).prepare_for_create(&mut obj);
        let errs = validate(HookKind::Validating, &obj);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "webhooks[1].name");
    }
}
