//! Local APIServices, as upstream's autoregister and crdRegistration controllers keep them:
//! one `APIService` without a `service` for every group version the cluster serves itself —
//! `v1.` (core), `v1.apps`, … for the built-in APIs, and one for every group version a
//! CustomResourceDefinition serves — each `Available` with reason `Local`.
//!
//! What is managed is marked as upstream marks it, with the label
//! `kube-aggregator.kubernetes.io/automanaged`:
//! - `onstart` (built-in group versions): created, corrected or (when the cluster no longer
//!   serves the group version) deleted once, by the first pass after the cluster starts; left
//!   alone afterwards (a deleted one comes back at the next start);
//! - `true` (group versions of CRDs): kept continuously — created when a CRD serves the group
//!   version, deleted when no CRD serves it any more.
//!
//! Guarantees: an APIService without the label, or with a `service` (a user's registration,
//! label or not), is never written or deleted by this module. No Local APIService is made for
//! `metrics.k8s.io`: the cluster answers it built in, outside the catalog, and upstream has no
//! such object — metrics-server's charts create `v1beta1.metrics.k8s.io` themselves, and
//! theirs takes precedence over the built-in API.
//!
//! Every APIService without a `service` (managed or not) gets the `Available` condition upstream's
//! availability controller gives Local ones; those naming a Service are the availability
//! controller's ([`super::available`]), which never probes a Local one.
//!
//! The planning ([`plan`]) is pure; [`LocalApiServices::reconcile`] carries its actions out
//! through the registry (admission included), all of one pass at once, so that a cluster's
//! first pass costs a few group commits rather than a flush per object. Created objects carry
//! their status from the start (one write each).

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Value};

use super::GROUP;
use crate::error::ApiError;
use crate::object;
use crate::registry::{DeleteOptions, Part, Registry, WriteOptions};
use crate::resources::{Catalog, ResourceDef};

/// The label that marks an APIService as managed, with [`Manage`]'s values (upstream's).
pub const MANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// `groupPriorityMinimum` of a CRD's group version (upstream's crdRegistrationController).
pub const CRD_GROUP_PRIORITY: i64 = 1000;
/// `versionPriority` of a CRD's group version (upstream's crdRegistrationController).
pub const CRD_VERSION_PRIORITY: i64 = 100;

/// The reason of a Local APIService's `Available` condition.
pub const LOCAL_REASON: &str = "Local";
/// The message of a Local APIService's `Available` condition.
pub const LOCAL_MESSAGE: &str = "Local APIServices are always available";

/// Upstream's priorities (group, version, `groupPriorityMinimum`, `versionPriority`) for the
/// built-in group versions the cluster serves: kube-apiserver's `apiVersionPriorities` merged
/// over the generic control plane's `DefaultGenericAPIServicePriorities`.
/// `resource.k8s.io/v1` is newer than the table this was taken from (which gives the group
/// 16200 and `v1beta2` 15): its version priority 21 is ours, above every beta. A built-in group
/// version missing here gets no APIService, as upstream skips those (a unit test requires a
/// row for every one the catalog serves).
pub const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v2", 17500, 30),
    ("autoscaling", "v1", 17500, 15),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("resource.k8s.io", "v1", 16200, 21),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// Errors of one pass (logged; the pass is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// APIServices are not served (a cluster without the kind).
    #[error("apiservices are not served")]
    NotServed,
    /// Writing one APIService failed.
    #[error("failed to {action} APIService {name}: {source}")]
    Write {
        /// `create`, `update`, `delete` or `update the status of`.
        action: &'static str,
        /// The APIService.
        name: String,
        /// The cause.
        #[source]
        source: ApiError,
    },
}

/// How a managed APIService is kept (the value of [`MANAGED_LABEL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manage {
    /// `onstart`: synced once after the cluster starts (built-in group versions).
    OnStart,
    /// `true`: synced on every pass (group versions of CRDs).
    Continuously,
}

impl Manage {
    /// The label's value.
    pub fn label(self) -> &'static str {
        match self {
            Manage::OnStart => "onstart",
            Manage::Continuously => "true",
        }
    }

    /// How `obj` is managed: None when it is not this module's (no label, an unknown value,
    /// or a `service`).
    pub fn of(obj: &Value) -> Option<Manage> {
        if obj["spec"]["service"].is_object() {
            return None;
        }
        match obj["metadata"]["labels"][MANAGED_LABEL].as_str() {
            Some("onstart") => Some(Manage::OnStart),
            Some("true") => Some(Manage::Continuously),
            _ => None,
        }
    }
}

