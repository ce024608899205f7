//! The built-in Kubernetes resources Fabrik serves: one catalog entry per row of
//! `fabrik-openapi`'s kind table ([`builtin_kinds`]), with the strategy of each.

use std::sync::Arc;

use fabrik_openapi::{builtin_kinds, BuiltinKind, Verbs};

use super::{ResourceDef, ScalePaths, SchemaRef, Subresource};
use crate::strategy::{self, Strategy, WorkloadKind};

/// A strategy constructor.
type NewStrategy = fn() -> Arc<dyn Strategy>;

/// Kinds whose strategy is not the generic one, by group and kind.
const STRATEGIES: &[(&str, &str, NewStrategy)] = &[
    ("", "Namespace", strategy::namespace),
    ("", "Pod", strategy::pod),
    ("", "Service", strategy::service),
    ("", "ConfigMap", strategy::configmap),
    ("", "Secret", strategy::secret),
    ("", "Event", strategy::event),
    ("", "Node", strategy::node),
    ("apps", "Deployment", || {
        strategy::workload(WorkloadKind::Deployment)
    }),
    ("apps", "ReplicaSet", || {
        strategy::workload(WorkloadKind::ReplicaSet)
    }),
    ("apps", "StatefulSet", || {
        strategy::workload(WorkloadKind::StatefulSet)
    }),
    ("apps", "DaemonSet", || {
        strategy::workload(WorkloadKind::DaemonSet)
    }),
    ("batch", "Job", strategy::job),
    ("autoscaling", "HorizontalPodAutoscaler", strategy::hpa),
    ("resource.k8s.io", "DeviceClass", strategy::device_class),
    ("resource.k8s.io", "ResourceClaim", strategy::resource_claim),
    (
        "resource.k8s.io",
        "ResourceClaimTemplate",
        strategy::resource_claim_template,
    ),
    ("rbac.authorization.k8s.io", "Role", strategy::path_named),
    (
        "rbac.authorization.k8s.io",
        "RoleBinding",
        strategy::path_named,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRole",
        strategy::path_named,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        strategy::path_named,
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition", || {
        Arc::new(crate::crd::CrdStrategy)
    }),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        || {
            Arc::new(crate::webhook::config::WebhookConfigStrategy(
                crate::webhook::config::HookKind::Validating,
            ))
        },
    ),
    ("apiregistration.k8s.io", "APIService", || {
        Arc::new(crate::aggregation::apiservice::ApiServiceStrategy)
    }),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        || {
            Arc::new(crate::webhook::config::WebhookConfigStrategy(
                crate::webhook::config::HookKind::Mutating,
            ))
        },
    ),
];

/// Built-in kinds served at several versions: group, kind, storage version and converter.
const CONVERSIONS: &[(&str, &str, &str, super::BuiltinConversion)] = &[(
    "autoscaling",
    "HorizontalPodAutoscaler",
    "v2",
    crate::strategy::hpa::convert,
)];

/// The catalog entry of one built-in kind; `generic` is the shared generic strategy.
fn entry(kind: &BuiltinKind, generic: &Arc<dyn Strategy>) -> ResourceDef {
    let strategy = STRATEGIES
        .iter()
        .find(|(group, name, _)| (*group, *name) == (kind.group, kind.kind))
        .map_or_else(|| generic.clone(), |(_, _, new)| new());
    let conversion = CONVERSIONS
        .iter()
        .find(|(group, name, _, _)| (*group, *name) == (kind.group, kind.kind));
    ResourceDef {
        group: kind.group.into(),
        version: kind.version.into(),
        kind: kind.kind.into(),
        plural: kind.plural.into(),
        singular: kind.singular(),
        namespaced: kind.namespaced,
        short_names: kind.short_names.iter().map(|s| s.to_string()).collect(),
        categories: kind.categories.iter().map(|s| s.to_string()).collect(),
        subresources: kind.subresources.to_vec(),
        definition: kind.definition(),
        strategy,
        type_check: Some(kind.type_check),
        schemas: SchemaRef::Builtin,
        scale: kind
            .subresources
            .contains(&Subresource::Scale)
            .then(ScalePaths::default),
        storage_version: conversion
            .filter(|(_, _, storage, _)| *storage != kind.version)
            .map(|(_, _, storage, _)| storage.to_string()),
        custom: false,
        create_only: kind.verbs == Verbs::CreateOnly,
        conversion: conversion.map(|(_, _, _, convert)| super::Conversion::Builtin(*convert)),
    }
}

/// Every built-in resource definition.
pub fn all() -> Vec<ResourceDef> {
    let generic = strategy::generic();
    builtin_kinds()
        .iter()
        .map(|kind| entry(kind, &generic))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    #[test]
    fn catalog_agrees_with_the_served_list() {
        let catalog = Catalog::builtin();
        let served = fabrik_openapi::builtin_resources();
        assert_eq!(catalog.all().len(), served.len());
        for res in served {
            let def = catalog.get(&res.group, &res.version, &res.plural);
            let Some(def) = def else {
                panic!(
                    "{}/{} {} is not in the catalog",
                    res.group, res.version, res.plural
                );
            };
            assert_eq!(def.kind, res.kind);
            assert_eq!(def.namespaced, res.namespaced, "{def:?}");
            assert_eq!(def.definition, res.definition, "{def:?}");
            assert_eq!(def.verbs(), res.verbs, "{def:?}");
            let subs: Vec<&str> = def.subresources.iter().map(|s| s.name()).collect();
            let docs: Vec<&str> = res.subresources.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(subs, docs, "{def:?}");
        }
    }

    #[test]
    fn every_kind_with_its_own_strategy_is_served() {
        for (group, kind, _) in STRATEGIES {
            let served = builtin_kinds()
                .iter()
                .any(|k| (k.group, k.kind) == (*group, *kind));
            assert!(served, "{group}/{kind}");
        }
    }

    #[test]
    fn every_built_in_kind_checks_types() {
        for def in Catalog::builtin().all() {
            let Some(check) = def.type_check else {
                panic!("{def:?} has no type check");
            };
            let bad = serde_json::json!({"metadata": {"name": 3}});
            assert!(check(&bad).is_err(), "{def:?}");
        }
    }
}
