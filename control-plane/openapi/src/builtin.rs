//! Generation of the built-in definitions from k8s-openapi's schemars schemas.
//!
//! Every kind of the table in [`crate::kinds`] (and its list kind, which k8s-openapi has no
//! schema for and which is therefore written here), the subresource bodies and the `meta.k8s.io`
//! kinds land in one map keyed by the upstream definition name, with
//! references written as `#/components/schemas/<name>` and `$ref` siblings moved into
//! `allOf: [{$ref}]`, the shape upstream OpenAPI v3 uses.

use std::collections::BTreeMap;

use k8s_openapi::api::{authentication, autoscaling, core, policy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::ListableResource;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Value};

use crate::kinds::builtin_kinds;

/// Prefix of every reference inside the generated definitions.
pub(crate) const REF_PREFIX: &str = "#/components/schemas/";

/// Name of the list-metadata definition.
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// Collects schemas and the (item, list) pairs whose list schemas are written by hand.
pub(crate) struct Collector {
    generator: SchemaGenerator,
    lists: Vec<(String, String, String)>,
}

impl Collector {
    /// Registers the schema of `T`.
    pub(crate) fn kind<T: JsonSchema>(&mut self) {
        self.generator.subschema_for::<T>();
    }

    /// Registers the schema of `T` and of its list.
    pub(crate) fn listable<T: JsonSchema + ListableResource>(&mut self) {
        self.generator.subschema_for::<T>();
        let item = T::schema_name().into_owned();
        let prefix = item.rsplit_once('.').map_or("", |(p, _)| p);
        let list = format!("{prefix}.{}", T::LIST_KIND);
        self.lists.push((item, list, T::KIND.to_owned()));
    }
}

/// Generates all built-in definitions (without the `x-kubernetes-*` extensions).
pub(crate) fn generate() -> BTreeMap<String, Value> {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.definitions_path = "/components/schemas".into();
        s.meta_schema = None;
    });
    let mut c = Collector {
        generator: settings.into_generator(),
        lists: Vec::new(),
    };
    for kind in builtin_kinds() {
        (kind.register)(&mut c);
    }
    // Bodies of subresources that are not their kind's own (`Subresource::body`).
    c.kind::<autoscaling::v1::Scale>();
    c.kind::<core::v1::Binding>();
    c.kind::<policy::v1::Eviction>();
    c.kind::<authentication::v1::TokenRequest>();
    // meta.k8s.io
    c.kind::<meta::Status>();
    c.kind::<meta::DeleteOptions>();
    c.kind::<meta::APIResourceList>();
    c.kind::<meta::APIGroupList>();
    c.kind::<meta::APIVersions>();
    c.kind::<meta::Patch>();
    c.kind::<meta::WatchEvent<core::v1::Pod>>();
    c.kind::<meta::ListMeta>();

    let mut defs: BTreeMap<String, Value> =
        c.generator.take_definitions(true).into_iter().collect();
    for (item, list, kind) in &c.lists {
        defs.insert(list.clone(), list_schema(item, kind));
    }
    for (name, schema) in table_schemas() {
        defs.insert(name.to_owned(), schema);
    }
    for name in UNTYPED {
        if let Some(Value::Object(schema)) = defs.get_mut(*name) {
            schema.retain(|key, _| key == "description");
        }
    }
    defs
}

/// Definitions upstream leaves untyped (any JSON value); k8s-openapi gives them a `type` or
/// a `oneOf`, which Swagger 2.0 cannot carry.
const UNTYPED: &[&str] = &[
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
];

/// The schema of `<Kind>List`, in upstream's shape.
fn list_schema(item: &str, kind: &str) -> Value {
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string"
            },
            "items": {
                "description": format!("List of {kind} objects."),
                "type": "array",
                "items": {"allOf": [{"$ref": format!("{REF_PREFIX}{item}")}], "default": {}}
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents.",
                "type": "string"
            },
            "metadata": {
                "allOf": [{"$ref": format!("{REF_PREFIX}{LIST_META}")}],
                "default": {},
                "description": "Standard list metadata."
            }
        },
        "required": ["items"]
    })
}

