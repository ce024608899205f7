//! kubectl-like flows of server-side apply against a hand-written schema of a Deployment.

use serde_json::{json, Value};

use super::*;
use crate::patch::{FieldPatchInfo, PatchSchema};

/// Deployment → ObjectMeta, DeploymentSpec (selector atomic) → PodTemplateSpec → PodSpec
/// (containers merged on name *without* a declared list type, nodeSelector atomic,
/// tolerations atomic) → Container (args atomic, ports a map list on containerPort+protocol
/// with protocol defaulting to TCP); ObjectMeta.finalizers a set.
struct Mock;

fn object(def: &str) -> FieldPatchInfo {
    FieldPatchInfo {
        definition: Some(def.into()),
        ..FieldPatchInfo::default()
    }
}

fn list(list_type: &str, elem: Option<&str>) -> FieldPatchInfo {
    FieldPatchInfo {
        is_list: true,
        list_type: Some(list_type.into()),
        definition: elem.map(str::to_owned),
        ..FieldPatchInfo::default()
    }
}

impl PatchSchema for Mock {
    fn field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        let scalar = FieldPatchInfo::default();
        Some(match (definition, field) {
            ("Deployment", "metadata") | ("Template", "metadata") => object("Meta"),
            ("Deployment", "spec") => object("Spec"),
            ("Deployment", "status") => object("Status"),
            ("Deployment", "apiVersion" | "kind") => scalar,
            ("Meta", "name" | "namespace" | "uid" | "resourceVersion") => scalar,
            ("Meta", "labels" | "annotations") => FieldPatchInfo {
                is_map: true,
                ..FieldPatchInfo::default()
            },
            ("Meta", "finalizers") => list("set", None),
            ("Spec", "replicas" | "paused") => scalar,
            ("Spec", "selector") => FieldPatchInfo {
                map_type: Some("atomic".into()),
                ..object("Selector")
            },
            ("Spec", "template") => object("Template"),
            ("Template", "spec") => object("PodSpec"),
            ("PodSpec", "containers") => FieldPatchInfo {
                is_list: true,
                strategies: vec!["merge".into()],
                merge_key: Some("name".into()),
                definition: Some("Container".into()),
                ..FieldPatchInfo::default()
            },
            ("PodSpec", "nodeSelector") => FieldPatchInfo {
                is_map: true,
                map_type: Some("atomic".into()),
                ..FieldPatchInfo::default()
            },
            ("PodSpec", "tolerations") => list("atomic", Some("Toleration")),
            ("Container", "name" | "image") => scalar,
            ("Container", "args") => list("atomic", None),
            ("Container", "ports") => FieldPatchInfo {
                list_map_keys: vec!["containerPort".into(), "protocol".into()],
                list_map_key_defaults: [("protocol".to_owned(), json!("TCP"))]
                    .into_iter()
                    .collect(),
                ..list("map", Some("Port"))
            },
            ("Port", "containerPort" | "protocol" | "name") => scalar,
            ("Selector", "matchLabels") => FieldPatchInfo {
                is_map: true,
                ..FieldPatchInfo::default()
            },
            ("Status", "replicas") => scalar,
            _ => return None,
        })
    }
}

const T1: &str = "2024-05-01T10:00:00Z";
const T2: &str = "2024-05-01T10:00:05Z";

fn ctx(now: &'static str) -> WriteContext<'static> {
    WriteContext {
        schema: &Mock,
        definition: "Deployment",
        api_version: "apps/v1",
        subresource: None,
        now,
    }
}

fn deployment(labels: Value, replicas: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": containers}
            }
        }
    })
}

fn nginx() -> Value {
    json!([{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}])
}

/// `(manager, operation, fieldsV1)` of every entry, in order.
fn managers(obj: &Value) -> Vec<(String, String, Value)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_owned(),
                        e["operation"].as_str().unwrap_or_default().to_owned(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn owners_of(obj: &Value, path: &Path) -> Vec<String> {
    managed_fields_of(obj)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.fields.contains(path))
        .map(|e| e.manager)
        .collect()
}

fn applied(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &'static str,
) -> Value {
    match apply(live, config, manager, force, &ctx(now)) {
        Ok(v) => v,
        Err(e) => panic!("apply failed: {e}"),
    }
}

