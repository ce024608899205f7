//! The admission webhooks as one plugin of the chain ([`crate::admission`]): in the mutating
//! phase every matching `MutatingWebhookConfiguration` webhook is called in order (configurations
//! by name, webhooks as listed), its JSONPatch applied and the result pruned to the schema; one
//! reinvocation round follows for `reinvocationPolicy: IfNeeded` webhooks that saw an object a
//! later webhook changed. In the validating phase every matching `ValidatingWebhookConfiguration`
//! webhook is called at once. Deletes are sent to both kinds (`oldObject` only; a patch on a
//! delete is ignored).
//!
//! A webhook matches by its `rules` (with `matchPolicy: Equivalent`, another served version of
//! the same resource, sent converted to that version), `namespaceSelector`, `objectSelector`
//! and `matchConditions` (CEL, as ValidatingAdmissionPolicy evaluates it). Objects of
//! `admissionregistration.k8s.io` are never sent to webhooks, so a broken webhook can always
//! be removed; the server's own writes are not sent either.
//!
//! A refusal is passed on with the webhook's code and message (`admission webhook "…" denied
//! the request: …`); a webhook that cannot be called fails the request (500) under
//! `failurePolicy: Fail`, or is skipped under `Ignore` (logged when its error changes).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use super::call::{Answer, Caller};
use super::config::{DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, REVIEW_VERSIONS};
use crate::admission::rules::{rule_matches, selector_matches, RuleTarget};
use crate::admission::{Admission, Operation, Order, Request, Verdict};
use crate::cel_limits::{self, Budget};
use crate::error::ApiError;
use crate::resources::ResourceDef;

const GROUP: &str = "admissionregistration.k8s.io";

/// The admission webhooks of one cluster.
pub struct Webhooks {
    caller: Caller,
    /// The last call error of each webhook skipped under `failurePolicy: Ignore`.
    ignored: Mutex<HashMap<String, String>>,
}

/// One webhook, with the configuration it came from.
struct Hook {
    config: String,
    spec: Value,
}

impl Hook {
    fn name(&self) -> &str {
        self.spec["name"].as_str().unwrap_or("")
    }

    fn fails_open(&self) -> bool {
        self.spec["failurePolicy"].as_str() == Some("Ignore")
    }

    fn timeout(&self) -> Duration {
        let secs = self.spec["timeoutSeconds"]
            .as_i64()
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, MAX_TIMEOUT_SECONDS);
        Duration::from_secs(secs as u64)
    }
}

/// What one request looks like to the webhooks.
struct Subject<'a> {
    req: &'a Request<'a>,
    obj: Option<&'a Value>,
    old: Option<&'a Value>,
    namespace: Option<Value>,
    /// The object's name where `obj` is not the object (CONNECT: its options).
    name: Option<&'a str>,
}

impl Subject<'_> {
    fn name(&self) -> &str {
        if let Some(n) = self.name {
            return n;
        }
        self.obj
            .or(self.old)
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or("")
    }
}

/// A webhook selected for a request, at the version it asked for.
struct Matched {
    def: std::sync::Arc<ResourceDef>,
}

/// What a webhook answered.
struct Response {
    allowed: bool,
    status: Value,
    patch: Option<Value>,
    warnings: Vec<String>,
}

impl Webhooks {
    /// The webhooks of a cluster, called through `caller`.
    pub fn new(caller: Caller) -> Webhooks {
        Webhooks {
            caller,
            ignored: Mutex::default(),
        }
    }

    async fn hooks(&self, req: &Request<'_>, plural: &str) -> Result<Vec<Hook>, ApiError> {
        let configs = req
            .objects
            .admission_objects("admissionregistration.k8s.io", plural)
            .await?;
        let mut configs: Vec<&Value> = configs.iter().collect();
        configs.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        Ok(configs
            .into_iter()
            .flat_map(|c| {
                let config = c["metadata"]["name"].as_str().unwrap_or("").to_string();
                c["webhooks"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |spec| Hook {
                        config: config.clone(),
                        spec,
                    })
            })
            .collect())
    }

    /// The request's namespace object (for `namespaceSelector`), read once per request.
    async fn namespace_of(req: &Request<'_>) -> Option<Value> {
        match (req.namespace, req.objects.resource("", "v1", "namespaces")) {
            (Some(ns), Some(def)) => req.objects.get(&def, None, ns).await.ok(),
            _ => None,
        }
    }

