//! Tests of strategic merge patch against a hand-written schema of a few core types.

use serde_json::{json, Value};

use super::super::{FieldPatchInfo, PatchError, PatchSchema};
use super::strategic_merge_patch;

/// PodSpec.containers merge on name, Container.env on name, Container.ports on containerPort,
/// Container.args atomic, ObjectMeta.finalizers a primitive merge list, PodSpec.volumes
/// merge+retainKeys, DeploymentSpec.strategy retainKeys.
struct MockSchema;

fn info(strategies: &[&str], key: Option<&str>, def: Option<&str>, list: bool) -> FieldPatchInfo {
    FieldPatchInfo {
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        merge_key: key.map(str::to_string),
        definition: def.map(str::to_string),
        is_list: list,
        is_map: false,
        ..FieldPatchInfo::default()
    }
}

fn map_of(def: Option<&str>) -> FieldPatchInfo {
    FieldPatchInfo {
        definition: def.map(str::to_string),
        is_map: true,
        ..FieldPatchInfo::default()
    }
}

impl PatchSchema for MockSchema {
    fn field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        Some(match (definition, field) {
            ("Pod", "metadata") | ("Deployment", "metadata") => {
                info(&[], None, Some("ObjectMeta"), false)
            }
            ("Pod", "spec") => info(&[], None, Some("PodSpec"), false),
            ("Pod", "status") => info(&[], None, None, false),
            ("ObjectMeta", "finalizers") => info(&["merge"], None, None, true),
            ("ObjectMeta", "labels") | ("ObjectMeta", "annotations") => map_of(None),
            ("ObjectMeta", "name") => info(&[], None, None, false),
            ("PodSpec", "containers") => info(&["merge"], Some("name"), Some("Container"), true),
            ("PodSpec", "volumes") => {
                info(&["merge", "retainKeys"], Some("name"), Some("Volume"), true)
            }
            ("PodSpec", "tolerations") => info(&[], None, Some("Toleration"), true),
            ("PodSpec", "nodeSelector") => map_of(None),
            ("Container", "env") => info(&["merge"], Some("name"), Some("EnvVar"), true),
            ("Container", "ports") => info(
                &["merge"],
                Some("containerPort"),
                Some("ContainerPort"),
                true,
            ),
            ("Container", "args") | ("Container", "command") => info(&[], None, None, true),
            ("Container", "resources") => info(&[], None, Some("Resources"), false),
            ("Container", "name") | ("Container", "image") => info(&[], None, None, false),
            ("Resources", "limits") | ("Resources", "requests") => map_of(Some("Quantity")),
            ("Deployment", "spec") => info(&[], None, Some("DeploymentSpec"), false),
            ("DeploymentSpec", "strategy") => {
                info(&["retainKeys"], None, Some("DeploymentStrategy"), false)
            }
            ("DeploymentSpec", "template") => info(&[], None, Some("PodTemplate"), false),
            ("PodTemplate", "spec") => info(&[], None, Some("PodSpec"), false),
            ("DeploymentStrategy", "rollingUpdate") => {
                info(&[], None, Some("RollingUpdate"), false)
            }
            ("Volume", "configMap") | ("Volume", "emptyDir") | ("Volume", "secret") => {
                info(&[], None, None, false)
            }
            _ => return None,
        })
    }
}

fn smp(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    strategic_merge_patch(doc, patch, &MockSchema, "Pod")
}

fn ok(doc: &Value, patch: &Value) -> Value {
    smp(doc, patch).unwrap_or_else(|e| panic!("patch {patch} failed: {e}"))
}

fn two_containers() -> Value {
    json!({
        "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "containers": [
                {"name": "a", "image": "a:1", "terminationMessagePath": "/dev/termination-log",
                 "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}],
                 "args": ["--a", "--b"]},
                {"name": "b", "image": "b:1", "terminationMessagePath": "/dev/termination-log"}
            ]
        }
    })
}

fn container_names(v: &Value) -> Vec<&str> {
    v["spec"]["containers"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn kubectl_apply_changes_one_container_of_two() {
    let doc = two_containers();
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b", "image": "b:2"}]
    }});
    let out = ok(&doc, &patch);
    let mut want = doc.clone();
    want["spec"]["containers"][1]["image"] = json!("b:2");
    assert_eq!(out, want);
    assert_eq!(
        doc["spec"]["containers"][1]["image"], "b:1",
        "input untouched"
    );
}