/// One Local APIService the cluster should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// `spec.group` (empty: core).
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority: i64,
    /// `spec.versionPriority`.
    pub version_priority: i64,
    /// How it is kept.
    pub manage: Manage,
}

impl Desired {
    /// `<version>.<group>`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.version, self.group)
    }

    /// Whether `obj` (a managed APIService of the same name) already says what this does.
    fn matches(&self, obj: &Value) -> bool {
        let spec = &obj["spec"];
        spec["group"].as_str().unwrap_or("") == self.group
            && spec["version"].as_str() == Some(self.version.as_str())
            && spec["groupPriorityMinimum"].as_i64() == Some(self.group_priority)
            && spec["versionPriority"].as_i64() == Some(self.version_priority)
            && Manage::of(obj) == Some(self.manage)
    }

    /// `obj` with this one's spec fields and label (other fields kept).
    fn apply_to(&self, obj: &Value) -> Value {
        let mut new = obj.clone();
        if !new["spec"].is_object() {
            new["spec"] = json!({});
        }
        if let Some(spec) = new["spec"].as_object_mut() {
            if self.group.is_empty() {
                spec.remove("group");
            } else {
                spec.insert("group".into(), json!(self.group));
            }
            spec.insert("version".into(), json!(self.version));
            spec.insert("groupPriorityMinimum".into(), json!(self.group_priority));
            spec.insert("versionPriority".into(), json!(self.version_priority));
        }
        if !new["metadata"]["labels"].is_object() {
            new["metadata"]["labels"] = json!({});
        }
        new["metadata"]["labels"][MANAGED_LABEL] = json!(self.manage.label());
        new
    }

    /// The whole object, with its `Available` condition.
    pub fn object(&self) -> Value {
        let base = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "APIService",
            "metadata": {"name": self.name()},
            "spec": {},
            "status": {"conditions": [local_condition(None)]},
        });
        self.apply_to(&base)
    }
}

/// The `Available` condition of a Local APIService; `previous`: its current one, whose
/// `lastTransitionTime` is kept when it was already true.
fn local_condition(previous: Option<&Value>) -> Value {
    let since = previous
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(object::now);
    json!({"type": "Available", "status": "True", "lastTransitionTime": since,
           "reason": LOCAL_REASON, "message": LOCAL_MESSAGE})
}

fn available_condition(obj: &Value) -> Option<&Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")
}

/// Whether `obj` (without a `service`) has the Local `Available` condition.
fn has_local_condition(obj: &Value) -> bool {
    available_condition(obj).is_some_and(|c| {
        c["status"] == "True" && c["reason"] == LOCAL_REASON && c["message"] == LOCAL_MESSAGE
    })
}

/// The Local APIServices for the group versions of `served`: `(group, version, custom)` of
/// each resource the cluster serves (`custom`: through a CRD). A group version with a built-in
/// resource is kept `onstart` with upstream's priorities (none: skipped), one only CRDs serve
/// continuously with the CRD priorities. `apiregistration.k8s.io` itself has none (upstream
/// registers the group versions of the servers behind the aggregator, not its own).
pub fn desired<'a>(
    served: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
) -> BTreeMap<String, Desired> {
    // (group, version) → whether some resource of it is built in.
    let mut gvs: BTreeMap<(&str, &str), bool> = BTreeMap::new();
    for (group, version, custom) in served {
        if group == GROUP {
            continue;
        }
        *gvs.entry((group, version)).or_insert(false) |= !custom;
    }
    let mut out = BTreeMap::new();
    for ((group, version), builtin) in gvs {
        let d = if builtin {
            let Some(&(_, _, gp, vp)) = PRIORITIES
                .iter()
                .find(|(g, v, _, _)| *g == group && *v == version)
            else {
                continue;
            };
            Desired {
                group: group.to_string(),
                version: version.to_string(),
                group_priority: gp,
                version_priority: vp,
                manage: Manage::OnStart,
            }
        } else {
            Desired {
                group: group.to_string(),
                version: version.to_string(),
                group_priority: CRD_GROUP_PRIORITY,
                version_priority: CRD_VERSION_PRIORITY,
                manage: Manage::Continuously,
            }
        };
        out.insert(d.name(), d);
    }
    out
}