    fn subject<'a>(
        req: &'a Request<'a>,
        obj: Option<&'a Value>,
        old: Option<&'a Value>,
        namespace: Option<Value>,
    ) -> Subject<'a> {
        Subject {
            req,
            obj,
            old,
            namespace,
            name: None,
        }
    }

    /// Whether `hook` is called for the request, and at which version.
    fn matches(&self, hook: &Hook, s: &Subject<'_>) -> Result<Option<Matched>, ApiError> {
        let req = s.req;
        let rules: Vec<&Value> = hook.spec["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let here = RuleTarget::of(req);
        let mut matched = rules
            .iter()
            .any(|r| rule_matches(r, &here))
            .then(|| {
                req.objects
                    .resource(&req.def.group, &req.def.version, &req.def.plural)
            })
            .flatten()
            .map(|def| Matched { def });
        if matched.is_none() && hook.spec["matchPolicy"].as_str() != Some("Exact") {
            matched = req
                .objects
                .catalog()
                .all()
                .into_iter()
                .filter(|d| {
                    d.group == req.def.group
                        && d.plural == req.def.plural
                        && d.version != req.def.version
                })
                .find(|d| {
                    let t = RuleTarget {
                        version: &d.version,
                        ..here
                    };
                    rules.iter().any(|r| rule_matches(r, &t))
                })
                .map(|def| Matched { def });
        }
        let Some(matched) = matched else {
            return Ok(None);
        };
        fn labels(o: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
            o.and_then(|o| o["metadata"]["labels"].as_object())
        }
        let is_namespace = req.def.group.is_empty() && req.def.plural == "namespaces";
        let ns_labels = if is_namespace {
            labels(s.obj.or(s.old))
        } else if req.def.namespaced {
            s.namespace
                .as_ref()
                .and_then(|n| n["metadata"]["labels"].as_object())
        } else {
            None
        };
        if (req.def.namespaced || is_namespace)
            && !selector_matches(&hook.spec["namespaceSelector"], ns_labels)
        {
            return Ok(None);
        }
        let object_selector = &hook.spec["objectSelector"];
        let selected = selector_matches(object_selector, labels(s.obj))
            || (s.old.is_some() && selector_matches(object_selector, labels(s.old)));
        if !selected {
            return Ok(None);
        }
        if self.conditions_hold(hook, s)? {
            Ok(Some(matched))
        } else {
            Ok(None)
        }
    }

    /// Evaluates `matchConditions`: all true → called; any false → not; an error fails the
    /// request under `failurePolicy: Fail` and skips the webhook under `Ignore`.
    fn conditions_hold(&self, hook: &Hook, s: &Subject<'_>) -> Result<bool, ApiError> {
        let conds: Vec<&Value> = hook.spec["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        if conds.is_empty() {
            return Ok(true);
        }
        let null = Value::Null;
        let request = request_json(s, &s.req.def.version, "");
        let vars: [(&str, &Value); 3] = [
            ("object", s.obj.unwrap_or(&null)),
            ("oldObject", s.old.unwrap_or(&null)),
            ("request", &request),
        ];
        let outcome = cel_limits::offload(|| {
            let budget = Budget::default();
            for c in &conds {
                let expr = c["expression"].as_str().unwrap_or("");
                match crate::admission::policy::eval(expr, &vars, &budget) {
                    Ok(cel::Value::Bool(true)) => {}
                    Ok(cel::Value::Bool(false)) => return Ok(false),
                    Ok(other) => {
                        return Err(format!(
                            "match condition {:?} did not return a bool: {other:?}",
                            c["name"].as_str().unwrap_or("")
                        ))
                    }
                    Err(e) => {
                        return Err(format!(
                            "match condition {:?}: {e}",
                            c["name"].as_str().unwrap_or("")
                        ))
                    }
                }
            }
            Ok(true)
        })
        .unwrap_or_else(Err);
        match outcome {
            Ok(b) => Ok(b),
            Err(_) if hook.fails_open() => Ok(false),
            Err(e) => Err(ApiError::Internal(format!(
                "failed calling webhook {:?}: failed to evaluate match condition: {e}",
                hook.name()
            ))),
        }
    }

    /// Calls one webhook; `Ok(None)` when it was skipped (failing open, or simulated).
    async fn call(
        &self,
        hook: &Hook,
        matched: &Matched,
        s: &Subject<'_>,
    ) -> Result<Option<Response>, ApiError> {
        let side_effects = hook.spec["sideEffects"].as_str().unwrap_or("Unknown");
        if s.req.dry_run && !matches!(side_effects, "None" | "NoneOnDryRun") {
            return Err(ApiError::BadRequest(format!(
                "admission webhook {:?} has side effects and does not support dry run",
                hook.name()
            )));
        }
        let version = REVIEW_VERSIONS
            .iter()
            .find(|v| {
                hook.spec["admissionReviewVersions"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| x == *v))
            })
            .copied()
            .unwrap_or("v1");
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": format!("admission.k8s.io/{version}"),
            "kind": "AdmissionReview",
            "request": request_for(s, &matched.def, &uid).await?,
        });
        let answer = self
            .caller
            .post(
                s.req.objects,
                &hook.spec["clientConfig"],
                &review,
                hook.timeout(),
            )
            .await
            .map_err(|e| e.0)
            .and_then(|a| match a {
                Answer::Simulated => Ok(None),
                Answer::Json(v) => parse_response(&v, version, &uid).map(Some),
            });
        match answer {
            Ok(r) => {
                self.recovered(hook);
                Ok(r)
            }
            Err(e) if hook.fails_open() => {
                self.ignore(hook, &e);
                Ok(None)
            }
            Err(e) => Err(ApiError::Internal(format!(
                "failed calling webhook {:?}: {e}",
                hook.name()
            ))),
        }
    }

    fn ignore(&self, hook: &Hook, error: &str) {
        let key = format!("{}/{}", hook.config, hook.name());
        let Ok(mut ignored) = self.ignored.lock() else {
            return;
        };
        if ignored.get(&key).map(String::as_str) != Some(error) {
            tracing::warn!(
                webhook = hook.name(),
                configuration = %hook.config,
                "failed calling webhook, failing open: {error}"
            );
            ignored.insert(key, error.to_string());
        }
    }

    fn recovered(&self, hook: &Hook) {
        if let Ok(mut ignored) = self.ignored.lock() {
            if ignored
                .remove(&format!("{}/{}", hook.config, hook.name()))
                .is_some()
            {
                tracing::info!(webhook = hook.name(), "webhook answers again");
            }
        }
    }

    /// The mutating webhooks over `obj`, then one reinvocation round.
    async fn run_mutating(
        &self,
        hooks: &[Hook],
        req: &Request<'_>,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let namespace = Self::namespace_of(req).await;
        let mut called = Vec::new();
        let mut last_change = None;
        for (i, hook) in hooks.iter().enumerate() {
            if self
                .mutate_once(hook, req, obj, old, namespace.as_ref())
                .await?
            {
                last_change = Some(i);
            }
            called.push(i);
        }
        let Some(last) = last_change else {
            return Ok(());
        };
        // Reinvocation: once, for the webhooks that asked, when a later one changed the object.
        for i in called.into_iter().filter(|i| *i < last) {
            let hook = &hooks[i];
            if hook.spec["reinvocationPolicy"].as_str() == Some("IfNeeded") {
                self.mutate_once(hook, req, obj, old, namespace.as_ref())
                    .await?;
            }
        }
        Ok(())
    }

    /// Calls `hook` if it matches and applies its patch; true when the object changed.
    async fn mutate_once(
        &self,
        hook: &Hook,
        req: &Request<'_>,
        obj: &mut Value,
        old: Option<&Value>,
        namespace: Option<&Value>,
    ) -> Result<bool, ApiError> {
        let current = obj.clone();
        let s = Self::subject(req, Some(&current), old, namespace.cloned());
        let Some(matched) = self.matches(hook, &s)? else {
            return Ok(false);
        };
        let Some(resp) = self.call(hook, &matched, &s).await? else {
            return Ok(false);
        };
        for w in resp.warnings {
            req.warn(w);
        }
        if !resp.allowed {
            return Err(denied(hook.name(), resp.status));
        }
        let Some(patch) = resp.patch else {
            return Ok(false);
        };
        let seen = at_version(req, &current, &matched.def).await?;
        let patched = fabrik_machinery::patch::json_patch(&seen, &patch).map_err(|e| {
            ApiError::Internal(format!(
                "failed calling webhook {:?}: its patch does not apply: {e}",
                hook.name()
            ))
        })?;
        // Back to the version the request was made in; what the schema does not know goes.
        let mut patched = at_version(req, &patched, req.def).await?;
        patched["apiVersion"] = json!(req.def.api_version());
        patched["kind"] = json!(req.def.kind);
        req.def
            .schemas
            .get()
            .prune_unknown(&req.def.definition, &mut patched);
        // A webhook may not move the object: its name (once set), namespace and uid stay.
        for field in ["name", "namespace", "uid"] {
            let before = &current["metadata"][field];
            if !before.is_null() && patched["metadata"][field] != *before {
                return Err(ApiError::Internal(format!(
                    "failed calling webhook {:?}: its patch changes metadata.{field}, which a webhook may not change",
                    hook.name()
                )));
            }
        }
        let changed = patched != *obj;
        *obj = patched;
        Ok(changed)
    }

    async fn run_validating(
        &self,
        hooks: &[Hook],
        req: &Request<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        name: Option<&str>,
    ) -> Result<Verdict, ApiError> {
        let mut s = Self::subject(req, obj, old, Self::namespace_of(req).await);
        s.name = name;
        let mut selected = Vec::new();
        for hook in hooks {
            if let Some(m) = self.matches(hook, &s)? {
                selected.push((hook, m));
            }
        }
        let calls = selected.iter().map(|(hook, m)| self.call(hook, m, &s));
        let answers = futures::future::join_all(calls).await;
        let mut verdict = Verdict::ok();
        let mut refusal = None;
        for ((hook, _), answer) in selected.iter().zip(answers) {
            let Some(resp) = answer? else { continue };
            verdict.warnings.extend(resp.warnings);
            if !resp.allowed && refusal.is_none() {
                refusal = Some(denied(hook.name(), resp.status));
            }
        }
        match refusal {
            Some(e) => Err(e),
            None => Ok(verdict),
        }
    }
}

