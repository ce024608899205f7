//! The built-in Kubernetes resources Fabrik serves, with their upstream names, short names,
//! categories, subresources and strategies.

use std::sync::Arc;

use k8s_openapi::api as k;
use serde_json::Value;

use super::{ResourceDef, ScalePaths, SchemaRef, Subresource, TypeCheck};
use crate::strategy::{self, Strategy};

fn check<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), String> {
    T::deserialize(v).map(|_| ()).map_err(|e| e.to_string())
}

struct Entry {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
    definition: &'static str,
    type_check: TypeCheck,
    strategy: Arc<dyn Strategy>,
}

use Subresource::{
    Attach, Binding, Eviction, Exec, Finalize, Log, PortForward, Scale, Status, Token,
};

const ALL: &[&str] = &["all"];

fn entries() -> Vec<Entry> {
    let generic = strategy::generic();

    macro_rules! e {
        ($g:expr, $v:expr, $kind:ident, $plural:expr, $ns:expr, $short:expr, $cat:expr, $sub:expr, $def:expr, $ty:ty, $strat:expr) => {
            Entry {
                group: $g,
                version: $v,
                kind: stringify!($kind),
                plural: $plural,
                namespaced: $ns,
                short: $short,
                categories: $cat,
                subresources: $sub,
                definition: $def,
                type_check: check::<$ty>,
                strategy: $strat,
            }
        };
    }
    vec![
        // core/v1
        e!(
            "",
            "v1",
            Namespace,
            "namespaces",
            false,
            &["ns"],
            &[],
            &[Status, Finalize],
            "io.k8s.api.core.v1.Namespace",
            k::core::v1::Namespace,
            strategy::namespace()
        ),
        e!(
            "",
            "v1",
            Pod,
            "pods",
            true,
            &["po"],
            ALL,
            &[Status, Binding, Eviction, Log, Exec, Attach, PortForward],
            "io.k8s.api.core.v1.Pod",
            k::core::v1::Pod,
            strategy::pod()
        ),
        e!(
            "",
            "v1",
            Service,
            "services",
            true,
            &["svc"],
            ALL,
            &[Status],
            "io.k8s.api.core.v1.Service",
            k::core::v1::Service,
            strategy::service()
        ),
        e!(
            "",
            "v1",
            Endpoints,
            "endpoints",
            true,
            &["ep"],
            &[],
            &[],
            "io.k8s.api.core.v1.Endpoints",
            k::core::v1::Endpoints,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            ConfigMap,
            "configmaps",
            true,
            &["cm"],
            &[],
            &[],
            "io.k8s.api.core.v1.ConfigMap",
            k::core::v1::ConfigMap,
            strategy::configmap()
        ),
        e!(
            "",
            "v1",
            Secret,
            "secrets",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.core.v1.Secret",
            k::core::v1::Secret,
            strategy::secret()
        ),
        e!(
            "",
            "v1",
            ServiceAccount,
            "serviceaccounts",
            true,
            &["sa"],
            &[],
            &[Token],
            "io.k8s.api.core.v1.ServiceAccount",
            k::core::v1::ServiceAccount,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            Event,
            "events",
            true,
            &["ev"],
            &[],
            &[],
            "io.k8s.api.core.v1.Event",
            k::core::v1::Event,
            strategy::event()
        ),
        e!(
            "",
            "v1",
            PersistentVolumeClaim,
            "persistentvolumeclaims",
            true,
            &["pvc"],
            &[],
            &[Status],
            "io.k8s.api.core.v1.PersistentVolumeClaim",
            k::core::v1::PersistentVolumeClaim,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            PersistentVolume,
            "persistentvolumes",
            false,
            &["pv"],
            &[],
            &[Status],
            "io.k8s.api.core.v1.PersistentVolume",
            k::core::v1::PersistentVolume,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            Node,
            "nodes",
            false,
            &["no"],
            &[],
            &[Status],
            "io.k8s.api.core.v1.Node",
            k::core::v1::Node,
            strategy::node()
        ),
        e!(
            "",
            "v1",
            ResourceQuota,
            "resourcequotas",
            true,
            &["quota"],
            &[],
            &[Status],
            "io.k8s.api.core.v1.ResourceQuota",
            k::core::v1::ResourceQuota,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            LimitRange,
            "limitranges",
            true,
            &["limits"],
            &[],
            &[],
            "io.k8s.api.core.v1.LimitRange",
            k::core::v1::LimitRange,
            generic.clone()
        ),
        e!(
            "",
            "v1",
            PodTemplate,
            "podtemplates",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.core.v1.PodTemplate",
            k::core::v1::PodTemplate,
            generic.clone()
        ),
        // apps/v1
        e!(
            "apps",
            "v1",
            Deployment,
            "deployments",
            true,
            &["deploy"],
            ALL,
            &[Status, Scale],
            "io.k8s.api.apps.v1.Deployment",
            k::apps::v1::Deployment,
            strategy::workload(strategy::WorkloadKind::Deployment)
        ),
        e!(
            "apps",
            "v1",
            ReplicaSet,
            "replicasets",
            true,
            &["rs"],
            ALL,
            &[Status, Scale],
            "io.k8s.api.apps.v1.ReplicaSet",
            k::apps::v1::ReplicaSet,
            strategy::workload(strategy::WorkloadKind::ReplicaSet)
        ),
        e!(
            "apps",
            "v1",
            StatefulSet,
            "statefulsets",
            true,
            &["sts"],
            ALL,
            &[Status, Scale],
            "io.k8s.api.apps.v1.StatefulSet",
            k::apps::v1::StatefulSet,
            strategy::workload(strategy::WorkloadKind::StatefulSet)
        ),
        e!(
            "apps",
            "v1",
            DaemonSet,
            "daemonsets",
            true,
            &["ds"],
            ALL,
            &[Status],
            "io.k8s.api.apps.v1.DaemonSet",
            k::apps::v1::DaemonSet,
            strategy::workload(strategy::WorkloadKind::DaemonSet)
        ),
        e!(
            "apps",
            "v1",
            ControllerRevision,
            "controllerrevisions",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.apps.v1.ControllerRevision",
            k::apps::v1::ControllerRevision,
            generic.clone()
        ),
        // batch/v1
        e!(
            "batch",
            "v1",
            Job,
            "jobs",
            true,
            &[],
            ALL,
            &[Status],
            "io.k8s.api.batch.v1.Job",
            k::batch::v1::Job,
            strategy::job()
        ),
        e!(
            "batch",
            "v1",
            CronJob,
            "cronjobs",
            true,
            &["cj"],
            ALL,
            &[Status],
            "io.k8s.api.batch.v1.CronJob",
            k::batch::v1::CronJob,
            generic.clone()
        ),
        // rbac.authorization.k8s.io/v1
        e!(
            "rbac.authorization.k8s.io",
            "v1",
            Role,
            "roles",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.rbac.v1.Role",
            k::rbac::v1::Role,
            strategy::path_named()
        ),
        e!(
            "rbac.authorization.k8s.io",
            "v1",
            RoleBinding,
            "rolebindings",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.rbac.v1.RoleBinding",
            k::rbac::v1::RoleBinding,
            strategy::path_named()
        ),
        e!(
            "rbac.authorization.k8s.io",
            "v1",
            ClusterRole,
            "clusterroles",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.rbac.v1.ClusterRole",
            k::rbac::v1::ClusterRole,
            strategy::path_named()
        ),
        e!(
            "rbac.authorization.k8s.io",
            "v1",
            ClusterRoleBinding,
            "clusterrolebindings",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.rbac.v1.ClusterRoleBinding",
            k::rbac::v1::ClusterRoleBinding,
            strategy::path_named()
        ),
        // others
        e!(
            "coordination.k8s.io",
            "v1",
            Lease,
            "leases",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.coordination.v1.Lease",
            k::coordination::v1::Lease,
            generic.clone()
        ),
        e!(
            "discovery.k8s.io",
            "v1",
            EndpointSlice,
            "endpointslices",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.discovery.v1.EndpointSlice",
            k::discovery::v1::EndpointSlice,
            generic.clone()
        ),
        e!(
            "events.k8s.io",
            "v1",
            Event,
            "events",
            true,
            &["ev"],
            &[],
            &[],
            "io.k8s.api.events.v1.Event",
            k::events::v1::Event,
            generic.clone()
        ),
        e!(
            "networking.k8s.io",
            "v1",
            NetworkPolicy,
            "networkpolicies",
            true,
            &["netpol"],
            &[],
            &[],
            "io.k8s.api.networking.v1.NetworkPolicy",
            k::networking::v1::NetworkPolicy,
            generic.clone()
        ),
        e!(
            "networking.k8s.io",
            "v1",
            Ingress,
            "ingresses",
            true,
            &["ing"],
            &[],
            &[Status],
            "io.k8s.api.networking.v1.Ingress",
            k::networking::v1::Ingress,
            generic.clone()
        ),
        e!(
            "networking.k8s.io",
            "v1",
            IngressClass,
            "ingressclasses",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.networking.v1.IngressClass",
            k::networking::v1::IngressClass,
            generic.clone()
        ),
        e!(
            "policy",
            "v1",
            PodDisruptionBudget,
            "poddisruptionbudgets",
            true,
            &["pdb"],
            &[],
            &[Status],
            "io.k8s.api.policy.v1.PodDisruptionBudget",
            k::policy::v1::PodDisruptionBudget,
            generic.clone()
        ),
        e!(
            "scheduling.k8s.io",
            "v1",
            PriorityClass,
            "priorityclasses",
            false,
            &["pc"],
            &[],
            &[],
            "io.k8s.api.scheduling.v1.PriorityClass",
            k::scheduling::v1::PriorityClass,
            generic.clone()
        ),
        e!(
            "storage.k8s.io",
            "v1",
            StorageClass,
            "storageclasses",
            false,
            &["sc"],
            &[],
            &[],
            "io.k8s.api.storage.v1.StorageClass",
            k::storage::v1::StorageClass,
            generic.clone()
        ),
        e!(
            "storage.k8s.io",
            "v1",
            CSIDriver,
            "csidrivers",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.storage.v1.CSIDriver",
            k::storage::v1::CSIDriver,
            generic.clone()
        ),
        e!(
            "node.k8s.io",
            "v1",
            RuntimeClass,
            "runtimeclasses",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.node.v1.RuntimeClass",
            k::node::v1::RuntimeClass,
            generic.clone()
        ),
        // apiextensions.k8s.io/v1
        e!("apiextensions.k8s.io", "v1", CustomResourceDefinition, "customresourcedefinitions", false, &["crd", "crds"], &["api-extensions"], &[Status], "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition", k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition, Arc::new(crate::crd::CrdStrategy)),
        // resource.k8s.io/v1 (DRA)
        e!(
            "resource.k8s.io",
            "v1",
            DeviceClass,
            "deviceclasses",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.resource.v1.DeviceClass",
            k::resource::v1::DeviceClass,
            generic.clone()
        ),
        e!(
            "resource.k8s.io",
            "v1",
            ResourceClaim,
            "resourceclaims",
            true,
            &[],
            &[],
            &[Status],
            "io.k8s.api.resource.v1.ResourceClaim",
            k::resource::v1::ResourceClaim,
            generic.clone()
        ),
        e!(
            "resource.k8s.io",
            "v1",
            ResourceClaimTemplate,
            "resourceclaimtemplates",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.resource.v1.ResourceClaimTemplate",
            k::resource::v1::ResourceClaimTemplate,
            generic.clone()
        ),
        e!(
            "resource.k8s.io",
            "v1",
            ResourceSlice,
            "resourceslices",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.resource.v1.ResourceSlice",
            k::resource::v1::ResourceSlice,
            generic.clone()
        ),
        // Reviews: create-only, answered by the server from its authenticator and authorizer.
        e!(
            "authentication.k8s.io",
            "v1",
            TokenReview,
            "tokenreviews",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.authentication.v1.TokenReview",
            k::authentication::v1::TokenReview,
            generic.clone()
        ),
        e!(
            "authentication.k8s.io",
            "v1",
            SelfSubjectReview,
            "selfsubjectreviews",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.authentication.v1.SelfSubjectReview",
            k::authentication::v1::SelfSubjectReview,
            generic.clone()
        ),
        e!(
            "authorization.k8s.io",
            "v1",
            SubjectAccessReview,
            "subjectaccessreviews",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.authorization.v1.SubjectAccessReview",
            k::authorization::v1::SubjectAccessReview,
            generic.clone()
        ),
        e!(
            "authorization.k8s.io",
            "v1",
            SelfSubjectAccessReview,
            "selfsubjectaccessreviews",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.authorization.v1.SelfSubjectAccessReview",
            k::authorization::v1::SelfSubjectAccessReview,
            generic.clone()
        ),
        e!(
            "authorization.k8s.io",
            "v1",
            SelfSubjectRulesReview,
            "selfsubjectrulesreviews",
            false,
            &[],
            &[],
            &[],
            "io.k8s.api.authorization.v1.SelfSubjectRulesReview",
            k::authorization::v1::SelfSubjectRulesReview,
            generic.clone()
        ),
        e!(
            "authorization.k8s.io",
            "v1",
            LocalSubjectAccessReview,
            "localsubjectaccessreviews",
            true,
            &[],
            &[],
            &[],
            "io.k8s.api.authorization.v1.LocalSubjectAccessReview",
            k::authorization::v1::LocalSubjectAccessReview,
            generic.clone()
        ),
        // admissionregistration.k8s.io/v1
        e!(
            "admissionregistration.k8s.io",
            "v1",
            ValidatingAdmissionPolicy,
            "validatingadmissionpolicies",
            false,
            &[],
            &["api-extensions"],
            &[Status],
            "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy",
            k::admissionregistration::v1::ValidatingAdmissionPolicy,
            generic.clone()
        ),
        e!(
            "admissionregistration.k8s.io",
            "v1",
            ValidatingAdmissionPolicyBinding,
            "validatingadmissionpolicybindings",
            false,
            &[],
            &["api-extensions"],
            &[],
            "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
            k::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            generic
        ),
    ]
}

/// Every built-in resource definition.
pub fn all() -> Vec<ResourceDef> {
    entries()
        .into_iter()
        .map(|e| ResourceDef {
            group: e.group.into(),
            version: e.version.into(),
            kind: e.kind.into(),
            plural: e.plural.into(),
            singular: e.kind.to_ascii_lowercase(),
            namespaced: e.namespaced,
            short_names: e.short.iter().map(|s| s.to_string()).collect(),
            categories: e.categories.iter().map(|s| s.to_string()).collect(),
            subresources: e.subresources.to_vec(),
            definition: e.definition.into(),
            strategy: e.strategy,
            type_check: Some(e.type_check),
            schemas: SchemaRef::Builtin,
            scale: e
                .subresources
                .contains(&Subresource::Scale)
                .then(ScalePaths::default),
            storage_version: None,
            custom: false,
            create_only: matches!(e.group, "authentication.k8s.io" | "authorization.k8s.io"),
        })
        .collect()
}
