//! Priority: a pod's `priorityClassName` becomes its `spec.priority` and `preemptionPolicy`, as
//! upstream's admission plugin does — the cluster's `globalDefault` class for a pod naming none
//! (the lowest if several; priority 0 when there is none), a refusal naming the class when it
//! does not exist, and a refusal when the pod states a priority or policy other than its
//! class's. PriorityClasses are checked too: at most one `globalDefault`, the `system-` prefix
//! reserved to the two built-in classes, user values at most one billion.
//!
//! In a tenant this resolves the tenant's own classes: they order the tenant's pods (in its own
//! scheduling and in the GPU queue, within the tenant), never its place among other tenants.

use serde_json::{json, Value};

use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::strategy::{forbidden, invalid};

/// The built-in classes every cluster has (created at bootstrap), with their values.
pub const SYSTEM_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];
/// The highest value a user-defined class may have.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;
const GROUP: &str = "scheduling.k8s.io";
const DEFAULT_POLICY: &str = "PreemptLowerPriority";

/// The plugin.
pub struct Priority;

/// The PriorityClass objects `bootstrap` creates.
pub fn system_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": "Used for system critical pods that must not be moved from their current node.",
            })
        })
        .collect()
}

fn classes_def(req: &Request<'_>) -> Option<std::sync::Arc<ResourceDef>> {
    req.objects.resource(GROUP, "v1", "priorityclasses")
}

fn pod_forbidden(pod: &Value, message: String) -> ApiError {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    ApiError::Forbidden(format!("pods {name:?} is forbidden: {message}"))
}

/// The class a pod without a class gets: the `globalDefault` one (the lowest if a race made
/// several), none when there is none.
fn default_class(classes: &[Value]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| c["globalDefault"].as_bool() == Some(true))
        .min_by_key(|c| c["value"].as_i64().unwrap_or(0))
}