/// The Local APIServices for what `catalog` serves now.
pub fn desired_of(catalog: &Catalog) -> BTreeMap<String, Desired> {
    let defs = catalog.all();
    desired(
        defs.iter()
            .map(|d| (d.group.as_str(), d.version.as_str(), d.custom)),
    )
}

/// One write a pass makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the APIService, with its status.
    Create(Desired),
    /// Set a managed APIService's spec and label.
    Update(Desired),
    /// Delete a managed APIService no group version needs any more, if still at this
    /// `resourceVersion`.
    Delete {
        /// The APIService.
        name: String,
        /// Its `metadata.resourceVersion` when listed.
        resource_version: String,
    },
    /// Give an APIService without a `service` the Local `Available` condition.
    SetLocalStatus {
        /// The APIService.
        name: String,
    },
}

/// What has been done so far, which decides what `onstart` APIServices still need.
#[derive(Debug, Default)]
pub struct Progress {
    /// Whether a pass has run (stale `onstart` APIServices are deleted by the first only).
    pub started: bool,
    /// The `onstart` APIServices synced since the cluster started.
    pub synced: HashSet<String>,
}

/// The writes that bring `current` (every APIService) to `desired`, given `progress`.
pub fn plan(
    desired: &BTreeMap<String, Desired>,
    current: &[Value],
    progress: &Progress,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let by_name: BTreeMap<&str, &Value> = current
        .iter()
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?, o)))
        .collect();
    for (name, d) in desired {
        let once_done = d.manage == Manage::OnStart && progress.synced.contains(name);
        match by_name.get(name.as_str()) {
            None if !once_done => actions.push(Action::Create(d.clone())),
            Some(cur) if !once_done && Manage::of(cur).is_some() && !d.matches(cur) => {
                actions.push(Action::Update(d.clone()));
            }
            _ => {}
        }
    }
    for (name, cur) in &by_name {
        if desired.contains_key(*name) || object::is_deleting(cur) {
            continue;
        }
        let stale = match Manage::of(cur) {
            Some(Manage::Continuously) => true,
            Some(Manage::OnStart) => !progress.started,
            None => false,
        };
        if stale {
            if let Some(rv) = cur["metadata"]["resourceVersion"].as_str() {
                actions.push(Action::Delete {
                    name: name.to_string(),
                    resource_version: rv.to_string(),
                });
            }
        }
    }
    for (name, cur) in &by_name {
        let deleted = actions
            .iter()
            .any(|a| matches!(a, Action::Delete { name: n, .. } if n == name));
        if !cur["spec"]["service"].is_object()
            && !object::is_deleting(cur)
            && !deleted
            && !has_local_condition(cur)
        {
            actions.push(Action::SetLocalStatus {
                name: name.to_string(),
            });
        }
    }
    actions
}

/// The controller's state between passes (see the module docs).
#[derive(Debug, Default)]
pub struct LocalApiServices {
    progress: Progress,
}

impl LocalApiServices {
    /// One pass over `current` (every APIService, just listed): the writes [`plan`] names, all
    /// at once. Returns the failures (the pass is then worth repeating soon).
    pub async fn reconcile(&mut self, registry: &Registry, current: &[Value]) -> Vec<LocalError> {
        let Some(def) = registry.resource(GROUP, "v1", "apiservices") else {
            return vec![LocalError::NotServed];
        };
        let desired = desired_of(registry.catalog());
        let actions = plan(&desired, current, &self.progress);
        let results =
            futures::future::join_all(actions.iter().map(|a| carry_out(registry, &def, a))).await;
        let mut errors = Vec::new();
        let mut failed: HashSet<String> = HashSet::new();
        for (action, result) in actions.iter().zip(results) {
            if let Err(e) = result {
                if let Action::Create(d) | Action::Update(d) = action {
                    failed.insert(d.name());
                }
                errors.push(e);
            }
        }
        for (name, d) in &desired {
            if d.manage == Manage::OnStart && !failed.contains(name) {
                self.progress.synced.insert(name.clone());
            }
        }
        self.progress.started = true;
        errors
    }
}

