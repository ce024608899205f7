//! Deployments, ReplicaSets, StatefulSets and DaemonSets: upstream defaults, selector and
//! template validation, the immutable selector, and each kind's `kubectl get` columns.

use fabrik_machinery::labels::Selector;
use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::pod::{default_pod_spec, validate_pod_spec};
use super::{
    age, default_field, immutable, invalid, name_of, not_supported, required, Column, Strategy,
};

/// Which workload kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

pub(super) struct WorkloadStrategy(pub WorkloadKind);

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Container names, images and the selector for `-o wide`.
fn wide_cells(obj: &Value) -> [Value; 3] {
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
    let selector = Selector::from_label_selector(&obj["spec"]["selector"])
        .map(|s| s.to_string())
        .unwrap_or_default();
    [
        json!(names.join(",")),
        json!(images.join(",")),
        json!(selector),
    ]
}

fn wide_columns() -> [Column; 3] {
    [
        Column::wide("Containers", "string", "Names of each container in the template."),
        Column::wide("Images", "string", "Images referenced by each container in the template."),
        Column::wide("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
    ]
}

impl Strategy for WorkloadStrategy {
    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        if self.0 != WorkloadKind::DaemonSet {
            default_field(obj, &["spec", "replicas"], json!(1));
        }
        match self.0 {
            WorkloadKind::Deployment => {
                default_field(obj, &["spec", "strategy", "type"], json!("RollingUpdate"));
                if obj["spec"]["strategy"]["type"] == "RollingUpdate" {
                    default_field(
                        obj,
                        &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
                        json!("25%"),
                    );
                    default_field(
                        obj,
                        &["spec", "strategy", "rollingUpdate", "maxSurge"],
                        json!("25%"),
                    );
                }
                default_field(obj, &["spec", "revisionHistoryLimit"], json!(10));
                default_field(obj, &["spec", "progressDeadlineSeconds"], json!(600));
            }
            WorkloadKind::StatefulSet => {
                default_field(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
                default_field(
                    obj,
                    &["spec", "updateStrategy", "type"],
                    json!("RollingUpdate"),
                );
                if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
                    default_field(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "partition"],
                        json!(0),
                    );
                }
                default_field(obj, &["spec", "revisionHistoryLimit"], json!(10));
                default_field(
                    obj,
                    &["spec", "persistentVolumeClaimRetentionPolicy"],
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
            WorkloadKind::DaemonSet => {
                default_field(
                    obj,
                    &["spec", "updateStrategy", "type"],
                    json!("RollingUpdate"),
                );
                if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
                    default_field(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "maxUnavailable"],
                        json!(1),
                    );
                    default_field(
                        obj,
                        &["spec", "updateStrategy", "rollingUpdate", "maxSurge"],
                        json!(0),
                    );
                }
                default_field(obj, &["spec", "revisionHistoryLimit"], json!(10));
            }
            WorkloadKind::ReplicaSet => {}
        }
        if let Some(spec) = obj["spec"]
            .get_mut("template")
            .and_then(|t| t.get_mut("spec"))
        {
            default_pod_spec(spec);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if let Some(r) = spec["replicas"].as_i64() {
            if r < 0 {
                errs.push(invalid(
                    "spec.replicas",
                    &r.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        match Selector::from_label_selector(&spec["selector"]) {
            _ if spec["selector"].is_null() => errs.push(required("spec.selector")),
            Ok(sel) if sel.is_empty() => errs.push(invalid(
                "spec.selector",
                "",
                "empty selector is invalid for deployment",
            )),
            Ok(sel) => {
                if !sel.matches(spec["template"]["metadata"]["labels"].as_object()) {
                    errs.push(invalid(
                        "spec.template.metadata.labels",
                        &spec["template"]["metadata"]["labels"].to_string(),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            Err(e) => errs.push(invalid("spec.selector", "", e.to_string())),
        }
        if spec["template"]["spec"].is_null() {
            errs.push(required("spec.template.spec.containers"));
        } else {
            errs.extend(validate_pod_spec(
                &spec["template"]["spec"],
                "spec.template.spec",
            ));
            if let Some(p) = spec["template"]["spec"]["restartPolicy"].as_str() {
                if p != "Always" {
                    errs.push(not_supported(
                        "spec.template.spec.restartPolicy",
                        p,
                        &["Always"],
                    ));
                }
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        immutable(new, old, &["spec", "selector"], "spec.selector")
            .into_iter()
            .collect()
    }

    fn columns(&self) -> Vec<Column> {
        let mut cols = vec![Column::NAME];
        match self.0 {
            WorkloadKind::Deployment => cols.extend([
                Column::new("Ready", "string", "Number of the pod with ready state"),
                Column::new("Up-to-date", "integer", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                Column::new("Available", "integer", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            ]),
            WorkloadKind::ReplicaSet => cols.extend([
                Column::new("Desired", "integer", "Replicas is the number of desired pods."),
                Column::new("Current", "integer", "Replicas is the most recently observed number of replicas."),
                Column::new("Ready", "integer", "The number of pods targeted by this ReplicaSet with a Ready Condition."),
            ]),
            WorkloadKind::StatefulSet => cols.push(Column::new("Ready", "string", "Number of the pod with ready state")),
            WorkloadKind::DaemonSet => cols.extend([
                Column::new("Desired", "integer", "The total number of nodes that should be running the daemon pod."),
                Column::new("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
                Column::new("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
                Column::new("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
                Column::new("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
                Column::new("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
            ]),
        }
        cols.push(Column::AGE);
        cols.extend(wide_columns());
        cols
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let mut cells = vec![json!(name_of(obj))];
        match self.0 {
            WorkloadKind::Deployment => cells.extend([
                json!(format!(
                    "{}/{}",
                    int(&status["readyReplicas"]),
                    int(&spec["replicas"])
                )),
                json!(int(&status["updatedReplicas"])),
                json!(int(&status["availableReplicas"])),
            ]),
            WorkloadKind::ReplicaSet => cells.extend([
                json!(int(&spec["replicas"])),
                json!(int(&status["replicas"])),
                json!(int(&status["readyReplicas"])),
            ]),
            WorkloadKind::StatefulSet => cells.push(json!(format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                int(&spec["replicas"])
            ))),
            WorkloadKind::DaemonSet => {
                let sel: Vec<String> = spec["template"]["spec"]["nodeSelector"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect();
                cells.extend([
                    json!(int(&status["desiredNumberScheduled"])),
                    json!(int(&status["currentNumberScheduled"])),
                    json!(int(&status["numberReady"])),
                    json!(int(&status["updatedNumberScheduled"])),
                    json!(int(&status["numberAvailable"])),
                    json!(if sel.is_empty() {
                        "<none>".to_string()
                    } else {
                        sel.join(",")
                    }),
                ]);
            }
        }
        cells.push(json!(age(obj)));
        cells.extend(wide_cells(obj));
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy() -> Value {
        json!({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        }})
    }

    #[test]
    fn defaults_and_valid() {
        let s = WorkloadStrategy(WorkloadKind::Deployment);
        let mut d = deploy();
        s.prepare_for_create(&mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(s.validate(&d).is_empty(), "{:?}", s.validate(&d));
        assert_eq!(s.cells(&d).len(), s.columns().len());
    }

    #[test]
    fn selector_must_match_and_is_immutable() {
        let s = WorkloadStrategy(WorkloadKind::Deployment);
        let mut d = deploy();
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        assert_eq!(s.validate(&d)[0].field, "spec.template.metadata.labels");
        let old = deploy();
        let mut new = deploy();
        new["spec"]["selector"]["matchLabels"]["app"] = json!("x");
        assert_eq!(s.validate_update(&new, &old).len(), 1);
    }
}
