//! ValidatingAdmissionPolicy: platform teams write admission rules as CEL expressions
//! (`admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy + ValidatingAdmissionPolicyBinding)
//! instead of running webhooks. Supported, with upstream semantics: `matchConstraints`
//! (resource rules with operations, exclusions, namespace and object selectors) narrowed by the
//! binding's `matchResources`, `matchConditions`, `variables`, `validations` (with `message`,
//! `reason`), `failurePolicy`, and the binding's `validationActions` (`Deny`, `Warn`, `Audit`).
//! Expressions see `object`, `oldObject`, `request`, `namespaceObject` and `variables`.
//! Parameter resources (`paramKind`) are not supported: such a policy fails closed or open as
//! its `failurePolicy` says, with a message saying why.

use std::panic::{catch_unwind, AssertUnwindSafe};

use serde_json::{json, Map, Value};

use super::rules::{self, selector_matches, strings, RuleTarget};
use super::{Admission, Operation, Request, Verdict};
use crate::cel_limits::{self, Budget};
use crate::error::ApiError;
use crate::strategy::invalid;

/// The plugin.
#[derive(Default)]
pub struct ValidatingAdmissionPolicy;

const GROUP: &str = "admissionregistration.k8s.io";

/// Whether one `resourceRules` / `excludeResourceRules` entry matches the request.
fn rule_matches(rule: &Value, req: &Request<'_>, name: &str) -> bool {
    let names = strings(&rule["resourceNames"]);
    rules::rule_matches(rule, &RuleTarget::of(req)) && (names.is_empty() || names.contains(&name))
}

/// Whether a `matchResources` block (policy's or binding's) selects the request.
fn resources_match(
    m: &Value,
    req: &Request<'_>,
    obj: &Value,
    namespace: Option<&Value>,
    require_rules: bool,
) -> bool {
    if m.is_null() {
        return !require_rules;
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let rules = m["resourceRules"].as_array();
    if let Some(rules) = rules {
        if !rules.iter().any(|r| rule_matches(r, req, name)) {
            return false;
        }
    } else if require_rules {
        return false;
    }
    if m["excludeResourceRules"]
        .as_array()
        .is_some_and(|ex| ex.iter().any(|r| rule_matches(r, req, name)))
    {
        return false;
    }
    if req.def.namespaced {
        let ns_labels = namespace.and_then(|n| n["metadata"]["labels"].as_object());
        if !selector_matches(&m["namespaceSelector"], ns_labels) {
            return false;
        }
    }
    selector_matches(&m["objectSelector"], obj["metadata"]["labels"].as_object())
}

/// Evaluates one CEL expression within the binding's cost `budget`; errors (including panics
/// of the evaluator, and the cost limits) are messages.
pub(crate) fn eval(
    expression: &str,
    vars: &[(&str, &Value)],
    budget: &Budget,
) -> Result<cel::Value, String> {
    catch_unwind(AssertUnwindSafe(|| {
        let program =
            cel::Program::compile(expression).map_err(|e| format!("compilation failed: {e}"))?;
        let mut ctx = cel::Context::default();
        for (name, value) in vars {
            let v = cel::to_value(value).map_err(|e| e.to_string())?;
            ctx.add_variable_from_value(*name, v);
        }
        cel_limits::execute(&program, &mut ctx, budget)
    }))
    .unwrap_or_else(|_| Err("expression evaluation failed".into()))
}

/// Every expression of a policy with its field path.
fn expressions(spec: &Value) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for (list, keys) in [
        ("variables", &["expression"][..]),
        ("matchConditions", &["expression"][..]),
        ("validations", &["expression", "messageExpression"][..]),
        ("auditAnnotations", &["valueExpression"][..]),
    ] {
        for (i, item) in spec[list].as_array().into_iter().flatten().enumerate() {
            for key in keys {
                if let Some(text) = item[*key].as_str() {
                    out.push((format!("spec.{list}[{i}].{key}"), text));
                }
            }
        }
    }
    out
}