#[test]
fn set_element_order_places_new_container() {
    let doc = two_containers();
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "n"}, {"name": "b"}],
        "containers": [{"name": "n", "image": "n:1"}]
    }});
    let out = ok(&doc, &patch);
    assert_eq!(container_names(&out), ["a", "n", "b"]);
    assert_eq!(
        out["spec"]["containers"][1],
        json!({"name": "n", "image": "n:1"})
    );
    assert!(out["spec"].get("$setElementOrder/containers").is_none());
}

#[test]
fn set_element_order_reorders_existing() {
    let doc = two_containers();
    let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}});
    let out = ok(&doc, &patch);
    assert_eq!(container_names(&out), ["b", "a"]);
    assert_eq!(
        out["spec"]["containers"][1]["env"],
        doc["spec"]["containers"][0]["env"]
    );
}

#[test]
fn set_element_order_must_match_patch_list() {
    let doc = two_containers();
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b", "image": "x"}, {"name": "a", "image": "y"}]
    }});
    assert!(matches!(
        smp(&doc, &patch),
        Err(PatchError::InvalidPatch(_))
    ));
    let not_list = json!({"spec": {"$setElementOrder/containers": {"name": "a"}}});
    assert!(matches!(
        smp(&doc, &not_list),
        Err(PatchError::InvalidPatch(_))
    ));
}

#[test]
fn new_list_item_without_order_goes_first_like_upstream() {
    let doc = two_containers();
    let patch = json!({"spec": {"containers": [{"name": "n", "image": "n:1"}]}});
    let out = ok(&doc, &patch);
    assert_eq!(container_names(&out), ["n", "a", "b"]);
}

#[test]
fn merge_into_matching_element_recursively() {
    let doc = two_containers();
    let patch = json!({"spec": {"containers": [{
        "name": "a",
        "env": [{"name": "Y", "value": "20"}, {"name": "Z", "value": "3"}],
        "ports": [{"containerPort": 443, "name": "https"}],
        "args": ["--c"]
    }]}});
    let out = ok(&doc, &patch);
    let a = &out["spec"]["containers"][0];
    assert_eq!(a["image"], "a:1");
    assert_eq!(
        a["env"],
        json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "20"}, {"name": "Z", "value": "3"}])
    );
    assert_eq!(
        a["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"},
               {"containerPort": 443, "protocol": "TCP", "name": "https"}])
    );
    assert_eq!(a["args"], json!(["--c"]), "atomic list replaced");
    assert_eq!(container_names(&out), ["a", "b"]);
}

#[test]
fn delete_list_element_by_merge_key() {
    let doc = two_containers();
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}],
        "containers": [{"$patch": "delete", "name": "b"}]
    }});
    let out = ok(&doc, &patch);
    assert_eq!(container_names(&out), ["a"]);

    let env = json!({"spec": {"containers": [{"name": "a", "env": [{"$patch": "delete", "name": "X"}]}]}});
    let out = ok(&doc, &env);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([{"name": "Y", "value": "2"}])
    );

    let port = json!({"spec": {"containers": [{"name": "a", "ports": [{"$patch": "delete", "containerPort": 80}]}]}});
    let out = ok(&doc, &port);
    assert_eq!(
        out["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 443, "protocol": "TCP"}])
    );

    let no_key = json!({"spec": {"containers": [{"$patch": "delete"}]}});
    assert!(matches!(
        smp(&doc, &no_key),
        Err(PatchError::InvalidPatch(_))
    ));
}

#[test]
fn replace_directive_in_list() {
    let doc = two_containers();
    let patch = json!({"spec": {"containers": [
        {"name": "z", "image": "z:1", "gone": null},
        {"$patch": "replace"}
    ]}});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "z", "image": "z:1"}])
    );
}

#[test]
fn replace_and_delete_directives_on_maps() {
    let doc = two_containers();
    let replace = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
    let out = ok(&doc, &replace);
    assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));
    assert_eq!(out["metadata"]["name"], "p");

    let delete = json!({"metadata": {"labels": {"$patch": "delete"}}});
    assert_eq!(ok(&doc, &delete)["metadata"]["labels"], json!({}));

    let merge = json!({"metadata": {"labels": {"$patch": "merge", "new": "1"}}});
    assert_eq!(
        ok(&doc, &merge)["metadata"]["labels"],
        json!({"app": "web", "tier": "front", "new": "1"})
    );

    let whole = json!({"$patch": "replace", "metadata": {"name": "q"}});
    assert_eq!(ok(&doc, &whole), json!({"metadata": {"name": "q"}}));
}

