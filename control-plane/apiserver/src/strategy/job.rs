//! Jobs: upstream defaults, the generated selector and labels, and the `kubectl get jobs`
//! columns.

use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::pod::{default_pod_spec, validate_pod_spec};
use super::{
    age, default_field, human_duration, immutable, name_of, not_supported, required, Column,
    Strategy,
};

pub(super) struct JobStrategy;

impl Strategy for JobStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
        let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let name = name_of(obj).to_string();
        if obj["spec"]["manualSelector"].as_bool() != Some(true)
            && obj["spec"]["selector"].is_null()
        {
            obj["spec"]["selector"] =
                json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
            default_field(obj, &["spec", "template", "metadata", "labels"], json!({}));
            let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
            for (k, v) in [
                ("batch.kubernetes.io/controller-uid", &uid),
                ("controller-uid", &uid),
                ("batch.kubernetes.io/job-name", &name),
                ("job-name", &name),
            ] {
                labels[k] = json!(v);
            }
        }
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        default_field(obj, &["spec", "completions"], json!(1));
        default_field(obj, &["spec", "parallelism"], json!(1));
        default_field(obj, &["spec", "backoffLimit"], json!(6));
        default_field(obj, &["spec", "completionMode"], json!("NonIndexed"));
        default_field(obj, &["spec", "suspend"], json!(false));
        if let Some(spec) = obj["spec"]
            .get_mut("template")
            .and_then(|t| t.get_mut("spec"))
        {
            default_pod_spec(spec);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let tpl = &obj["spec"]["template"]["spec"];
        if tpl.is_null() {
            return vec![required("spec.template.spec.containers")];
        }
        let mut errs = validate_pod_spec(tpl, "spec.template.spec");
        match tpl["restartPolicy"].as_str() {
            Some("OnFailure") | Some("Never") => {}
            Some(p) => errs.push(not_supported(
                "spec.template.spec.restartPolicy",
                p,
                &["OnFailure", "Never"],
            )),
            None => errs.push(required("spec.template.spec.restartPolicy")),
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        [
            immutable(new, old, &["spec", "selector"], "spec.selector"),
            immutable(new, old, &["spec", "completions"], "spec.completions"),
            immutable(new, old, &["spec", "completionMode"], "spec.completionMode"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Status", "string", "Status of the job."),
            Column::new(
                "Completions",
                "string",
                "The desired number of successfully finished pods the job should be run with.",
            ),
            Column::new("Duration", "string", "Time required to complete the job."),
            Column::AGE,
            Column::wide(
                "Containers",
                "string",
                "Names of each container in the template.",
            ),
            Column::wide(
                "Images",
                "string",
                "Images referenced by each container in the template.",
            ),
            Column::wide(
                "Selector",
                "string",
                "A label query over pods that should match the pod count.",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let status = &obj["status"];
        let has = |ty: &str| {
            status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == ty && c["status"] == "True")
        };
        let state = if has("Complete") {
            "Complete"
        } else if has("Failed") {
            "Failed"
        } else if obj["spec"]["suspend"].as_bool() == Some(true) {
            "Suspended"
        } else {
            "Running"
        };
        let duration = match status["startTime"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        {
            Some(start) => {
                let end = status["completionTime"]
                    .as_str()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.with_timezone(&chrono::Utc))
                    .unwrap_or_else(chrono::Utc::now);
                human_duration(
                    (end - start.with_timezone(&chrono::Utc))
                        .num_seconds()
                        .max(0),
                )
            }
            None => String::new(),
        };
        let containers = obj["spec"]["template"]["spec"]["containers"].as_array();
        let names: Vec<&str> = containers
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        let images: Vec<&str> = containers
            .into_iter()
            .flatten()
            .filter_map(|c| c["image"].as_str())
            .collect();
        let selector =
            fabrik_machinery::labels::Selector::from_label_selector(&obj["spec"]["selector"])
                .map(|s| s.to_string())
                .unwrap_or_default();
        vec![
            json!(name_of(obj)),
            json!(state),
            json!(format!(
                "{}/{}",
                status["succeeded"].as_i64().unwrap_or(0),
                obj["spec"]["completions"].as_i64().unwrap_or(1)
            )),
            json!(duration),
            json!(age(obj)),
            json!(names.join(",")),
            json!(images.join(",")),
            json!(selector),
        ]
    }
}
