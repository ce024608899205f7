//! OpenAPI v3: the discovery index (`/openapi/v3`) and one document per group-version.
//!
//! The shapes follow upstream kube-openapi's spec3 output, which kubectl reads for `explain`,
//! for `apply`'s strategic-merge-patch metadata, and to find out (by the `fieldValidation`
//! parameter of the PATCH operation carrying the kind's `x-kubernetes-group-version-kind`)
//! whether the server validates fields.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::builtin::REF_PREFIX;
use crate::definitions::Definitions;
use crate::operations::{self, Body, Operation, PathItem, Produces};
use crate::params::QueryParam;
use crate::refs::{self, collect_refs};
use crate::resource::ResourceDoc;

/// `info.version` of the v3 documents, as upstream writes it.
const V3_VERSION: &str = "unversioned";

/// The discovery index: `{"paths": {"<path>": {"serverRelativeURL": "/openapi/v3/<path>?hash=<hash>"}}}`.
pub fn v3_index(docs: &[(String, String)]) -> Value {
    let sorted: BTreeMap<&str, &str> = docs.iter().map(|(p, h)| (p.as_str(), h.as_str())).collect();
    let mut paths = Map::new();
    for (path, hash) in sorted {
        paths.insert(
            path.to_owned(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json!({ "paths": paths })
}

/// The index path of a group-version's document: `api/v1` or `apis/<group>/<version>`.
pub fn v3_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The OpenAPI v3 document of one group-version. `extra` carries definitions that are not
/// built in (CRD schemas) by name; they take precedence over built-ins of the same name.
pub fn v3_document(
    defs: &Definitions,
    extra: &BTreeMap<String, Value>,
    group: &str,
    version: &str,
    resources: &[ResourceDoc],
) -> Value {
    let served = resources
        .iter()
        .filter(|r| r.group == group && r.version == version);
    let items: Vec<PathItem> = served
        .flat_map(|r| operations::resource_paths(r, &crate::docs::origin(defs, extra, r)))
        .collect();
    let mut paths = Map::new();
    for item in &items {
        paths.insert(item.path.clone(), path_item(item));
    }
    let mut roots = BTreeSet::new();
    collect_refs(&Value::Object(paths.clone()), &mut roots);
    let mut schemas = Map::new();
    for (name, schema) in refs::closure(roots, extra, defs.schemas()) {
        schemas.insert(name, schema.clone());
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": V3_VERSION},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header"
                }
            }
        },
        "security": [{"BearerToken": []}]
    })
}

/// One path item: its operations and the parameters they share.
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
                "name": p.name,
                "in": "path",
                "description": p.description,
                "required": true,
                "schema": {"type": "string", "uniqueItems": true}
            })
        })
        .collect();
    params.extend(item.shared_query.iter().map(|p| query_param(p)));
    out.insert("parameters".into(), Value::Array(params));
    Value::Object(out)
}

fn query_param(p: &QueryParam) -> Value {
    json!({
        "name": p.name,
        "in": "query",
        "description": p.description,
        "schema": {"type": p.ty.as_str(), "uniqueItems": true}
    })
}

fn schema_ref(definition: &str) -> Value {
    json!({"$ref": format!("{REF_PREFIX}{definition}")})
}

/// Media types a response is offered in.
pub(crate) fn media_types(produces: Produces, protobuf: bool) -> Vec<&'static str> {
    let mut types = Vec::new();
    if produces != Produces::Watch {
        types.push("application/json");
        types.push("application/yaml");
        if protobuf {
            types.push("application/vnd.kubernetes.protobuf");
        }
    }
    if produces != Produces::Object {
        types.push("application/json;stream=watch");
        if protobuf {
            types.push("application/vnd.kubernetes.protobuf;stream=watch");
        }
    }
    types
}

/// Content types of a patch request body.
pub(crate) fn patch_types(strategic: bool) -> Vec<&'static str> {
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if strategic {
        types.push("application/strategic-merge-patch+json");
    }
    types
}

/// The description upstream gives each status code.
pub(crate) fn code_description(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        401 => "Unauthorized",
        _ => "",
    }
}

fn operation(op: &Operation) -> Value {
    let mut out = Map::new();
    out.insert("tags".into(), json!([op.tag]));
    out.insert("description".into(), json!(op.description));
    out.insert("operationId".into(), json!(op.operation_id));
    let params: Vec<Value> = op.query.iter().map(|p| query_param(p)).collect();
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    if let Some(body) = &op.body {
        out.insert("requestBody".into(), request_body(body));
    }
    let mut responses = Map::new();
    for code in op.codes {
        let mut content = Map::new();
        for media in media_types(op.produces, op.protobuf) {
            content.insert(
                media.to_owned(),
                json!({"schema": schema_ref(&op.definition)}),
            );
        }
        responses.insert(
            code.to_string(),
            json!({"description": code_description(*code), "content": content}),
        );
    }
    responses.insert("401".into(), json!({"description": code_description(401)}));
    out.insert("responses".into(), Value::Object(responses));
    out.insert("x-kubernetes-action".into(), json!(op.action));
    out.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": op.gvk.group, "version": op.gvk.version, "kind": op.gvk.kind}),
    );
    Value::Object(out)
}

fn request_body(body: &Body) -> Value {
    match body {
        Body::Object(def) => {
            json!({"content": {"*/*": {"schema": schema_ref(def)}}, "required": true})
        }
        Body::Delete => {
            json!({"content": {"*/*": {"schema": schema_ref(operations::DELETE_OPTIONS)}}})
        }
        Body::Patch { strategic } => {
            let mut content = Map::new();
            for media in patch_types(*strategic) {
                content.insert(
                    media.to_owned(),
                    json!({"schema": schema_ref(operations::PATCH)}),
                );
            }
            json!({"content": content, "required": true})
        }
    }
}