fn exempt(req: &Request<'_>) -> bool {
    req.user.is_none() || req.def.group == GROUP
}

#[async_trait::async_trait]
impl Admission for Webhooks {
    fn name(&self) -> &'static str {
        "AdmissionWebhooks"
    }

    fn order(&self) -> Order {
        Order::Webhooks
    }

    async fn mutate(
        &self,
        req: &Request<'_>,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if exempt(req) {
            return Ok(());
        }
        let hooks = self.hooks(req, "mutatingwebhookconfigurations").await?;
        if hooks.is_empty() {
            return Ok(());
        }
        self.run_mutating(&hooks, req, obj, old).await
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.def.group == GROUP && req.def.plural.ends_with("webhookconfigurations") {
            self.check_targets(req, obj)?;
        }
        if req.def.group == "apiextensions.k8s.io" && req.def.plural == "customresourcedefinitions"
        {
            self.check_conversion_target(req, obj)?;
        }
        if exempt(req) {
            return Ok(Verdict::ok());
        }
        let hooks = self.hooks(req, "validatingwebhookconfigurations").await?;
        if hooks.is_empty() {
            return Ok(Verdict::ok());
        }
        self.run_validating(&hooks, req, Some(obj), old, None).await
    }

    async fn validate_delete(&self, req: &Request<'_>, old: &Value) -> Result<Verdict, ApiError> {
        if exempt(req) {
            return Ok(Verdict::ok());
        }
        let mut hooks = self.hooks(req, "mutatingwebhookconfigurations").await?;
        hooks.extend(self.hooks(req, "validatingwebhookconfigurations").await?);
        if hooks.is_empty() {
            return Ok(Verdict::ok());
        }
        self.run_validating(&hooks, req, None, Some(old), None)
            .await
    }

    async fn validate_connect(
        &self,
        req: &Request<'_>,
        name: &str,
        options: &Value,
    ) -> Result<Verdict, ApiError> {
        if exempt(req) {
            return Ok(Verdict::ok());
        }
        let mut hooks = self.hooks(req, "mutatingwebhookconfigurations").await?;
        hooks.extend(self.hooks(req, "validatingwebhookconfigurations").await?);
        if hooks.is_empty() {
            return Ok(Verdict::ok());
        }
        self.run_validating(&hooks, req, Some(options), None, Some(name))
            .await
    }
}

