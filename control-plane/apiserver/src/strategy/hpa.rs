//! HorizontalPodAutoscalers, stored at `autoscaling/v2` and served at `v2` and `v1`
//! ([`convert`], as upstream: what `v1` cannot say — metrics other than CPU utilisation,
//! `behavior`, conditions — rides in `autoscaling.alpha.kubernetes.io/*` annotations at `v1`):
//! upstream's defaults (one replica at least, 80 % average CPU utilisation when no metric is
//! given, the default scaling rules wherever a `behavior` leaves one out), upstream's
//! validation and the `kubectl get hpa` columns.

use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::{age, default_field, invalid, not_supported, required, Column, Strategy};

pub(super) struct HpaStrategy;

/// The metric source types and the field each one's settings live in.
const SOURCES: &[(&str, &str)] = &[
    ("Resource", "resource"),
    ("Pods", "pods"),
    ("Object", "object"),
    ("External", "external"),
    ("ContainerResource", "containerResource"),
];

/// Upstream's default rules for scaling up (`scaleUp`) or down.
pub fn default_rules(up: bool) -> Value {
    if up {
        json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    } else {
        json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    }
}

/// `v1`'s annotations for what only `v2` can say.
const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

fn is_v1(obj: &Value) -> bool {
    obj["apiVersion"] == "autoscaling/v1"
}

fn is_cpu_utilization(m: &Value) -> bool {
    m["type"] == "Resource"
        && m["resource"]["name"] == "cpu"
        && m["resource"]["target"]["type"] == "Utilization"
}

/// Converts an autoscaler between `autoscaling/v1` and `autoscaling/v2` (`desired`).
pub fn convert(obj: &Value, desired: &str) -> Result<Value, String> {
    let from = obj["apiVersion"].as_str().unwrap_or("");
    if from == desired {
        return Ok(obj.clone());
    }
    match desired {
        "autoscaling/v1" => Ok(to_v1(obj)),
        "autoscaling/v2" => to_v2(obj),
        other => Err(format!("unknown version {other:?}")),
    }
}

fn set_or_remove(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(v) => {
            map.insert(key.into(), v);
        }
        None => {
            map.remove(key);
        }
    }
}