impl Priority {
    async fn resolve(&self, req: &Request<'_>, pod: &mut Value) -> Result<(), ApiError> {
        let name = pod["spec"]["priorityClassName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        // Read for every pod: from the snapshot admission keeps of the kinds it reads on every
        // write (one list per change of the classes, not one per pod).
        let classes = req
            .objects
            .admission_objects(GROUP, "priorityclasses")
            .await?;
        let (class_name, value, policy) = match &name {
            None => match default_class(&classes) {
                Some(c) => (
                    c["metadata"]["name"].as_str().map(str::to_string),
                    c["value"].as_i64().unwrap_or(0),
                    c["preemptionPolicy"].as_str().unwrap_or(DEFAULT_POLICY),
                ),
                None => (None, 0, DEFAULT_POLICY),
            },
            Some(n) => {
                let stored = classes.iter().find(|c| c["metadata"]["name"] == n.as_str());
                let system = SYSTEM_CLASSES.iter().find(|(s, _)| s == n);
                match (stored, system) {
                    (Some(c), _) => (
                        Some(n.clone()),
                        c["value"].as_i64().unwrap_or(0),
                        c["preemptionPolicy"].as_str().unwrap_or(DEFAULT_POLICY),
                    ),
                    (None, Some((_, v))) => (Some(n.clone()), *v, DEFAULT_POLICY),
                    (None, None) => {
                        return Err(pod_forbidden(
                            pod,
                            format!("no PriorityClass with name {n} was found"),
                        ))
                    }
                }
            }
        };
        if let Some(stated) = pod["spec"]["priority"].as_i64() {
            if stated != value {
                return Err(pod_forbidden(
                    pod,
                    format!(
                        "the integer value of priority ({stated}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
                    ),
                ));
            }
        }
        if let Some(stated) = pod["spec"]["preemptionPolicy"].as_str() {
            if stated != policy {
                return Err(pod_forbidden(
                    pod,
                    format!(
                        "the string value of PreemptionPolicy ({stated}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                    ),
                ));
            }
        }
        let policy = policy.to_string();
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
            if let Some(n) = class_name {
                spec.insert("priorityClassName".into(), json!(n));
            }
            spec.insert("priority".into(), json!(value));
            spec.insert("preemptionPolicy".into(), json!(policy));
        }
        Ok(())
    }

    async fn check_class(
        &self,
        req: &Request<'_>,
        class: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let name = class["metadata"]["name"].as_str().unwrap_or("");
        let value = class["value"].as_i64();
        let mut causes = Vec::new();
        match (SYSTEM_CLASSES.iter().find(|(s, _)| *s == name), value) {
            (_, None) => causes.push(crate::strategy::required("value")),
            (Some((_, v)), Some(value)) if value != *v => causes.push(invalid(
                "metadata.name",
                name,
                "name and value do not match a known system priority class",
            )),
            (None, _) if name.starts_with("system-") => causes.push(invalid(
                "metadata.name",
                name,
                "priority class names with 'system-' prefix are reserved",
            )),
            (None, Some(value)) if value > HIGHEST_USER_PRIORITY => causes.push(forbidden(
                "value",
                format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
                ),
            )),
            _ => {}
        }
        if let Some(old) = old {
            if old["value"] != class["value"] {
                causes.push(forbidden("value", "may not be changed in an update."));
            }
            if old["preemptionPolicy"] != class["preemptionPolicy"] {
                causes.push(forbidden(
                    "preemptionPolicy",
                    "may not be changed in an update.",
                ));
            }
        }
        if let Some(p) = class["preemptionPolicy"].as_str() {
            if !matches!(p, "PreemptLowerPriority" | "Never") {
                causes.push(crate::strategy::not_supported(
                    "preemptionPolicy",
                    p,
                    &["Never", "PreemptLowerPriority"],
                ));
            }
        }
        if !causes.is_empty() {
            return Err(ApiError::Invalid {
                kind: "PriorityClass".into(),
                group: GROUP.into(),
                name: name.to_string(),
                causes,
            });
        }
        // At most one default: another class already marked default refuses this one.
        if class["globalDefault"].as_bool() == Some(true) {
            if let Some(def) = classes_def(req) {
                let others = req.objects.list(&def, None).await?;
                if let Some(other) = others.iter().find(|c| {
                    c["globalDefault"].as_bool() == Some(true) && c["metadata"]["name"] != name
                }) {
                    return Err(ApiError::Forbidden(format!(
                        "priorityclasses.scheduling.k8s.io {name:?} is forbidden: PriorityClass {} is already marked as default. Only one default can exist",
                        other["metadata"]["name"].as_str().unwrap_or("")
                    )));
                }
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Admission for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn mutate(
        &self,
        req: &Request<'_>,
        obj: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if req.op == Operation::Create && req.is_core("pods") && req.subresource.is_none() {
            self.resolve(req, obj).await?;
        }
        Ok(())
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let writes_class = req.def.group == GROUP
            && req.def.plural == "priorityclasses"
            && req.subresource.is_none()
            && matches!(req.op, Operation::Create | Operation::Update);
        if writes_class {
            self.check_class(req, obj, old).await?;
        }
        Ok(Verdict::ok())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::registry::{Registry, WriteOptions};
    use crate::resources::Catalog;
    use fabrik_store::{SledBackend, SledConfig, Store};

    struct Cluster {
        _dir: tempfile::TempDir,
        reg: Registry,
    }

    async fn cluster() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let reg = Registry::new(store, Arc::new(Catalog::builtin()));
        crate::cluster::bootstrap(&reg).await.expect("bootstrap");
        Cluster { _dir: dir, reg }
    }

    impl Cluster {
        async fn class(&self, obj: Value) -> Result<Value, ApiError> {
            let def = self
                .reg
                .catalog()
                .get(GROUP, "v1", "priorityclasses")
                .expect("served");
            self.reg
                .create(&def, None, obj, &WriteOptions::default())
                .await
                .map(|w| w.object)
        }

        async fn pod(&self, name: &str, spec: Value) -> Result<Value, ApiError> {
            let def = self.reg.catalog().get("", "v1", "pods").expect("served");
            let mut spec = spec;
            spec["containers"] = json!([{"name": "c", "image": "x"}]);
            let pod = json!({"metadata": {"name": name}, "spec": spec});
            self.reg
                .create(&def, Some("default"), pod, &WriteOptions::default())
                .await
                .map(|w| w.object)
        }
    }

    fn class(name: &str, value: i64) -> Value {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value})
    }

    #[tokio::test]
    async fn a_pod_gets_its_class_s_priority_or_the_default_s() {
        let c = cluster().await;
        // No class anywhere: priority 0, upstream's default policy.
        let plain = c.pod("plain", json!({})).await.expect("plain");
        assert_eq!(plain["spec"]["priority"], 0);
        assert_eq!(plain["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        assert!(plain["spec"].get("priorityClassName").is_none());

        let mut urgent = class("urgent", 1000);
        urgent["preemptionPolicy"] = json!("Never");
        c.class(urgent).await.expect("urgent");
        let p = c
            .pod("u", json!({"priorityClassName": "urgent"}))
            .await
            .expect("urgent pod");
        assert_eq!(p["spec"]["priority"], 1000);
        assert_eq!(p["spec"]["preemptionPolicy"], "Never");

        // The built-in classes exist in every cluster.
        let s = c
            .pod("s", json!({"priorityClassName": "system-cluster-critical"}))
            .await
            .expect("system class");
        assert_eq!(s["spec"]["priority"], 2_000_000_000);

        // A default class applies to pods naming none.
        let mut low = class("low", -5);
        low["globalDefault"] = json!(true);
        c.class(low).await.expect("default class");
        let d = c.pod("d", json!({})).await.expect("default pod");
        assert_eq!(d["spec"]["priorityClassName"], "low");
        assert_eq!(d["spec"]["priority"], -5);
    }

    #[tokio::test]
    async fn unknown_classes_and_stated_priorities_are_refused() {
        let c = cluster().await;
        let err = c
            .pod("x", json!({"priorityClassName": "nope"}))
            .await
            .expect_err("unknown class");
        assert_eq!(err.code(), 403, "{err}");
        assert!(
            err.to_string()
                .contains("no PriorityClass with name nope was found"),
            "{err}"
        );
        c.class(class("high", 100)).await.expect("high");
        let err = c
            .pod(
                "y",
                json!({"priorityClassName": "high", "priority": 1_000_000_000}),
            )
            .await
            .expect_err("a stated priority other than the class's");
        assert_eq!(err.code(), 403, "{err}");
        assert!(err.to_string().contains("computed 100"), "{err}");
        // The same value is accepted (a pod written back as read).
        c.pod("z", json!({"priorityClassName": "high", "priority": 100}))
            .await
            .expect("the class's own value");
    }

    #[tokio::test]
    async fn classes_are_checked_as_upstream() {
        let c = cluster().await;
        let err = c
            .class(class("system-mine", 5))
            .await
            .expect_err("reserved prefix");
        assert_eq!(err.code(), 422, "{err}");
        let err = c
            .class(class("huge", HIGHEST_USER_PRIORITY + 1))
            .await
            .expect_err("above the user maximum");
        assert_eq!(err.code(), 422, "{err}");
        let mut a = class("a", 1);
        a["globalDefault"] = json!(true);
        c.class(a).await.expect("first default");
        let mut b = class("b", 2);
        b["globalDefault"] = json!(true);
        let err = c.class(b).await.expect_err("second default");
        assert_eq!(err.code(), 403, "{err}");
        assert!(
            err.to_string().contains("Only one default can exist"),
            "{err}"
        );
    }
}