#[test]
fn unknown_or_misplaced_directives_fail() {
    let doc = two_containers();
    let bad = json!({"metadata": {"labels": {"$patch": "explode"}}});
    assert_eq!(
        smp(&doc, &bad),
        Err(PatchError::UnsupportedDirective("\"explode\"".into()))
    );
    let bad_list = json!({"spec": {"containers": [{"name": "a", "$patch": "frobnicate"}]}});
    assert!(matches!(
        smp(&doc, &bad_list),
        Err(PatchError::UnsupportedDirective(_))
    ));
    let merge_list = json!({"spec": {"containers": [{"$patch": "merge"}]}});
    assert!(matches!(
        smp(&doc, &merge_list),
        Err(PatchError::InvalidPatch(_))
    ));
    assert_eq!(smp(&doc, &bad).err().map(|e| e.status_code()), Some(400));
}

#[test]
fn null_deletes_and_maps_merge() {
    let doc = two_containers();
    let patch = json!({"metadata": {"labels": {"tier": null, "env": "prod"}, "absent": null}});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "web", "env": "prod"})
    );
    assert!(
        out["metadata"].get("absent").is_none(),
        "unmatched null ignored"
    );
    let drop_spec = ok(&doc, &json!({"spec": null}));
    assert!(drop_spec.get("spec").is_none());
}

#[test]
fn primitive_merge_list_is_a_set() {
    let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
    let out = ok(&doc, &json!({"metadata": {"finalizers": ["b", "c"]}}));
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));

    let out = ok(
        &doc,
        &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "x"]}}),
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["b"]));

    let out = ok(
        &doc,
        &json!({"metadata": {
            "$setElementOrder/finalizers": ["c", "b", "a"],
            "finalizers": ["c"]
        }}),
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["c", "b", "a"]));

    let out = ok(
        &doc,
        &json!({"metadata": {
            "$setElementOrder/finalizers": ["b"],
            "$deleteFromPrimitiveList/finalizers": ["a"]
        }}),
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["b"]));

    let fresh = ok(
        &json!({"metadata": {}}),
        &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
    );
    assert_eq!(
        fresh,
        json!({"metadata": {}}),
        "deleting from an absent list adds nothing"
    );
}

#[test]
fn retain_keys_drops_unlisted_fields() {
    let doc = json!({"spec": {"strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1}
    }}});
    let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}});
    let out = strategic_merge_patch(&doc, &patch, &MockSchema, "Deployment");
    assert_eq!(out, Ok(json!({"spec": {"strategy": {"type": "Recreate"}}})));

    let unlisted =
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}});
    let err = strategic_merge_patch(&doc, &unlisted, &MockSchema, "Deployment");
    assert!(matches!(err, Err(PatchError::InvalidPatch(_))));

    let volumes = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
    let patch = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "configMap"], "configMap": {"name": "cm"}}]}});
    let out = ok(&volumes, &patch);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "v", "configMap": {"name": "cm"}}])
    );
}

#[test]
fn unknown_fields_merge_without_schema() {
    let doc = json!({"spec": {"custom": {"a": 1, "list": [1, 2], "nested": {"x": 1}}}});
    let patch = json!({"spec": {"custom": {"list": [3], "nested": {"y": 2}, "a": null}}});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["spec"]["custom"],
        json!({"list": [3], "nested": {"x": 1, "y": 2}})
    );
    let any = strategic_merge_patch(&doc, &patch, &MockSchema, "");
    assert_eq!(
        any.map(|v| v["spec"]["custom"].clone()),
        Ok(out["spec"]["custom"].clone())
    );
}

#[test]
fn map_fields_merge_per_key() {
    let doc = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
    let patch = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": null, "gpu": "1"}}}]}});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"],
        json!({"memory": "1Gi", "gpu": "1"})
    );
}

