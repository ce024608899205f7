//! The three patch types of the Kubernetes API: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386) and strategic merge patch.
//!
//! All functions are pure: they take the current object and the patch and return the patched
//! object, leaving both inputs untouched. A malformed patch is reported as a [`PatchError`],
//! never a panic. Strategic merge patch needs to know how each field merges (merge keys,
//! strategies); that knowledge comes from a [`PatchSchema`] supplied by the caller.

mod depth;
mod order;
mod strategic;

use std::collections::BTreeMap;

use serde_json::Value;

pub use depth::MAX_PATCHED_DEPTH;
pub use strategic::strategic_merge_patch;

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch document is malformed: not valid for its patch type, a list element without
    /// its merge key, a directive with the wrong shape (upstream answers 400 Bad Request).
    #[error("invalid patch: {0}")]
    InvalidPatch(String),
    /// A JSON patch `test` operation found a different value (upstream answers 422).
    #[error("the test operation at {path} failed: the value did not match")]
    TestFailed {
        /// The JSON pointer of the failed test.
        path: String,
    },
    /// A JSON patch operation could not be applied to this document, e.g. its path does not
    /// exist (upstream answers 422).
    #[error("{0}")]
    OperationFailed(String),
    /// A JSON patch with too many operations, or whose `copy` operations would copy more than
    /// [`MAX_JSON_PATCH_COPY_BYTES`] in all (a few operations that copy a document into itself
    /// would otherwise double it each time).
    #[error("{0}")]
    TooLarge(String),
    /// A `$patch` directive with a value other than `replace`, `delete` or (in lists of maps
    /// only) `merge` (upstream answers 400).
    #[error("unknown patch type: {0}")]
    UnsupportedDirective(String),
    /// The current object cannot be merged as the patch requires, e.g. a merge list whose
    /// elements are not objects or lack the merge key (upstream answers 422).
    #[error("cannot apply the patch to the object: {0}")]
    Conflict(String),
}

impl PatchError {
    /// The HTTP status upstream answers with for this error.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::InvalidPatch(_) | PatchError::UnsupportedDirective(_) => 400,
            PatchError::TestFailed { .. }
            | PatchError::OperationFailed(_)
            | PatchError::TooLarge(_)
            | PatchError::Conflict(_) => 422,
        }
    }
}

