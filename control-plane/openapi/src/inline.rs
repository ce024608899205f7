//! Patch metadata of inline schemas: a CustomResourceDefinition's `openAPIV3Schema`.
//!
//! A nested schema is named by the CRD's name, `#`, and the JSON pointer to it inside the
//! root schema: `widgets.example.com#` is the root,
//! `widgets.example.com#/properties/spec/properties/ports/items` the element of
//! `spec.ports`. [`InlineSchema`] answers [`PatchSchema::field`] for those names from the
//! structural-schema extensions (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`, `additionalProperties`; fields under
//! `x-kubernetes-preserve-unknown-fields` that the schema does not declare are untyped),
//! and for the root's `metadata` and any other name from the built-in definitions (so
//! `metadata.labels` merge per key and `metadata.finalizers` as a set, as upstream).

use fabrik_machinery::patch::{FieldPatchInfo, PatchSchema};
use serde_json::Value;

use crate::definitions::Definitions;
use crate::patch_info::{key_defaults, map_type, string_list};

/// The definition the root's `metadata` is typed by.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The patch schema of one CRD version's `openAPIV3Schema`.
#[derive(Clone, Debug)]
pub struct InlineSchema {
    name: String,
    root: Value,
}

impl InlineSchema {
    /// The schema `root` (an `openAPIV3Schema`) of the CRD named `name` (e.g.
    /// `widgets.example.com`; for several versions, one schema per version, named apart,
    /// e.g. `widgets.example.com/v1`).
    pub fn new(name: impl Into<String>, root: Value) -> InlineSchema {
        InlineSchema {
            name: name.into(),
            root,
        }
    }

    /// The definition name of the root schema (`<name>#`), to pass as the object's
    /// definition.
    pub fn root_definition(&self) -> String {
        format!("{}#", self.name)
    }

    /// The schema a definition name points to, if it is one of this CRD's.
    pub fn resolve(&self, definition: &str) -> Option<&Value> {
        let pointer = definition.strip_prefix(&self.name)?.strip_prefix('#')?;
        self.root.pointer(pointer)
    }
}

/// Escapes a property name for a JSON pointer.
fn escape(field: &str) -> String {
    field.replace('~', "~0").replace('/', "~1")
}

/// Whether a schema is a struct: an object with declared properties.
fn is_struct(schema: &Value) -> bool {
    schema.get("properties").is_some_and(Value::is_object)
}

/// The metadata of property `prop`, found at the definition name `name`.
fn inline_info(prop: &Value, name: &str) -> FieldPatchInfo {
    let items = prop.get("items").filter(|i| i.is_object());
    let additional = prop.get("additionalProperties").filter(|a| a.is_object());
    let mut info = FieldPatchInfo {
        map_type: map_type(prop),
        ..FieldPatchInfo::default()
    };
    if let Some(items) = items {
        info.is_list = true;
        let list_type = prop.get("x-kubernetes-list-type").and_then(Value::as_str);
        info.list_type = Some(list_type.unwrap_or("atomic").to_owned());
        if list_type == Some("map") {
            info.list_map_keys = string_list(prop.get("x-kubernetes-list-map-keys"));
            info.list_map_key_defaults = key_defaults(&info.list_map_keys, items, false);
        }
        info.struct_type = map_type(items);
        info.definition = is_struct(items).then(|| format!("{name}/items"));
    } else if let Some(additional) = additional {
        info.is_map = true;
        info.struct_type = map_type(additional);
        info.definition = is_struct(additional).then(|| format!("{name}/additionalProperties"));
    } else if is_struct(prop) {
        info.definition = Some(name.to_owned());
    }
    info
}

impl PatchSchema for InlineSchema {
    fn field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        let Some(node) = self.resolve(definition) else {
            return Definitions::builtin().patch_field(definition, field);
        };
        let is_root = definition.len() == self.name.len() + 1;
        if is_root && field == "metadata" {
            return Some(FieldPatchInfo {
                definition: Some(OBJECT_META.to_owned()),
                ..FieldPatchInfo::default()
            });
        }
        let prop = node.get("properties")?.get(field)?;
        let name = format!("{definition}/properties/{}", escape(field));
        Some(inline_info(prop, &name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> InlineSchema {
        InlineSchema::new(
            "widgets.example.com",
            json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "ports": {"type": "array",
                              "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"],
                              "items": {"type": "object", "properties": {
                                  "port": {"type": "integer"},
                                  "protocol": {"type": "string", "default": "TCP"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                 "additionalProperties": {"type": "string"}},
                    "a/b": {"type": "object", "properties": {"c": {"type": "string"}}},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}
            }}),
        )
    }

    #[test]
    fn fields_of_nested_schemas() {
        let s = schema();
        let root = s.root_definition();
        let spec = s.field(&root, "spec");
        let spec_def = spec.and_then(|i| i.definition);
        assert_eq!(
            spec_def.as_deref(),
            Some("widgets.example.com#/properties/spec")
        );
        let spec_def = spec_def.unwrap_or_default();
        let ports = s.field(&spec_def, "ports").unwrap_or_default();
        assert_eq!(ports.list_type.as_deref(), Some("map"));
        assert_eq!(ports.list_map_keys, ["port", "protocol"]);
        assert_eq!(
            ports.list_map_key_defaults.get("protocol"),
            Some(&json!("TCP"))
        );
        assert_eq!(
            ports.definition.as_deref(),
            Some("widgets.example.com#/properties/spec/properties/ports/items")
        );
        let port_def = ports.definition.unwrap_or_default();
        assert!(s.field(&port_def, "port").is_some());
        let tags = s.field(&spec_def, "tags").unwrap_or_default();
        assert_eq!(tags.list_type.as_deref(), Some("set"));
        let args = s.field(&spec_def, "args").unwrap_or_default();
        assert_eq!(args.list_type.as_deref(), Some("atomic"));
        let selector = s.field(&spec_def, "selector").unwrap_or_default();
        assert!(selector.is_map && selector.map_type.as_deref() == Some("atomic"));
        let slash = s.field(&spec_def, "a/b").and_then(|i| i.definition);
        let slash = slash.unwrap_or_default();
        assert!(s.field(&slash, "c").is_some(), "{slash}");
        let extra = s.field(&spec_def, "extra").unwrap_or_default();
        assert!(extra.definition.is_none() && !extra.is_map);
        assert!(s.field(&spec_def, "nope").is_none());
    }

    #[test]
    fn metadata_is_object_meta() {
        let s = schema();
        let meta = s
            .field(&s.root_definition(), "metadata")
            .unwrap_or_default();
        assert_eq!(meta.definition.as_deref(), Some(OBJECT_META));
        let finalizers = s.field(OBJECT_META, "finalizers").unwrap_or_default();
        assert_eq!(finalizers.list_type.as_deref(), Some("set"));
    }
}
