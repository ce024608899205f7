//! Strategic-merge-patch metadata of a field, read from the definitions' extensions.

use std::collections::BTreeMap;

use fabrik_machinery::patch::{FieldPatchInfo, PatchSchema};
use serde_json::Value;

use crate::definitions::Definitions;
use crate::refs::schema_target;

impl Definitions {
    /// Patch metadata of `field` in `definition`; `None` when either is unknown.
    pub fn patch_field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        let key = (definition.to_string(), field.to_string());
        if let Ok(cache) = self.field_cache.0.read() {
            if let Some(hit) = cache.get(&key) {
                return hit.clone();
            }
        }
        let info = self
            .get(definition)
            .and_then(|d| d.get("properties"))
            .and_then(|p| p.get(field))
            .map(|prop| self.field_info(prop));
        if let Ok(mut cache) = self.field_cache.0.write() {
            cache.insert(key, info.clone());
        }
        info
    }

    /// Builds the patch metadata from a property schema.
    fn field_info(&self, prop: &Value) -> FieldPatchInfo {
        let mut info = field_info(prop);
        if let Some(def) = &info.definition {
            let target = self.get(def);
            // The definition-level map type (e.g. LabelSelector is atomic) applies to the
            // field's value, or for lists and maps to each element.
            let def_map_type = target.and_then(map_type);
            if info.is_list || info.is_map {
                info.struct_type = def_map_type;
            } else if info.map_type.is_none() {
                info.map_type = def_map_type;
            }
            if let Some(target) = target {
                info.list_map_key_defaults = key_defaults(&info.list_map_keys, target, true);
            }
            // Free-form and primitive definitions (Quantity, RawExtension, Time) have no
            // fields to merge into.
            let structured = target.is_some_and(|s| s.get("properties").is_some());
            if !structured {
                info.definition = None;
            }
        }
        info
    }
}

impl PatchSchema for Definitions {
    fn field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        self.patch_field(definition, field)
    }
}

/// Reads the patch metadata a property schema carries itself.
fn field_info(prop: &Value) -> FieldPatchInfo {
    let strategies = prop
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let merge_key = prop
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let items = prop.get("items");
    let additional = prop.get("additionalProperties").filter(|a| a.is_object());
    let (is_list, is_map) = (items.is_some(), items.is_none() && additional.is_some());
    let element = items.or(additional).unwrap_or(prop);
    let mut info = FieldPatchInfo {
        strategies,
        merge_key,
        definition: schema_target(element).map(str::to_owned),
        is_list,
        is_map,
        map_type: map_type(prop),
        ..FieldPatchInfo::default()
    };
    if is_list {
        info.list_type = prop
            .get("x-kubernetes-list-type")
            .and_then(Value::as_str)
            .or(info.list_kind())
            .map(str::to_owned);
        if info.list_type.as_deref() == Some("map") {
            info.list_map_keys = string_list(prop.get("x-kubernetes-list-map-keys"));
            if info.list_map_keys.is_empty() {
                info.list_map_keys = info.merge_key.iter().cloned().collect();
            }
        }
    }
    info
}

