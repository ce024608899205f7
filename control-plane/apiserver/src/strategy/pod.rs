//! Pods: upstream defaulting, validation, the immutable spec, QoS class, graceful deletion,
//! field selectors and the `kubectl get pods` columns.

use fabrik_machinery::resources;
use fabrik_machinery::validation::{self, FieldError};
use serde_json::{json, Value};

use super::{
    age, default_field, duplicate, forbidden, invalid, name_of, not_supported, or_none, required,
    Column, Strategy,
};

/// How a delete proceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GracefulDelete {
    /// Remove the object now.
    Immediate,
    /// Set `deletionTimestamp` this many seconds ahead; a kubelet finishes the deletion.
    Graceful(i64),
}

pub(super) struct PodStrategy;

/// `status.phase` of a pod.
pub fn pod_phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const DNS_POLICIES: [&str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: [&str; 3] = ["Always", "Never", "IfNotPresent"];
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// Upstream `SetDefaults_Container` (also used for pod templates).
fn default_container(c: &mut Value) {
    let image = c["image"].as_str().unwrap_or("").to_string();
    let policy = if image_tag_is_latest(&image) {
        "Always"
    } else {
        "IfNotPresent"
    };
    default_field(c, &["imagePullPolicy"], json!(policy));
    default_field(
        c,
        &["terminationMessagePath"],
        json!("/dev/termination-log"),
    );
    default_field(c, &["terminationMessagePolicy"], json!("File"));
    default_field(c, &["resources"], json!({}));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            default_field(p, &["protocol"], json!("TCP"));
        }
    }
    // Requests default to limits when only limits are given.
    if let Some(limits) = c["resources"]["limits"].as_object().cloned() {
        for (k, v) in limits {
            default_field(c, &["resources", "requests", &k], v);
        }
    }
}

fn image_tag_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// Upstream `SetDefaults_PodSpec` with its containers: shared by pods and every pod template.
pub(crate) fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, &["restartPolicy"], json!("Always"));
    default_field(spec, &["dnsPolicy"], json!("ClusterFirst"));
    default_field(spec, &["terminationGracePeriodSeconds"], json!(30));
    default_field(spec, &["schedulerName"], json!("default-scheduler"));
    default_field(spec, &["securityContext"], json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
}

/// Whether a container's `resources` asks for nothing (absent, `{}`, empty lists).
fn no_resources(r: &Value) -> bool {
    match r {
        Value::Null => true,
        Value::Object(o) => o.values().all(|v| match v {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        }),
        _ => false,
    }
}