impl Webhooks {
    /// A tenant's configuration may name only the URLs its Tenant allows.
    fn check_targets(&self, req: &Request<'_>, obj: &Value) -> Result<(), ApiError> {
        let targets = self.caller.targets();
        if !targets.is_restricted() {
            return Ok(());
        }
        let mut causes = Vec::new();
        for (i, hook) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
            let Some(url) = hook["clientConfig"]["url"].as_str() else {
                continue;
            };
            let checked = super::config::check_url(url).and_then(|u| targets.check_url(&u));
            if let Err(e) = checked {
                causes.push(fabrik_machinery::validation::FieldError::forbidden(
                    format!("webhooks[{i}].clientConfig.url"),
                    e,
                ));
            }
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::Invalid {
            kind: req.def.kind.clone(),
            group: req.def.group.clone(),
            name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
            causes,
        })
    }
}

impl Webhooks {
    /// A tenant's CRD may name only a conversion URL its Tenant allows.
    fn check_conversion_target(&self, req: &Request<'_>, obj: &Value) -> Result<(), ApiError> {
        let targets = self.caller.targets();
        let Some(url) = obj["spec"]["conversion"]["webhook"]["clientConfig"]["url"].as_str() else {
            return Ok(());
        };
        if !targets.is_restricted() {
            return Ok(());
        }
        let checked = super::config::check_url(url).and_then(|u| targets.check_url(&u));
        match checked {
            Ok(()) => Ok(()),
            Err(e) => Err(ApiError::Invalid {
                kind: req.def.kind.clone(),
                group: req.def.group.clone(),
                name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
                causes: vec![fabrik_machinery::validation::FieldError::forbidden(
                    "spec.conversion.webhook.clientConfig.url",
                    e,
                )],
            }),
        }
    }
}

