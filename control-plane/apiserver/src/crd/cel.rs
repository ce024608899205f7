//! `x-kubernetes-validations`: CEL rules on custom objects, evaluated with the `cel` crate with
//! `self` bound to the value at the rule's schema node and `oldSelf` to the previous value for
//! transition rules (evaluated only on update, when the old value exists).
//!
//! Rules come from CRD authors and values from tenants: compilation and evaluation run under
//! `catch_unwind`, so a defect in the interpreter answers an error instead of killing the server.

use std::panic::{catch_unwind, AssertUnwindSafe};

use fabrik_machinery::validation::{FieldError, FieldErrorKind};
use serde_json::Value;

use crate::cel_limits::{self, Budget};

/// Nesting depth beyond which rules are not looked for.
const MAX_DEPTH: usize = 64;

/// Checks that every rule in `schema` compiles; returns `(schema path, message)` for each that
/// does not.
pub fn compile_errors(schema: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    compile_walk(schema, "", 0, &mut out);
    out
}

/// Rules whose estimated cost is over budget: `(schema path, message)` (see
/// [`cel_limits::rule_cost_errors`]).
pub fn cost_errors(schema: &Value) -> Vec<(String, String)> {
    cel_limits::rule_cost_errors(schema)
}

fn compile_walk(schema: &Value, path: &str, depth: usize, out: &mut Vec<(String, String)>) {
    if depth > MAX_DEPTH {
        return;
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or("");
        if text.trim().is_empty() {
            out.push((path.to_string(), "rule must not be empty".into()));
            continue;
        }
        match catch_unwind(|| cel::Program::compile(text).map(|_| ())) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => out.push((path.to_string(), format!("compilation failed: {e}"))),
            Err(_) => out.push((path.to_string(), "compilation failed".into())),
        }
    }
    for (k, s) in schema["properties"].as_object().into_iter().flatten() {
        compile_walk(s, &format!("{path}.properties[{k}]"), depth + 1, out);
    }
    if let Some(items) = schema.get("items") {
        compile_walk(items, &format!("{path}.items"), depth + 1, out);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        compile_walk(
            extra,
            &format!("{path}.additionalProperties"),
            depth + 1,
            out,
        );
    }
}

/// Evaluates every rule that applies to `value` (and `old`, for transition rules), off the
/// async workers and within the cost limits of [`crate::cel_limits`]: one object's rules share
/// one budget; once it is spent, evaluation stops with an error.
pub fn validate(schema: &Value, value: &Value, old: Option<&Value>, path: &str) -> Vec<FieldError> {
    if !has_rules(schema, 0) {
        return Vec::new();
    }
    let run = || {
        let mut errs = Vec::new();
        let budget = Budget::default();
        walk(schema, value, old, path, 0, &budget, &mut errs);
        errs
    };
    match cel_limits::offload(run) {
        Ok(errs) => errs,
        Err(message) => vec![FieldError {
            kind: FieldErrorKind::FieldValueForbidden,
            field: if path.is_empty() {
                "<root>".into()
            } else {
                path.to_string()
            },
            message,
            value: None,
        }],
    }
}

