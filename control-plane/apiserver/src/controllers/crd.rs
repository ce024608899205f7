//! The CRD controller: serves what CustomResourceDefinitions declare. For each CRD it checks
//! that its names are free, registers one resource per served version in the catalog (so
//! discovery, OpenAPI and the registry serve it at once), and reports `NamesAccepted` and
//! `Established`. Deleting a CRD deletes its objects first (finalizer
//! `customresourcecleanup.apiextensions.k8s.io`), then stops serving it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::crd::{self, CLEANUP_FINALIZER};
use crate::error::{ApiError, Result};
use crate::object;
use crate::registry::{DeleteOptions, ListParams, Part, Registry, WriteOptions};
use crate::resources::ResourceDef;

/// What is registered for one CRD.
struct Registered {
    uid: String,
    generation: i64,
    /// (group, version, plural) of each served version.
    served: Vec<(String, String, String)>,
}

/// The controller's state: what it has registered.
#[derive(Default)]
pub struct CrdController {
    registered: HashMap<String, Registered>,
}

fn crd_def(registry: &Registry) -> Result<Arc<ResourceDef>> {
    registry
        .catalog()
        .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| ApiError::Internal("customresourcedefinitions are not served".into()))
}

fn condition(ty: &str, status: bool, reason: &str, message: &str, old: &Value) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = old["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == ty && c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string));
    json!({
        "type": ty,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous.unwrap_or_else(object::now),
    })
}

impl CrdController {
    /// Who else serves this CRD's plural or kind in its group: a built-in kind or another CRD.
    fn name_conflict(&self, registry: &Registry, crd: &Value, all: &[Value]) -> Option<String> {
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap_or("");
        let plural = spec["names"]["plural"].as_str().unwrap_or("");
        let kind = spec["names"]["kind"].as_str().unwrap_or("");
        let me = crd["metadata"]["name"].as_str().unwrap_or("");
        for def in registry.catalog().all() {
            if def.group == group && !def.custom && (def.plural == plural || def.kind == kind) {
                return Some(format!(
                    "{plural} or {kind} is already served by the built-in API"
                ));
            }
        }
        for other in all {
            let name = other["metadata"]["name"].as_str().unwrap_or("");
            if name == me || other["spec"]["group"].as_str() != Some(group) {
                continue;
            }
            let older = other["metadata"]["creationTimestamp"].as_str()
                < crd["metadata"]["creationTimestamp"].as_str()
                || (other["metadata"]["creationTimestamp"] == crd["metadata"]["creationTimestamp"]
                    && name < me);
            let clash = other["spec"]["names"]["kind"].as_str() == Some(kind)
                || other["spec"]["names"]["plural"].as_str() == Some(plural);
            if clash && older {
                return Some(format!(
                    "\"{kind}\" or \"{plural}\" is already in use by {name}"
                ));
            }
        }
        None
    }

    fn unregister(&mut self, registry: &Registry, name: &str) {
        if let Some(r) = self.registered.remove(name) {
            for (g, v, p) in r.served {
                registry.catalog().remove(&g, &v, &p);
            }
        }
    }