/// `obj` at `def`'s version (another served version of the request's resource: converted as
/// the registry converts it — the CRD's conversion webhook, or the same fields under the
/// other `apiVersion`).
async fn at_version(req: &Request<'_>, obj: &Value, def: &ResourceDef) -> Result<Value, ApiError> {
    if !obj.is_object() || obj["apiVersion"].as_str() == Some(def.api_version().as_str()) {
        return Ok(obj.clone());
    }
    req.objects
        .convert(def, vec![obj.clone()], &def.api_version())
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
}

/// The `request` of the review sent to a webhook that matched at `def`'s version.
async fn request_for(s: &Subject<'_>, def: &ResourceDef, uid: &str) -> Result<Value, ApiError> {
    let mut r = request_json(s, &def.version, uid);
    r["kind"] = json!({"group": def.group, "version": def.version, "kind": def.kind});
    r["resource"] = json!({"group": def.group, "version": def.version, "resource": def.plural});
    r["object"] = match s.obj {
        Some(o) => at_version(s.req, o, def).await?,
        None => Value::Null,
    };
    r["oldObject"] = match s.old {
        Some(o) => at_version(s.req, o, def).await?,
        None => Value::Null,
    };
    if s.req.op == Operation::Connect {
        // The options object, as sent (PodExecOptions, ...).
        r["object"] = s.obj.cloned().unwrap_or(Value::Null);
    }
    Ok(r)
}

/// The AdmissionRequest fields every webhook (and match condition) sees.
fn request_json(s: &Subject<'_>, version: &str, uid: &str) -> Value {
    let req = s.req;
    let def = req.def;
    let user = req
        .user
        .map(|u| json!({"username": u.name, "uid": u.uid, "groups": u.groups, "extra": u.extra}));
    let options_kind = match req.op {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => "",
    };
    let mut r = json!({
        "uid": uid,
        "kind": {"group": def.group, "version": version, "kind": def.kind},
        "resource": {"group": def.group, "version": version, "resource": def.plural},
        "requestKind": {"group": def.group, "version": def.version, "kind": def.kind},
        "requestResource": {"group": def.group, "version": def.version, "resource": def.plural},
        "name": s.name(),
        "operation": req.op.as_str(),
        "userInfo": user.unwrap_or_else(|| json!({})),
        "dryRun": req.dry_run,
        "options": if options_kind.is_empty() { Value::Null } else {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind})
        },
    });
    if let Some(ns) = req.namespace {
        r["namespace"] = json!(ns);
    }
    if let Some(sub) = req.subresource {
        r["subResource"] = json!(sub);
        r["requestSubResource"] = json!(sub);
    }
    r
}