/// `meta.k8s.io/v1` Table and its parts, which k8s-openapi does not model.
fn table_schemas() -> [(&'static str, Value); 4] {
    let meta = "io.k8s.apimachinery.pkg.apis.meta.v1";
    [
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.Table",
            json!({
                "description": "Table is a tabular representation of a set of API resources.",
                "type": "object",
                "properties": {
                    "apiVersion": {"description": "APIVersion of this representation.", "type": "string"},
                    "columnDefinitions": {
                        "description": "Columns describes each column in the returned items array.",
                        "type": "array",
                        "items": {"$ref": format!("{REF_PREFIX}{meta}.TableColumnDefinition")},
                        "x-kubernetes-list-type": "atomic"
                    },
                    "kind": {"description": "Kind of this representation.", "type": "string"},
                    "metadata": {
                        "allOf": [{"$ref": format!("{REF_PREFIX}{LIST_META}")}],
                        "description": "Standard list metadata."
                    },
                    "rows": {
                        "description": "Rows is the list of items in the table.",
                        "type": "array",
                        "items": {"$ref": format!("{REF_PREFIX}{meta}.TableRow")},
                        "x-kubernetes-list-type": "atomic"
                    }
                },
                "required": ["columnDefinitions", "rows"],
                "x-kubernetes-group-version-kind": [
                    {"group": "meta.k8s.io", "kind": "Table", "version": "v1"}
                ]
            }),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.TableColumnDefinition",
            json!({
                "description": "TableColumnDefinition describes one column of a Table.",
                "type": "object",
                "properties": {
                    "description": {"description": "Human readable description of the column.", "type": "string"},
                    "format": {"description": "Optional formatting hint for the column's type.", "type": "string"},
                    "name": {"description": "Human readable name of the column.", "type": "string"},
                    "priority": {"description": "Importance of the column; 0 is most important.", "type": "integer", "format": "int32"},
                    "type": {"description": "OpenAPI type of the column's cells.", "type": "string"}
                },
                "required": ["name", "type", "format", "description", "priority"]
            }),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.TableRow",
            json!({
                "description": "TableRow is one row of a Table.",
                "type": "object",
                "properties": {
                    "cells": {
                        "description": "Cells of the row, one per column definition.",
                        "type": "array",
                        "items": {"type": "object"},
                        "x-kubernetes-list-type": "atomic"
                    },
                    "conditions": {
                        "description": "Conditions describing the state of the row.",
                        "type": "array",
                        "items": {"$ref": format!("{REF_PREFIX}{meta}.TableRowCondition")},
                        "x-kubernetes-list-type": "atomic"
                    },
                    "object": {
                        "allOf": [{"$ref": format!("{REF_PREFIX}io.k8s.apimachinery.pkg.runtime.RawExtension")}],
                        "description": "The full object or its metadata, as asked by includeObject."
                    }
                },
                "required": ["cells"]
            }),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.TableRowCondition",
            json!({
                "description": "TableRowCondition describes a condition of a row.",
                "type": "object",
                "properties": {
                    "message": {"description": "Human readable details.", "type": "string"},
                    "reason": {"description": "Machine readable reason.", "type": "string"},
                    "status": {"description": "True, False or Unknown.", "type": "string"},
                    "type": {"description": "Type of the condition.", "type": "string"}
                },
                "required": ["type", "status"]
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_kinds_lists_and_dependencies() {
        let defs = generate();
        for name in [
            "io.k8s.api.core.v1.Pod",
            "io.k8s.api.core.v1.PodList",
            "io.k8s.api.core.v1.Container",
            "io.k8s.api.apps.v1.DeploymentList",
            "io.k8s.api.autoscaling.v1.Scale",
            "io.k8s.api.resource.v1.ResourceSliceList",
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionList",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "io.k8s.apimachinery.pkg.apis.meta.v1.Table",
            "io.k8s.apimachinery.pkg.runtime.RawExtension",
        ] {
            assert!(defs.contains_key(name), "missing {name}");
        }
    }

    #[test]
    fn struct_fields_use_all_of_with_description_beside() {
        let defs = generate();
        let spec = &defs["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert_eq!(
            spec["allOf"][0]["$ref"],
            json!("#/components/schemas/io.k8s.api.core.v1.PodSpec")
        );
        assert!(spec["description"].is_string());
        assert!(spec.get("$ref").is_none());
    }

    #[test]
    fn any_json_definitions_are_untyped_like_upstream() {
        let defs = generate();
        for name in UNTYPED {
            let schema = defs[*name]
                .as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>());
            assert_eq!(schema, Some(vec!["description".to_owned()]), "{name}");
        }
    }

    #[test]
    fn list_schema_refers_to_its_item() {
        let defs = generate();
        let items = &defs["io.k8s.api.core.v1.ConfigMapList"]["properties"]["items"];
        assert_eq!(
            items["items"]["allOf"][0]["$ref"],
            json!("#/components/schemas/io.k8s.api.core.v1.ConfigMap")
        );
    }
}
