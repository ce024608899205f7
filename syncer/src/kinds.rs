//! The kinds the syncer moves, and where each is served.

use kube::api::{ApiResource, GroupVersionKind};

/// A kind the syncer watches, on either side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 Pod (down; status and binding up).
    Pod,
    /// core/v1 Service (down; status up).
    Service,
    /// core/v1 Endpoints of selector-less Services (down).
    Endpoints,
    /// discovery.k8s.io/v1 EndpointSlice of selector-less Services (down).
    EndpointSlice,
    /// core/v1 ConfigMap (down).
    ConfigMap,
    /// core/v1 Secret (down; service account tokens included).
    Secret,
    /// core/v1 PersistentVolumeClaim (down; status up).
    PersistentVolumeClaim,
    /// core/v1 Event (up).
    Event,
    /// core/v1 Node (up).
    Node,
    /// networking.k8s.io/v1 Ingress (down; status up) — an extra kind, synced for tenants that
    /// ask for it.
    Ingress,
    /// resource.k8s.io/v1 ResourceClaim (down; status up).
    ResourceClaim,
    /// policy/v1 PodDisruptionBudget (down; status up).
    PodDisruptionBudget,
    /// resource.k8s.io/v1 DeviceClass (up, mirrored read-only).
    DeviceClass,
    /// gateway.networking.k8s.io/v1 HTTPRoute (down; status up) — an extra kind.
    HttpRoute,
    /// gateway.networking.k8s.io/v1 GRPCRoute (down; status up) — an extra kind.
    GrpcRoute,
    /// gateway.networking.k8s.io/v1beta1 ReferenceGrant (watched in the tenant only, while
    /// routes are synced: it decides which cross-namespace backends a route may name).
    ReferenceGrant,
    /// scheduling.x-k8s.io/v1alpha1 PodGroup of the coscheduling plugin (watched in the tenant
    /// only: its `minMember` sizes the gang of the pods naming it).
    CoschedulingPodGroup,
    /// scheduling.volcano.sh/v1beta1 PodGroup (watched in the tenant only, as above).
    VolcanoPodGroup,
    /// batch/v1 Job (watched in the tenant only: a Job's parallelism is the gang of its pods).
    Job,
    /// jobset.x-k8s.io/v1alpha2 JobSet (watched in the tenant only: all its Jobs' pods are one
    /// gang).
    JobSet,
}

impl Kind {
    /// The kinds copied from tenant to host.
    pub const DOWN: [Kind; 9] = [
        Kind::Pod,
        Kind::Service,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::ConfigMap,
        Kind::Secret,
        Kind::PersistentVolumeClaim,
        Kind::ResourceClaim,
        Kind::PodDisruptionBudget,
    ];

    /// Every kind watched on the host.
    pub const HOST: [Kind; 12] = [
        Kind::Pod,
        Kind::Service,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::ConfigMap,
        Kind::Secret,
        Kind::PersistentVolumeClaim,
        Kind::Event,
        Kind::Node,
        Kind::ResourceClaim,
        Kind::DeviceClass,
        Kind::PodDisruptionBudget,
    ];

    /// The host kinds that may not be served (`resource.k8s.io/v1` before Kubernetes 1.34):
    /// such a host has none of them, and what needs them waits.
    pub fn optional(self) -> bool {
        matches!(
            self,
            Kind::ResourceClaim
                | Kind::DeviceClass
                | Kind::HttpRoute
                | Kind::GrpcRoute
                | Kind::ReferenceGrant
                | Kind::CoschedulingPodGroup
                | Kind::VolcanoPodGroup
                | Kind::JobSet
        )
    }

    /// The tenant-only kinds whose objects size gangs ([`crate::gangs`]).
    pub const GANG_OBJECTS: [Kind; 4] = [
        Kind::CoschedulingPodGroup,
        Kind::VolcanoPodGroup,
        Kind::Job,
        Kind::JobSet,
    ];

    /// The kinds a Tenant may add to the synced set (`spec.sync.extraKinds`).
    pub const EXTRA: [Kind; 3] = [Kind::Ingress, Kind::HttpRoute, Kind::GrpcRoute];

    /// Whether the kind is a Gateway API route.
    pub fn is_route(self) -> bool {
        matches!(self, Kind::HttpRoute | Kind::GrpcRoute)
    }

    /// The extra kind a Tenant's `spec.sync.extraKinds` entry (`<resource>.<group>`) names.
    pub fn from_extra_name(name: &str) -> Option<Kind> {
        Kind::EXTRA.into_iter().find(|k| k.extra_name() == name)
    }

    /// `<resource>.<group>` (`<resource>` for the core group).
    pub fn extra_name(self) -> String {
        let r = self.api_resource();
        if r.group.is_empty() {
            r.plural
        } else {
            format!("{}.{}", r.plural, r.group)
        }
    }

    /// The API resource of the kind.
    pub fn api_resource(self) -> ApiResource {
        let (group, kind, plural) = match self {
            Kind::HttpRoute => (crate::routes::GROUP, "HTTPRoute", "httproutes"),
            Kind::GrpcRoute => (crate::routes::GROUP, "GRPCRoute", "grpcroutes"),
            Kind::ReferenceGrant => {
                return ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(crate::routes::GROUP, "v1beta1", "ReferenceGrant"),
                    "referencegrants",
                )
            }
            Kind::CoschedulingPodGroup => {
                return ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
                    "podgroups",
                )
            }
            Kind::VolcanoPodGroup => {
                return ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup"),
                    "podgroups",
                )
            }
            Kind::JobSet => {
                return ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
                    "jobsets",
                )
            }
            Kind::Job => ("batch", "Job", "jobs"),
            Kind::Pod => ("", "Pod", "pods"),
            Kind::Service => ("", "Service", "services"),
            Kind::Endpoints => ("", "Endpoints", "endpoints"),
            Kind::EndpointSlice => ("discovery.k8s.io", "EndpointSlice", "endpointslices"),
            Kind::ConfigMap => ("", "ConfigMap", "configmaps"),
            Kind::Secret => ("", "Secret", "secrets"),
            Kind::PersistentVolumeClaim => ("", "PersistentVolumeClaim", "persistentvolumeclaims"),
            Kind::Event => ("", "Event", "events"),
            Kind::Node => ("", "Node", "nodes"),
            Kind::Ingress => ("networking.k8s.io", "Ingress", "ingresses"),
            Kind::ResourceClaim => ("resource.k8s.io", "ResourceClaim", "resourceclaims"),
            Kind::PodDisruptionBudget => ("policy", "PodDisruptionBudget", "poddisruptionbudgets"),
            Kind::DeviceClass => ("resource.k8s.io", "DeviceClass", "deviceclasses"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
    }

    /// The kind an Event's `involvedObject.kind` names, among those synced down.
    pub fn from_kind_name(kind: &str) -> Option<Kind> {
        Kind::DOWN
            .into_iter()
            .find(|k| k.api_resource().kind == kind)
    }

    /// Whether the kind is cluster-scoped.
    pub fn cluster_scoped(self) -> bool {
        matches!(self, Kind::Node | Kind::DeviceClass)
    }

    /// Whether the host's objects of the kind are shared by every tenant (not per tenant).
    pub fn shared_on_host(self) -> bool {
        self.cluster_scoped()
    }
}