/// Carries out one action. Losing a race (the object was changed, created or deleted by
/// someone else meanwhile) is an error only where the next pass has to look again.
async fn carry_out(
    registry: &Registry,
    def: &ResourceDef,
    action: &Action,
) -> Result<(), LocalError> {
    let opts = WriteOptions::default();
    let fail = |action: &'static str, name: &str| {
        let name = name.to_string();
        move |source| LocalError::Write {
            action,
            name,
            source,
        }
    };
    match action {
        Action::Create(d) => {
            let opts = WriteOptions {
                with_status: true,
                ..opts
            };
            registry
                .create(def, None, d.object(), &opts)
                .await
                .map(drop)
                .map_err(fail("create", &d.name()))
        }
        Action::Update(d) => registry
            .update_with(def, None, &d.name(), None, Part::Main, &opts, |old| {
                // Changed hands since it was listed: no longer ours to write.
                if Manage::of(old).is_none() {
                    return Ok(old.clone());
                }
                Ok(d.apply_to(old))
            })
            .await
            .map(drop)
            .map_err(fail("update", &d.name())),
        Action::Delete {
            name,
            resource_version,
        } => {
            let opts = DeleteOptions {
                resource_version: Some(resource_version.clone()),
                ..DeleteOptions::default()
            };
            match registry.delete(def, None, name, &opts).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
                Err(e) => Err(fail("delete", name)(e)),
            }
        }
        Action::SetLocalStatus { name } => {
            let result = registry
                .update_with(def, None, name, None, Part::Status, &opts, |old| {
                    if old["spec"]["service"].is_object() {
                        return Ok(old.clone());
                    }
                    let condition = local_condition(available_condition(old));
                    let mut conditions: Vec<Value> = old["status"]["conditions"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| c["type"] != "Available")
                        .collect();
                    conditions.push(condition);
                    let mut new = old.clone();
                    new["status"]["conditions"] = json!(conditions);
                    Ok(new)
                })
                .await;
            match result {
                Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
                Err(e) => Err(fail("update the status of", name)(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(gvs: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str, bool)> {
        gvs.iter().map(|(g, v)| (*g, *v, false)).collect()
    }

    fn listed(d: &Desired, rv: &str) -> Value {
        let mut o = d.object();
        o["metadata"]["resourceVersion"] = json!(rv);
        o
    }

    #[test]
    fn every_builtin_group_version_has_upstream_priorities() {
        let catalog = Catalog::builtin();
        let want = desired_of(&catalog);
        for (group, version) in catalog.group_versions() {
            if group == GROUP {
                continue;
            }
            let name = format!("{version}.{group}");
            let d = want
                .get(&name)
                .unwrap_or_else(|| panic!("no Local APIService for {name}: add it to PRIORITIES"));
            assert_eq!(d.manage, Manage::OnStart, "{name}");
        }
        assert_eq!(want["v1."].group_priority, 18000);
        assert_eq!(want["v1."].version_priority, 1);
        assert_eq!(want["v1.apps"].group_priority, 17800);
        assert_eq!(want["v1.batch"].group_priority, 17400);
        assert_eq!(want["v2.autoscaling"].version_priority, 30);
        // Neither the aggregator's own group nor the built-in metrics API.
        assert!(!want.contains_key("v1.apiregistration.k8s.io"));
        assert!(
            want.keys().all(|n| !n.ends_with(".metrics.k8s.io")),
            "{want:?}"
        );
    }

    #[test]
    fn the_core_group_s_object_has_no_group_and_is_valid() {
        let want = desired(builtin(&[("", "v1")]));
        let obj = want["v1."].object();
        assert_eq!(obj["metadata"]["name"], "v1.");
        assert!(obj["spec"].get("group").is_none(), "{obj}");
        assert!(obj["spec"].get("service").is_none(), "{obj}");
        assert_eq!(obj["metadata"]["labels"][MANAGED_LABEL], "onstart");
        assert!(has_local_condition(&obj));
        assert!(super::super::apiservice::validate(&obj).is_empty());
    }

    #[test]
    fn crd_group_versions_are_kept_continuously_with_upstream_s_crd_priorities() {
        let want = desired(vec![
            ("example.com", "v1", true),
            ("example.com", "v1beta1", true),
            ("example.com", "v1", true),
            // A CRD in a built-in group version: one object, the built-in one.
            ("apps", "v1", true),
            ("apps", "v1", false),
        ]);
        let names: Vec<&String> = want.keys().collect();
        assert_eq!(names, ["v1.apps", "v1.example.com", "v1beta1.example.com"]);
        let d = &want["v1.example.com"];
        assert_eq!((d.group_priority, d.version_priority), (1000, 100));
        assert_eq!(d.manage, Manage::Continuously);
        assert_eq!(want["v1.apps"].manage, Manage::OnStart);
        assert!(super::super::apiservice::validate(&d.object()).is_empty());
    }

    #[test]
    fn a_fresh_cluster_creates_every_one_and_a_synced_one_needs_nothing() {
        let want = desired(builtin(&[("", "v1"), ("apps", "v1")]));
        let actions = plan(&want, &[], &Progress::default());
        assert_eq!(actions.len(), 2);
        assert!(actions.iter().all(|a| matches!(a, Action::Create(_))));
        let current: Vec<Value> = want.values().map(|d| listed(d, "5")).collect();
        assert!(plan(&want, &current, &Progress::default()).is_empty());
    }

    #[test]
    fn a_user_s_apiservice_is_never_written_or_deleted() {
        let want = desired(vec![("example.com", "v1", true)]);
        // The user registered the same name with a Service (and even our label).
        let mut theirs = json!({"metadata": {"name": "v1.example.com", "resourceVersion": "3",
                "labels": {MANAGED_LABEL: "true"}},
            "spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 100,
                     "versionPriority": 100,
                     "service": {"namespace": "ns", "name": "svc", "port": 443}}});
        let metrics = json!({"metadata": {"name": "v1beta1.metrics.k8s.io", "resourceVersion": "4"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                     "versionPriority": 100,
                     "service": {"namespace": "kube-system", "name": "metrics-server"}}});
        let progress = Progress::default();
        assert!(plan(&want, &[theirs.clone(), metrics.clone()], &progress).is_empty());
        // Nothing desired any more: still untouched.
        assert!(plan(&BTreeMap::new(), &[theirs.clone(), metrics], &progress).is_empty());
        // A Local one without our label (a user's): its status only, never its spec.
        theirs["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("service");
        theirs["metadata"]["labels"] = json!({});
        let actions = plan(&BTreeMap::new(), std::slice::from_ref(&theirs), &progress);
        assert_eq!(
            actions,
            [Action::SetLocalStatus {
                name: "v1.example.com".into()
            }]
        );
        theirs["status"] = json!({"conditions": [local_condition(None)]});
        assert!(plan(&want, &[theirs], &progress).is_empty());
    }

    #[test]
    fn a_crd_group_version_no_longer_served_is_deleted_and_a_changed_one_corrected() {
        let old = desired(vec![("example.com", "v1", true)]);
        let current = vec![listed(&old["v1.example.com"], "7")];
        let progress = Progress {
            started: true,
            synced: HashSet::new(),
        };
        assert_eq!(
            plan(&BTreeMap::new(), &current, &progress),
            [Action::Delete {
                name: "v1.example.com".into(),
                resource_version: "7".into()
            }]
        );
        let mut edited = current[0].clone();
        edited["spec"]["versionPriority"] = json!(5);
        let actions = plan(&old, &[edited.clone()], &progress);
        assert_eq!(actions, [Action::Update(old["v1.example.com"].clone())]);
        let fixed = old["v1.example.com"].apply_to(&edited);
        assert!(old["v1.example.com"].matches(&fixed));
    }

    #[test]
    fn builtin_ones_are_synced_once_and_stale_ones_deleted_only_at_start() {
        let want = desired(builtin(&[("apps", "v1")]));
        let stale = desired(builtin(&[("batch", "v1")]));
        let current = vec![listed(&stale["v1.batch"], "2")];
        let mut progress = Progress::default();
        let first = plan(&want, &current, &progress);
        assert!(first.contains(&Action::Create(want["v1.apps"].clone())));
        assert!(first.contains(&Action::Delete {
            name: "v1.batch".into(),
            resource_version: "2".into()
        }));
        progress.started = true;
        progress.synced.insert("v1.apps".into());
        // After start: a deleted built-in one is not recreated, a stale one not deleted.
        assert!(plan(&want, &current, &progress).is_empty());
    }

    #[test]
    fn a_local_one_with_a_wrong_condition_gets_the_local_one_back() {
        let want = desired(builtin(&[("apps", "v1")]));
        let mut cur = listed(&want["v1.apps"], "2");
        cur["status"]["conditions"] =
            json!([{"type": "Available", "status": "False", "reason": "Whatever"}]);
        assert_eq!(
            plan(&want, &[cur.clone()], &Progress::default()),
            [Action::SetLocalStatus {
                name: "v1.apps".into()
            }]
        );
        let c = local_condition(available_condition(&cur));
        assert_eq!(c["reason"], LOCAL_REASON);
        assert_eq!(c["status"], "True");
    }
}

/// The controller against a real sled store: the registry, the CRD controller and the loop.
#[cfg(test)]
mod store_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use fabrik_store::{SledBackend, SledConfig, Store};

    use super::*;
    use crate::controllers::crd::CrdController;
    use crate::registry::ListParams;

    struct Fixture {
        _dir: tempfile::TempDir,
        reg: Arc<Registry>,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let reg = Arc::new(Registry::new(store, Arc::new(Catalog::builtin())));
        crate::cluster::bootstrap(&reg).await.expect("bootstrap");
        Fixture { _dir: dir, reg }
    }

    fn apiservices(reg: &Registry) -> Arc<ResourceDef> {
        reg.resource(GROUP, "v1", "apiservices").expect("served")
    }

    async fn all(reg: &Registry) -> BTreeMap<String, Value> {
        reg.list(&apiservices(reg), None, &ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|o| Some((o["metadata"]["name"].as_str()?.to_string(), o)))
            .collect()
    }

    fn crd(group: &str, versions: &[&str]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({"name": v, "served": true, "storage": i == 0,
                       "schema": {"openAPIV3Schema": {"type": "object",
                                  "x-kubernetes-preserve-unknown-fields": true}}})
            })
            .collect();
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": format!("widgets.{group}")},
               "spec": {"group": group, "scope": "Namespaced",
                        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                                  "listKind": "WidgetList"},
                        "versions": versions}})
    }

    fn registered(name: &str, group: &str, version: &str) -> Value {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": name},
               "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                        "versionPriority": 100, "insecureSkipTLSVerify": true,
                        "service": {"namespace": "kube-system", "name": "backend"}}})
    }

    async fn pass(local: &mut LocalApiServices, reg: &Registry) {
        let items = super::super::list_all(reg).await.expect("list");
        let errors = local.reconcile(reg, &items).await;
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[tokio::test]
    async fn built_in_and_crd_group_versions_get_local_apiservices_and_users_keep_theirs() {
        let f = fixture().await;
        let reg = &f.reg;
        // Users' registrations: the metrics API (which the cluster also serves built in) and
        // a group version a CRD will serve too.
        for obj in [
            registered("v1beta1.metrics.k8s.io", "metrics.k8s.io", "v1beta1"),
            registered("v1beta1.example.com", "example.com", "v1beta1"),
        ] {
            reg.create(&apiservices(reg), None, obj, &WriteOptions::default())
                .await
                .expect("register");
        }
        let mut local = LocalApiServices::default();
        pass(&mut local, reg).await;
        let objs = all(reg).await;
        let want = desired_of(reg.catalog());
        for name in want.keys() {
            let o = &objs[name];
            assert!(o["spec"].get("service").is_none(), "{o}");
            assert!(has_local_condition(o), "{o}");
        }
        let apps = &objs["v1.apps"];
        assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
        assert_eq!(apps["spec"]["versionPriority"], 15);
        assert_eq!(apps["metadata"]["labels"][MANAGED_LABEL], "onstart");
        assert!(objs.contains_key("v1."));
        let metrics = objs["v1beta1.metrics.k8s.io"].clone();
        assert_eq!(metrics["spec"]["service"]["name"], "backend");
        // The only ones not Local are the users'.
        assert_eq!(objs.len(), want.len() + 2);
        // A second pass writes nothing.
        let rv_before: Vec<Value> = objs
            .values()
            .map(|o| o["metadata"]["resourceVersion"].clone())
            .collect();
        pass(&mut local, reg).await;
        let rv_after: Vec<Value> = all(reg)
            .await
            .values()
            .map(|o| o["metadata"]["resourceVersion"].clone())
            .collect();
        assert_eq!(rv_before, rv_after);

        // A CRD serving two versions, one of which the user registered.
        let crds = reg
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("crds");
        reg.create(
            &crds,
            None,
            crd("example.com", &["v1", "v1beta1"]),
            &WriteOptions::default(),
        )
        .await
        .expect("crd");
        let mut crd_controller = CrdController::default();
        crd_controller.reconcile_all(reg).await.expect("crd pass");
        pass(&mut local, reg).await;
        let objs = all(reg).await;
        let v1 = &objs["v1.example.com"];
        assert_eq!(v1["spec"]["group"], "example.com");
        assert_eq!(v1["spec"]["groupPriorityMinimum"], CRD_GROUP_PRIORITY);
        assert_eq!(v1["spec"]["versionPriority"], CRD_VERSION_PRIORITY);
        assert_eq!(v1["metadata"]["labels"][MANAGED_LABEL], "true");
        assert!(has_local_condition(v1), "{v1}");
        let theirs = &objs["v1beta1.example.com"];
        assert_eq!(theirs["spec"]["service"]["name"], "backend", "{theirs}");

        // The CRD goes: its Local APIService goes, the user's stays; so does the metrics one.
        reg.delete(
            &crds,
            None,
            "widgets.example.com",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete crd");
        for _ in 0..3 {
            crd_controller.reconcile_all(reg).await.expect("crd pass");
        }
        assert!(reg.catalog().get("example.com", "v1", "widgets").is_none());
        pass(&mut local, reg).await;
        let objs = all(reg).await;
        assert!(!objs.contains_key("v1.example.com"), "{:?}", objs.keys());
        assert_eq!(
            objs["v1beta1.example.com"]["spec"]["service"]["name"],
            "backend"
        );
        assert_eq!(objs["v1beta1.metrics.k8s.io"], metrics);
        assert!(objs.contains_key("v1.apps"));
    }

    #[tokio::test]
    async fn the_owner_s_loop_follows_crds_and_a_follower_writes_nothing() {
        let f = fixture().await;
        let reg = f.reg.clone();
        let aggregator = Arc::new(super::super::Aggregator::new(
            crate::webhook::WebhookSettings::default(),
            Default::default(),
        ));
        // A follower first: it keeps no Local APIServices.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let follower = tokio::spawn(super::super::available::run(
            aggregator.clone(),
            reg.clone(),
            super::super::available::Role::Follower,
            async move {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(all(&reg).await.is_empty());
        let _ = stop.send(());
        follower.await.expect("follower");

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let owner = tokio::spawn(super::super::available::run(
            aggregator,
            reg.clone(),
            super::super::available::Role::Owner,
            async move {
                let _ = stopped.await;
            },
        ));
        let wait = |what: &'static str, want: bool, name: &'static str| {
            let reg = reg.clone();
            async move {
                for _ in 0..100 {
                    if all(&reg).await.contains_key(name) == want {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                panic!("timed out waiting for {what}");
            }
        };
        wait("the built-in ones", true, "v1.batch").await;
        // A served CRD version wakes the loop through the catalog (no APIService changed).
        let crds = reg
            .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("crds");
        reg.create(
            &crds,
            None,
            crd("example.com", &["v1"]),
            &WriteOptions::default(),
        )
        .await
        .expect("crd");
        CrdController::default()
            .reconcile_all(&reg)
            .await
            .expect("crd pass");
        wait("the CRD's", true, "v1.example.com").await;
        // Deleted by someone: a CRD's is kept continuously, so it comes back.
        let before = all(&reg).await["v1.example.com"]["metadata"]["uid"].clone();
        reg.delete(
            &apiservices(&reg),
            None,
            "v1.example.com",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
        for _ in 0..100 {
            let objs = all(&reg).await;
            if objs
                .get("v1.example.com")
                .is_some_and(|o| o["metadata"]["uid"] != before)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_ne!(all(&reg).await["v1.example.com"]["metadata"]["uid"], before);
        // The CRD's group version is no longer served: removed from the catalog.
        assert!(reg.catalog().remove("example.com", "v1", "widgets"));
        wait("the CRD's to go", false, "v1.example.com").await;
        let _ = stop.send(());
        owner.await.expect("owner");
    }
}
