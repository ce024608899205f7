//! The create-only review resources, answered from this server's authenticator and
//! authorizer without storing anything: `selfsubjectreviews` (`kubectl auth whoami`),
//! `selfsubjectaccessreviews` and `selfsubjectrulesreviews` (`kubectl auth can-i`, `--list`),
//! `subjectaccessreviews`, `localsubjectaccessreviews`, `tokenreviews`; and the
//! `serviceaccounts/token` TokenRequest (`kubectl create token`).

use serde_json::{json, Value};

use crate::auth::serviceaccount::{
    TokenSpec, DEFAULT_EXPIRATION_SECS, MAX_EXPIRATION_SECS, MIN_EXPIRATION_SECS,
};
use crate::auth::UserInfo;
use crate::error::{ApiError, Result};
use crate::rbac::{Attributes, Decision};
use crate::resources::ResourceDef;
use crate::server::ApiServer;
use crate::strategy::invalid;

fn user_json(u: &UserInfo) -> Value {
    let mut v = json!({"username": u.name, "groups": u.groups});
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        v["extra"] = json!(u.extra);
    }
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn invalid_review(kind: &str, group: &str, field: &str, msg: &str) -> ApiError {
    ApiError::Invalid {
        kind: kind.into(),
        group: group.into(),
        name: String::new(),
        causes: vec![invalid(field, "", msg)],
    }
}

