//! Strategic-merge-patch metadata of a field, read from the definitions' extensions.

use fabrik_machinery::patch::{FieldPatchInfo, PatchSchema};
use serde_json::Value;

use crate::definitions::Definitions;
use crate::refs::schema_target;

impl Definitions {
    /// Patch metadata of `field` in `definition`; `None` when either is unknown.
    pub fn patch_field(&self, definition: &str, field: &str) -> Option<FieldPatchInfo> {
        let prop = self.get(definition)?.get("properties")?.get(field)?;
        Some(self.field_info(prop))
    }

    /// Builds the patch metadata from a property schema.
    fn field_info(&self, prop: &Value) -> FieldPatchInfo {
        let mut info = field_info(prop);
        // Free-form and primitive definitions (Quantity, RawExtension, Time) have no fields
        // to merge into.
        if let Some(def) = &info.definition {
            let structured = self.get(def).is_some_and(|s| s.get("properties").is_some());
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
    FieldPatchInfo {
        strategies,
        merge_key,
        definition: schema_target(element).map(str::to_owned),
        is_list,
        is_map,
    }
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