fn to_v1(obj: &Value) -> Value {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let metrics: Vec<Value> = spec["metrics"].as_array().cloned().unwrap_or_default();
    let cpu = metrics.iter().position(is_cpu_utilization);
    let others: Vec<&Value> = metrics
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != cpu)
        .map(|(_, m)| m)
        .collect();
    let mut out = obj.clone();
    out["apiVersion"] = json!("autoscaling/v1");
    let mut new_spec = serde_json::Map::new();
    for f in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
        set_or_remove(
            &mut new_spec,
            f,
            Some(spec[f].clone()).filter(|v| !v.is_null()),
        );
    }
    if let Some(i) = cpu {
        new_spec.insert(
            "targetCPUUtilizationPercentage".into(),
            metrics[i]["resource"]["target"]["averageUtilization"].clone(),
        );
    }
    out["spec"] = Value::Object(new_spec);
    let current: Vec<Value> = status["currentMetrics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let current_cpu = current
        .iter()
        .position(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
    let mut annotations = out["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let text = |v: &Value| Value::String(v.to_string());
    set_or_remove(
        &mut annotations,
        METRICS_ANNOTATION,
        (!others.is_empty()).then(|| text(&json!(others))),
    );
    set_or_remove(
        &mut annotations,
        BEHAVIOR_ANNOTATION,
        spec["behavior"]
            .is_object()
            .then(|| text(&spec["behavior"])),
    );
    let other_current: Vec<&Value> = current
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != current_cpu)
        .map(|(_, m)| m)
        .collect();
    set_or_remove(
        &mut annotations,
        CURRENT_METRICS_ANNOTATION,
        (!other_current.is_empty()).then(|| text(&json!(other_current))),
    );
    set_or_remove(
        &mut annotations,
        CONDITIONS_ANNOTATION,
        status["conditions"]
            .as_array()
            .filter(|c| !c.is_empty())
            .map(|c| text(&json!(c))),
    );
    if annotations.is_empty() {
        if let Some(meta) = out["metadata"].as_object_mut() {
            meta.remove("annotations");
        }
    } else {
        out["metadata"]["annotations"] = Value::Object(annotations);
    }
    if status.is_object() {
        let mut new_status = serde_json::Map::new();
        for f in ["observedGeneration", "lastScaleTime"] {
            set_or_remove(
                &mut new_status,
                f,
                Some(status[f].clone()).filter(|v| !v.is_null()),
            );
        }
        for f in ["currentReplicas", "desiredReplicas"] {
            new_status.insert(f.into(), json!(status[f].as_i64().unwrap_or(0)));
        }
        if let Some(i) = current_cpu {
            set_or_remove(
                &mut new_status,
                "currentCPUUtilizationPercentage",
                Some(current[i]["resource"]["current"]["averageUtilization"].clone())
                    .filter(|v| !v.is_null()),
            );
        }
        out["status"] = Value::Object(new_status);
    }
    out
}

fn to_v2(obj: &Value) -> Result<Value, String> {
    let spec = &obj["spec"];
    let status = &obj["status"];
    let mut annotations = obj["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut take = |key: &str| -> Result<Option<Value>, String> {
        match annotations.remove(key) {
            Some(Value::String(s)) => serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| format!("annotation {key} is not JSON: {e}")),
            _ => Ok(None),
        }
    };
    let others = take(METRICS_ANNOTATION)?;
    let behavior = take(BEHAVIOR_ANNOTATION)?;
    let other_current = take(CURRENT_METRICS_ANNOTATION)?;
    let conditions = take(CONDITIONS_ANNOTATION)?;
    let mut out = obj.clone();
    out["apiVersion"] = json!("autoscaling/v2");
    if annotations.is_empty() {
        if let Some(meta) = out["metadata"].as_object_mut() {
            meta.remove("annotations");
        }
    } else {
        out["metadata"]["annotations"] = Value::Object(annotations);
    }
    let mut metrics = Vec::new();
    if let Some(t) = spec["targetCPUUtilizationPercentage"].as_i64() {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": t}}}));
    }
    metrics.extend(
        others
            .and_then(|o| o.as_array().cloned())
            .unwrap_or_default(),
    );
    let mut new_spec = serde_json::Map::new();
    for f in ["scaleTargetRef", "minReplicas", "maxReplicas"] {
        set_or_remove(
            &mut new_spec,
            f,
            Some(spec[f].clone()).filter(|v| !v.is_null()),
        );
    }
    if !metrics.is_empty() {
        new_spec.insert("metrics".into(), json!(metrics));
    }
    set_or_remove(&mut new_spec, "behavior", behavior);
    out["spec"] = Value::Object(new_spec);
    if status.is_object() {
        let mut new_status = serde_json::Map::new();
        for f in [
            "observedGeneration",
            "lastScaleTime",
            "currentReplicas",
            "desiredReplicas",
        ] {
            set_or_remove(
                &mut new_status,
                f,
                Some(status[f].clone()).filter(|v| !v.is_null()),
            );
        }
        let mut current = Vec::new();
        if let Some(u) = status["currentCPUUtilizationPercentage"].as_i64() {
            current.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": u}}}));
        }
        current.extend(
            other_current
                .and_then(|o| o.as_array().cloned())
                .unwrap_or_default(),
        );
        if !current.is_empty() {
            new_status.insert("currentMetrics".into(), json!(current));
        }
        set_or_remove(&mut new_status, "conditions", conditions);
        out["status"] = Value::Object(new_status);
    }
    Ok(out)
}

