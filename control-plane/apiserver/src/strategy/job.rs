//! Jobs: upstream defaults, the generated selector and labels, upstream's validation of the
//! pod failure policy, per-index backoff limits and success policy, and the `kubectl get jobs`
//! columns.

use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::pod::{default_pod_spec, validate_pod_spec};
use super::{
    age, default_field, human_duration, immutable, invalid, name_of, not_supported, required,
    Column, Strategy,
};

/// The most rules a pod failure policy or success policy has (upstream).
const MAX_RULES: usize = 20;
/// The most exit codes one `onExitCodes` lists (upstream).
const MAX_EXIT_CODES: usize = 255;

pub(super) struct JobStrategy;

fn too_many(field: String, n: usize, max: usize) -> FieldError {
    invalid(
        field,
        &n.to_string(),
        format!("must have at most {max} items"),
    )
}

/// Upstream's validation of `podFailurePolicy`, `backoffLimitPerIndex`, `maxFailedIndexes` and
/// `successPolicy`.
fn validate_policies(spec: &Value, errs: &mut Vec<FieldError>) {
    let indexed = spec["completionMode"] == "Indexed";
    let per_index = spec["backoffLimitPerIndex"].as_i64();
    let completions = spec["completions"].as_i64();
    if let Some(n) = per_index {
        if !indexed {
            errs.push(invalid(
                "spec.backoffLimitPerIndex",
                &n.to_string(),
                "requires completionMode: Indexed",
            ));
        }
        if n < 0 {
            errs.push(invalid(
                "spec.backoffLimitPerIndex",
                &n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    if let Some(m) = spec["maxFailedIndexes"].as_i64() {
        if per_index.is_none() {
            errs.push(invalid(
                "spec.maxFailedIndexes",
                &m.to_string(),
                "requires the backoffLimitPerIndex to be set",
            ));
        }
        if m < 0 || completions.is_some_and(|c| m > c) {
            errs.push(invalid(
                "spec.maxFailedIndexes",
                &m.to_string(),
                "must be between 0 and completions",
            ));
        }
    }
    let pfp = &spec["podFailurePolicy"];
    if !pfp.is_null() {
        let restart = spec["template"]["spec"]["restartPolicy"]
            .as_str()
            .unwrap_or("");
        if restart != "Never" {
            errs.push(invalid(
                "spec.template.spec.restartPolicy",
                restart,
                "only \"Never\" is supported when podFailurePolicy is specified",
            ));
        }
        let rules = pfp["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if rules.len() > MAX_RULES {
            errs.push(too_many(
                "spec.podFailurePolicy.rules".into(),
                rules.len(),
                MAX_RULES,
            ));
        }
        for (i, rule) in rules.iter().enumerate() {
            let path = format!("spec.podFailurePolicy.rules[{i}]");
            match rule["action"].as_str() {
                Some("FailJob" | "Ignore" | "Count") => {}
                Some("FailIndex") => {
                    if per_index.is_none() {
                        errs.push(invalid(
                            format!("{path}.action"),
                            "FailIndex",
                            "requires the backoffLimitPerIndex to be set",
                        ));
                    }
                }
                Some(other) => errs.push(not_supported(
                    format!("{path}.action"),
                    other,
                    &["Count", "FailIndex", "FailJob", "Ignore"],
                )),
                None => errs.push(required(format!("{path}.action"))),
            }
            let codes = &rule["onExitCodes"];
            let conditions = &rule["onPodConditions"];
            if codes.is_null() == conditions.is_null() {
                errs.push(invalid(
                    path.clone(),
                    "",
                    "specifying one of OnExitCodes and OnPodConditions is required",
                ));
                continue;
            }
            if !codes.is_null() {
                let op = codes["operator"].as_str().unwrap_or("");
                if !matches!(op, "In" | "NotIn") {
                    errs.push(not_supported(
                        format!("{path}.onExitCodes.operator"),
                        op,
                        &["In", "NotIn"],
                    ));
                }
                let values: Vec<i64> = codes["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_i64)
                    .collect();
                let vpath = format!("{path}.onExitCodes.values");
                if values.is_empty() {
                    errs.push(required(vpath.clone()));
                } else if values.len() > MAX_EXIT_CODES {
                    errs.push(too_many(vpath.clone(), values.len(), MAX_EXIT_CODES));
                }
                if op == "In" && values.contains(&0) {
                    errs.push(invalid(
                        vpath.clone(),
                        "0",
                        "must not be 0 for the In operator",
                    ));
                }
                if values.windows(2).any(|w| w[0] >= w[1]) {
                    errs.push(invalid(vpath, "", "must be ordered and have no duplicates"));
                }
            }
            for (j, c) in conditions.as_array().into_iter().flatten().enumerate() {
                let cpath = format!("{path}.onPodConditions[{j}]");
                if c["type"].as_str().is_none_or(str::is_empty) {
                    errs.push(required(format!("{cpath}.type")));
                }
                let st = c["status"].as_str().unwrap_or("True");
                if !matches!(st, "True" | "False" | "Unknown") {
                    errs.push(not_supported(
                        format!("{cpath}.status"),
                        st,
                        &["True", "False", "Unknown"],
                    ));
                }
            }
        }
    }
    let sp = &spec["successPolicy"];
    if !sp.is_null() {
        if !indexed {
            errs.push(invalid(
                "spec.successPolicy",
                "",
                "requires completionMode: Indexed",
            ));
        }
        let rules = sp["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if rules.is_empty() {
            errs.push(required("spec.successPolicy.rules"));
        } else if rules.len() > MAX_RULES {
            errs.push(too_many(
                "spec.successPolicy.rules".into(),
                rules.len(),
                MAX_RULES,
            ));
        }
        for (i, rule) in rules.iter().enumerate() {
            let path = format!("spec.successPolicy.rules[{i}]");
            let indexes = rule["succeededIndexes"].as_str();
            let count = rule["succeededCount"].as_i64();
            if indexes.is_none() && count.is_none() {
                errs.push(invalid(
                    path.clone(),
                    "",
                    "at least one of succeededCount or succeededIndexes must be specified",
                ));
            }
            if let Some(n) = count {
                if n <= 0 || completions.is_some_and(|c| n > c) {
                    errs.push(invalid(
                        format!("{path}.succeededCount"),
                        &n.to_string(),
                        "must be between 1 and completions",
                    ));
                }
            }
            if let Some(text) = indexes {
                if !valid_indexes(text, completions.unwrap_or(i64::MAX)) {
                    errs.push(invalid(
                        format!("{path}.succeededIndexes"),
                        text,
                        "must be ascending, non-overlapping indexes and ranges (\"1,3-5\") below completions",
                    ));
                }
            }
        }
    }
}

/// Whether `text` is an index list (`1,3-5`): ascending, non-overlapping, below `limit`.
fn valid_indexes(text: &str, limit: i64) -> bool {
    let mut last = -1i64;
    for part in text.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i64>(), b.parse::<i64>()),
            None => (part.parse::<i64>(), part.parse::<i64>()),
        };
        let (Ok(a), Ok(b)) = (a, b) else {
            return false;
        };
        if a <= last || b < a || b >= limit {
            return false;
        }
        last = b;
    }
    !text.is_empty()
}

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
        // With a limit per index, the Job-wide one is effectively unlimited (upstream).
        let per_index = !obj["spec"]["backoffLimitPerIndex"].is_null();
        default_field(
            obj,
            &["spec", "backoffLimit"],
            json!(if per_index { i32::MAX } else { 6 }),
        );
        let replacement = if obj["spec"]["podFailurePolicy"].is_null() {
            "TerminatingOrFailed"
        } else {
            "Failed"
        };
        default_field(obj, &["spec", "podReplacementPolicy"], json!(replacement));
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
        validate_policies(&obj["spec"], &mut errs);
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        [
            immutable(new, old, &["spec", "selector"], "spec.selector"),
            immutable(new, old, &["spec", "completions"], "spec.completions"),
            immutable(new, old, &["spec", "completionMode"], "spec.completionMode"),
            immutable(
                new,
                old,
                &["spec", "podFailurePolicy"],
                "spec.podFailurePolicy",
            ),
            immutable(
                new,
                old,
                &["spec", "backoffLimitPerIndex"],
                "spec.backoffLimitPerIndex",
            ),
            immutable(new, old, &["spec", "successPolicy"], "spec.successPolicy"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(spec: Value) -> Vec<String> {
        let job = json!({"spec": spec});
        JobStrategy
            .validate(&job)
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    fn template(restart: &str) -> Value {
        json!({"spec": {"restartPolicy": restart, "containers": [{"name": "m", "image": "x"}]}})
    }

    #[test]
    fn policies_are_checked_as_upstream() {
        let ok = json!({"completionMode": "Indexed", "completions": 4, "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 2, "template": template("Never"),
            "podFailurePolicy": {"rules": [
                {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1, 42]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "successPolicy": {"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 2}]}});
        assert!(fields(ok).is_empty());
        let bad = json!({"completions": 2, "backoffLimitPerIndex": 1, "maxFailedIndexes": 3,
            "template": template("OnFailure"),
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 5, 3]}},
                {"action": "Explode", "onPodConditions": [{"type": "X"}]},
                {"action": "Count"}]},
            "successPolicy": {"rules": [{"succeededIndexes": "3-1"}]}});
        let f = fields(bad);
        for want in [
            "spec.backoffLimitPerIndex",
            "spec.maxFailedIndexes",
            "spec.template.spec.restartPolicy",
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "spec.podFailurePolicy.rules[1].action",
            "spec.podFailurePolicy.rules[2]",
            "spec.successPolicy",
            "spec.successPolicy.rules[0].succeededIndexes",
        ] {
            assert!(f.contains(&want.to_string()), "{want} not in {f:?}");
        }
    }

    #[test]
    fn per_index_jobs_default_to_no_job_wide_limit() {
        let mut job = json!({"spec": {"backoffLimitPerIndex": 1, "template": template("Never"),
            "podFailurePolicy": {"rules": []}}});
        JobStrategy.prepare_for_create_defaults_only(&mut job);
        assert_eq!(job["spec"]["backoffLimit"], json!(i32::MAX));
        assert_eq!(job["spec"]["podReplacementPolicy"], "Failed");
    }
}