/// `x-kubernetes-map-type` of a schema.
pub(crate) fn map_type(schema: &Value) -> Option<String> {
    schema
        .get("x-kubernetes-map-type")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A list of strings (non-strings skipped).
pub(crate) fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Defaults of the list map `keys` in the element schema `element`. Upstream's built-in
/// schemas declare `default: TCP` on every `protocol` key; k8s-openapi's carry no defaults,
/// so with `builtin` that one is supplied when the schema has none.
pub(crate) fn key_defaults(
    keys: &[String],
    element: &Value,
    builtin: bool,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for key in keys {
        let declared = element
            .get("properties")
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("default"));
        match declared {
            Some(d) => {
                out.insert(key.clone(), d.clone());
            }
            None if builtin && key == "protocol" => {
                out.insert(key.clone(), Value::String("TCP".into()));
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(def: &str, field: &str) -> FieldPatchInfo {
        Definitions::builtin()
            .patch_field(def, field)
            .unwrap_or_else(|| panic!("{def}.{field} unknown"))
    }

    #[test]
    fn pod_spec_containers_merge_by_name() {
        let info = field("io.k8s.api.core.v1.PodSpec", "containers");
        assert_eq!(info.strategies, ["merge"]);
        assert_eq!(info.merge_key.as_deref(), Some("name"));
        assert_eq!(
            info.definition.as_deref(),
            Some("io.k8s.api.core.v1.Container")
        );
        assert!(info.is_list && !info.is_map);
    }

    #[test]
    fn container_env_and_ports() {
        let env = field("io.k8s.api.core.v1.Container", "env");
        assert_eq!(env.merge_key.as_deref(), Some("name"));
        assert_eq!(env.definition.as_deref(), Some("io.k8s.api.core.v1.EnvVar"));
        let ports = field("io.k8s.api.core.v1.Container", "ports");
        assert_eq!(ports.merge_key.as_deref(), Some("containerPort"));
    }

    #[test]
    fn finalizers_are_a_merged_primitive_list() {
        let info = field(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers",
        );
        assert_eq!(info.strategies, ["merge"]);
        assert_eq!(info.merge_key, None);
        assert_eq!(info.definition, None);
        assert!(info.is_list);
    }

    #[test]
    fn volumes_retain_keys_and_objects_and_maps() {
        let volumes = field("io.k8s.api.core.v1.PodSpec", "volumes");
        assert_eq!(volumes.strategies, ["merge", "retainKeys"]);
        let spec = field("io.k8s.api.core.v1.Pod", "spec");
        assert_eq!(
            spec.definition.as_deref(),
            Some("io.k8s.api.core.v1.PodSpec")
        );
        assert!(!spec.is_list && !spec.is_map);
        let labels = field("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "labels");
        assert!(labels.is_map && labels.definition.is_none());
        let limits = field("io.k8s.api.core.v1.ResourceRequirements", "limits");
        assert!(limits.is_map && limits.definition.is_none());
        let created = field(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "creationTimestamp",
        );
        assert!(created.definition.is_none() && !created.is_list);
    }

    #[test]
    fn trait_answers_like_the_inherent_method() {
        let schema: &dyn PatchSchema = Definitions::builtin();
        let info = schema.field("io.k8s.api.core.v1.PodSpec", "initContainers");
        assert_eq!(info.and_then(|i| i.merge_key).as_deref(), Some("name"));
    }

    #[test]
    fn unknown_definition_or_field_is_none() {
        let defs = Definitions::builtin();
        assert!(defs.patch_field("io.k8s.api.core.v1.Nope", "x").is_none());
        assert!(defs
            .patch_field("io.k8s.api.core.v1.PodSpec", "nope")
            .is_none());
    }
}

#[cfg(test)]
mod apply_info_tests {
    use super::*;
    use serde_json::json;

    fn field(def: &str, field: &str) -> FieldPatchInfo {
        Definitions::builtin()
            .patch_field(def, field)
            .unwrap_or_default()
    }

    #[test]
    fn list_and_map_types_for_server_side_apply() {
        let containers = field("io.k8s.api.core.v1.PodSpec", "containers");
        assert_eq!(containers.list_type.as_deref(), Some("map"));
        assert_eq!(containers.list_map_keys, ["name"]);
        let ports = field("io.k8s.api.core.v1.Container", "ports");
        assert_eq!(ports.list_map_keys, ["containerPort", "protocol"]);
        assert_eq!(
            ports.list_map_key_defaults.get("protocol"),
            Some(&json!("TCP"))
        );
        let finalizers = field(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "finalizers",
        );
        assert_eq!(finalizers.list_type.as_deref(), Some("set"));
        let args = field("io.k8s.api.core.v1.Container", "args");
        assert_eq!(args.list_type.as_deref(), Some("atomic"));
        let node_selector = field("io.k8s.api.core.v1.PodSpec", "nodeSelector");
        assert_eq!(node_selector.map_type.as_deref(), Some("atomic"));
        let selector = field("io.k8s.api.apps.v1.DeploymentSpec", "selector");
        assert_eq!(selector.map_type.as_deref(), Some("atomic"));
        let replicas = field("io.k8s.api.apps.v1.DeploymentSpec", "replicas");
        assert_eq!(replicas.list_type, None);
    }

    #[test]
    fn list_types_derive_from_patch_strategy_when_undeclared() {
        let mut defs = std::collections::BTreeMap::new();
        defs.insert(
            "T".to_owned(),
            json!({"type": "object", "properties": {
                "keyed": {"type": "array", "items": {"type": "object"},
                          "x-kubernetes-patch-strategy": "merge",
                          "x-kubernetes-patch-merge-key": "id"},
                "set": {"type": "array", "items": {"type": "string"},
                        "x-kubernetes-patch-strategy": "merge"},
                "plain": {"type": "array", "items": {"type": "string"}}
            }}),
        );
        let defs = Definitions::from_map(defs);
        let keyed = defs.patch_field("T", "keyed").unwrap_or_default();
        assert_eq!(keyed.list_type.as_deref(), Some("map"));
        assert_eq!(keyed.list_map_keys, ["id"]);
        let set = defs.patch_field("T", "set").unwrap_or_default();
        assert_eq!(set.list_type.as_deref(), Some("set"));
        let plain = defs.patch_field("T", "plain").unwrap_or_default();
        assert_eq!(plain.list_type.as_deref(), Some("atomic"));
    }
}
