//! Tests of the v3 and v2 documents built from the built-in resources.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde_json::{json, Value};

use crate::refs::collect_refs;
use crate::{builtin_resources, v2_document, v3_document, v3_index, Definitions, ResourceDoc};

fn all_refs(value: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("$ref", Value::String(r)) => out.push(r.clone()),
                        _ => walk(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut out);
    out
}

fn group_versions() -> BTreeSet<(String, String)> {
    builtin_resources()
        .into_iter()
        .map(|r| (r.group, r.version))
        .collect()
}

fn apps_v1() -> Value {
    v3_document(
        Definitions::builtin(),
        &BTreeMap::new(),
        "apps",
        "v1",
        &builtin_resources(),
    )
}

#[test]
fn index_lists_paths_with_hashes() {
    let index = v3_index(&[
        ("apis/apps/v1".into(), "AB12".into()),
        ("api/v1".into(), "CD34".into()),
    ]);
    assert_eq!(
        index,
        json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=CD34"},
            "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=AB12"}
        }})
    );
    assert_eq!(crate::v3_path("", "v1"), "api/v1");
    assert_eq!(crate::v3_path("batch", "v1"), "apis/batch/v1");
}

#[test]
fn v3_documents_have_no_dangling_refs() {
    for (group, version) in group_versions() {
        let doc = v3_document(
            Definitions::builtin(),
            &BTreeMap::new(),
            &group,
            &version,
            &builtin_resources(),
        );
        let schemas = &doc["components"]["schemas"];
        for r in all_refs(&doc) {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or("<bad prefix>");
            assert!(
                schemas.get(name).is_some(),
                "{group}/{version}: dangling {r}"
            );
        }
        assert_eq!(doc["openapi"], json!("3.0.0"));
    }
}

#[test]
fn v3_document_holds_referenced_definitions_only() {
    let doc = apps_v1();
    let schemas = &doc["components"]["schemas"];
    assert!(schemas.get("io.k8s.api.apps.v1.Deployment").is_some());
    assert!(schemas.get("io.k8s.api.autoscaling.v1.Scale").is_some());
    assert!(schemas
        .get("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        .is_some());
    assert!(schemas.get("io.k8s.api.core.v1.ConfigMap").is_none());
    assert!(schemas.get("io.k8s.api.batch.v1.Job").is_none());
    assert!(doc["paths"]
        .get("/api/v1/namespaces/{namespace}/pods")
        .is_none());
}

#[test]
fn patch_operation_advertises_field_validation_for_its_gvk() {
    let doc = apps_v1();
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    assert_eq!(patch["x-kubernetes-action"], json!("patch"));
    assert_eq!(
        patch["operationId"],
        json!("patchAppsV1NamespacedDeployment")
    );
    let names: Vec<_> = patch["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["dryRun", "fieldManager", "fieldValidation", "force"]
    );
    let body = &patch["requestBody"]["content"];
    assert!(body.get("application/strategic-merge-patch+json").is_some());
    assert!(body.get("application/apply-patch+yaml").is_some());
}

#[test]
fn v3_schemas_carry_extensions_kubectl_reads() {
    let doc = v3_document(
        Definitions::builtin(),
        &BTreeMap::new(),
        "",
        "v1",
        &builtin_resources(),
    );
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], json!("name"));
    let list = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    let content = &list["responses"]["200"]["content"];
    assert_eq!(
        content["application/json;stream=watch"]["schema"]["$ref"],
        json!("#/components/schemas/io.k8s.api.core.v1.PodList")
    );
    let eviction = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
    assert_eq!(
        eviction["x-kubernetes-group-version-kind"]["group"],
        json!("policy")
    );
}

fn widget() -> (ResourceDoc, BTreeMap<String, Value>) {
    let res = ResourceDoc {
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
        namespaced: true,
        verbs: vec!["get".into(), "list".into(), "patch".into()],
        subresources: vec![],
        definition: "com.example.v1.Widget".into(),
        list_definition: "com.example.v1.WidgetList".into(),
    };
    let mut extra = BTreeMap::new();
    extra.insert(
        "com.example.v1.Widget".to_owned(),
        json!({"type": "object", "properties": {
            "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Widget", "version": "v1"}]}),
    );
    extra.insert(
        "com.example.v1.WidgetList".to_owned(),
        json!({"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/com.example.v1.Widget"}}}}),
    );
    (res, extra)
}

#[test]
fn extra_definitions_serve_custom_resources() {
    let (res, extra) = widget();
    let doc = v3_document(Definitions::builtin(), &extra, "example.com", "v1", &[res]);
    let schemas = &doc["components"]["schemas"];
    assert!(schemas.get("com.example.v1.Widget").is_some());
    assert!(schemas
        .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        .is_some());
    let patch =
        &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(
        patch["operationId"],
        json!("patchExampleComV1NamespacedWidget")
    );
    let body = &patch["requestBody"]["content"];
    assert!(body.get("application/strategic-merge-patch+json").is_none());
    assert!(body.get("application/merge-patch+json").is_some());
}

#[test]
fn v2_document_is_swagger_with_definition_refs() {
    let (widget, extra) = widget();
    let mut resources = builtin_resources();
    resources.push(widget);
    let doc = v2_document(Definitions::builtin(), &extra, &resources);
    assert_eq!(doc["swagger"], json!("2.0"));
    let defs = &doc["definitions"];
    for r in all_refs(&doc) {
        let name = r.strip_prefix("#/definitions/").unwrap_or("<bad prefix>");
        assert!(defs.get(name).is_some(), "dangling {r}");
    }
    let spec = &defs["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
    assert_eq!(
        spec["$ref"],
        json!("#/definitions/io.k8s.api.core.v1.PodSpec")
    );
    assert!(spec["description"].is_string());
    assert!(defs.get("com.example.v1.Widget").is_some());
    let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    assert_eq!(patch["parameters"][0]["in"], json!("body"));
    let text = serde_json::to_string(&doc).unwrap_or_default();
    assert!(!text.contains("\"allOf\":[{\"$ref\""));
    assert!(!text.contains("#/components/"));
}

#[test]
fn v3_generation_is_fast_enough() {
    let defs = Definitions::builtin();
    let resources = builtin_resources();
    let extra = BTreeMap::new();
    let start = Instant::now();
    let gvs = group_versions();
    for (group, version) in &gvs {
        let doc = v3_document(defs, &extra, group, version, &resources);
        let bytes = serde_json::to_vec(&doc).unwrap_or_default();
        assert!(!bytes.is_empty());
    }
    let per_doc = start.elapsed() / u32::try_from(gvs.len()).unwrap_or(1);
    // Generous bound for unoptimised test builds on a loaded machine.
    assert!(per_doc.as_millis() < 1000, "{per_doc:?} per document");
    let mut refs = BTreeSet::new();
    collect_refs(&apps_v1(), &mut refs);
    assert!(!refs.is_empty());
}
