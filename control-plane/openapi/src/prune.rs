//! Removal of fields a schema does not declare, for `fieldValidation` (Strict, Warn, Ignore).
//!
//! Walks the object alongside its schema through references, lists and maps. A schema with
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`, or an object schema
//! with neither `properties` nor `additionalProperties` (free-form, e.g. RawExtension) keeps
//! everything beneath it. Removed paths are written as upstream's strict-decoding errors
//! write them: `spec.containers[0].foo`.

use serde_json::Value;

use crate::definitions::Definitions;
use crate::refs::schema_target;

/// How many references may be followed without reaching a concrete schema.
const MAX_REF_HOPS: usize = 64;

impl Definitions {
    /// Removes fields not in the schema of `definition`, returning their paths. An unknown
    /// definition removes nothing.
    pub fn prune_unknown(&self, definition: &str, object: &mut Value) -> Vec<String> {
        let mut removed = Vec::new();
        if let Some(schema) = self.get(definition) {
            self.prune(schema, object, &mut String::new(), &mut removed);
        }
        removed
    }

    /// Follows references until a concrete schema; `None` for unknown or cyclic references.
    fn resolve<'a>(&'a self, mut schema: &'a Value) -> Option<&'a Value> {
        for _ in 0..MAX_REF_HOPS {
            if keeps_everything(schema) {
                return Some(schema);
            }
            match schema_target(schema) {
                Some(name) => schema = self.get(name)?,
                None => return Some(schema),
            }
        }
        None
    }

    fn prune(&self, schema: &Value, value: &mut Value, path: &mut String, out: &mut Vec<String>) {
        let Some(schema) = self.resolve(schema) else {
            return;
        };
        if keeps_everything(schema) {
            return;
        }
        match value {
            Value::Object(map) => {
                let props = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties");
                if props.is_none() && additional.is_none() {
                    return;
                }
                let mut unknown = Vec::new();
                for (key, child) in map.iter_mut() {
                    let len = path.len();
                    push_key(path, key);
                    match (props.and_then(|p| p.get(key)), additional) {
                        (Some(sub), _) => self.prune(sub, child, path, out),
                        (None, Some(Value::Bool(true))) => {}
                        (None, Some(sub @ Value::Object(_))) => self.prune(sub, child, path, out),
                        (None, _) => {
                            unknown.push(key.clone());
                            out.push(path.clone());
                        }
                    }
                    path.truncate(len);
                }
                for key in unknown {
                    map.remove(&key);
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = schema.get("items") else {
                    return;
                };
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.prune(item_schema, item, path, out);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// Whether nothing beneath this schema may be pruned.
fn keeps_everything(schema: &Value) -> bool {
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    flag("x-kubernetes-preserve-unknown-fields") || flag("x-kubernetes-int-or-string")
}

/// Appends `.key` (or `key` at the root) to `path`.
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const POD: &str = "io.k8s.api.core.v1.Pod";

    #[test]
    fn removes_unknown_fields_at_any_depth() {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod", "bogus": 1,
            "metadata": {"name": "a", "labels": {"anything": "x"}, "annotations": {"b/c": "d"}},
            "spec": {"foo": true, "containers": [
                {"name": "c", "image": "i"},
                {"name": "d", "bogus": {"x": 1}, "env": [{"name": "E", "value": "v", "extra": 0}]}
            ]}
        });
        let removed = Definitions::builtin().prune_unknown(POD, &mut pod);
        assert_eq!(
            removed,
            [
                "bogus",
                "spec.foo",
                "spec.containers[1].bogus",
                "spec.containers[1].env[0].extra"
            ]
        );
        assert!(pod.get("bogus").is_none());
        assert!(pod["spec"].get("foo").is_none());
        assert!(pod["spec"]["containers"][1].get("bogus").is_none());
        assert_eq!(pod["metadata"]["labels"]["anything"], json!("x"));
        assert_eq!(pod["spec"]["containers"][1]["env"][0]["value"], json!("v"));
    }

    #[test]
    fn keeps_free_form_and_int_or_string_values() {
        let mut pod = json!({
            "metadata": {"name": "a", "managedFields": [{"fieldsV1": {"f:spec": {"f:x": {}}}}]},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}},
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": "http", "path": "/"}}}]}
        });
        let before = pod.clone();
        let removed = Definitions::builtin().prune_unknown(POD, &mut pod);
        assert!(removed.is_empty(), "{removed:?}");
        assert_eq!(pod, before);
    }

    #[test]
    fn keeps_raw_extension_contents() {
        let mut rev = json!({"revision": 1, "data": {"spec": {"anything": {"goes": true}}}});
        let before = rev.clone();
        let removed =
            Definitions::builtin().prune_unknown("io.k8s.api.apps.v1.ControllerRevision", &mut rev);
        assert!(removed.is_empty());
        assert_eq!(rev, before);
    }

    #[test]
    fn crd_schema_json_values_are_kept() {
        let mut crd = json!({"spec": {"group": "g", "names": {"kind": "K", "plural": "ks"},
            "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "default": {"a": {"b": 1}},
                "properties": {"x": {"type": "string", "example": {"deep": 1}}}}}}]}});
        let removed = Definitions::builtin().prune_unknown(
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
            &mut crd,
        );
        assert!(removed.is_empty(), "{removed:?}");
    }

    #[test]
    fn unknown_definition_prunes_nothing() {
        let mut v = json!({"a": 1});
        assert!(Definitions::builtin()
            .prune_unknown("no.Such", &mut v)
            .is_empty());
        assert_eq!(v, json!({"a": 1}));
    }
}