    fn register(
        &mut self,
        registry: &Registry,
        crd: &Value,
    ) -> std::result::Result<(), crd::CrdError> {
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
        let uid = crd["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let generation = crd["metadata"]["generation"].as_i64().unwrap_or(0);
        if self
            .registered
            .get(&name)
            .is_some_and(|r| r.uid == uid && r.generation == generation)
        {
            return Ok(());
        }
        let defs = crd::resource_defs(crd)?;
        self.unregister(registry, &name);
        let served = defs
            .iter()
            .map(|d| (d.group.clone(), d.version.clone(), d.plural.clone()))
            .collect();
        for d in defs {
            registry.catalog().insert(d);
        }
        self.registered.insert(
            name,
            Registered {
                uid,
                generation,
                served,
            },
        );
        Ok(())
    }

    /// Deletes a deleting CRD's objects; finishes the CRD when none is left. Returns whether it
    /// still waits for objects.
    async fn clean_up(&mut self, registry: &Registry, crd: &Value) -> Result<bool> {
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
        if let Ok(defs) = crd::resource_defs(crd) {
            if let Some(d) = defs.first() {
                registry
                    .delete_collection(d, None, &ListParams::default(), &DeleteOptions::default())
                    .await?;
                if !registry
                    .list(
                        d,
                        None,
                        &ListParams {
                            limit: Some(1),
                            ..Default::default()
                        },
                    )
                    .await?
                    .items
                    .is_empty()
                {
                    return Ok(true);
                }
            }
        }
        self.unregister(registry, &name);
        let def = crd_def(registry)?;
        let result = registry
            .update_with(
                &def,
                None,
                &name,
                None,
                Part::Main,
                &WriteOptions::default(),
                |old| {
                    let mut new = old.clone();
                    let rest: Vec<Value> = object::finalizers(old)
                        .into_iter()
                        .filter(|f| f != CLEANUP_FINALIZER)
                        .map(Value::from)
                        .collect();
                    new["metadata"]["finalizers"] = json!(rest);
                    Ok(new)
                },
            )
            .await;
        match result {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn write_status(
        &self,
        registry: &Registry,
        crd: &Value,
        accepted: std::result::Result<(), String>,
    ) -> Result<()> {
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
        let def = crd_def(registry)?;
        let storage: Option<String> = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["storage"].as_bool() == Some(true))
            .and_then(|v| v["name"].as_str().map(str::to_string));
        let result = registry
            .update_with(&def, None, &name, None, Part::Status, &WriteOptions::default(), |old| {
                let mut new = old.clone();
                let (names, established) = match &accepted {
                    Ok(()) => (
                        condition("NamesAccepted", true, "NoConflicts", "no conflicts found", old),
                        condition("Established", true, "InitialNamesAccepted", "the initial names have been accepted", old),
                    ),
                    Err(why) => (
                        condition("NamesAccepted", false, "NameConflict", why, old),
                        condition("Established", false, "NotAccepted", "not all names are accepted", old),
                    ),
                };
                let mut stored: Vec<Value> = old["status"]["storedVersions"].as_array().cloned().unwrap_or_default();
                if let Some(s) = &storage {
                    if accepted.is_ok() && !stored.iter().any(|v| v == s.as_str()) {
                        stored.push(json!(s));
                    }
                }
                let accepted_names = if accepted.is_ok() { old["spec"]["names"].clone() } else { old["status"]["acceptedNames"].clone() };
                new["status"] = json!({
                    "conditions": [names, established],
                    "acceptedNames": if accepted_names.is_null() { json!({"plural": "", "kind": ""}) } else { accepted_names },
                    "storedVersions": stored,
                });
                Ok(new)
            })
            .await;
        match result {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One pass over every CRD. Returns whether some deleting CRD still waits.
    pub async fn reconcile_all(&mut self, registry: &Registry) -> Result<bool> {
        let def = crd_def(registry)?;
        let crds = registry
            .list(&def, None, &ListParams::default())
            .await?
            .items;
        let mut waiting = false;
        let present: Vec<String> = crds
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        let gone: Vec<String> = self
            .registered
            .keys()
            .filter(|k| !present.contains(k))
            .cloned()
            .collect();
        for name in gone {
            self.unregister(registry, &name);
        }
        for crd in &crds {
            let name = crd["metadata"]["name"].as_str().unwrap_or("").to_string();
            if object::is_deleting(crd) {
                waiting |= self.clean_up(registry, crd).await?;
                continue;
            }
            let accepted = match self.name_conflict(registry, crd, &crds) {
                Some(why) => {
                    self.unregister(registry, &name);
                    Err(why)
                }
                None => self.register(registry, crd).map_err(|e| e.to_string()),
            };
            self.write_status(registry, crd, accepted).await?;
        }
        Ok(waiting)
    }

    /// Runs until `shutdown` resolves, woken by every change to a CRD.
    pub async fn run(
        mut self,
        registry: Arc<Registry>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let prefix = match crd_def(&registry) {
            Ok(d) => d.key_prefix(None),
            Err(_) => return,
        };
        let mut wakeups = super::Wakeups::new(registry.clone(), prefix, shutdown);
        loop {
            wakeups.arm().await;
            let pending = match self.reconcile_all(&registry).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "CRD reconciliation failed; retrying");
                    true
                }
            };
            if !wakeups.wait(pending).await {
                return;
            }
        }
    }
}
