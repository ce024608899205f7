//! The `APIService` kind (`apiregistration.k8s.io/v1`): upstream's validation, so a
//! registration the server would proxy wrongly is refused when written.

use fabrik_machinery::validation::{self as names, FieldError};
use serde_json::{json, Value};

use crate::strategy::{default_field, forbidden, invalid, required, Strategy};

/// The strategy of `APIService`.
pub struct ApiServiceStrategy;

impl Strategy for ApiServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj["spec"]["service"].is_object() {
            default_field(obj, &["spec", "service", "port"], json!(443));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        self.prepare_for_create(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate(obj)
    }
}

/// Upstream `ValidateAPIService`.
pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &obj["spec"];
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let group = spec["group"].as_str().unwrap_or("");
    let version = spec["version"].as_str().unwrap_or("");
    if version.is_empty() {
        errs.push(required("spec.version"));
    } else {
        for m in names::dns1035_label(version) {
            errs.push(invalid("spec.version", version, m));
        }
    }
    if !group.is_empty() {
        for m in names::dns1123_subdomain(group) {
            errs.push(invalid("spec.group", group, m));
        }
    }
    if name != format!("{version}.{group}") {
        errs.push(invalid(
            "metadata.name",
            name,
            format!("must be `spec.version+\".\"+spec.group`: \"{version}.{group}\""),
        ));
    }
    let service = &spec["service"];
    if service.is_object() {
        if group.is_empty() {
            errs.push(required("spec.group"));
        }
        for f in ["namespace", "name"] {
            let v = service[f].as_str().unwrap_or("");
            if v.is_empty() {
                errs.push(required(format!("spec.service.{f}")));
            } else {
                for m in names::dns1123_label(v) {
                    errs.push(invalid(format!("spec.service.{f}"), v, m));
                }
            }
        }
        if let Some(p) = service["port"].as_i64() {
            if !(1..=65535).contains(&p) {
                errs.push(invalid(
                    "spec.service.port",
                    &p.to_string(),
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
        match spec["groupPriorityMinimum"].as_i64() {
            Some(p) if (1..=20000).contains(&p) => {}
            Some(p) => errs.push(invalid(
                "spec.groupPriorityMinimum",
                &p.to_string(),
                "must be positive and less than 20000",
            )),
            None => errs.push(required("spec.groupPriorityMinimum")),
        }
        match spec["versionPriority"].as_i64() {
            Some(p) if (1..=1000).contains(&p) => {}
            Some(p) => errs.push(invalid(
                "spec.versionPriority",
                &p.to_string(),
                "must be positive and less than 1000",
            )),
            None => errs.push(required("spec.versionPriority")),
        }
    }
    let has_ca = spec["caBundle"].as_str().is_some_and(|c| !c.is_empty());
    if spec["insecureSkipTLSVerify"].as_bool() == Some(true) && has_ca {
        errs.push(forbidden(
            "spec.insecureSkipTLSVerify",
            "may not be true if caBundle is present",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(spec: Value) -> Value {
        json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": spec})
    }

    fn good() -> Value {
        json!({"group": "metrics.k8s.io", "version": "v1beta1",
               "service": {"namespace": "kube-system", "name": "metrics-server"},
               "groupPriorityMinimum": 100, "versionPriority": 100,
               "insecureSkipTLSVerify": true})
    }

    #[test]
    fn upstream_rules() {
        assert!(validate(&svc(good())).is_empty());
        let cases: Vec<(&str, Value, &str)> = vec![
            ("version", json!("v1"), "metadata.name"),
            (
                "groupPriorityMinimum",
                json!(0),
                "spec.groupPriorityMinimum",
            ),
            ("versionPriority", Value::Null, "spec.versionPriority"),
            ("caBundle", json!("Zm9v"), "spec.insecureSkipTLSVerify"),
            (
                "service",
                json!({"namespace": "kube-system"}),
                "spec.service.name",
            ),
        ];
        for (field, value, expected) in cases {
            let mut spec = good();
            spec[field] = value;
            let errs = validate(&svc(spec));
            assert!(
                errs.iter().any(|e| e.field == expected),
                "{field}: {errs:?}"
            );
        }
    }
}