/// A policy whose expressions are estimated over the per-expression cost limit is refused
/// (what the expressions bound themselves, such as literal lists, is counted; the sizes of
/// the objects they read are bounded at evaluation by the actual cost limit).
fn check_policy_cost(obj: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    for (field, text) in expressions(&obj["spec"]) {
        if let Some(cost) = cel_limits::expression_cost(text) {
            if cost > cel_limits::ESTIMATED_EXPRESSION_LIMIT {
                causes.push(fabrik_machinery::validation::FieldError::forbidden(
                    field,
                    cel_limits::over_budget(cost, cel_limits::ESTIMATED_EXPRESSION_LIMIT),
                ));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: "ValidatingAdmissionPolicy".into(),
        group: GROUP.into(),
        name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        causes,
    })
}

pub(crate) fn cel_to_json(v: &cel::Value) -> Value {
    match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => json!(b),
        cel::Value::Int(i) => json!(i),
        cel::Value::UInt(u) => json!(u),
        cel::Value::Float(f) => json!(f),
        cel::Value::String(s) => json!(s.as_str()),
        cel::Value::List(l) => Value::Array(l.iter().map(cel_to_json).collect()),
        cel::Value::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, cel_to_json(v));
            }
            Value::Object(out)
        }
        other => json!(format!("{other:?}")),
    }
}

enum Outcome {
    Pass,
    Violation { message: String, reason: String },
    Error(String),
}

fn evaluate(policy: &Value, vars_base: &[(&str, &Value)]) -> Outcome {
    let budget = Budget::default();
    let eval = |e: &str, vars: &[(&str, &Value)]| eval(e, vars, &budget);
    let spec = &policy["spec"];
    if !spec["paramKind"].is_null() {
        return Outcome::Error("policies with paramKind are not supported by Fabrik".into());
    }
    // Variables, in order; each may use the ones before it.
    let mut variables = Map::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or("");
        let vars_json = Value::Object(variables.clone());
        let mut vars: Vec<(&str, &Value)> = vars_base.to_vec();
        vars.push(("variables", &vars_json));
        match eval(v["expression"].as_str().unwrap_or(""), &vars) {
            Ok(value) => {
                variables.insert(name.to_string(), cel_to_json(&value));
            }
            Err(e) => return Outcome::Error(format!("variable {name:?}: {e}")),
        }
    }
    let vars_json = Value::Object(variables);
    let mut vars: Vec<(&str, &Value)> = vars_base.to_vec();
    vars.push(("variables", &vars_json));
    for c in spec["matchConditions"].as_array().into_iter().flatten() {
        match eval(c["expression"].as_str().unwrap_or(""), &vars) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Outcome::Pass,
            Ok(other) => {
                return Outcome::Error(format!(
                    "match condition {:?} did not return a bool: {other:?}",
                    c["name"].as_str().unwrap_or("")
                ))
            }
            Err(e) => return Outcome::Error(e),
        }
    }
    for v in spec["validations"].as_array().into_iter().flatten() {
        let expression = v["expression"].as_str().unwrap_or("");
        match eval(expression, &vars) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = v["message"]
                    .as_str()
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .or_else(|| {
                        v["messageExpression"]
                            .as_str()
                            .and_then(|m| match eval(m, &vars) {
                                Ok(cel::Value::String(s)) => Some(s.to_string()),
                                _ => None,
                            })
                    })
                    .unwrap_or_else(|| format!("failed expression: {expression}"));
                return Outcome::Violation {
                    message,
                    reason: v["reason"].as_str().unwrap_or("Invalid").to_string(),
                };
            }
            Ok(other) => {
                return Outcome::Error(format!(
                    "expression {expression:?} did not return a bool: {other:?}"
                ))
            }
            Err(e) => return Outcome::Error(format!("expression {expression:?}: {e}")),
        }
    }
    Outcome::Pass
}