#[test]
fn first_apply_creates_ownership() {
    let config = deployment(json!({"app": "web"}), json!(2), nginx());
    let obj = applied(None, &config, "kubectl", false, T1);
    assert_eq!(obj["spec"]["replicas"], 2);
    let entries = &obj["metadata"]["managedFields"];
    assert_eq!(
        entries,
        &json!([{
            "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": T1,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                            ".": {}, "f:image": {}, "f:name": {},
                            "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                ".": {}, "f:containerPort": {}
                            }}
                        }}}
                    }
                }
            }
        }])
    );
}

#[test]
fn second_apply_removing_a_label_removes_it() {
    let first = deployment(json!({"app": "web", "tier": "front"}), json!(2), nginx());
    let obj = applied(None, &first, "kubectl", false, T1);
    let second = deployment(json!({"app": "web"}), json!(2), nginx());
    let obj = applied(Some(&obj), &second, "kubectl", false, T2);
    assert_eq!(obj["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(obj["metadata"]["managedFields"][0]["time"], T2);
    // Dropping the container drops it (and its ports) too.
    let third = deployment(json!({"app": "web"}), json!(2), json!([]));
    let obj = applied(Some(&obj), &third, "kubectl", false, T2);
    // An empty list owns nothing (as upstream): the field the manager owned goes.
    assert_eq!(obj["spec"]["template"]["spec"].get("containers"), None);
}

#[test]
fn another_managers_update_then_apply_conflicts_and_force_takes_it() {
    let config = deployment(json!({"app": "web"}), json!(2), nginx());
    let obj = applied(None, &config, "kubectl", false, T1);
    let mut scaled = obj.clone();
    scaled["spec"]["replicas"] = json!(5);
    let scaled = update_managed_fields(Some(&obj), &scaled, "kubectl-client-side-apply", &ctx(T2));
    let replicas = Path::fields(&["spec", "replicas"]);
    assert_eq!(owners_of(&scaled, &replicas), ["kubectl-client-side-apply"]);

    // Applying another value conflicts.
    let err = apply(Some(&scaled), &config, "kubectl", false, &ctx(T2));
    let Err(err) = err else {
        panic!("expected a conflict")
    };
    assert_eq!(err.status_code(), 409);
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
    );
    let ApplyError::Conflicts(conflicts) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(conflicts[0].field, ".spec.replicas");
    assert_eq!(
        conflicts[0].cause_message(),
        r#"conflict with "kubectl-client-side-apply" using apps/v1"#
    );

    // Applying the current value shares the field instead.
    let same = deployment(json!({"app": "web"}), json!(5), nginx());
    let shared = applied(Some(&scaled), &same, "kubectl", false, T2);
    let mut owners = owners_of(&shared, &replicas);
    owners.sort();
    assert_eq!(owners, ["kubectl", "kubectl-client-side-apply"]);

    // Forcing takes the field; the other manager, owning nothing more, disappears.
    let forced = applied(Some(&scaled), &config, "kubectl", true, T2);
    assert_eq!(forced["spec"]["replicas"], 2);
    assert_eq!(owners_of(&forced, &replicas), ["kubectl"]);
    let names: Vec<String> = managers(&forced).into_iter().map(|m| m.0).collect();
    assert_eq!(names, ["kubectl"]);
}

#[test]
fn container_image_conflict_names_the_element() {
    let config = deployment(json!({"app": "web"}), json!(2), nginx());
    let obj = applied(None, &config, "a", false, T1);
    let mut other = config.clone();
    other["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
    let err = apply(Some(&obj), &other, "b", false, &ctx(T2)).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some(
            r#"Apply failed with 1 conflict: conflict with "a": .spec.template.spec.containers[name="nginx"].image"#
        )
    );
}

#[test]
fn two_appliers_sharing_a_field_both_keep_it() {
    let a = deployment(json!({"app": "web"}), json!(2), nginx());
    let obj = applied(None, &a, "a", false, T1);
    let b = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"app": "web", "team": "x"}}});
    let obj = applied(Some(&obj), &b, "b", false, T2);
    let app = Path::fields(&["metadata", "labels", "app"]);
    assert_eq!(owners_of(&obj, &app).len(), 2);
    // a stops applying the label: b still owns it, so it stays.
    let a2 = deployment(json!({}), json!(2), nginx());
    let obj = applied(Some(&obj), &a2, "a", false, T2);
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"app": "web", "team": "x"})
    );
    assert_eq!(owners_of(&obj, &app), ["b"]);
    // b stops too: now it goes.
    let b2 = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "labels": {"team": "x"}}});
    let obj = applied(Some(&obj), &b2, "b", false, T2);
    assert_eq!(obj["metadata"]["labels"], json!({"team": "x"}));
}

