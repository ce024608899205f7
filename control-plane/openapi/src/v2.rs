//! Swagger 2.0: one document for everything served (`/openapi/v2`).
//!
//! Definitions are the v3 ones rewritten to `#/definitions/` references, with upstream's v2
//! shape of a `$ref` beside its `description` (what kubectl's v2 parser expects).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::definitions::Definitions;
use crate::operations::{self, Body, Operation, PathItem};
use crate::params::QueryParam;
use crate::refs::{self, collect_refs, to_v2_schema};
use crate::resource::ResourceDoc;
use crate::v3::{code_description, media_types, patch_types};

/// `info.version` of the v2 document.
const V2_VERSION: &str = "v1.37.0";

/// The Swagger 2.0 document for all `resources`, with every definition they reference and
/// all of `extra`.
pub fn v2_document(
    defs: &Definitions,
    extra: &BTreeMap<String, Value>,
    resources: &[ResourceDoc],
) -> Value {
    let mut paths = Map::new();
    for res in resources {
        let origin = crate::docs::origin(defs, extra, res);
        for item in operations::resource_paths(res, &origin) {
            paths.insert(item.path.clone(), path_item(&item));
        }
    }
    let mut roots: BTreeSet<String> = extra.keys().cloned().collect();
    collect_refs(&Value::Object(paths.clone()), &mut roots);
    let mut definitions = Map::new();
    for (name, schema) in refs::closure(roots, extra, defs.schemas()) {
        definitions.insert(name, to_v2_schema(schema));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": V2_VERSION},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header"
            }
        },
        "security": [{"BearerToken": []}]
    })
}

fn definition_ref(definition: &str) -> Value {
    json!({"$ref": format!("#/definitions/{definition}")})
}

fn query_param(p: &QueryParam) -> Value {
    json!({
        "uniqueItems": true,
        "type": p.ty.as_str(),
        "description": p.description,
        "name": p.name,
        "in": "query"
    })
}

fn path_item(item: &PathItem) -> Value {
    let mut out = Map::new();
    for op in &item.operations {
        out.insert(op.method.as_str().to_owned(), operation(op));
    }
    let mut params: Vec<Value> = item
        .params
        .iter()
        .map(|p| {
            json!({
                "uniqueItems": true,
                "type": "string",
                "description": p.description,
                "name": p.name,
                "in": "path",
                "required": true
            })
        })
        .collect();
    params.extend(item.shared_query.iter().map(|p| query_param(p)));
    out.insert("parameters".into(), Value::Array(params));
    Value::Object(out)
}

fn operation(op: &Operation) -> Value {
    let mut out = Map::new();
    out.insert("description".into(), json!(op.description));
    let consumes = match &op.body {
        Some(Body::Patch { strategic }) => patch_types(*strategic),
        _ => vec!["*/*"],
    };
    out.insert("consumes".into(), json!(consumes));
    out.insert(
        "produces".into(),
        json!(media_types(op.produces, op.protobuf)),
    );
    out.insert("schemes".into(), json!(["https"]));
    out.insert("tags".into(), json!([op.tag]));
    out.insert("operationId".into(), json!(op.operation_id));
    let mut params = Vec::new();
    if let Some(body) = &op.body {
        let (schema, required) = match body {
            Body::Object(def) => (definition_ref(def), true),
            Body::Patch { .. } => (definition_ref(operations::PATCH), true),
            Body::Delete => (definition_ref(operations::DELETE_OPTIONS), false),
        };
        params.push(json!({"name": "body", "in": "body", "required": required, "schema": schema}));
    }
    params.extend(op.query.iter().map(|p| query_param(p)));
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    let mut responses = Map::new();
    for code in op.codes {
        responses.insert(
            code.to_string(),
            json!({"description": code_description(*code), "schema": definition_ref(&op.definition)}),
        );
    }
    responses.insert("401".into(), json!({"description": code_description(401)}));
    out.insert("responses".into(), Value::Object(responses));
    out.insert("x-kubernetes-action".into(), json!(op.action));
    out.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": op.gvk.group, "kind": op.gvk.kind, "version": op.gvk.version}),
    );
    Value::Object(out)
}