/// The most operations one JSON patch may have (upstream: 10,000).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The most bytes the `copy` operations of one JSON patch may copy, together (upstream bounds
/// the accumulated copy size too).
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Applies an RFC 6902 JSON patch (a list of operations) to `doc`.
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    if let Some(n) = patch
        .as_array()
        .map(Vec::len)
        .filter(|n| *n > MAX_JSON_PATCH_OPERATIONS)
    {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {n}"
        )));
    }
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::InvalidPatch(e.to_string()))?;
    let mut copied = 0usize;
    // Like kube-apiserver's JSON patch library, a `test` that a path is `null` passes when the
    // path does not exist (clients such as kube-rs's finalizer helper rely on it). Operations
    // are applied one by one so the check sees the document as the earlier operations left it;
    // the document changes only if every operation succeeds.
    let mut out = doc.clone();
    let mut depth = depth::DepthGuard::new(doc);
    for op in ops.0 {
        depth.admit(&out, &op)?;
        if let json_patch::PatchOperation::Copy(c) = &op {
            let size = out
                .pointer(c.from.as_str())
                .and_then(|v| serde_json::to_vec(v).ok())
                .map_or(0, |b| b.len());
            copied = copied.saturating_add(size);
            if copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(PatchError::TooLarge(format!(
                    "unable to copy: the copy operations of this patch would copy more than {MAX_JSON_PATCH_COPY_BYTES} bytes"
                )));
            }
        }
        if let json_patch::PatchOperation::Test(t) = &op {
            if t.value.is_null() && out.pointer(t.path.as_str()).is_none() {
                continue;
            }
        }
        json_patch::patch(&mut out, &[op]).map_err(|e| match e.kind {
            json_patch::PatchErrorKind::TestFailed => PatchError::TestFailed {
                path: e.path.to_string(),
            },
            _ => PatchError::OperationFailed(e.to_string()),
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod json_patch_null_test {
    use super::*;
    use serde_json::json;

    #[test]
    fn copies_that_double_the_document_are_refused() {
        let doc = json!({"a": ["x"], "big": "y".repeat(100_000)});
        // Each copy doubles /a: 64 of them would make 2^64 copies.
        let mut ops =
            vec![json!({"op": "add", "path": "/a/0", "value": {"big": "y".repeat(100_000)}})];
        for _ in 0..64 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/a/0"}));
        }
        let err = json_patch(&doc, &Value::Array(ops)).err();
        assert!(matches!(err, Some(PatchError::TooLarge(_))), "{err:?}");
        let many = Value::Array(vec![
            json!({"op": "test", "path": "/big", "value": null});
            10_001
        ]);
        assert!(matches!(
            json_patch(&doc, &many),
            Err(PatchError::TooLarge(_))
        ));
        // A few small copies still work.
        let ok = json!([{"op": "copy", "from": "/a", "path": "/b"}]);
        assert_eq!(
            json_patch(&doc, &ok).ok().map(|d| d["b"] == d["a"]),
            Some(true)
        );
    }

    #[test]
    fn test_null_on_a_missing_path_passes() {
        let doc = json!({"metadata": {"name": "a"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]);
        assert_eq!(
            json_patch(&doc, &patch).ok(),
            Some(json!({"metadata": {"name": "a", "finalizers": ["f"]}}))
        );
        let failing = json!([{"op": "add", "path": "/x", "value": 1}, {"op": "test", "path": "/metadata/name", "value": "b"}]);
        assert!(json_patch(&doc, &failing).is_err());
    }
}

/// Applies an RFC 7386 JSON merge patch: objects merge recursively, `null` deletes a key, any
/// other value (a list, a scalar, or a non-object patch as a whole) replaces.
pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// How strategic merge patch sees a type. Implemented elsewhere (from the upstream OpenAPI
/// schemas and their `x-kubernetes-patch-*` extensions).
pub trait PatchSchema: Send + Sync {
    /// Patch metadata of `field` in the object definition `definition` (e.g.
    /// `"io.k8s.api.core.v1.PodSpec"`, `"containers"`). `None` = unknown field: objects merge
    /// recursively without schema, lists are replaced.
    fn field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo>;
}

/// Strategic-merge metadata of one field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPatchInfo {
    /// `x-kubernetes-patch-strategy` split on `,`: `merge`, `retainKeys`, `replace`.
    pub strategies: Vec<String>,
    /// `x-kubernetes-patch-merge-key`, the key identifying elements of a merge list of objects.
    pub merge_key: Option<String>,
    /// Definition of the field's value: for an object field its type; for a list or map field
    /// the element type; `None` for primitives and free-form values.
    pub definition: Option<String>,
    /// The field is a list.
    pub is_list: bool,
    /// The field is an `additionalProperties` map (`map[string]X`) rather than a struct.
    pub is_map: bool,
    /// How server-side apply merges the list (`atomic`, `set` or `map`): upstream's
    /// `x-kubernetes-list-type`, else derived as structured-merge-diff does (a `merge` patch
    /// strategy with a merge key is a `map` list keyed by it, without one a `set`, any other
    /// list `atomic`). `None` where the schema does not say; [`FieldPatchInfo::list_kind`]
    /// then derives it from the patch strategy.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys` of a `map` list (the merge key where only that is given).
    pub list_map_keys: Vec<String>,
    /// Default values of list map keys an element may omit (upstream's schemas declare
    /// `protocol: TCP` for ports), used to compute the element's key.
    pub list_map_key_defaults: BTreeMap<String, Value>,
    /// `x-kubernetes-map-type` (`atomic` or `granular`) of the field's value when it is an
    /// object: declared on the property, else on the struct definition it refers to.
    pub map_type: Option<String>,
    /// For lists and maps: `x-kubernetes-map-type` of the element definition (e.g. an atomic
    /// struct such as `LocalObjectReference`). `None` for other fields.
    pub struct_type: Option<String>,
}

impl FieldPatchInfo {
    /// Whether the strategies include `name`.
    pub fn has_strategy(&self, name: &str) -> bool {
        self.strategies.iter().any(|s| s.trim() == name)
    }

    /// The list type server-side apply uses: the declared one, else derived from the patch
    /// strategy (`merge` with a merge key: `map`; `merge` without: `set`; else `atomic`).
    /// `None` for fields that are not lists.
    pub fn list_kind(&self) -> Option<&str> {
        if !self.is_list {
            return None;
        }
        if let Some(t) = self.list_type.as_deref() {
            return Some(t);
        }
        Some(match (self.has_strategy("merge"), &self.merge_key) {
            (true, Some(_)) => "map",
            (true, None) => "set",
            (false, _) => "atomic",
        })
    }

    /// The keys of a `map` list: `list_map_keys`, else the merge key.
    pub fn map_keys(&self) -> Vec<String> {
        if !self.list_map_keys.is_empty() {
            return self.list_map_keys.clone();
        }
        self.merge_key.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_operations() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "remove", "path": "/metadata/labels/a"},
            {"op": "test", "path": "/spec/replicas", "value": 3}
        ]);
        let out = json_patch(&doc, &patch);
        assert_eq!(
            out,
            Ok(json!({"metadata": {"labels": {"b": "2"}}, "spec": {"replicas": 3}}))
        );
        assert_eq!(doc["spec"]["replicas"], 1, "input untouched");
    }

    #[test]
    fn json_patch_errors() {
        let doc = json!({"a": 1});
        let failed = json_patch(&doc, &json!([{"op": "test", "path": "/a", "value": 2}]));
        assert_eq!(failed, Err(PatchError::TestFailed { path: "/a".into() }));
        assert_eq!(failed.err().map(|e| e.status_code()), Some(422));

        let missing = json_patch(&doc, &json!([{"op": "remove", "path": "/b"}]));
        assert!(matches!(missing, Err(PatchError::OperationFailed(_))));

        for bad in [
            json!({"op": "add"}),
            json!([{"op": "jump", "path": "/a"}]),
            json!("x"),
        ] {
            let e = json_patch(&doc, &bad);
            assert!(matches!(e, Err(PatchError::InvalidPatch(_))), "{bad}");
            assert_eq!(e.err().map(|e| e.status_code()), Some(400));
        }
    }

    #[test]
    fn merge_patch_rfc7386() {
        let doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        let patch = json!({"a": "z", "c": {"f": null, "h": 1}, "l": [3]});
        assert_eq!(
            merge_patch(&doc, &patch),
            json!({"a": "z", "c": {"d": "e", "h": 1}, "l": [3]})
        );
        assert_eq!(merge_patch(&doc, &json!([1])), json!([1]));
        assert_eq!(
            merge_patch(&json!([1]), &json!({"a": null, "b": 1})),
            json!({"b": 1})
        );
    }
}