#[async_trait::async_trait]
impl Admission for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let (Some(bdef), Some(pdef)) = (
            req.objects
                .resource(GROUP, "v1", "validatingadmissionpolicybindings"),
            req.objects
                .resource(GROUP, "v1", "validatingadmissionpolicies"),
        ) else {
            return Ok(Verdict::ok());
        };
        // Policies do not apply to the server's own writes, nor to policies themselves (so a
        // bad policy can always be removed).
        if req.def.group == GROUP && req.def.plural == "validatingadmissionpolicies" {
            check_policy_cost(obj)?;
        }
        if req.user.is_none() || req.def.group == GROUP {
            return Ok(Verdict::ok());
        }
        let bindings = req.objects.admission_objects(GROUP, &bdef.plural).await?;
        if bindings.is_empty() {
            return Ok(Verdict::ok());
        }
        let policies = req.objects.admission_objects(GROUP, &pdef.plural).await?;
        let namespace = match (req.namespace, req.objects.resource("", "v1", "namespaces")) {
            (Some(ns), Some(def)) => req.objects.get(&def, None, ns).await.ok(),
            _ => None,
        };
        let user = req
            .user
            .map(|u| json!({"username": u.name, "uid": u.uid, "groups": u.groups}));
        let request = json!({
            "operation": req.op.as_str(),
            "namespace": req.namespace.unwrap_or(""),
            "name": obj["metadata"]["name"],
            "dryRun": req.dry_run,
            "userInfo": user,
            "kind": {"group": req.def.group, "version": req.def.version, "kind": req.def.kind},
            "resource": {"group": req.def.group, "version": req.def.version, "resource": req.def.plural},
            "subResource": req.subresource.unwrap_or(""),
        });
        let old_value = match (req.op, old) {
            (Operation::Update, Some(o)) => o.clone(),
            _ => Value::Null,
        };
        let ns_value = namespace.clone().unwrap_or(Value::Null);
        let vars_base: [(&str, &Value); 4] = [
            ("object", obj),
            ("oldObject", &old_value),
            ("request", &request),
            ("namespaceObject", &ns_value),
        ];
        let mut verdict = Verdict::ok();
        for binding in bindings.iter() {
            let policy_name = binding["spec"]["policyName"].as_str().unwrap_or("");
            let Some(policy) = policies
                .iter()
                .find(|p| p["metadata"]["name"].as_str() == Some(policy_name))
            else {
                continue;
            };
            if !resources_match(
                &policy["spec"]["matchConstraints"],
                req,
                obj,
                namespace.as_ref(),
                true,
            ) || !resources_match(
                &binding["spec"]["matchResources"],
                req,
                obj,
                namespace.as_ref(),
                false,
            ) {
                continue;
            }
            let binding_name = binding["metadata"]["name"].as_str().unwrap_or("");
            let actions = strings(&binding["spec"]["validationActions"]);
            let outcome =
                cel_limits::offload(|| evaluate(policy, &vars_base)).unwrap_or_else(Outcome::Error);
            let (message, reason) = match outcome {
                Outcome::Pass => continue,
                Outcome::Violation { message, reason } => (message, reason),
                Outcome::Error(e) => {
                    if policy["spec"]["failurePolicy"].as_str() == Some("Ignore") {
                        continue;
                    }
                    (e, "Invalid".to_string())
                }
            };
            let text = format!(
                "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {message}"
            );
            if actions.contains(&"Warn") {
                verdict.warnings.push(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
                ));
            }
            if actions.contains(&"Audit") {
                tracing::info!(
                    policy = policy_name,
                    binding = binding_name,
                    "audit: {text}"
                );
            }
            if actions.contains(&"Deny") {
                return Err(match reason.as_str() {
                    "Forbidden" | "Unauthorized" => ApiError::Forbidden(text),
                    _ => ApiError::Invalid {
                        kind: req.def.kind.clone(),
                        group: req.def.group.clone(),
                        name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
                        causes: vec![invalid("", "", &text)],
                    },
                });
            }
        }
        Ok(verdict)
    }
}