#[test]
fn directives_and_nulls_do_not_leak_into_new_values() {
    let doc = json!({"spec": {"containers": [{"name": "a"}]}});
    let patch = json!({"spec": {
        "containers": [{"name": "n", "env": [{"name": "E", "value": "1"}], "$setElementOrder/env": [{"name": "E"}], "junk": null}],
        "nodeSelector": {"disk": "ssd", "none": null},
        "tolerations": [{"key": "k", "operator": null}]
    }});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["spec"]["containers"][0],
        json!({"name": "n", "env": [{"name": "E", "value": "1"}]})
    );
    assert_eq!(out["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    assert_eq!(out["spec"]["tolerations"], json!([{"key": "k"}]));
}

#[test]
fn malformed_patches_are_errors() {
    let doc = two_containers();
    assert!(matches!(
        smp(&doc, &json!([1])),
        Err(PatchError::InvalidPatch(_))
    ));
    let no_key = json!({"spec": {"containers": [{"image": "x"}]}});
    assert!(matches!(
        smp(&doc, &no_key),
        Err(PatchError::InvalidPatch(_))
    ));
    let mixed = json!({"spec": {"containers": ["a"]}});
    assert!(matches!(
        smp(&doc, &mixed),
        Err(PatchError::InvalidPatch(_))
    ));
    let nested = json!({"metadata": {"finalizers": [["a"]]}});
    assert!(matches!(
        smp(&json!({"metadata": {"finalizers": ["a"]}}), &nested),
        Err(PatchError::InvalidPatch(_))
    ));
    let retain = json!({"metadata": {"$retainKeys": "name"}});
    assert!(matches!(
        smp(&doc, &retain),
        Err(PatchError::InvalidPatch(_))
    ));
    assert!(matches!(
        strategic_merge_patch(&json!("x"), &json!({}), &MockSchema, "Pod"),
        Err(PatchError::Conflict(_))
    ));
}

#[test]
fn type_changes_replace() {
    let doc = json!({"spec": {"x": {"a": 1}, "containers": [{"name": "a"}]}});
    let out = ok(&doc, &json!({"spec": {"x": "scalar"}}));
    assert_eq!(out["spec"]["x"], "scalar");
    let out = ok(
        &json!({"spec": {"x": 1}}),
        &json!({"spec": {"x": {"a": null, "b": 2}}}),
    );
    assert_eq!(out["spec"]["x"], json!({"b": 2}));
}

#[test]
fn deployment_template_containers_merge_deep() {
    let doc = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]},
        {"name": "side", "image": "busybox"}
    ]}}}});
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "web"}, {"name": "side"}],
        "containers": [{"name": "web", "image": "nginx:2"}]
    }}}});
    let out = strategic_merge_patch(&doc, &patch, &MockSchema, "Deployment")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([
            {"name": "web", "image": "nginx:2", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "busybox"}
        ])
    );
}

#[test]
fn set_element_order_for_a_list_the_object_lacks() {
    let doc = json!({"spec": {}});
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
        "containers": [{"name": "b"}, {"name": "a", "bad": null}]
    }});
    let out = ok(&doc, &patch);
    assert_eq!(
        out,
        json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}})
    );
}

#[test]
fn set_element_order_ignores_deletions_when_validating() {
    let doc = two_containers();
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "b"}],
        "containers": [{"name": "a", "$patch": "delete"}, {"name": "b", "image": "b:3"}]
    }});
    let out = ok(&doc, &patch);
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "b", "image": "b:3", "terminationMessagePath": "/dev/termination-log"}])
    );
}

#[test]
fn arbitrary_patches_never_panic() {
    let docs = [
        two_containers(),
        json!({}),
        json!({"spec": {"containers": "x"}}),
    ];
    let pieces = [
        json!(null),
        json!(1),
        json!("s"),
        json!([]),
        json!({}),
        json!([null]),
        json!([{"$patch": "delete"}]),
        json!([{"$patch": "replace"}]),
        json!({"$patch": 3}),
        json!({"$retainKeys": [1]}),
        json!({"$setElementOrder/containers": [1, {"name": "a"}]}),
        json!({"$deleteFromPrimitiveList/containers": [{"name": "a"}]}),
        json!({"$setElementOrder/": []}),
        json!([{"name": 1}, {"name": "1"}]),
    ];
    for doc in &docs {
        for a in &pieces {
            for b in &pieces {
                let patch = json!({"spec": {"containers": a, "x": b}, "metadata": {"finalizers": b, "labels": a}});
                let _ = smp(doc, &patch);
                let _ = smp(doc, &json!({"spec": a}));
                let _ = smp(doc, b);
            }
        }
    }
}