/// Whether any schema node has rules (most have none: no thread is taken for them).
fn has_rules(schema: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    schema["x-kubernetes-validations"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
        || schema["properties"]
            .as_object()
            .is_some_and(|p| p.values().any(|s| has_rules(s, depth + 1)))
        || schema.get("items").is_some_and(|s| has_rules(s, depth + 1))
        || schema
            .get("additionalProperties")
            .is_some_and(|s| s.is_object() && has_rules(s, depth + 1))
}

fn walk(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    depth: usize,
    budget: &Budget,
    errs: &mut Vec<FieldError>,
) {
    if depth > MAX_DEPTH || value.is_null() {
        return;
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if budget.spent() {
            errs.push(FieldError {
                kind: FieldErrorKind::FieldValueInvalid,
                field: if path.is_empty() {
                    "<root>".into()
                } else {
                    path.to_string()
                },
                message: cel_limits::BUDGET_EXCEEDED.into(),
                value: None,
            });
            return;
        }
        if let Some(e) = check_rule(rule, value, old, path, budget) {
            errs.push(e);
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            for (k, v) in map {
                let sub = props
                    .and_then(|p| p.get(k))
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(sub) = sub {
                    let child = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(
                        sub,
                        v,
                        old.and_then(|o| o.get(k)),
                        &child,
                        depth + 1,
                        budget,
                        errs,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    // Transition rules on list items apply only where the list keeps positions.
                    let old_item = old.and_then(|o| o.get(i));
                    walk(
                        sub,
                        v,
                        old_item,
                        &format!("{path}[{i}]"),
                        depth + 1,
                        budget,
                        errs,
                    );
                }
            }
        }
        _ => {}
    }
}

fn check_rule(
    rule: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    budget: &Budget,
) -> Option<FieldError> {
    let text = rule["rule"].as_str().unwrap_or("");
    let transition = text.contains("oldSelf");
    if transition && old.is_none() {
        return None;
    }
    let field = match rule["fieldPath"].as_str() {
        Some(fp) if !fp.is_empty() => format!("{path}{fp}"),
        _ => path.to_string(),
    };
    let kind = match rule["reason"].as_str() {
        Some("FieldValueForbidden") => FieldErrorKind::FieldValueForbidden,
        Some("FieldValueRequired") => FieldErrorKind::FieldValueRequired,
        Some("FieldValueDuplicate") => FieldErrorKind::FieldValueDuplicate,
        _ => FieldErrorKind::FieldValueInvalid,
    };
    let fail = |message: String| FieldError {
        kind,
        field: if field.is_empty() {
            "<root>".into()
        } else {
            field.clone()
        },
        message,
        value: Some(match value {
            Value::String(s) => s.clone(),
            Value::Object(_) => "object".into(),
            other => other.to_string(),
        }),
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<bool, String> {
        let program =
            cel::Program::compile(text).map_err(|e| format!("compilation failed: {e}"))?;
        let mut ctx = cel::Context::default();
        let me = cel::to_value(value).map_err(|e| e.to_string())?;
        ctx.add_variable_from_value("self", me);
        if let Some(o) = old {
            let old_value = cel::to_value(o).map_err(|e| e.to_string())?;
            ctx.add_variable_from_value("oldSelf", old_value);
        }
        match cel_limits::execute(&program, &mut ctx, budget) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("rule did not evaluate to a bool: {other:?}")),
            Err(e) => Err(format!("rule evaluation error: {e}")),
        }
    }));
    match outcome {
        Ok(Ok(true)) => None,
        Ok(Ok(false)) => {
            let message = rule["message"]
                .as_str()
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("failed rule: {text}"));
            Some(fail(message))
        }
        Ok(Err(e)) => Some(fail(e)),
        Err(_) => Some(fail("rule evaluation failed".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"},
                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable", "fieldPath": ".mode"}
            ],
            "properties": {"minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}, "mode": {"type": "string"},
                "names": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('x-')"}]}}}
        }}})
    }

    #[test]
    fn rules_pass_fail_and_transition() {
        let ok =
            json!({"spec": {"minReplicas": 1, "maxReplicas": 3, "mode": "a", "names": ["x-1"]}});
        assert!(validate(&schema(), &ok, None, "").is_empty());
        let bad =
            json!({"spec": {"minReplicas": 5, "maxReplicas": 3, "mode": "a", "names": ["y"]}});
        let errs = validate(&schema(), &bad, None, "");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
        assert_eq!(errs[0].message, "minReplicas must not exceed maxReplicas");
        assert_eq!(errs[1].field, "spec.names[0]");
        assert!(errs[1].message.contains("failed rule"));
        let changed = json!({"spec": {"minReplicas": 1, "maxReplicas": 3, "mode": "b"}});
        let errs = validate(&schema(), &changed, Some(&ok), "");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.mode");
    }

    #[test]
    fn bad_rules_are_reported_not_panicked() {
        let s = json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a +"}, {"rule": ""}, {"rule": "self.x == 1"}]});
        assert_eq!(compile_errors(&s).len(), 2);
        let errs = validate(&s, &json!({"y": 1}), None, "");
        assert!(errs
            .iter()
            .all(|e| e.kind == FieldErrorKind::FieldValueInvalid));
        assert_eq!(errs.len(), 3, "{errs:?}");
    }
}