#[test]
fn map_lists_merge_by_keys() {
    let a = deployment(json!({"app": "web"}), json!(1), nginx());
    let obj = applied(None, &a, "a", false, T1);
    // b adds a sidecar and a UDP port 80 to nginx (a different key: protocol differs).
    let b = deployment(
        json!({}),
        json!(1),
        json!([
            {"name": "nginx", "ports": [{"containerPort": 80, "protocol": "UDP"}]},
            {"name": "sidecar", "image": "envoy"}
        ]),
    );
    let obj = applied(Some(&obj), &b, "b", false, T2);
    let containers = &obj["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers,
        &json!([
            {"name": "nginx", "image": "nginx:1.25",
             "ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "UDP"}]},
            {"name": "sidecar", "image": "envoy"}
        ])
    );
    // a re-applies without change: b's elements stay.
    let obj = applied(Some(&obj), &a, "a", false, T2);
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    // b drops its sidecar: it goes; nginx (shared) stays with a's port only.
    let b2 = deployment(json!({}), json!(1), json!([{"name": "nginx"}]));
    let obj = applied(Some(&obj), &b2, "b", false, T2);
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"],
        json!([{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}])
    );
}

#[test]
fn set_lists_merge_by_value() {
    let with_finalizers = |f: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "finalizers": f}})
    };
    let obj = applied(None, &with_finalizers(json!(["a.io/x"])), "a", false, T1);
    let obj = applied(
        Some(&obj),
        &with_finalizers(json!(["b.io/y"])),
        "b",
        false,
        T2,
    );
    assert_eq!(obj["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
    let fields = &managers(&obj)[0].2;
    assert_eq!(
        fields,
        &json!({"f:metadata": {"f:finalizers": {"v:\"a.io/x\"": {}}}})
    );
    let obj = applied(Some(&obj), &with_finalizers(json!([])), "a", false, T2);
    assert_eq!(obj["metadata"]["finalizers"], json!(["b.io/y"]));
}

#[test]
fn atomic_lists_and_maps_are_replaced_whole() {
    let mut a = deployment(
        json!({}),
        json!(1),
        json!([{"name": "c", "args": ["--a", "--b"]}]),
    );
    a["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a", "gpu": "h100"});
    let obj = applied(None, &a, "a", false, T1);
    let mut a2 = deployment(json!({}), json!(1), json!([{"name": "c", "args": ["--c"]}]));
    a2["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "b"});
    let obj = applied(Some(&obj), &a2, "a", false, T2);
    let spec = &obj["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["args"], json!(["--c"]));
    assert_eq!(spec["nodeSelector"], json!({"zone": "b"}));
    // Atomic values are owned as one leaf.
    let fields = &managers(&obj)[0].2["f:spec"]["f:template"]["f:spec"];
    assert_eq!(fields["f:nodeSelector"], json!({}));
    assert_eq!(
        fields["f:containers"]["k:{\"name\":\"c\"}"]["f:args"],
        json!({})
    );
    // Another manager changing one key of the atomic map conflicts on the whole map.
    let mut b = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
    b["spec"] = json!({"template": {"spec": {"nodeSelector": {"zone": "c"}}}});
    let err = apply(Some(&obj), &b, "b", false, &ctx(T2)).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some(
            r#"Apply failed with 1 conflict: conflict with "a": .spec.template.spec.nodeSelector"#
        )
    );
}

#[test]
fn granular_maps_merge_per_key() {
    let a = deployment(json!({"app": "web"}), json!(1), nginx());
    let obj = applied(None, &a, "a", false, T1);
    let b = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"team": "x"}}});
    let obj = applied(Some(&obj), &b, "b", false, T2);
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"app": "web", "team": "x"})
    );
}

