//! The built-in resources Fabrik serves, described as [`ResourceDoc`]s.
//!
//! A convenience for callers and tests; the API server may build its own list instead.

use crate::resource::{ResourceDoc, SubresourceDoc};

/// All verbs of an ordinary resource.
const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One row of [`TABLE`]: group, version, kind, plural, namespaced, definition prefix,
/// subresources.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static str,
    &'static [&'static str],
);

/// The built-in resources.
const TABLE: &[Row] = &[
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "Pod",
        "pods",
        true,
        "io.k8s.api.core.v1",
        &["status", "binding", "eviction"],
    ),
    (
        "",
        "v1",
        "Service",
        "services",
        true,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "Endpoints",
        "endpoints",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    (
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    (
        "",
        "v1",
        "Secret",
        "secrets",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    ("", "v1", "Event", "events", true, "io.k8s.api.core.v1", &[]),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "Node",
        "nodes",
        false,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        "io.k8s.api.core.v1",
        &["status"],
    ),
    (
        "",
        "v1",
        "LimitRange",
        "limitranges",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    (
        "",
        "v1",
        "PodTemplate",
        "podtemplates",
        true,
        "io.k8s.api.core.v1",
        &[],
    ),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        "io.k8s.api.apps.v1",
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        "io.k8s.api.apps.v1",
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        "io.k8s.api.apps.v1",
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        true,
        "io.k8s.api.apps.v1",
        &["status"],
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        "io.k8s.api.apps.v1",
        &[],
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        "io.k8s.api.policy.v1",
        &["status"],
    ),
    (
        "batch",
        "v1",
        "Job",
        "jobs",
        true,
        "io.k8s.api.batch.v1",
        &["status"],
    ),
    (
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        true,
        "io.k8s.api.batch.v1",
        &["status"],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        "io.k8s.api.rbac.v1",
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        "io.k8s.api.rbac.v1",
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        "io.k8s.api.rbac.v1",
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        "io.k8s.api.rbac.v1",
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        "io.k8s.api.coordination.v1",
        &[],
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
        "io.k8s.api.discovery.v1",
        &[],
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        "io.k8s.api.events.v1",
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        "io.k8s.api.networking.v1",
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        "io.k8s.api.networking.v1",
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
        "io.k8s.api.networking.v1",
        &[],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        "io.k8s.api.scheduling.v1",
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        "io.k8s.api.storage.v1",
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "CSIDriver",
        "csidrivers",
        false,
        "io.k8s.api.storage.v1",
        &[],
    ),
    (
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        false,
        "io.k8s.api.node.v1",
        &[],
    ),
    (
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "deviceclasses",
        false,
        "io.k8s.api.resource.v1",
        &[],
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        true,
        "io.k8s.api.resource.v1",
        &["status"],
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        true,
        "io.k8s.api.resource.v1",
        &[],
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        false,
        "io.k8s.api.resource.v1",
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
        &["status"],
    ),
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The subresource `name` of a kind whose definition is `definition`.
fn subresource(name: &str, definition: &str) -> SubresourceDoc {
    let (definition, verbs): (&str, &[&str]) = match name {
        "scale" => (
            "io.k8s.api.autoscaling.v1.Scale",
            &["get", "patch", "update"],
        ),
        "binding" => ("io.k8s.api.core.v1.Binding", &["create"]),
        "eviction" => ("io.k8s.api.policy.v1.Eviction", &["create"]),
        _ => (definition, &["get", "patch", "update"]),
    };
    SubresourceDoc {
        name: name.to_owned(),
        definition: definition.to_owned(),
        verbs: strings(verbs),
    }
}

/// The built-in resources with all verbs and their usual subresources.
pub fn builtin_resources() -> Vec<ResourceDoc> {
    TABLE
        .iter()
        .map(|(group, version, kind, plural, namespaced, prefix, subs)| {
            let definition = format!("{prefix}.{kind}");
            ResourceDoc {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
                kind: (*kind).to_owned(),
                plural: (*plural).to_owned(),
                namespaced: *namespaced,
                verbs: strings(ALL),
                subresources: subs.iter().map(|s| subresource(s, &definition)).collect(),
                list_definition: format!("{definition}List"),
                definition,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Definitions;

    #[test]
    fn every_definition_exists() {
        let defs = Definitions::builtin();
        for res in builtin_resources() {
            assert!(defs.get(&res.definition).is_some(), "{}", res.definition);
            assert!(
                defs.get(&res.list_definition).is_some(),
                "{}",
                res.list_definition
            );
            for sub in &res.subresources {
                assert!(defs.get(&sub.definition).is_some(), "{}", sub.definition);
            }
        }
    }

    #[test]
    fn definitions_carry_the_resource_gvk() {
        let defs = Definitions::builtin();
        for res in builtin_resources() {
            assert_eq!(
                defs.find_by_gvk(&res.group, &res.version, &res.kind),
                Some(res.definition.as_str())
            );
        }
    }
}