impl Strategy for HpaStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        default_field(obj, &["spec", "minReplicas"], json!(1));
        if is_v1(obj) {
            // What `v2`'s default metric reads as at `v1`.
            let carries_metrics = obj["metadata"]["annotations"][METRICS_ANNOTATION].is_string();
            if !carries_metrics && obj["spec"].is_object() {
                default_field(obj, &["spec", "targetCPUUtilizationPercentage"], json!(80));
            }
            return;
        }
        let no_metrics = obj["spec"]["metrics"]
            .as_array()
            .is_none_or(|m| m.is_empty());
        if no_metrics && obj["spec"].is_object() {
            obj["spec"]["metrics"] = json!([{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]);
        }
        if obj["spec"]["behavior"].is_object() {
            for (field, up) in [("scaleUp", true), ("scaleDown", false)] {
                let defaults = default_rules(up);
                let rules = &mut obj["spec"]["behavior"][field];
                if rules.is_null() {
                    *rules = defaults;
                    continue;
                }
                for key in ["selectPolicy", "policies"] {
                    if rules[key].is_null() {
                        rules[key] = defaults[key].clone();
                    }
                }
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        self.prepare_for_create_defaults_only(new);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        let target = &spec["scaleTargetRef"];
        for field in ["kind", "name"] {
            if target[field].as_str().is_none_or(str::is_empty) {
                errs.push(required(format!("spec.scaleTargetRef.{field}")));
            }
        }
        let min = spec["minReplicas"].as_i64().unwrap_or(1);
        let max = spec["maxReplicas"].as_i64();
        if min < 1 {
            errs.push(invalid(
                "spec.minReplicas",
                &min.to_string(),
                "must be greater than or equal to 1",
            ));
        }
        match max {
            None => errs.push(required("spec.maxReplicas")),
            Some(m) if m < 1 => errs.push(invalid(
                "spec.maxReplicas",
                &m.to_string(),
                "must be greater than 0",
            )),
            Some(m) if m < min => errs.push(invalid(
                "spec.maxReplicas",
                &m.to_string(),
                "must be greater than or equal to `minReplicas`",
            )),
            Some(_) => {}
        }
        // At v1, what only v2 can say rides in annotations: they must read as v2 would.
        if is_v1(obj) {
            for key in [
                METRICS_ANNOTATION,
                CURRENT_METRICS_ANNOTATION,
                CONDITIONS_ANNOTATION,
                BEHAVIOR_ANNOTATION,
            ] {
                if let Some(text) = obj["metadata"]["annotations"][key].as_str() {
                    if let Err(e) = serde_json::from_str::<Value>(text) {
                        errs.push(invalid(
                            format!("metadata.annotations[{key}]"),
                            "",
                            format!("must be JSON: {e}"),
                        ));
                    }
                }
            }
        }
        if let Some(t) = spec["targetCPUUtilizationPercentage"].as_i64() {
            if t < 1 {
                errs.push(invalid(
                    "spec.targetCPUUtilizationPercentage",
                    &t.to_string(),
                    "must be greater than 0",
                ));
            }
        }
        for (i, metric) in spec["metrics"].as_array().into_iter().flatten().enumerate() {
            validate_metric(metric, &format!("spec.metrics[{i}]"), &mut errs);
        }
        for field in ["scaleUp", "scaleDown"] {
            let rules = &spec["behavior"][field];
            if !rules.is_null() {
                validate_rules(rules, &format!("spec.behavior.{field}"), &mut errs);
            }
        }
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new(
                "Reference",
                "string",
                "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource.",
            ),
            Column::new(
                "Targets",
                "string",
                "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).",
            ),
            Column::new(
                "MinPods",
                "string",
                "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
            ),
            Column::new(
                "MaxPods",
                "integer",
                "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
            ),
            Column::new(
                "Replicas",
                "integer",
                "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.",
            ),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let target = &spec["scaleTargetRef"];
        let reference = format!(
            "{}/{}",
            target["kind"].as_str().unwrap_or(""),
            target["name"].as_str().unwrap_or("")
        );
        let shown = if is_v1(obj) {
            to_v2(obj).unwrap_or_else(|_| obj.clone())
        } else {
            obj.clone()
        };
        json!([
            obj["metadata"]["name"],
            reference,
            targets(&shown["spec"], &shown["status"]),
            spec["minReplicas"]
                .as_i64()
                .map(|m| m.to_string())
                .unwrap_or_else(|| "<unset>".into()),
            spec["maxReplicas"],
            obj["status"]["currentReplicas"].as_i64().unwrap_or(0),
            age(obj),
        ])
        .as_array()
        .cloned()
        .unwrap_or_default()
    }
}

fn validate_metric(metric: &Value, at: &str, errs: &mut Vec<FieldError>) {
    let Some(ty) = metric["type"].as_str() else {
        errs.push(required(format!("{at}.type")));
        return;
    };
    let Some((_, field)) = SOURCES.iter().find(|(t, _)| *t == ty) else {
        let names: Vec<&str> = SOURCES.iter().map(|(t, _)| *t).collect();
        errs.push(not_supported(format!("{at}.type"), ty, &names));
        return;
    };
    for (other_ty, other) in SOURCES {
        if other != field && !metric[*other].is_null() {
            errs.push(invalid(
                format!("{at}.{other}"),
                "",
                format!("must be omitted for metric type {ty:?} (it is for {other_ty:?})"),
            ));
        }
    }
    let source = &metric[*field];
    if !source.is_object() {
        errs.push(required(format!("{at}.{field}")));
        return;
    }
    let at = format!("{at}.{field}");
    match *field {
        "resource" | "containerResource" => {
            if source["name"].as_str().is_none_or(str::is_empty) {
                errs.push(required(format!("{at}.name")));
            }
            if *field == "containerResource"
                && source["container"].as_str().is_none_or(str::is_empty)
            {
                errs.push(required(format!("{at}.container")));
            }
        }
        _ => {
            if source["metric"]["name"].as_str().is_none_or(str::is_empty) {
                errs.push(required(format!("{at}.metric.name")));
            }
            if *field == "object" && source["describedObject"]["name"].as_str().is_none() {
                errs.push(required(format!("{at}.describedObject.name")));
            }
        }
    }
    let target = &source["target"];
    let at = format!("{at}.target");
    match target["type"].as_str() {
        None => errs.push(required(format!("{at}.type"))),
        Some("Utilization") => {
            if !matches!(*field, "resource" | "containerResource") {
                errs.push(invalid(
                    format!("{at}.type"),
                    "Utilization",
                    "must be Value or AverageValue for this metric type",
                ));
            }
            match target["averageUtilization"].as_i64() {
                Some(u) if u > 0 => {}
                Some(u) => errs.push(invalid(
                    format!("{at}.averageUtilization"),
                    &u.to_string(),
                    "must be greater than 0",
                )),
                None => errs.push(required(format!("{at}.averageUtilization"))),
            }
        }
        Some("AverageValue") => {
            if target["averageValue"].is_null() {
                errs.push(required(format!("{at}.averageValue")));
            }
        }
        Some("Value") => {
            if matches!(*field, "resource" | "containerResource" | "pods") {
                errs.push(invalid(
                    format!("{at}.type"),
                    "Value",
                    "must be Utilization or AverageValue for this metric type",
                ));
            } else if target["value"].is_null() {
                errs.push(required(format!("{at}.value")));
            }
        }
        Some(other) => errs.push(not_supported(
            format!("{at}.type"),
            other,
            &["AverageValue", "Utilization", "Value"],
        )),
    }
}

fn validate_rules(rules: &Value, at: &str, errs: &mut Vec<FieldError>) {
    if let Some(w) = rules["stabilizationWindowSeconds"].as_i64() {
        if !(0..=3600).contains(&w) {
            errs.push(invalid(
                format!("{at}.stabilizationWindowSeconds"),
                &w.to_string(),
                "must be between 0 and 3600",
            ));
        }
    }
    if let Some(p) = rules["selectPolicy"].as_str() {
        if !matches!(p, "Max" | "Min" | "Disabled") {
            errs.push(not_supported(
                format!("{at}.selectPolicy"),
                p,
                &["Disabled", "Max", "Min"],
            ));
        }
    }
    for (i, policy) in rules["policies"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{at}.policies[{i}]");
        match policy["type"].as_str() {
            Some("Pods" | "Percent") => {}
            Some(other) => errs.push(not_supported(
                format!("{at}.type"),
                other,
                &["Percent", "Pods"],
            )),
            None => errs.push(required(format!("{at}.type"))),
        }
        if policy["value"].as_i64().is_none_or(|v| v <= 0) {
            errs.push(invalid(
                format!("{at}.value"),
                &policy["value"].to_string(),
                "must be greater than zero",
            ));
        }
        if policy["periodSeconds"]
            .as_i64()
            .is_none_or(|p| !(1..=1800).contains(&p))
        {
            errs.push(invalid(
                format!("{at}.periodSeconds"),
                &policy["periodSeconds"].to_string(),
                "must be greater than zero and less than or equal to 1800",
            ));
        }
    }
}

/// The TARGETS cell: `<current>/<target>` per metric, as kubectl prints it.
fn targets(spec: &Value, status: &Value) -> String {
    let current = status["currentMetrics"].as_array();
    let cells: Vec<String> = spec["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| {
            let ty = m["type"].as_str().unwrap_or("");
            let field = SOURCES
                .iter()
                .find(|(t, _)| *t == ty)
                .map(|(_, f)| *f)
                .unwrap_or("");
            let source = &m[field];
            let cur = current.and_then(|c| c.get(i)).map(|c| &c[field]["current"]);
            let target = &source["target"];
            let name = source["name"]
                .as_str()
                .or(source["metric"]["name"].as_str())
                .unwrap_or("");
            let (have, want) = match target["type"].as_str() {
                Some("Utilization") => (
                    cur.and_then(|c| c["averageUtilization"].as_i64())
                        .map(|u| format!("{u}%")),
                    format!("{}%", target["averageUtilization"].as_i64().unwrap_or(0)),
                ),
                Some("AverageValue") => (
                    cur.and_then(|c| c["averageValue"].as_str())
                        .map(str::to_string),
                    target["averageValue"].as_str().unwrap_or("").to_string(),
                ),
                _ => (
                    cur.and_then(|c| c["value"].as_str()).map(str::to_string),
                    target["value"].as_str().unwrap_or("").to_string(),
                ),
            };
            format!(
                "{name}: {}/{want}",
                have.unwrap_or_else(|| "<unknown>".into())
            )
        })
        .collect();
    if cells.is_empty() {
        "<none>".into()
    } else {
        cells.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(spec: Value) -> Value {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "h", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn defaults_are_upstream_s() {
        let mut obj = hpa(
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "name": "web"}, "maxReplicas": 4,
                                 "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}),
        );
        HpaStrategy.prepare_for_create(&mut obj);
        assert_eq!(obj["spec"]["minReplicas"], 1);
        assert_eq!(
            obj["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert_eq!(obj["spec"]["behavior"]["scaleUp"], default_rules(true));
        assert_eq!(
            obj["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
            0
        );
        assert_eq!(obj["spec"]["behavior"]["scaleDown"]["selectPolicy"], "Max");
        assert!(HpaStrategy.validate(&obj).is_empty());
    }

    #[test]
    fn bad_specs_name_their_fields() {
        let obj = hpa(
            json!({"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 3,
            "maxReplicas": 2, "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 0}}},
                {"type": "Pods", "resource": {"name": "cpu"}},
                {"type": "Bogus"},
                {"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "Utilization", "averageUtilization": 5}}}],
            "behavior": {"scaleUp": {"selectPolicy": "Sometimes",
                "policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}}),
        );
        let fields: Vec<String> = HpaStrategy
            .validate(&obj)
            .into_iter()
            .map(|e| e.field)
            .collect();
        for want in [
            "spec.scaleTargetRef.name",
            "spec.maxReplicas",
            "spec.metrics[0].resource.target.averageUtilization",
            "spec.metrics[1].resource",
            "spec.metrics[1].pods",
            "spec.metrics[2].type",
            "spec.metrics[3].external.target.type",
            "spec.behavior.scaleUp.selectPolicy",
            "spec.behavior.scaleUp.policies[0].value",
        ] {
            assert!(fields.iter().any(|f| f == want), "{want} in {fields:?}");
        }
    }

    #[test]
    fn v1_and_v2_convert_without_losing_anything() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "namespace": "default", "annotations": {"team": "a"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"},
                        "target": {"type": "AverageValue", "averageValue": "10"}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 90}}}],
                "conditions": [{"type": "AbleToScale", "status": "True"}]}});
        let v1 = convert(&v2, "autoscaling/v1").expect("to v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert!(v1["spec"]["metrics"].is_null());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 90);
        assert_eq!(v1["metadata"]["annotations"]["team"], "a");
        assert!(v1["metadata"]["annotations"][METRICS_ANNOTATION].is_string());
        let back = convert(&v1, "autoscaling/v2").expect("to v2");
        assert_eq!(back, v2);
        // A bad annotation is an error, not a silent loss — refused when written, naming it.
        let mut bad = v1.clone();
        bad["metadata"]["annotations"][METRICS_ANNOTATION] = json!("{not json");
        assert!(convert(&bad, "autoscaling/v2").is_err());
        let fields: Vec<String> = HpaStrategy
            .validate(&bad)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert!(
            fields
                .iter()
                .any(|f| f == &format!("metadata.annotations[{METRICS_ANNOTATION}]")),
            "{fields:?}"
        );
    }

    #[test]
    fn targets_read_as_kubectl_prints_them() {
        let spec = json!({"metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}]});
        assert_eq!(targets(&spec, &Value::Null), "cpu: <unknown>/50%");
        let status = json!({"currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 120, "averageValue": "120m"}}}]});
        assert_eq!(targets(&spec, &status), "cpu: 120%/50%");
    }
}