#[test]
fn update_records_changes_and_drops_empty_managers() {
    let created = deployment(json!({"app": "web"}), json!(1), nginx());
    let obj = update_managed_fields(None, &created, "kubectl-create", &ctx(T1));
    let entries = managers(&obj);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].0.as_str(), entries[0].1.as_str()),
        ("kubectl-create", "Update")
    );
    assert_eq!(
        entries[0].2["f:metadata"],
        json!({"f:labels": {".": {}, "f:app": {}}})
    );
    assert!(entries[0].2.get("f:apiVersion").is_none());

    // An update that changes nothing keeps entries and times.
    let same = update_managed_fields(Some(&obj), &obj, "other", &ctx(T2));
    assert_eq!(
        same["metadata"]["managedFields"],
        obj["metadata"]["managedFields"]
    );

    // Another manager takes replicas; then everything else is deleted by a third.
    let mut scaled = obj.clone();
    scaled["spec"]["replicas"] = json!(3);
    let scaled = update_managed_fields(Some(&obj), &scaled, "hpa", &ctx(T2));
    let replicas = Path::fields(&["spec", "replicas"]);
    assert_eq!(owners_of(&scaled, &replicas), ["hpa"]);
    assert_eq!(scaled["metadata"]["managedFields"][1]["time"], T2);
    let mut emptied = scaled.clone();
    if let Some(meta) = emptied["metadata"].as_object_mut() {
        meta.remove("labels");
    }
    emptied["spec"] = json!({"replicas": 3});
    let emptied = update_managed_fields(Some(&scaled), &emptied, "editor", &ctx(T2));
    let names: Vec<String> = managers(&emptied).into_iter().map(|m| m.0).collect();
    assert_eq!(names, ["hpa"]);
}

#[test]
fn untracked_objects_stay_untracked_until_first_apply() {
    let existing = deployment(json!({"app": "web"}), json!(1), nginx());
    let mut changed = existing.clone();
    changed["spec"]["replicas"] = json!(2);
    let out = update_managed_fields(Some(&existing), &changed, "editor", &ctx(T1));
    assert!(out["metadata"].get("managedFields").is_none());

    let config = deployment(json!({"app": "web"}), json!(4), nginx());
    let Err(err) = apply(Some(&changed), &config, "kubectl", false, &ctx(T2)) else {
        panic!("the before-first-apply manager owns replicas")
    };
    assert!(
        err.to_string()
            .contains("\"before-first-apply\" using apps/v1"),
        "{err}"
    );
    let obj = applied(Some(&changed), &config, "kubectl", true, T2);
    let names: Vec<String> = managers(&obj).into_iter().map(|m| m.0).collect();
    assert_eq!(names, ["kubectl", BEFORE_FIRST_APPLY]);
}

#[test]
fn managed_fields_in_an_update_are_honoured_and_can_be_reset() {
    let obj = applied(
        None,
        &deployment(json!({"app": "web"}), json!(1), nginx()),
        "a",
        false,
        T1,
    );
    let mut reset = obj.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    let out = update_managed_fields(Some(&obj), &reset, "editor", &ctx(T2));
    assert!(out["metadata"].get("managedFields").is_none());
    // An empty list does not reset: the old entries are kept.
    let mut empty = obj.clone();
    empty["metadata"]["managedFields"] = json!([]);
    let out = update_managed_fields(Some(&obj), &empty, "editor", &ctx(T2));
    assert_eq!(
        out["metadata"]["managedFields"],
        obj["metadata"]["managedFields"]
    );
}

#[test]
fn status_is_never_owned_by_main_writes_and_spec_never_by_status_writes() {
    let mut config = deployment(json!({}), json!(1), nginx());
    config["status"] = json!({"replicas": 9});
    let obj = applied(None, &config, "a", false, T1);
    assert!(
        obj.get("status").is_none(),
        "status is not applied on the main resource"
    );
    assert!(managers(&obj)[0].2.get("f:status").is_none());

    let mut live = obj.clone();
    live["status"] = json!({"replicas": 1});
    let status_ctx = WriteContext {
        subresource: Some("status"),
        ..ctx(T2)
    };
    let mut status_config = config.clone();
    status_config["spec"]["replicas"] = json!(7);
    status_config["metadata"] = json!({"name": "web"});
    let out = apply(Some(&live), &status_config, "ctrl", false, &status_ctx);
    let Ok(out) = out else { panic!("{out:?}") };
    assert_eq!(out["status"]["replicas"], 9);
    assert_eq!(out["spec"]["replicas"], 1, "spec is not applied on /status");
    let ctrl = managed_fields_of(&out)
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.manager == "ctrl");
    let ctrl = ctrl.map(|e| (e.subresource, e.fields.to_fields_v1()));
    assert_eq!(
        ctrl,
        Some((
            Some("status".into()),
            json!({"f:status": {"f:replicas": {}}})
        ))
    );

    // A main-resource update that also changes status records only the spec change.
    let mut updated = out.clone();
    updated["spec"]["replicas"] = json!(3);
    updated["status"]["replicas"] = json!(4);
    let updated = update_managed_fields(Some(&out), &updated, "editor", &ctx(T2));
    let editor = managed_fields_of(&updated)
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.manager == "editor")
        .map(|e| e.fields.to_fields_v1());
    assert_eq!(editor, Some(json!({"f:spec": {"f:replicas": {}}})));
}

