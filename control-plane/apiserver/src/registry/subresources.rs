//! Subresources that are not a part of the object: `scale`, `pods/binding`, `pods/eviction`.

use fabrik_machinery::labels::Selector;
use fabrik_store::StoreError;
use serde_json::{json, Value};

use super::{object, DeleteOptions, ListParams, Part, Registry, WriteOptions};
use crate::error::{ApiError, Result};
use crate::jsonpath;
use crate::resources::ResourceDef;

/// The `autoscaling/v1 Scale` view of an object, read through the resource's scale paths.
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let paths = def.scale.clone().unwrap_or_default();
    let selector = match paths
        .label_selector
        .as_deref()
        .and_then(|p| jsonpath::get(obj, p))
    {
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Object(_)) => Selector::from_label_selector(v)
            .map(|s| s.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    let int = |path: &str| {
        jsonpath::get(obj, path)
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": int(&paths.spec_replicas)},
        "status": {"replicas": int(&paths.status_replicas), "selector": selector},
    })
}

fn replicas_of(scale: &Value) -> Result<i64> {
    let r = scale["spec"]["replicas"].as_i64().unwrap_or(0);
    if r < 0 {
        return Err(ApiError::Invalid {
            kind: "Scale".into(),
            group: "autoscaling".into(),
            name: scale["metadata"]["name"].as_str().unwrap_or("").into(),
            causes: vec![crate::strategy::invalid(
                "spec.replicas",
                &r.to_string(),
                "must be greater than or equal to 0",
            )],
        });
    }
    Ok(r)
}

impl Registry {
    /// Writes a Scale (PUT, or the result of a PATCH) back to the object's `spec.replicas`.
    pub async fn update_scale(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        scale: &Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let replicas = replicas_of(scale)?;
        let expected = object::resource_version(scale)?;
        let written = self
            .update_with(def, ns, name, expected, Part::Main, opts, |old| {
                let mut new = old.clone();
                let path = def.scale.clone().unwrap_or_default().spec_replicas;
                if !jsonpath::set(&mut new, &path, json!(replicas)) {
                    return Err(ApiError::Internal(format!(
                        "cannot write the scale path {path}"
                    )));
                }
                Ok(new)
            })
            .await?;
        Ok(scale_of(def, &written.object))
    }

