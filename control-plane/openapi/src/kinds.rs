//! The table of built-in kinds: the one list from which the API server's catalog, the schema
//! registration of [`Definitions::builtin`](crate::Definitions::builtin) and
//! [`builtin_resources`](crate::builtin_resources) are all derived.
//!
//! A row names the k8s-openapi type of its kind; group, version, kind, plural, scope, schema
//! and typed decoding come from that type, so a kind cannot be served without its schema.
//! The row adds what the type does not say: short names, categories, subresources and verbs.

use std::borrow::Cow;

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, coordination,
    core, discovery, events, networking, node, policy, rbac, resource, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
use k8s_openapi::{ClusterResourceScope, ListableResource, NamespaceResourceScope, Resource};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::builtin::Collector;
use crate::resource::ResourceDoc;
use crate::subresource::Subresource::{
    self, Attach, Binding, Eviction, Exec, Finalize, Log, PortForward, Scale, Status, Token,
};

/// Checks that a JSON object decodes as a kind's typed structure (the types of every field).
pub type TypeCheck = fn(&Value) -> Result<(), serde_json::Error>;

/// The verbs of a kind's main resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbs {
    /// An ordinary stored resource: every verb, and a `<Kind>List`.
    All,
    /// A review (access reviews, token reviews): only `create`, answered without storing.
    CreateOnly,
}

impl Verbs {
    /// The verb names, sorted.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Verbs::All => &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            Verbs::CreateOnly => &["create"],
        }
    }
}

/// One built-in kind.
pub struct BuiltinKind {
    /// API group; empty for core.
    pub group: &'static str,
    /// Served (and stored) version.
    pub version: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: &'static [&'static str],
    /// Categories (`all`).
    pub categories: &'static [&'static str],
    /// Subresources served.
    pub subresources: &'static [Subresource],
    /// Verbs of the main resource.
    pub verbs: Verbs,
    /// Decodes into the kind's k8s-openapi struct.
    pub type_check: TypeCheck,
    /// The kind's definition name (its schemars schema name).
    schema_name: fn() -> Cow<'static, str>,
    /// Registers the kind's schema (and its list's) with the generator.
    pub(crate) register: fn(&mut Collector),
}

impl std::fmt::Debug for BuiltinKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BuiltinKind({}/{} {})",
            self.group, self.version, self.kind
        )
    }
}

/// Whether a k8s-openapi resource scope is a namespace's.
trait Scope {
    const NAMESPACED: bool;
}

impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

fn decodes<T: DeserializeOwned>(v: &Value) -> Result<(), serde_json::Error> {
    T::deserialize(v).map(|_| ())
}

/// An ordinary kind `T` ([`Verbs::All`]), with no short names, categories or subresources.
const fn crud<T>() -> BuiltinKind
where
    T: ListableResource + JsonSchema + DeserializeOwned,
    T::Scope: Scope,
{
    BuiltinKind {
        register: Collector::listable::<T>,
        verbs: Verbs::All,
        ..review::<T>()
    }
}

/// A review kind `T` ([`Verbs::CreateOnly`]).
const fn review<T>() -> BuiltinKind
where
    T: Resource + JsonSchema + DeserializeOwned,
    T::Scope: Scope,
{
    BuiltinKind {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names: &[],
        categories: &[],
        subresources: &[],
        verbs: Verbs::CreateOnly,
        type_check: decodes::<T>,
        schema_name: T::schema_name,
        register: Collector::kind::<T>,
    }
}

/// The `all` category.
const ALL: &[&str] = &["all"];

/// The `api-extensions` category.
const API_EXTENSIONS: &[&str] = &["api-extensions"];