#[test]
fn entries_are_sorted_apply_first_then_by_time() {
    let obj = update_managed_fields(
        None,
        &deployment(json!({"app": "web"}), json!(1), nginx()),
        "creator",
        &ctx(T1),
    );
    let b = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"z": "1"}}});
    let obj = applied(Some(&obj), &b, "zz-applier", false, T2);
    let names: Vec<(String, String)> = managers(&obj).into_iter().map(|m| (m.0, m.1)).collect();
    assert_eq!(
        names,
        [
            ("zz-applier".to_owned(), "Apply".to_owned()),
            ("creator".to_owned(), "Update".to_owned())
        ]
    );
}

#[test]
fn malformed_configs_are_typed_errors() {
    let good = deployment(json!({}), json!(1), nginx());
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        f(&mut c);
        apply(None, &c, "m", false, &ctx(T1)).err()
    };
    assert!(matches!(
        apply(None, &json!([1]), "m", false, &ctx(T1)),
        Err(ApplyError::InvalidConfig(_))
    ));
    assert_eq!(
        apply(None, &good, "", false, &ctx(T1)).err(),
        Some(ApplyError::MissingManager)
    );
    assert!(matches!(
        with(&|c| c["apiVersion"] = json!("apps/v1beta1")),
        Some(ApplyError::IncorrectVersion { .. })
    ));
    assert!(matches!(
        with(&|c| c["kind"] = json!(null)),
        Some(ApplyError::InvalidConfig(_))
    ));
    let mf = with(&|c| c["metadata"]["managedFields"] = json!([]));
    assert_eq!(
        mf.map(|e| e.to_string()).as_deref(),
        Some("metadata.managedFields must be nil")
    );

    let no_key = with(&|c| c["spec"]["template"]["spec"]["containers"] = json!([{"image": "x"}]));
    assert!(matches!(
        no_key,
        Some(ApplyError::InvalidShape(ShapeError::Invalid { .. }))
    ));
    assert_eq!(no_key.map(|e| e.status_code()), Some(400));
    let dup = with(&|c| {
        c["spec"]["template"]["spec"]["containers"] = json!([{"name": "a"}, {"name": "a"}])
    });
    assert_eq!(
        dup.map(|e| e.to_string()).as_deref(),
        Some(
            r#"failed to create typed patch object: .spec.template.spec.containers: duplicate entries for key [name="a"]"#
        )
    );
    let set_of_maps = with(&|c| c["metadata"]["finalizers"] = json!([{"a": 1}]));
    assert!(matches!(set_of_maps, Some(ApplyError::InvalidShape(_))));
    let not_list = with(&|c| c["spec"]["template"]["spec"]["containers"] = json!("x"));
    assert!(
        not_list.is_none(),
        "a scalar where a list is expected is a leaf"
    );

    let mut deep = json!(1);
    for _ in 0..500 {
        deep = json!({ "x": deep });
    }
    let too_deep = with(&|c| c["spec"]["extra"] = deep.clone());
    assert!(matches!(
        too_deep,
        Some(ApplyError::InvalidShape(ShapeError::TooDeep { .. }))
    ));

    let mut bad_live = good.clone();
    bad_live["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    assert!(matches!(
        apply(Some(&bad_live), &good, "m", false, &ctx(T1)),
        Err(ApplyError::ManagedFields(_))
    ));
    assert_eq!(
        apply(Some(&json!(3)), &good, "m", false, &ctx(T1)).err(),
        Some(ApplyError::InvalidLive)
    );
}

#[test]
fn field_set_of_an_object() {
    let set = field_set(
        &deployment(json!({"a": "b"}), json!(1), nginx()),
        &Mock,
        "Deployment",
    );
    let Ok(set) = set else { panic!("{set:?}") };
    assert!(set.contains(&Path::fields(&["metadata", "labels", "a"])));
    assert!(set.contains(&Path::fields(&["metadata", "name"])));
    assert!(!set.contains(&Path::fields(&["spec"])));
    let round = FieldSet::from_fields_v1(&set.to_fields_v1());
    assert_eq!(round.as_ref(), Ok(&set));
}
