//! PATCH: JSON patch, merge patch and strategic merge patch applied to the stored object, then
//! written through the same update pipeline as PUT. Without a `resourceVersion` in the patch
//! the patch is re-applied to the fresh object when a concurrent write wins the race.

use std::sync::Mutex;

use fabrik_machinery::patch;
use serde_json::Value;

use super::{object, FieldValidation, Part, Registry, WriteOptions, Written};
use crate::error::{ApiError, Result};
use crate::negotiation::BodyType;
use crate::resources::ResourceDef;

/// Applies one patch document of `ty` to `doc`. `definition` is the OpenAPI definition for
/// strategic merge patch (None for kinds without a schema: strategic merge is refused).
pub fn apply(
    doc: &Value,
    patch_doc: &Value,
    ty: BodyType,
    definition: Option<&str>,
) -> Result<Value> {
    match ty {
        BodyType::JsonPatch => {
            // Upstream: a document that does not decode as a list of operations is 400; only
            // operations that fail to apply are 422.
            if !patch_doc
                .as_array()
                .is_some_and(|ops| ops.iter().all(Value::is_object))
            {
                return Err(ApiError::BadRequest(
                    "a JSON patch must be a list of operation objects".into(),
                ));
            }
            patch::json_patch(doc, patch_doc).map_err(|e| ApiError::Invalid {
                kind: String::new(),
                group: String::new(),
                name: String::new(),
                causes: vec![crate::strategy::invalid("", "", e.to_string())],
            })
        }
        BodyType::MergePatch => {
            if !patch_doc.is_object() {
                return Err(ApiError::BadRequest("the merge patch must be a JSON object".into()));
            }
            Ok(patch::merge_patch(doc, patch_doc))
        }
        BodyType::StrategicMergePatch => {
            let Some(def) = definition else {
                // Upstream's answer for custom resources.
                return Err(ApiError::UnsupportedMediaType(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
                ));
            };
            if !patch_doc.is_object() {
                return Err(ApiError::BadRequest("the strategic merge patch must be a JSON object".into()));
            }
            patch::strategic_merge_patch(doc, patch_doc, fabrik_openapi::Definitions::builtin(), def)
                .map_err(|e| ApiError::BadRequest(e.to_string()))
        }
        BodyType::ApplyPatch => Err(ApiError::UnsupportedMediaType(
            "server-side apply (application/apply-patch+yaml) is not served yet".into(),
        )),
        BodyType::Json | BodyType::Yaml | BodyType::Protobuf => Err(ApiError::UnsupportedMediaType(
            "the body of a PATCH must be application/json-patch+json, application/merge-patch+json or application/strategic-merge-patch+json".into(),
        )),
    }
}

impl Registry {
    /// Patches an object or its status.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        ty: BodyType,
        patch_doc: &Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let warnings: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let fv: FieldValidation = opts.field_validation;
        let definition = def.type_check.map(|_| def.definition.as_str());
        let mut written = self
            .update_with(def, ns, name, None, part, opts, |old| {
                let mut patched = apply(old, patch_doc, ty, definition)?;
                let w = self.check_object(def, &mut patched, fv)?;
                if let Ok(mut all) = warnings.lock() {
                    *all = w;
                }
                // A resourceVersion written by the patch is a precondition.
                let given = object::resource_version(&patched)?;
                let current = object::resource_version(old)?;
                if given.is_some() && given != current {
                    return Err(ApiError::conflict(&def.group_resource(), name));
                }
                if patched["metadata"]["name"].as_str() != Some(name) {
                    return Err(ApiError::BadRequest(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        patched["metadata"]["name"].as_str().unwrap_or("")
                    )));
                }
                Ok(patched)
            })
            .await?;
        written.warnings = warnings.into_inner().unwrap_or_default();
        Ok(written)
    }
}