/// Every built-in kind.
static KINDS: &[BuiltinKind] = &[
    // core/v1
    BuiltinKind {
        short_names: &["ns"],
        subresources: &[Status, Finalize],
        ..crud::<core::v1::Namespace>()
    },
    BuiltinKind {
        short_names: &["po"],
        categories: ALL,
        subresources: &[Status, Binding, Eviction, Log, Exec, Attach, PortForward],
        ..crud::<core::v1::Pod>()
    },
    BuiltinKind {
        short_names: &["svc"],
        categories: ALL,
        subresources: &[Status],
        ..crud::<core::v1::Service>()
    },
    BuiltinKind {
        short_names: &["ep"],
        ..crud::<core::v1::Endpoints>()
    },
    BuiltinKind {
        short_names: &["cm"],
        ..crud::<core::v1::ConfigMap>()
    },
    crud::<core::v1::Secret>(),
    BuiltinKind {
        short_names: &["sa"],
        subresources: &[Token],
        ..crud::<core::v1::ServiceAccount>()
    },
    BuiltinKind {
        short_names: &["ev"],
        ..crud::<core::v1::Event>()
    },
    BuiltinKind {
        short_names: &["pvc"],
        subresources: &[Status],
        ..crud::<core::v1::PersistentVolumeClaim>()
    },
    BuiltinKind {
        short_names: &["pv"],
        subresources: &[Status],
        ..crud::<core::v1::PersistentVolume>()
    },
    BuiltinKind {
        short_names: &["no"],
        subresources: &[Status],
        ..crud::<core::v1::Node>()
    },
    BuiltinKind {
        short_names: &["quota"],
        subresources: &[Status],
        ..crud::<core::v1::ResourceQuota>()
    },
    BuiltinKind {
        short_names: &["limits"],
        ..crud::<core::v1::LimitRange>()
    },
    crud::<core::v1::PodTemplate>(),
    // apps/v1
    BuiltinKind {
        short_names: &["deploy"],
        categories: ALL,
        subresources: &[Status, Scale],
        ..crud::<apps::v1::Deployment>()
    },
    BuiltinKind {
        short_names: &["rs"],
        categories: ALL,
        subresources: &[Status, Scale],
        ..crud::<apps::v1::ReplicaSet>()
    },
    BuiltinKind {
        short_names: &["sts"],
        categories: ALL,
        subresources: &[Status, Scale],
        ..crud::<apps::v1::StatefulSet>()
    },
    BuiltinKind {
        short_names: &["ds"],
        categories: ALL,
        subresources: &[Status],
        ..crud::<apps::v1::DaemonSet>()
    },
    crud::<apps::v1::ControllerRevision>(),
    // batch/v1
    BuiltinKind {
        categories: ALL,
        subresources: &[Status],
        ..crud::<batch::v1::Job>()
    },
    BuiltinKind {
        short_names: &["cj"],
        categories: ALL,
        subresources: &[Status],
        ..crud::<batch::v1::CronJob>()
    },
    // autoscaling/v2
    BuiltinKind {
        short_names: &["hpa"],
        categories: ALL,
        subresources: &[Status],
        ..crud::<autoscaling::v2::HorizontalPodAutoscaler>()
    },
    // autoscaling/v1 (the same objects, converted: see the API server's HPA strategy)
    BuiltinKind {
        short_names: &["hpa"],
        categories: ALL,
        subresources: &[Status],
        ..crud::<autoscaling::v1::HorizontalPodAutoscaler>()
    },
    // rbac.authorization.k8s.io/v1
    crud::<rbac::v1::Role>(),
    crud::<rbac::v1::RoleBinding>(),
    crud::<rbac::v1::ClusterRole>(),
    crud::<rbac::v1::ClusterRoleBinding>(),
    // others
    crud::<coordination::v1::Lease>(),
    crud::<discovery::v1::EndpointSlice>(),
    BuiltinKind {
        short_names: &["ev"],
        ..crud::<events::v1::Event>()
    },
    BuiltinKind {
        short_names: &["netpol"],
        ..crud::<networking::v1::NetworkPolicy>()
    },
    BuiltinKind {
        short_names: &["ing"],
        subresources: &[Status],
        ..crud::<networking::v1::Ingress>()
    },
    crud::<networking::v1::IngressClass>(),
    BuiltinKind {
        short_names: &["pdb"],
        subresources: &[Status],
        ..crud::<policy::v1::PodDisruptionBudget>()
    },
    BuiltinKind {
        short_names: &["pc"],
        ..crud::<scheduling::v1::PriorityClass>()
    },
    BuiltinKind {
        short_names: &["sc"],
        ..crud::<storage::v1::StorageClass>()
    },
    crud::<storage::v1::CSIDriver>(),
    crud::<node::v1::RuntimeClass>(),
    // apiextensions.k8s.io/v1
    BuiltinKind {
        short_names: &["crd", "crds"],
        categories: API_EXTENSIONS,
        subresources: &[Status],
        ..crud::<apiextensions::CustomResourceDefinition>()
    },
    // resource.k8s.io/v1 (DRA)
    crud::<resource::v1::DeviceClass>(),
    BuiltinKind {
        subresources: &[Status],
        ..crud::<resource::v1::ResourceClaim>()
    },
    crud::<resource::v1::ResourceClaimTemplate>(),
    crud::<resource::v1::ResourceSlice>(),
    // Reviews: create-only, answered by the server from its authenticator and authorizer.
    review::<authentication::v1::TokenReview>(),
    review::<authentication::v1::SelfSubjectReview>(),
    review::<authorization::v1::SubjectAccessReview>(),
    review::<authorization::v1::SelfSubjectAccessReview>(),
    review::<authorization::v1::SelfSubjectRulesReview>(),
    review::<authorization::v1::LocalSubjectAccessReview>(),
    // admissionregistration.k8s.io/v1
    BuiltinKind {
        categories: API_EXTENSIONS,
        subresources: &[Status],
        ..crud::<admissionregistration::v1::ValidatingAdmissionPolicy>()
    },
    BuiltinKind {
        categories: API_EXTENSIONS,
        ..crud::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
    },
    BuiltinKind {
        categories: API_EXTENSIONS,
        ..crud::<admissionregistration::v1::ValidatingWebhookConfiguration>()
    },
    BuiltinKind {
        categories: API_EXTENSIONS,
        ..crud::<admissionregistration::v1::MutatingWebhookConfiguration>()
    },
    // apiregistration.k8s.io/v1: API aggregation.
    BuiltinKind {
        categories: API_EXTENSIONS,
        subresources: &[Status],
        ..crud::<apiregistration::APIService>()
    },
];

