//! Server-side apply (`application/apply-patch+yaml`) and `metadata.managedFields` bookkeeping
//! for every other write, on top of the field-ownership logic in `fabrik_machinery::apply`.

use fabrik_machinery::apply::{self as ssa, ApplyError, WriteContext};
use fabrik_machinery::patch::PatchSchema;
use fabrik_openapi::InlineSchema;
use serde_json::{json, Value};

use super::{object, Part, Registry, WriteOptions, Written};
use crate::error::{ApiError, Result};
use crate::resources::ResourceDef;

/// The schema view field ownership is computed with, and the definition to start from.
enum Schema<'a> {
    Builtin(&'a ResourceDef),
    Inline(InlineSchema),
}

impl<'a> Schema<'a> {
    fn of(def: &'a ResourceDef) -> Schema<'a> {
        if def.custom {
            let root = def
                .schemas
                .get()
                .get(&def.definition)
                .cloned()
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            Schema::Inline(InlineSchema::new(def.definition.clone(), root))
        } else {
            Schema::Builtin(def)
        }
    }

    fn parts(&self) -> (&dyn PatchSchema, String) {
        match self {
            Schema::Builtin(def) => (def.schemas.get(), def.definition.clone()),
            Schema::Inline(inline) => (inline, inline.root_definition()),
        }
    }
}

/// Records `manager`'s changes from `old` to `new` in `new`'s managedFields.
pub fn track(
    def: &ResourceDef,
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
) -> Value {
    let schema = Schema::of(def);
    let (patch_schema, definition) = schema.parts();
    let now = object::now();
    let api_version = def.api_version();
    let ctx = WriteContext {
        schema: patch_schema,
        definition: &definition,
        api_version: &api_version,
        subresource,
        now: &now,
    };
    ssa::update_managed_fields(old, new, manager, &ctx)
}

fn apply_error(def: &ResourceDef, name: &str, e: ApplyError) -> ApiError {
    match e {
        ApplyError::Conflicts(conflicts) => ApiError::ApplyConflict {
            resource: def.group_resource(),
            name: name.to_string(),
            message: ssa::conflict_message(&conflicts),
            causes: conflicts
                .iter()
                .map(|c| (c.field.clone(), c.cause_message()))
                .collect(),
        },
        other if other.status_code() == 400 => ApiError::BadRequest(other.to_string()),
        other => ApiError::Internal(other.to_string()),
    }
}

impl Registry {
    /// Server-side apply of `config` by `manager` (creates the object when it does not exist).
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        mut config: Value,
        part: Part,
        manager: &str,
        force: bool,
        opts: &WriteOptions,
    ) -> Result<Written> {
        if manager.is_empty() {
            return Err(ApiError::Invalid {
                kind: "PatchOptions".into(),
                group: "meta.k8s.io".into(),
                name: String::new(),
                causes: vec![crate::strategy::field_required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            });
        }
        let warnings = self.check_object(def, &mut config, opts.field_validation)?;
        match config["metadata"]["name"].as_str() {
            Some(n) if n != name => {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            Some(_) => {}
            None => config["metadata"]["name"] = json!(name),
        }
        if let (true, Some(ns)) = (def.namespaced, ns) {
            match config["metadata"]["namespace"].as_str() {
                Some(n) if n != ns => {
                    return Err(ApiError::BadRequest("the namespace of the provided object does not match the namespace sent on the request".into()));
                }
                _ => config["metadata"]["namespace"] = json!(ns),
            }
        }
        let schema = Schema::of(def);
        let (patch_schema, definition) = schema.parts();
        let api_version = def.api_version();
        let subresource = (part == Part::Status).then_some("status");
        let untracked = WriteOptions {
            field_manager: None,
            ..opts.clone()
        };
        let live = match self.get(def, ns, name).await {
            Ok(v) => Some(v),
            Err(ApiError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let Some(_) = live else {
            if part != Part::Main {
                return Err(ApiError::NotFound {
                    resource: def.group_resource(),
                    name: name.to_string(),
                });
            }
            let now = object::now();
            let ctx = WriteContext {
                schema: patch_schema,
                definition: &definition,
                api_version: &api_version,
                subresource,
                now: &now,
            };
            let merged = ssa::apply(None, &config, manager, force, &ctx)
                .map_err(|e| apply_error(def, name, e))?;
            let mut written = self.create(def, ns, merged, &untracked).await?;
            written.warnings = warnings;
            return Ok(written);
        };
        let mut written = self
            .update_with(def, ns, name, None, part, &untracked, |old| {
                let now = object::now();
                let ctx = WriteContext {
                    schema: patch_schema,
                    definition: &definition,
                    api_version: &api_version,
                    subresource,
                    now: &now,
                };
                ssa::apply(Some(old), &config, manager, force, &ctx)
                    .map_err(|e| apply_error(def, name, e))
            })
            .await?;
        written.warnings = warnings;
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    #[test]
    fn updates_record_spec_fields() {
        let catalog = Catalog::builtin();
        let def = catalog.get("apps", "v1", "deployments").expect("served");
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "d"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let mut obj = obj;
        def.strategy.prepare_for_create(&mut obj);
        let created = track(&def, None, &obj, "kubectl-create", None);
        let fields = created["metadata"]["managedFields"][0]["fieldsV1"].to_string();
        assert!(fields.contains("f:replicas"), "{fields}");
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(4);
        let after = track(&def, Some(&created), &scaled, "kubectl-scale", None);
        let managers: Vec<&str> = after["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(managers.contains(&"kubectl-scale"), "{managers:?}");
        // A status write by another manager leaves everyone's spec ownership alone.
        let mut with_status = after.clone();
        with_status["status"] = json!({"replicas": 4});
        let last = track(
            &def,
            Some(&after),
            &with_status,
            "controller",
            Some("status"),
        );
        let create_fields = last["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["manager"] == "kubectl-create")
            .map(|m| m["fieldsV1"].to_string())
            .unwrap_or_default();
        assert!(create_fields.contains("f:template"), "{create_fields}");
    }
}