/// Validates a pod spec at `path` (`spec`, or `spec.template.spec` for workloads).
pub(crate) fn validate_pod_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let containers = spec["containers"].as_array();
    match containers {
        None => errs.push(required(format!("{path}.containers"))),
        Some(cs) if cs.is_empty() => errs.push(required(format!("{path}.containers"))),
        Some(_) => {}
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            match c["name"].as_str() {
                None | Some("") => errs.push(required(format!("{at}.name"))),
                Some(name) => {
                    for msg in validation::dns1123_label(name) {
                        errs.push(invalid(format!("{at}.name"), name, msg));
                    }
                    if !seen.insert(name.to_string()) {
                        errs.push(duplicate(format!("{at}.name"), name));
                    }
                }
            }
            if c["image"].as_str().is_none_or(|s| s.trim().is_empty()) {
                errs.push(required(format!("{at}.image")));
            }
            if let Some(p) = c["imagePullPolicy"].as_str() {
                if !PULL_POLICIES.contains(&p) {
                    errs.push(not_supported(
                        format!("{at}.imagePullPolicy"),
                        p,
                        &PULL_POLICIES,
                    ));
                }
            }
            for (j, port) in c["ports"].as_array().into_iter().flatten().enumerate() {
                let n = port["containerPort"].as_i64().unwrap_or(0);
                if !(1..=65535).contains(&n) {
                    errs.push(invalid(
                        format!("{at}.ports[{j}].containerPort"),
                        &n.to_string(),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
                if let Some(proto) = port["protocol"].as_str() {
                    if !PROTOCOLS.contains(&proto) {
                        errs.push(not_supported(
                            format!("{at}.ports[{j}].protocol"),
                            proto,
                            &PROTOCOLS,
                        ));
                    }
                }
            }
            // Upstream resource rules: non-negative, whole extended resources, requests equal
            // to limits where overcommit is not allowed (quota counts what is validated here).
            errs.extend(resources::validate_container_resources(
                &c["resources"],
                &format!("{at}.resources"),
            ));
            match (list, c["restartPolicy"].as_str()) {
                (_, None) | ("initContainers", Some("Always")) => {}
                ("initContainers", Some(p)) => {
                    errs.push(not_supported(format!("{at}.restartPolicy"), p, &["Always"]));
                }
                (_, Some(_)) => errs.push(forbidden(
                    format!("{at}.restartPolicy"),
                    "may not be set for non-init containers",
                )),
            }
        }
    }
    for (i, c) in spec["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !no_resources(&c["resources"]) {
            errs.push(forbidden(
                format!("{path}.ephemeralContainers[{i}].resources"),
                "cannot be set for an Ephemeral Container",
            ));
        }
    }
    errs.extend(resources::validate_pod_resources(
        &spec["resources"],
        &format!("{path}.resources"),
    ));
    errs.extend(resources::validate_overhead(
        &spec["overhead"],
        &format!("{path}.overhead"),
    ));
    if let Some(p) = spec["restartPolicy"].as_str() {
        if !RESTART_POLICIES.contains(&p) {
            errs.push(not_supported(
                format!("{path}.restartPolicy"),
                p,
                &RESTART_POLICIES,
            ));
        }
    }
    if let Some(p) = spec["dnsPolicy"].as_str() {
        if !DNS_POLICIES.contains(&p) {
            errs.push(not_supported(format!("{path}.dnsPolicy"), p, &DNS_POLICIES));
        }
    }
    if let Some(n) = spec["terminationGracePeriodSeconds"].as_i64() {
        if n < 0 {
            errs.push(invalid(
                format!("{path}.terminationGracePeriodSeconds"),
                &n.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    errs
}

fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec["containers"].as_array().into_iter().flatten() {
        let req = c["resources"]["requests"].as_object();
        let lim = c["resources"]["limits"].as_object();
        if req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let l = lim.and_then(|l| l.get(res));
            let r = req.and_then(|r| r.get(res));
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Blanks the fields of a pod spec that updates may change.
fn mutable_view(spec: &Value) -> Value {
    let mut v = spec.clone();
    for list in ["containers", "initContainers"] {
        if let Some(cs) = v.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("image");
                }
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        for f in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
            "schedulingGates",
            "nodeSelector",
        ] {
            o.remove(f);
        }
    }
    v
}

/// The names of a pod's scheduling gates.
fn gate_names(spec: &Value) -> Vec<&str> {
    spec["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str())
        .collect()
}

/// Upstream's scheduling-gate rules for a pod (not a template): qualified, unique names, and no
/// `nodeName` while a gate is left.
fn validate_gates(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, g) in spec["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.schedulingGates[{i}].name");
        match g["name"].as_str() {
            None | Some("") => errs.push(required(at)),
            Some(name) => {
                for msg in validation::qualified_name(name) {
                    errs.push(invalid(at.clone(), name, msg));
                }
                if !seen.insert(name) {
                    errs.push(duplicate(at, name));
                }
            }
        }
    }
    let bound = spec["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    if bound && !seen.is_empty() {
        errs.push(forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    errs
}

/// Upstream's rules for changing scheduling directives: gates may only be removed; while the
/// pod is gated its `nodeSelector` may gain entries (none changed or removed), otherwise it is
/// immutable.
fn validate_scheduling_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let old_gates = gate_names(old);
    for name in gate_names(new) {
        if !old_gates.contains(&name) {
            errs.push(forbidden(
                "spec.schedulingGates",
                format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            ));
        }
    }
    let empty = serde_json::Map::new();
    let old_sel = old["nodeSelector"].as_object().unwrap_or(&empty);
    let new_sel = new["nodeSelector"].as_object().unwrap_or(&empty);
    if old_sel != new_sel {
        let only_added = old_sel.iter().all(|(k, v)| new_sel.get(k) == Some(v));
        if old_gates.is_empty() {
            errs.push(forbidden(
                "spec.nodeSelector",
                "may only be changed while the pod has scheduling gates",
            ));
        } else if !only_added {
            errs.push(forbidden(
                "spec.nodeSelector",
                "only additions are allowed (no updates or deletions) while the pod has scheduling gates",
            ));
        }
    }
    errs
}

impl Strategy for PodStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
        let qos = qos_class(&obj["spec"]);
        let gated = !gate_names(&obj["spec"]).is_empty();
        if let Some(o) = obj.as_object_mut() {
            let mut status = json!({"phase": "Pending", "qosClass": qos});
            if gated {
                // As upstream: a gated pod says so until its gates are cleared.
                status["conditions"] = json!([{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }]);
            }
            o.insert("status".into(), status);
        }
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec") {
            default_pod_spec(spec);
        }
        default_field(obj, &["spec", "enableServiceLinks"], json!(true));
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        if obj.get("spec").is_none() {
            return vec![required("spec.containers")];
        }
        let mut errs = validate_pod_spec(&obj["spec"], "spec");
        errs.extend(validate_gates(&obj["spec"]));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        if mutable_view(&new["spec"]) != mutable_view(&old["spec"]) {
            return vec![forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative),`spec.schedulingGates` (only removals),`spec.nodeSelector` (only additions, while the pod has scheduling gates)",
            )];
        }
        let mut errs = validate_gates(&new["spec"]);
        errs.extend(validate_scheduling_update(&new["spec"], &old["spec"]));
        errs
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            Column::new("Status", "string", "The aggregate status of the containers in this pod."),
            Column::new("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            Column::AGE,
            Column::wide("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            Column::wide("Node", "string", "NodeName is a request to schedule this pod onto a specific node."),
            Column::wide("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node."),
            Column::wide("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
        let statuses = obj["status"]["containerStatuses"].as_array();
        let ready = statuses
            .into_iter()
            .flatten()
            .filter(|s| s["ready"].as_bool() == Some(true))
            .count();
        let restarts: i64 = statuses
            .into_iter()
            .flatten()
            .map(|s| s["restartCount"].as_i64().unwrap_or(0))
            .sum();
        let mut reason = obj["status"]["reason"]
            .as_str()
            .unwrap_or_else(|| pod_phase(obj))
            .to_string();
        for s in statuses.into_iter().flatten() {
            if let Some(r) = s["state"]["waiting"]["reason"].as_str() {
                reason = r.to_string();
            } else if let Some(r) = s["state"]["terminated"]["reason"].as_str() {
                reason = r.to_string();
            }
        }
        if obj["metadata"]["deletionTimestamp"].is_string() {
            reason = "Terminating".into();
        }
        let gates = obj["spec"]["readinessGates"].as_array().map_or(0, Vec::len);
        vec![
            json!(name_of(obj)),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts.to_string()),
            json!(age(obj)),
            json!(or_none(obj["status"]["podIP"].as_str())),
            json!(or_none(obj["spec"]["nodeName"].as_str())),
            json!(or_none(obj["status"]["nominatedNodeName"].as_str())),
            json!(if gates == 0 {
                "<none>".to_string()
            } else {
                format!("0/{gates}")
            }),
        ]
    }

    fn graceful_delete(&self, obj: &Value, requested: Option<i64>) -> GracefulDelete {
        let scheduled = obj["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let terminal = matches!(pod_phase(obj), "Succeeded" | "Failed");
        if !scheduled || terminal {
            return GracefulDelete::Immediate;
        }
        let grace = requested
            .or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        if grace <= 0 {
            GracefulDelete::Immediate
        } else {
            GracefulDelete::Graceful(grace)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "busybox:1.36", "ports": [{"containerPort": 80}]}
        ]}})
    }

    #[test]
    fn defaults_follow_upstream() {
        let mut p = pod();
        PodStrategy.prepare_for_create(&mut p);
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(p["spec"]["containers"][1]["ports"][0]["protocol"], "TCP");
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert!(PodStrategy.validate(&p).is_empty());
    }

    #[test]
    fn scheduling_gates_follow_upstream() {
        let mut gated = pod();
        gated["spec"]["schedulingGates"] = json!([{"name": "example.com/queue"}]);
        PodStrategy.prepare_for_create(&mut gated);
        assert!(PodStrategy.validate(&gated).is_empty());
        assert_eq!(
            gated["status"]["conditions"][0]["reason"],
            "SchedulingGated"
        );
        // Bad and duplicate names; bound while gated.
        let mut bad = gated.clone();
        bad["spec"]["schedulingGates"] = json!([{"name": "a/b/c"}, {"name": "x"}, {"name": "x"}]);
        bad["spec"]["nodeName"] = json!("n1");
        let fields: Vec<String> = PodStrategy
            .validate(&bad)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            vec![
                "spec.schedulingGates[0].name",
                "spec.schedulingGates[2].name",
                "spec.nodeName"
            ]
        );
        // While gated: gates may go, the node selector may grow.
        let mut next = gated.clone();
        next["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n1"});
        assert!(PodStrategy.validate_update(&next, &gated).is_empty());
        next["spec"]["schedulingGates"] = json!([]);
        assert!(PodStrategy.validate_update(&next, &gated).is_empty());
        // A new gate, a changed selector entry, or a selector change without gates: refused.
        let mut added = gated.clone();
        added["spec"]["schedulingGates"] = json!([{"name": "example.com/queue"}, {"name": "y"}]);
        assert_eq!(
            PodStrategy.validate_update(&added, &gated)[0].field,
            "spec.schedulingGates"
        );
        let mut changed = next.clone();
        changed["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n2"});
        let mut was = next.clone();
        was["spec"]["schedulingGates"] = json!([{"name": "example.com/queue"}]);
        assert_eq!(
            PodStrategy.validate_update(&changed, &was)[0].field,
            "spec.nodeSelector"
        );
        assert_eq!(
            PodStrategy.validate_update(&changed, &next)[0].field,
            "spec.nodeSelector"
        );
    }

    #[test]
    fn validation_names_fields() {
        let p = json!({"spec": {"containers": [{"name": "A_b"}, {"name": "A_b", "image": "x"}], "restartPolicy": "Sometimes"}});
        let fields: Vec<String> = PodStrategy
            .validate(&p)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert!(fields.contains(&"spec.containers[0].name".to_string()));
        assert!(fields.contains(&"spec.containers[0].image".to_string()));
        assert!(fields.contains(&"spec.containers[1].name".to_string()));
        assert!(fields.contains(&"spec.restartPolicy".to_string()));
    }

    #[test]
    fn resources_are_validated_as_upstream() {
        let with = |containers: Value| {
            let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": containers}});
            PodStrategy.prepare_for_create(&mut p);
            PodStrategy
                .validate(&p)
                .into_iter()
                .map(|e| e.field)
                .collect::<Vec<_>>()
        };
        let gpu = |l: &str, r: &str| json!({"limits": {"nvidia.com/gpu": l}, "requests": {"nvidia.com/gpu": r}});
        assert!(with(json!([{"name": "a", "image": "x", "resources": gpu("1", "1")}])).is_empty());
        assert_eq!(
            with(
                json!([{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "-3"}}}])
            ),
            vec![
                "spec.containers[0].resources.limits[nvidia.com/gpu]",
                "spec.containers[0].resources.requests[nvidia.com/gpu]"
            ]
        );
        assert_eq!(
            with(json!([{"name": "a", "image": "x", "resources": gpu("2", "1")}])),
            vec!["spec.containers[0].resources.requests"]
        );
        assert_eq!(
            with(json!([{"name": "a", "image": "x", "resources": gpu("0.5", "0.5")}])).len(),
            2
        );
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "x", "restartPolicy": "Never"}],
            "containers": [{"name": "a", "image": "x", "restartPolicy": "Always"}],
            "ephemeralContainers": [{"name": "e", "image": "x", "resources": gpu("1", "1")}],
        }});
        PodStrategy.prepare_for_create(&mut p);
        let fields: Vec<String> = PodStrategy
            .validate(&p)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            vec![
                "spec.initContainers[0].restartPolicy",
                "spec.containers[0].restartPolicy",
                "spec.ephemeralContainers[0].resources"
            ]
        );
    }

    #[test]
    fn spec_is_immutable_but_images() {
        let old = pod();
        let mut new = pod();
        new["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert!(PodStrategy.validate_update(&new, &old).is_empty());
        new["spec"]["containers"][0]["name"] = json!("c");
        assert_eq!(PodStrategy.validate_update(&new, &old).len(), 1);
    }

    #[test]
    fn graceful_only_when_scheduled_and_running() {
        let mut p = pod();
        assert_eq!(
            PodStrategy.graceful_delete(&p, None),
            GracefulDelete::Immediate
        );
        p["spec"]["nodeName"] = json!("n1");
        p["status"]["phase"] = json!("Running");
        assert_eq!(
            PodStrategy.graceful_delete(&p, None),
            GracefulDelete::Graceful(30)
        );
        assert_eq!(
            PodStrategy.graceful_delete(&p, Some(0)),
            GracefulDelete::Immediate
        );
        p["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            PodStrategy.graceful_delete(&p, None),
            GracefulDelete::Immediate
        );
    }
}