/// The attributes a review's `spec` asks about.
fn attributes(def: &ResourceDef, spec: &Value, path_ns: Option<&str>) -> Result<Attributes> {
    let r = &spec["resourceAttributes"];
    let n = &spec["nonResourceAttributes"];
    match (r.is_object(), n.is_object()) {
        (true, false) => {
            let text = |k: &str| r[k].as_str().unwrap_or("").to_string();
            let mut ns = text("namespace");
            if let Some(p) = path_ns {
                if !ns.is_empty() && ns != p {
                    return Err(invalid_review(
                        &def.kind,
                        &def.group,
                        "spec.resourceAttributes.namespace",
                        "must match metadata.namespace",
                    ));
                }
                ns = p.to_string();
            }
            Ok(Attributes::resource(
                &text("verb"),
                &text("group"),
                &text("resource"),
                &text("subresource"),
                &ns,
                &text("name"),
            ))
        }
        (false, true) => Ok(Attributes::non_resource(
            n["verb"].as_str().unwrap_or(""),
            n["path"].as_str().unwrap_or(""),
        )),
        _ => Err(invalid_review(
            &def.kind,
            &def.group,
            "spec",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
    }
}

fn decision_status(d: Decision) -> Value {
    match d {
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny => json!({"allowed": false}),
    }
}

impl ApiServer {
    /// Answers a review create.
    pub(crate) async fn review(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        user: &UserInfo,
        mut body: Value,
    ) -> Result<Value> {
        if !body.is_object() {
            return Err(ApiError::BadRequest(
                "the review must be a JSON object".into(),
            ));
        }
        body["apiVersion"] = json!(def.api_version());
        body["kind"] = json!(def.kind);
        let spec = body["spec"].clone();
        let status = match def.plural.as_str() {
            "selfsubjectreviews" => json!({"userInfo": user_json(user)}),
            "selfsubjectaccessreviews" => {
                let a = attributes(def, &spec, None)?;
                decision_status(self.authz.authorize(user, &a))
            }
            "subjectaccessreviews" | "localsubjectaccessreviews" => {
                let subject = UserInfo {
                    name: spec["user"].as_str().unwrap_or("").to_string(),
                    uid: spec["uid"].as_str().unwrap_or("").to_string(),
                    groups: strings(&spec["groups"]),
                    ..UserInfo::default()
                };
                if subject.name.is_empty() && subject.groups.is_empty() {
                    return Err(invalid_review(
                        &def.kind,
                        &def.group,
                        "spec.user",
                        "at least one of user or group must be specified",
                    ));
                }
                let path_ns = (def.plural == "localsubjectaccessreviews")
                    .then_some(ns)
                    .flatten();
                let a = attributes(def, &spec, path_ns)?;
                decision_status(self.authz.authorize(&subject, &a))
            }
            "selfsubjectrulesreviews" => {
                let namespace = spec["namespace"].as_str().unwrap_or("");
                let rules = self.authz.rules_for(user, namespace);
                let resource: Vec<Value> = rules
                    .iter()
                    .filter(|r| r.non_resource_urls.is_empty())
                    .map(|r| {
                        json!({"verbs": r.verbs, "apiGroups": r.api_groups,
                               "resources": r.resources, "resourceNames": r.resource_names})
                    })
                    .collect();
                let non_resource: Vec<Value> = rules
                    .iter()
                    .filter(|r| !r.non_resource_urls.is_empty())
                    .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
                    .collect();
                json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
            }
            "tokenreviews" => {
                let token = spec["token"].as_str().unwrap_or("");
                match self.auth.authenticate_token(token, &self.registry).await {
                    Ok(u) => json!({
                        "authenticated": true,
                        "user": user_json(&u.authenticated()),
                        "audiences": self.auth.tokens().audiences(),
                    }),
                    Err(e) => json!({"authenticated": false, "error": e.to_string()}),
                }
            }
            _ => return Err(ApiError::MethodNotAllowed),
        };
        body["status"] = status;
        if body["metadata"].is_null() {
            body["metadata"] = json!({});
        }
        body["metadata"]["creationTimestamp"] = Value::Null;
        Ok(body)
    }

    /// `POST serviceaccounts/<name>/token`.
    pub(crate) async fn token_request(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        body: Value,
    ) -> Result<Value> {
        let sa = self.registry.get(def, Some(ns), name).await?;
        let spec = &body["spec"];
        let bad = |field: &str, msg: &str| {
            invalid_review("TokenRequest", "authentication.k8s.io", field, msg)
        };
        let expiration = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_EXPIRATION_SECS,
            v => v
                .as_i64()
                .ok_or_else(|| bad("spec.expirationSeconds", "must be an integer"))?,
        };
        if expiration < MIN_EXPIRATION_SECS {
            return Err(bad(
                "spec.expirationSeconds",
                "may not specify a duration less than 10 minutes",
            ));
        }
        if expiration > MAX_EXPIRATION_SECS {
            return Err(bad(
                "spec.expirationSeconds",
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        let audiences = strings(&spec["audiences"]);
        if audiences.iter().any(String::is_empty) {
            return Err(bad("spec.audiences", "audiences may not be empty strings"));
        }
        let bound = match &spec["boundObjectRef"] {
            Value::Null => None,
            r => {
                let kind = r["kind"].as_str().unwrap_or("");
                let plural = match kind {
                    "Pod" => "pods",
                    "Secret" => "secrets",
                    _ => {
                        return Err(bad(
                            "spec.boundObjectRef.kind",
                            "supported values: \"Pod\", \"Secret\"",
                        ))
                    }
                };
                let obj_name = r["name"].as_str().unwrap_or("");
                let obj_def = self
                    .registry
                    .resource("", "v1", plural)
                    .ok_or(ApiError::NoRoute)?;
                let obj = self.registry.get(&obj_def, Some(ns), obj_name).await?;
                let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
                if let Some(want) = r["uid"].as_str().filter(|u| !u.is_empty()) {
                    if want != uid {
                        return Err(ApiError::Conflict {
                            resource: obj_def.group_resource(),
                            name: obj_name.to_string(),
                            message: format!(
                                "the UID in the bound object reference ({want}) does not match the UID in record ({uid})"
                            ),
                        });
                    }
                }
                Some((kind.to_string(), obj_name.to_string(), uid))
            }
        };
        let token_spec = TokenSpec {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: sa["metadata"]["uid"].as_str().unwrap_or("").to_string(),
            audiences: audiences.clone(),
            expiration_secs: expiration,
            bound,
        };
        let (token, exp) = self
            .auth
            .tokens()
            .issue(&token_spec)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let expires = chrono::DateTime::from_timestamp(exp, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        let audiences = if audiences.is_empty() {
            self.auth.tokens().audiences().to_vec()
        } else {
            audiences
        };
        let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration});
        if !spec["boundObjectRef"].is_null() {
            out_spec["boundObjectRef"] = spec["boundObjectRef"].clone();
        }
        Ok(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": crate::object::now()},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": expires},
        }))
    }
}
