//! The upstream `x-kubernetes-*` extensions and their merge into the generated definitions.
//!
//! The data (`data/k8s-schema-extensions.json`) was extracted from the upstream OpenAPI spec:
//! per definition its group/version/kinds and map type, per field its patch strategy, patch
//! merge key, list type, list map keys and map type.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The embedded extension data.
const DATA: &str = include_str!("../data/k8s-schema-extensions.json");

/// Top level of the data file.
#[derive(Debug, Deserialize)]
struct ExtensionFile {
    definitions: BTreeMap<String, DefinitionExtensions>,
}

/// Extensions of one definition.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DefinitionExtensions {
    #[serde(default)]
    fields: BTreeMap<String, FieldExtensions>,
    #[serde(default)]
    gvk: Vec<Gvk>,
    #[serde(default, rename = "mapType")]
    map_type: Option<String>,
}

/// Extensions of one field.
#[derive(Debug, Default, Deserialize)]
struct FieldExtensions {
    #[serde(default, rename = "patch-strategy")]
    patch_strategy: Option<String>,
    #[serde(default, rename = "patch-merge-key")]
    patch_merge_key: Option<String>,
    #[serde(default, rename = "list-type")]
    list_type: Option<String>,
    #[serde(default, rename = "list-map-keys")]
    list_map_keys: Option<Vec<String>>,
    #[serde(default, rename = "map-type")]
    map_type: Option<String>,
}

/// One group/version/kind.
#[derive(Debug, Deserialize)]
struct Gvk {
    group: String,
    kind: String,
    version: String,
}

/// Parses the embedded data. The file is part of the crate; a test proves it parses.
fn parse() -> BTreeMap<String, DefinitionExtensions> {
    match serde_json::from_str::<ExtensionFile>(DATA) {
        Ok(file) => file.definitions,
        Err(_) => BTreeMap::new(),
    }
}

/// Merges the upstream extensions into `defs`, in place.
pub(crate) fn merge_into(defs: &mut BTreeMap<String, Value>) {
    for (name, ext) in parse() {
        if let Some(Value::Object(schema)) = defs.get_mut(&name) {
            apply(schema, &ext);
        }
    }
}

/// Applies one definition's extensions to its schema.
fn apply(schema: &mut Map<String, Value>, ext: &DefinitionExtensions) {
    if !ext.gvk.is_empty() {
        let gvks = ext
            .gvk
            .iter()
            .map(|g| {
                let mut m = Map::new();
                m.insert("group".into(), Value::String(g.group.clone()));
                m.insert("kind".into(), Value::String(g.kind.clone()));
                m.insert("version".into(), Value::String(g.version.clone()));
                Value::Object(m)
            })
            .collect();
        schema.insert("x-kubernetes-group-version-kind".into(), Value::Array(gvks));
        // Upstream never requires metadata on a top-level kind; k8s-openapi does.
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|r| r != "metadata");
            if required.is_empty() {
                schema.remove("required");
            }
        }
    }
    if let Some(map_type) = &ext.map_type {
        schema.insert(
            "x-kubernetes-map-type".into(),
            Value::String(map_type.clone()),
        );
    }
    let Some(Value::Object(props)) = schema.get_mut("properties") else {
        return;
    };
    for (field, fx) in &ext.fields {
        if let Some(Value::Object(prop)) = props.get_mut(field) {
            apply_field(prop, fx);
        }
    }
}

/// Applies one field's extensions to its property schema.
fn apply_field(prop: &mut Map<String, Value>, fx: &FieldExtensions) {
    if let Some(keys) = &fx.list_map_keys {
        let keys = keys.iter().cloned().map(Value::String).collect();
        prop.insert("x-kubernetes-list-map-keys".into(), Value::Array(keys));
    }
    let strings = [
        ("x-kubernetes-list-type", &fx.list_type),
        ("x-kubernetes-map-type", &fx.map_type),
        ("x-kubernetes-patch-merge-key", &fx.patch_merge_key),
        ("x-kubernetes-patch-strategy", &fx.patch_strategy),
    ];
    for (key, value) in strings {
        if let Some(v) = value {
            prop.insert(key.into(), Value::String(v.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn embedded_data_parses() {
        let file: ExtensionFile = serde_json::from_str(DATA).expect("embedded data is valid");
        assert!(file.definitions.len() > 300);
        assert_eq!(parse().len(), file.definitions.len());
    }

    #[test]
    fn merges_field_and_definition_extensions() {
        let mut defs = BTreeMap::new();
        defs.insert(
            "io.k8s.api.core.v1.PodSpec".to_owned(),
            json!({"type": "object", "properties": {"containers": {"type": "array"}}}),
        );
        defs.insert(
            "io.k8s.api.core.v1.Pod".to_owned(),
            json!({"type": "object", "properties": {}, "required": ["metadata"]}),
        );
        merge_into(&mut defs);
        let containers = &defs["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], json!("name"));
        assert_eq!(containers["x-kubernetes-patch-strategy"], json!("merge"));
        assert_eq!(containers["x-kubernetes-list-type"], json!("map"));
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let pod = &defs["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );
        assert!(pod.get("required").is_none());
    }

    #[test]
    fn every_extension_field_of_a_served_definition_exists() {
        let defs = crate::Definitions::builtin();
        let mut missing = Vec::new();
        for (name, ext) in parse() {
            let Some(schema) = defs.get(&name) else {
                continue;
            };
            for field in ext.fields.keys() {
                if schema["properties"].get(field).is_none() {
                    missing.push(format!("{name}.{field}"));
                }
            }
        }
        assert!(missing.is_empty(), "{missing:?}");
    }
}