    /// Patches the Scale of an object. The patch is applied to the Scale read inside the
    /// write's retry loop, so a concurrent writer (the object's controller) costs a retry,
    /// not a 409; a `resourceVersion` written by the patch itself stays a precondition.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch_scale(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        ty: crate::negotiation::BodyType,
        patch_doc: &Value,
        opts: &WriteOptions,
    ) -> Result<Value> {
        let written = self
            .update_with(def, ns, name, None, Part::Main, opts, |old| {
                let current = scale_of(def, old);
                let patched = super::apply_patch(
                    &current,
                    patch_doc,
                    ty,
                    Some("io.k8s.api.autoscaling.v1.Scale"),
                )?;
                let given = object::resource_version(&patched)?;
                if given.is_some() && given != object::resource_version(&current)? {
                    return Err(ApiError::conflict(&def.group_resource(), name));
                }
                let replicas = replicas_of(&patched)?;
                let mut new = old.clone();
                let path = def.scale.clone().unwrap_or_default().spec_replicas;
                if !jsonpath::set(&mut new, &path, json!(replicas)) {
                    return Err(ApiError::Internal(format!(
                        "cannot write the scale path {path}"
                    )));
                }
                Ok(new)
            })
            .await?;
        Ok(scale_of(def, &written.object))
    }

    /// `pods/binding`: assigns the pod to a node, once.
    pub async fn bind_pod(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        binding: &Value,
    ) -> Result<()> {
        let node = binding["target"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::Invalid {
                kind: "Binding".into(),
                group: String::new(),
                name: name.into(),
                causes: vec![crate::strategy::required("target.name")],
            })?;
        let key = def.key(ns, name);
        loop {
            let kv = self
                .store
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::NotFound {
                    resource: def.group_resource(),
                    name: name.into(),
                })?;
            let mut pod = object::decode_as(&kv, &def.api_version())?;
            if let Some(uid) = binding["metadata"]["uid"].as_str() {
                if pod["metadata"]["uid"].as_str() != Some(uid) {
                    return Err(ApiError::conflict(&def.group_resource(), name));
                }
            }
            if object::is_deleting(&pod) {
                return Err(ApiError::Conflict {
                    resource: def.group_resource(),
                    name: name.into(),
                    message: format!("pod {name} is being deleted, cannot be assigned to a host"),
                });
            }
            if pod["spec"]["schedulingGates"]
                .as_array()
                .is_some_and(|g| !g.is_empty())
            {
                // As upstream: a gated pod is not bound until its gates are cleared.
                return Err(ApiError::Conflict {
                    resource: def.group_resource(),
                    name: name.into(),
                    message: format!("pod {name} has non-empty .spec.schedulingGates"),
                });
            }
            if let Some(existing) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                return Err(ApiError::Conflict {
                    resource: def.group_resource(),
                    name: name.into(),
                    message: format!("pod {name} is already assigned to node \"{existing}\""),
                });
            }
            pod["spec"]["nodeName"] = json!(node);
            let conds = pod["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut conds: Vec<Value> = conds
                .into_iter()
                .filter(|c| c["type"] != "PodScheduled")
                .collect();
            conds.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": object::now()}));
            pod["status"]["conditions"] = json!(conds);
            match self
                .store
                .update(&key, object::encode(&pod)?, Some(kv.mod_revision))
                .await
            {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_store(e, &def.group_resource(), name)),
            }
        }
    }

    /// `pods/eviction`: deletes the pod unless a PodDisruptionBudget forbids it now.
    pub async fn evict_pod(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        eviction: &Value,
    ) -> Result<()> {
        let pod = self.get(def, ns, name).await?;
        let labels = pod["metadata"]["labels"].as_object();
        let pdbs_def = self
            .catalog
            .get("policy", "v1", "poddisruptionbudgets")
            .ok_or_else(|| ApiError::Internal("poddisruptionbudgets not served".into()))?;
        let pdbs = self.list(&pdbs_def, ns, &ListParams::default()).await?;
        let matching: Vec<&Value> = pdbs
            .items
            .iter()
            .filter(|pdb| {
                Selector::from_label_selector(&pdb["spec"]["selector"])
                    .map(|s| !s.is_empty() && s.matches(labels))
                    .unwrap_or(false)
            })
            .collect();
        if matching.len() > 1 {
            return Err(ApiError::Internal("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()));
        }
        let terminal = matches!(
            crate::strategy::pod_phase(&pod),
            "Succeeded" | "Failed" | "Pending"
        );
        if let (Some(pdb), false) = (matching.first(), terminal || object::is_deleting(&pod)) {
            let sel = Selector::from_label_selector(&pdb["spec"]["selector"])
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            let pods = self
                .list(
                    def,
                    ns,
                    &ListParams {
                        labels: sel,
                        ..Default::default()
                    },
                )
                .await?;
            let expected = pods.items.len() as i64;
            let healthy = pods
                .items
                .iter()
                .filter(|p| !object::is_deleting(p))
                .filter(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
                .count() as i64;
            let resolve = |v: &Value| -> Option<i64> {
                match v {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) => s
                        .strip_suffix('%')
                        .and_then(|p| p.parse::<i64>().ok())
                        .map(|p| (p * expected + 99) / 100),
                    _ => None,
                }
            };
            let allowed = if let Some(min) = resolve(&pdb["spec"]["minAvailable"]) {
                healthy - min
            } else if let Some(max) = resolve(&pdb["spec"]["maxUnavailable"]) {
                max - (expected - healthy)
            } else {
                healthy - 1
            };
            if allowed < 1 {
                return Err(ApiError::TooManyRequests(format!(
                    "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {} needs {} healthy pods and has {healthy} currently",
                    pdb["metadata"]["name"].as_str().unwrap_or(""),
                    healthy - allowed
                )));
            }
        }
        let opts = &eviction["deleteOptions"];
        let delete = DeleteOptions {
            propagation: None,
            dry_run: opts["dryRun"]
                .as_array()
                .is_some_and(|d| d.iter().any(|v| v == "All")),
            grace_period: opts["gracePeriodSeconds"].as_i64(),
            uid: opts["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: opts["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            user: None,
        };
        self.delete(def, ns, name, &delete).await.map(|_| ())
    }
}