/// Reads a webhook's AdmissionReview answer.
fn parse_response(v: &Value, version: &str, uid: &str) -> Result<Response, String> {
    let want = format!("admission.k8s.io/{version}");
    if version == "v1"
        && (v["apiVersion"].as_str() != Some(want.as_str()) || v["kind"] != "AdmissionReview")
    {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            v["apiVersion"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        ));
    }
    let r = &v["response"];
    if !r.is_object() {
        return Err("webhook response was absent".into());
    }
    if version == "v1" && r["uid"].as_str() != Some(uid) {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            r["uid"].as_str().unwrap_or("")
        ));
    }
    let allowed = r["allowed"].as_bool().unwrap_or(false);
    let patch = match r["patch"].as_str() {
        None | Some("") => None,
        Some(b64) => {
            if version == "v1" && r["patchType"].as_str() != Some("JSONPatch") {
                return Err(format!(
                    "webhook returned a patch with patchType {:?}; only \"JSONPatch\" is supported",
                    r["patchType"].as_str().unwrap_or("")
                ));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("the patch is not base64: {e}"))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("the patch is not JSON: {e}"))?,
            )
        }
    };
    let warnings = r["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| w.trim().chars().take(512).collect::<String>())
        .filter(|w| !w.is_empty())
        .collect();
    if let Some(audit) = r["auditAnnotations"].as_object().filter(|a| !a.is_empty()) {
        let annotations = Value::Object(audit.clone()).to_string();
        tracing::info!(%annotations, "audit annotations of a webhook");
    }
    Ok(Response {
        allowed,
        status: r["status"].clone(),
        patch: if allowed { patch } else { None },
        warnings,
    })
}

/// Upstream `ToStatusErr`: the webhook's status, at least a 400, with who refused.
fn denied(webhook: &str, status: Value) -> ApiError {
    let by = format!("admission webhook {webhook:?} denied the request");
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let reason = status["reason"].as_str().unwrap_or("").to_string();
    let message = match status["message"].as_str().filter(|m| !m.is_empty()) {
        Some(m) => format!("{by}: {m}"),
        None if !reason.is_empty() => format!("{by}: {reason}"),
        None => format!("{by} without explanation"),
    };
    ApiError::Denied(Box::new(crate::error::Refusal {
        code,
        reason,
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_upstream() {
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "warnings": ["careful", " "],
                         "patchType": "JSONPatch",
                         "patch": base64::engine::general_purpose::STANDARD.encode(
                             r#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#)}});
        let r = parse_response(&ok, "v1", "u1").expect("answer");
        assert!(r.allowed);
        assert_eq!(r.warnings, vec!["careful"]);
        assert_eq!(r.patch.expect("patch")[0]["path"], "/metadata/labels/x");
        let mut wrong_uid = ok.clone();
        wrong_uid["response"]["uid"] = json!("u2");
        assert!(parse_response(&wrong_uid, "v1", "u1").is_err());
        let mut wrong_kind = ok.clone();
        wrong_kind["kind"] = json!("Other");
        assert!(parse_response(&wrong_kind, "v1", "u1").is_err());
        let mut merge = ok.clone();
        merge["response"]["patchType"] = json!("MergePatch");
        assert!(parse_response(&merge, "v1", "u1").is_err());
        // v1beta1 answers are read leniently, as upstream does.
        let beta = json!({"response": {"allowed": false}});
        assert!(
            !parse_response(&beta, "v1beta1", "u1")
                .expect("answer")
                .allowed
        );
    }

    #[test]
    fn refusals_keep_the_webhooks_code_and_message() {
        let e = denied(
            "deny.example.com",
            json!({"code": 403, "reason": "Forbidden", "message": "no"}),
        );
        assert_eq!(e.code(), 403);
        assert_eq!(e.reason(), "Forbidden");
        assert_eq!(
            e.to_string(),
            "admission webhook \"deny.example.com\" denied the request: no"
        );
        let bare = denied("d.example.com", Value::Null);
        assert_eq!(bare.code(), 400);
        assert_eq!(
            bare.to_string(),
            "admission webhook \"d.example.com\" denied the request without explanation"
        );
        assert_eq!(denied("d.e.f", json!({"code": 200})).code(), 400);
    }
}
