//! Server-side apply against the real built-in schemas and a CRD's inline schema.

use fabrik_machinery::apply::{
    apply, field_set, managed_fields_of, update_managed_fields, ApplyError, FieldSet, Path,
    WriteContext,
};
use serde_json::{json, Value};

use crate::{Definitions, InlineSchema};

const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";
const NOW: &str = "2024-05-01T10:00:00Z";

fn ctx() -> WriteContext<'static> {
    WriteContext {
        schema: Definitions::builtin(),
        definition: DEPLOYMENT,
        api_version: "apps/v1",
        subresource: None,
        now: NOW,
    }
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"},
                     "finalizers": ["example.com/keep"]},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"gpu": "h100"},
                    "containers": [{
                        "name": "nginx", "image": "nginx:1.25",
                        "args": ["--port", "80"],
                        "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                        "env": [{"name": "MODE", "value": "prod"}],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}
                    }]
                }
            }
        }
    })
}

#[test]
fn deployment_field_set_round_trips_through_fields_v1() {
    let set = field_set(&deployment(), Definitions::builtin(), DEPLOYMENT);
    let Ok(set) = set else { panic!("{set:?}") };
    let doc = set.to_fields_v1();
    let container =
        &doc["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"];
    assert_eq!(container["."], json!({}));
    assert_eq!(container["f:args"], json!({}), "args is atomic");
    assert!(container["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"].is_object());
    assert!(container["f:ports"]["k:{\"containerPort\":53,\"protocol\":\"UDP\"}"].is_object());
    assert!(container["f:env"]["k:{\"name\":\"MODE\"}"]["f:value"].is_object());
    assert_eq!(
        container["f:resources"]["f:limits"],
        json!({"f:nvidia.com/gpu": {}})
    );
    let spec = &doc["f:spec"];
    assert_eq!(spec["f:selector"], json!({}), "LabelSelector is atomic");
    assert_eq!(
        spec["f:template"]["f:spec"]["f:nodeSelector"],
        json!({}),
        "atomic map"
    );
    assert_eq!(
        spec["f:strategy"]["f:rollingUpdate"],
        json!({"f:maxSurge": {}})
    );
    assert_eq!(
        doc["f:metadata"]["f:finalizers"],
        json!({"v:\"example.com/keep\"": {}})
    );
    let text = serde_json::to_string(&doc).unwrap_or_default();
    let parsed: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(FieldSet::from_fields_v1(&parsed).as_ref(), Ok(&set));
}

#[test]
fn kubectl_flow_on_a_deployment() {
    let obj = apply(None, &deployment(), "kubectl", false, &ctx());
    let Ok(obj) = obj else { panic!("{obj:?}") };
    // Another client scales it with an update; kubectl re-applying 2 replicas conflicts.
    let mut scaled = obj.clone();
    scaled["spec"]["replicas"] = json!(4);
    let scaled = update_managed_fields(Some(&obj), &scaled, "kubectl-client-side-apply", &ctx());
    let err = apply(Some(&scaled), &deployment(), "kubectl", false, &ctx()).err();
    assert_eq!(
        err.as_ref().map(ToString::to_string).as_deref(),
        Some(
            r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
        )
    );
    assert!(matches!(err, Some(ApplyError::Conflicts(_))));
    let forced = apply(Some(&scaled), &deployment(), "kubectl", true, &ctx());
    let Ok(forced) = forced else {
        panic!("{forced:?}")
    };
    assert_eq!(forced["spec"]["replicas"], 2);
    let entries = managed_fields_of(&forced).unwrap_or_default();
    assert_eq!(entries.len(), 1);
    // Changing the image of the container (merged by name) and dropping the UDP port.
    let mut next = deployment();
    next["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    next["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    let out = apply(Some(&forced), &next, "kubectl", false, &ctx());
    let Ok(out) = out else { panic!("{out:?}") };
    let c = &out["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.26");
    assert_eq!(c["ports"], json!([{"containerPort": 80}]));
}

#[test]
fn crd_inline_schema_apply() {
    let schema = InlineSchema::new(
        "widgets.example.com",
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "required": ["port"], "properties": {
                              "port": {"type": "integer"},
                              "protocol": {"type": "string", "default": "TCP"},
                              "name": {"type": "string"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                         "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                             "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}
        }}),
    );
    let root = schema.root_definition();
    let ctx = WriteContext {
        schema: &schema,
        definition: &root,
        api_version: "example.com/v1",
        subresource: None,
        now: NOW,
    };
    let widget = |spec: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "labels": {"a": "1"}}, "spec": spec})
    };
    let a = widget(
        json!({"ports": [{"port": 80}], "tags": ["x"], "args": ["1"],
                          "selector": {"k": "v"}, "extra": {"free": {"form": 1}}}),
    );
    let obj = apply(None, &a, "a", false, &ctx);
    let Ok(obj) = obj else { panic!("{obj:?}") };
    let fields = &obj["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        fields["f:spec"]["f:ports"],
        json!({"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}})
    );
    assert_eq!(
        fields["f:spec"]["f:extra"],
        json!({"f:free": {".": {}, "f:form": {}}}),
        "untyped (preserve-unknown-fields) keys are members of their own, as upstream"
    );
    assert_eq!(fields["f:metadata"], json!({"f:labels": {"f:a": {}}}));

    let b = widget(json!({"ports": [{"port": 81}], "tags": ["y"], "args": ["1"]}));
    let obj = apply(Some(&obj), &b, "b", false, &ctx);
    let Ok(obj) = obj else { panic!("{obj:?}") };
    assert_eq!(obj["spec"]["ports"], json!([{"port": 80}, {"port": 81}]));
    assert_eq!(obj["spec"]["tags"], json!(["x", "y"]));
    let args = Path::fields(&["spec", "args"]);
    let owners: Vec<String> = managed_fields_of(&obj)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.fields.contains(&args))
        .map(|e| e.manager)
        .collect();
    assert_eq!(owners, ["a", "b"], "the same atomic value is shared");

    let c = widget(json!({"selector": {"k": "w"}}));
    let err = apply(Some(&obj), &c, "c", false, &ctx).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some(r#"Apply failed with 1 conflict: conflict with "a": .spec.selector"#)
    );
    let missing_key = widget(json!({"ports": [{"name": "x"}]}));
    assert!(matches!(
        apply(Some(&obj), &missing_key, "c", false, &ctx),
        Err(ApplyError::InvalidShape(_))
    ));
}