/// Every built-in kind Fabrik serves.
pub fn builtin_kinds() -> &'static [BuiltinKind] {
    KINDS
}

impl BuiltinKind {
    /// Singular name (lower-case kind).
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// OpenAPI definition name of the kind (`io.k8s.api.core.v1.Pod`).
    pub fn definition(&self) -> String {
        (self.schema_name)().into_owned()
    }

    /// OpenAPI definition name of the list kind (`io.k8s.api.core.v1.PodList`); only
    /// [`Verbs::All`] kinds have that schema.
    pub fn list_definition(&self) -> String {
        format!("{}List", self.definition())
    }

    /// Its description for the OpenAPI documents.
    pub fn doc(&self) -> ResourceDoc {
        let definition = self.definition();
        ResourceDoc {
            group: self.group.to_owned(),
            version: self.version.to_owned(),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
            namespaced: self.namespaced,
            verbs: self.verbs.names().iter().map(|v| (*v).to_owned()).collect(),
            subresources: self
                .subresources
                .iter()
                .map(|s| s.doc(&definition))
                .collect(),
            list_definition: self.list_definition(),
            definition,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::gvk::gvks;
    use crate::Definitions;

    #[test]
    fn every_kind_has_its_schemas() {
        let defs = Definitions::builtin();
        for kind in builtin_kinds() {
            let definition = kind.definition();
            assert_eq!(
                defs.find_by_gvk(kind.group, kind.version, kind.kind),
                Some(definition.as_str()),
                "{kind:?}"
            );
            if kind.verbs == Verbs::All {
                let list = format!("{}List", kind.kind);
                assert_eq!(
                    defs.find_by_gvk(kind.group, kind.version, &list),
                    Some(kind.list_definition().as_str()),
                    "{kind:?}"
                );
            }
            for sub in kind.subresources {
                let body = sub.body(&definition);
                assert!(defs.get(body).is_some(), "{kind:?} {}: {body}", sub.name());
            }
        }
    }

    #[test]
    fn every_kind_schema_belongs_to_a_kind() {
        let mut known = BTreeSet::new();
        for kind in builtin_kinds() {
            let definition = kind.definition();
            known.insert(kind.list_definition());
            known.extend(
                kind.subresources
                    .iter()
                    .map(|s| s.body(&definition).to_owned()),
            );
            known.insert(definition);
        }
        for (name, schema) in Definitions::builtin().schemas() {
            let is_kind = gvks(schema).next().is_some();
            let meta = name.starts_with("io.k8s.apimachinery.");
            assert!(!is_kind || meta || known.contains(name), "{name}");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut paths = BTreeSet::new();
        let mut kinds = BTreeSet::new();
        for kind in builtin_kinds() {
            assert!(
                paths.insert((kind.group, kind.version, kind.plural)),
                "{kind:?}"
            );
            assert!(
                kinds.insert((kind.group, kind.version, kind.kind)),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn scope_and_names_come_from_the_type() {
        let pod = builtin_kinds().iter().find(|k| k.kind == "Pod");
        let pod = pod.map(|k| (k.group, k.version, k.plural, k.namespaced, k.singular()));
        assert_eq!(pod, Some(("", "v1", "pods", true, "pod".to_owned())));
        let review = builtin_kinds().iter().find(|k| k.kind == "TokenReview");
        assert_eq!(review.map(|k| k.verbs.names()), Some(&["create"][..]));
    }
}
