//! The `APIService` kind (`apiregistration.k8s.io/v1`): upstream's validation, so a
//! registration the server would proxy wrongly is refused when written.

use fabrik_machinery::validation::{self as names, FieldError};
use serde_json::{json, Value};

use crate::strategy::{
    age, default_field, forbidden, invalid, name_of, required, Column, NameValidator, Strategy,
};

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

    /// Upstream checks only that the name is a path segment; [`validate`] that it is
    /// `<version>.<group>` (`v1.` for the core group, which is no DNS subdomain).
    fn name_validator(&self) -> NameValidator {
        names::path_segment_name
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new(
                "Service",
                "string",
                "The reference to the service that hosts this API endpoint.",
            ),
            Column::new("Available", "string", "Whether this service is available."),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            json!(name_of(obj)),
            json!(service_cell(obj)),
            json!(available_cell(obj)),
            json!(age(obj)),
        ]
    }
}

/// The `SERVICE` column: `namespace/name`, or `Local` for an API the server serves itself.
fn service_cell(obj: &Value) -> String {
    let svc = &obj["spec"]["service"];
    if svc.is_object() {
        format!(
            "{}/{}",
            svc["namespace"].as_str().unwrap_or(""),
            svc["name"].as_str().unwrap_or("")
        )
    } else {
        "Local".into()
    }
}

/// The `AVAILABLE` column as upstream prints it: `True`, `False (<reason>)`, or `Unknown`
/// without the condition.
fn available_cell(obj: &Value) -> String {
    let Some(c) = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
    else {
        return "Unknown".into();
    };
    let status = c["status"].as_str().unwrap_or("Unknown");
    match c["reason"].as_str() {
        Some(reason) if status != "True" && !reason.is_empty() => format!("{status} ({reason})"),
        _ => status.to_string(),
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
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            "spec.group",
            "only v1 may have an empty group and it better be legacy kube",
        ));
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
    let has_ca = spec["caBundle"].as_str().is_some_and(|c| !c.is_empty());
    let insecure = spec["insecureSkipTLSVerify"].as_bool() == Some(true);
    let service = &spec["service"];
    if !service.is_object() {
        // A Local APIService: the server serves the group version itself.
        if has_ca {
            errs.push(forbidden(
                "spec.caBundle",
                "local APIservices may not have a caBundle",
            ));
        }
        if insecure {
            errs.push(forbidden(
                "spec.insecureSkipTLSVerify",
                "local APIservices may not have insecureSkipTLSVerify",
            ));
        }
        return errs;
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
    if insecure && has_ca {
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

    #[test]
    fn local_apiservices_follow_upstream_rules() {
        let local = |name: &str, spec: Value| json!({"metadata": {"name": name}, "spec": spec});
        let core = local(
            "v1.",
            json!({"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}),
        );
        assert!(validate(&core).is_empty(), "{:?}", validate(&core));
        assert!(names::path_segment_name("v1.").is_empty());
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "v2.",
                json!({"version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1}),
                "spec.group",
            ),
            (
                "v1.apps",
                json!({"group": "apps", "version": "v1", "versionPriority": 15}),
                "spec.groupPriorityMinimum",
            ),
            (
                "v1.apps",
                json!({"group": "apps", "version": "v1", "groupPriorityMinimum": 17800,
                       "versionPriority": 15, "caBundle": "Zm9v"}),
                "spec.caBundle",
            ),
            (
                "v1.apps",
                json!({"group": "apps", "version": "v1", "groupPriorityMinimum": 17800,
                       "versionPriority": 15, "insecureSkipTLSVerify": true}),
                "spec.insecureSkipTLSVerify",
            ),
        ];
        for (name, spec, expected) in cases {
            let errs = validate(&local(name, spec));
            assert!(
                errs.iter().any(|e| e.field == expected),
                "{expected}: {errs:?}"
            );
        }
    }

    #[test]
    fn the_table_says_local_or_the_service_and_the_condition() {
        let s = ApiServiceStrategy;
        let mut obj = json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps"}});
        assert_eq!(s.cells(&obj)[1], "Local");
        assert_eq!(s.cells(&obj)[2], "Unknown");
        obj["status"]["conditions"] =
            json!([{"type": "Available", "status": "True", "reason": "Local"}]);
        assert_eq!(s.cells(&obj)[2], "True");
        let mut reg = svc(good());
        reg["status"]["conditions"] =
            json!([{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]);
        assert_eq!(s.cells(&reg)[1], "kube-system/metrics-server");
        assert_eq!(s.cells(&reg)[2], "False (MissingEndpoints)");
        assert_eq!(s.columns().len(), s.cells(&reg).len());
    }
}
