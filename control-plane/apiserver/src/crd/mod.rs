//! CustomResourceDefinitions: validation of CRD objects, and turning a CRD into the resources it
//! serves (one [`ResourceDef`] per served version) with a schema-driven strategy. The
//! registry then serves custom objects through the same generic path as built-in kinds.

pub mod cel;
pub mod schema;
mod strategy;

use std::collections::BTreeMap;
use std::sync::Arc;

use fabrik_openapi::Definitions;
use serde_json::{json, Value};

use crate::resources::{ResourceDef, ScalePaths, SchemaRef, Subresource};

pub use strategy::{CrdStrategy, CustomStrategy};

/// The finalizer that makes deleting a CRD delete its objects first.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Why a CRD cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// A required part is missing or malformed (the CRD strategy refuses these on write).
    #[error("invalid CustomResourceDefinition: {0}")]
    Invalid(String),
}

/// The OpenAPI definition name upstream uses for a custom kind: reversed group, version, kind.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The schema used to prune unknown fields: the CRD's, with the fields every object has.
fn pruning_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    if !s.is_object() {
        s = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    if s.get("properties").is_none()
        && s["x-kubernetes-preserve-unknown-fields"].as_bool() != Some(true)
    {
        s["properties"] = json!({});
    }
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("apiVersion".into(), json!({"type": "string"}));
        props.insert("kind".into(), json!({"type": "string"}));
        props.insert(
            "metadata".into(),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    s
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The resources a CRD serves, one per served version.
pub fn resource_defs(crd: &Value) -> Result<Vec<ResourceDef>, CrdError> {
    let spec = &crd["spec"];
    let group = spec["group"]
        .as_str()
        .filter(|g| !g.is_empty())
        .ok_or_else(|| CrdError::Invalid("spec.group is required".into()))?;
    let names = &spec["names"];
    let plural = names["plural"]
        .as_str()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| CrdError::Invalid("spec.names.plural is required".into()))?;
    let kind = names["kind"]
        .as_str()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| CrdError::Invalid("spec.names.kind is required".into()))?;
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let versions = spec["versions"]
        .as_array()
        .ok_or_else(|| CrdError::Invalid("spec.versions is required".into()))?;
    let storage = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .ok_or_else(|| CrdError::Invalid("one version must be the storage version".into()))?;
    let conversion = (spec["conversion"]["strategy"].as_str() == Some("Webhook"))
        .then(|| spec["conversion"]["webhook"].clone())
        .filter(Value::is_object);
    let mut defs = Vec::new();
    for v in versions
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
    {
        let version = v["name"]
            .as_str()
            .ok_or_else(|| CrdError::Invalid("a version has no name".into()))?;
        let schema = v["schema"]["openAPIV3Schema"].clone();
        let schema = if schema.is_object() {
            schema
        } else {
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        };
        let definition = definition_name(group, version, kind);
        let mut map = BTreeMap::new();
        let mut published = pruning_schema(&schema);
        published["x-kubernetes-group-version-kind"] =
            json!([{"group": group, "version": version, "kind": kind}]);
        map.insert(definition.clone(), published);
        let mut subresources = Vec::new();
        let subs = &v["subresources"];
        if subs.get("status").is_some_and(|s| s.is_object()) {
            subresources.push(Subresource::Status);
        }
        let scale = subs
            .get("scale")
            .filter(|s| s.is_object())
            .map(|s| ScalePaths {
                spec_replicas: s["specReplicasPath"]
                    .as_str()
                    .unwrap_or(".spec.replicas")
                    .to_string(),
                status_replicas: s["statusReplicasPath"]
                    .as_str()
                    .unwrap_or(".status.replicas")
                    .to_string(),
                label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
            });
        if scale.is_some() {
            subresources.push(Subresource::Scale);
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let selectable = v["selectableFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["jsonPath"].as_str())
            .map(|p| p.trim_start_matches('.').to_string())
            .collect();
        defs.push(ResourceDef {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: singular.clone(),
            namespaced,
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            subresources,
            definition,
            strategy: Arc::new(CustomStrategy::new(schema, &columns, selectable)),
            type_check: None,
            schemas: SchemaRef::Custom(Arc::new(Definitions::from_map(map))),
            scale,
            storage_version: (version != storage).then(|| storage.to_string()),
            custom: true,
            create_only: false,
            conversion: conversion
                .clone()
                .map(crate::resources::Conversion::Webhook),
        });
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crd_becomes_one_resource_per_served_version() {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
        "versions": [
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}},
             "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}}},
            {"name": "v1beta1", "served": true, "storage": false},
            {"name": "v0", "served": false, "storage": false}
        ]}});
        let defs = resource_defs(&crd).expect("defs");
        assert_eq!(defs.len(), 2);
        assert_eq!(defs[0].definition, "com.example.v1.Widget");
        assert!(defs[0].has(Subresource::Scale) && defs[0].has(Subresource::Status));
        assert_eq!(
            defs[0].scale.as_ref().map(|s| s.spec_replicas.as_str()),
            Some(".spec.size")
        );
        assert_eq!(defs[1].storage_version.as_deref(), Some("v1"));
        assert_eq!(defs[0].key_prefix(Some("a")), defs[1].key_prefix(Some("a")));
        assert!(resource_defs(&json!({"spec": {}})).is_err());
    }
}
