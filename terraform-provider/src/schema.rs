//! The schemas this provider serves: its configuration, the `fabrik_tenant` resource and the
//! `fabrik_tenant` and `fabrik_tenant_kubeconfig` data sources. One description drives both the
//! protocol's `Schema` messages and the types values are decoded with.

use crate::proto::tfplugin6 as pb;
use crate::value::Ty;

/// Name of the managed resource.
pub const TENANT: &str = "fabrik_tenant";
/// Name of the kubeconfig data source.
pub const TENANT_KUBECONFIG: &str = "fabrik_tenant_kubeconfig";

/// How an attribute is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The configuration must set it.
    Required,
    /// The configuration may set it.
    Optional,
    /// The provider sets it.
    Computed,
}

/// What an attribute holds.
#[derive(Clone, Debug)]
pub enum Kind {
    /// A value of a plain type.
    Plain(Ty),
    /// A single object of nested attributes (`quota = { ... }`).
    Nested(Vec<Attr>),
}

/// One attribute.
#[derive(Clone, Debug)]
pub struct Attr {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Who sets it.
    pub mode: Mode,
    /// Whether Terraform hides it in output.
    pub sensitive: bool,
    /// Markdown description (also the registry docs' source of truth).
    pub description: &'static str,
}

impl Attr {
    fn new(name: &'static str, kind: Kind, mode: Mode, description: &'static str) -> Attr {
        Attr {
            name,
            kind,
            mode,
            sensitive: false,
            description,
        }
    }

    fn sensitive(mut self) -> Attr {
        self.sensitive = true;
        self
    }

    /// The attribute's Terraform type.
    pub fn ty(&self) -> Ty {
        match &self.kind {
            Kind::Plain(t) => t.clone(),
            Kind::Nested(attrs) => object_ty(attrs),
        }
    }

    fn to_proto(&self) -> pb::schema::Attribute {
        let (ty, nested_type) = match &self.kind {
            Kind::Plain(t) => (t.to_json().to_string().into_bytes(), None),
            Kind::Nested(attrs) => (
                Vec::new(),
                Some(pb::schema::Object {
                    attributes: attrs.iter().map(Attr::to_proto).collect(),
                    nesting: pb::schema::object::NestingMode::Single as i32,
                }),
            ),
        };
        pb::schema::Attribute {
            name: self.name.to_string(),
            r#type: ty,
            nested_type,
            description: self.description.to_string(),
            required: self.mode == Mode::Required,
            optional: self.mode == Mode::Optional,
            computed: self.mode == Mode::Computed,
            sensitive: self.sensitive,
            description_kind: pb::StringKind::Markdown as i32,
            deprecated: false,
            write_only: false,
        }
    }
}

/// The object type of a list of attributes.
pub fn object_ty(attrs: &[Attr]) -> Ty {
    Ty::Object(attrs.iter().map(|a| (a.name.to_string(), a.ty())).collect())
}

/// A schema: a version and the top-level attributes.
#[derive(Clone, Debug)]
pub struct Schema {
    /// Schema version (recorded in state; see `UpgradeResourceState`).
    pub version: i64,
    /// Markdown description.
    pub description: &'static str,
    /// Top-level attributes.
    pub attrs: Vec<Attr>,
}

impl Schema {
    /// The type of a whole value of this schema.
    pub fn ty(&self) -> Ty {
        object_ty(&self.attrs)
    }

    /// The protocol message.
    pub fn to_proto(&self) -> pb::Schema {
        pb::Schema {
            version: self.version,
            block: Some(pb::schema::Block {
                version: self.version,
                attributes: self.attrs.iter().map(Attr::to_proto).collect(),
                block_types: Vec::new(),
                description: self.description.to_string(),
                description_kind: pb::StringKind::Markdown as i32,
                deprecated: false,
            }),
        }
    }
}

fn string(name: &'static str, mode: Mode, description: &'static str) -> Attr {
    Attr::new(name, Kind::Plain(Ty::String), mode, description)
}

fn number(name: &'static str, mode: Mode, description: &'static str) -> Attr {
    Attr::new(name, Kind::Plain(Ty::Number), mode, description)
}

fn strings(name: &'static str, mode: Mode, description: &'static str) -> Attr {
    Attr::new(
        name,
        Kind::Plain(Ty::List(Box::new(Ty::String))),
        mode,
        description,
    )
}

/// The provider's configuration.
pub fn provider() -> Schema {
    use Mode::Optional;
    Schema {
        version: 0,
        description: "Fabrik tenants on a host cluster. The host is reached with a kubeconfig \
            (`config_path`, `config_context`), inline credentials (`host` and certificates), or \
            the `KUBECONFIG` environment variable.",
        attrs: vec![
            string(
                "config_path",
                Optional,
                "Path of the host kubeconfig (e.g. `.fabrik/host.kubeconfig` of `fabrik up`).",
            ),
            string(
                "config_context",
                Optional,
                "Context of the kubeconfig to use (default: its current context).",
            ),
            string(
                "host",
                Optional,
                "URL of the host API server (instead of a kubeconfig).",
            ),
            string(
                "cluster_ca_certificate",
                Optional,
                "PEM CA certificate of the host API server (with `host`).",
            ),
            string(
                "client_certificate",
                Optional,
                "PEM client certificate (with `host`).",
            ),
            string(
                "client_key",
                Optional,
                "PEM private key of `client_certificate`.",
            )
            .sensitive(),
            string("token", Optional, "Bearer token (with `host`).").sensitive(),
        ],
    }
}

fn spec_attrs(mode: Mode) -> Vec<Attr> {
    use Mode::Optional as O;
    // In data sources every spec field is computed; in the resource it is optional.
    let m = |_: Mode| {
        if mode == Mode::Computed {
            Mode::Computed
        } else {
            O
        }
    };
    vec![
        strings("owners", m(O), "Users (`alice`, `oidc:alice@example.com`) and groups (`group:ml`) who are `cluster-admin` inside the tenant."),
        Attr::new("quota", Kind::Nested(vec![
            string("cpu", m(O), "CPU requests, as a quantity (`16`, `500m`)."),
            string("memory", m(O), "Memory requests, as a quantity (`64Gi`)."),
            number("pods", m(O), "Number of pods."),
            number("gpus", m(O), "GPUs: whole GPUs, MIG slices or shared slices, per `gpu_sharing`."),
            string("gpu_sharing", m(O), "What `nvidia.com/gpu` is: `whole`, `mig:<profile>` (e.g. `mig:1g.18gb`), `share:<memory MiB>,<compute %>` (e.g. `share:8192,25`) or `timeslice`."),
            strings("gpu_types", m(O), "Further GPU kinds the tenant may request by NVIDIA's names, same syntax: `mig:1g.18gb` as `nvidia.com/mig-1g.18gb`, `timeslice` or `share:…` as `nvidia.com/gpu.shared`, `whole` as `nvidia.com/gpu`."),
            number("node_ports", m(O), "Node ports the tenant may hold (`services.nodeports`: a `NodePort` or `LoadBalancer` Service takes one per port; host node ports are shared by every tenant). 0 when unset."),
            number("load_balancers", m(O), "`LoadBalancer` Services the tenant may have (`services.loadbalancers`). 0 when unset."),
            string("storage", m(O), "Bytes the tenant's objects may take in the control plane's store, as a quantity (`512Mi`). A default applies when unset."),
            number("objects", m(O), "Objects the tenant may keep in the control plane's store. A default applies when unset."),
        ]), m(O), "Resources the tenant may use on the host."),
        Attr::new("isolation", Kind::Nested(vec![
            Attr::new("node_selector", Kind::Plain(Ty::Map(Box::new(Ty::String))), m(O), "Node labels the tenant's pods are pinned to (its node pool)."),
            Attr::new("dedicated_nodes", Kind::Plain(Ty::Bool), m(O), "Whether the pool's nodes are the tenant's alone (tainted for it)."),
            string("runtime_class", m(O), "RuntimeClass of the tenant's pods (e.g. a sandboxed runtime)."),
            strings("allow", m(O), "Privileges allowed (none by default): `privileged`, `hostNamespaces`, `hostPath`."),
            strings("ingress_classes", m(O), "Host IngressClasses the tenant's synced Ingresses may name (none by default)."),
            strings("external_names", m(O), "DNS names the tenant's `ExternalName` Services may point at (none by default); `*.example.com` allows every name under `example.com`."),
            strings("webhook_targets", m(O), "Where the tenant's `url` admission webhooks may call (none by default): DNS names, `*.example.com`, IP addresses or CIDRs. Loopback, link-local and the control plane's addresses are never called; private ranges only where an entry names them."),
            strings("gateways", m(O), "Host Gateways (`namespace/name`) the tenant's synced HTTPRoutes and GRPCRoutes may attach to (none by default)."),
            strings("route_hostnames", m(O), "Hostnames the tenant's synced Ingresses and routes may claim (`*.example.com` for every name under it); a route naming none gets these, an Ingress rule without a host is refused. Empty: whatever the controllers and Gateways accept."),
        ]), m(O), "Where and how the tenant's pods run."),
        Attr::new("network", Kind::Nested(vec![
            number("segment", m(O), "Segment identifier (a VXLAN VNI or VLAN id on the fast fabric)."),
        ]), m(O), "The tenant's network segment."),
        Attr::new("sync", Kind::Nested(vec![
            strings("extra_kinds", m(O), "`<resource>.<group>` of kinds synced down besides the built-in set."),
        ]), m(O), "What is synced besides the built-in kinds."),
        Attr::new("queue", Kind::Nested(vec![
            number("borrowing_limit", m(O), "GPUs of each of its kinds the tenant may hold beyond its guarantee (`quota.gpus`) while others leave theirs idle; reclaimed when their owners need them. 0 when unset."),
            number("lending_limit", m(O), "Of its idle guaranteed GPUs, how many of each kind others may borrow. Unset: all."),
            number("weight", m(O), "The tenant's weight when idle GPUs are shared among borrowers (1 to 1000; 1 when unset)."),
            string("parent", m(O), "The group (a department of several tenants) the tenant belongs to: its members' idle guaranteed GPUs go to each other first, and the group shares the rest as one claimant."),
        ]), m(O), "The tenant's place in the shared GPU queue."),
    ]
}

/// Description of the tenant name attribute.
const NAME_DOC: &str =
    "Tenant name: a DNS label of at most 40 characters. Changing it replaces the tenant.";

/// The `fabrik_tenant` resource.
pub fn tenant_resource() -> Schema {
    use Mode::{Computed, Optional, Required};
    let mut attrs = vec![
        string("id", Computed, "The tenant name."),
        string("name", Required, NAME_DOC),
    ];
    attrs.extend(spec_attrs(Optional));
    attrs.extend([
        number("ready_timeout", Optional, "Seconds to wait for the tenant to become `Ready` after a create or an update, and to disappear after a destroy (default 180)."),
        string("endpoint", Computed, "URL of the tenant's API (`https://<listener>/clusters/<name>`)."),
        string("phase", Computed, "`Pending`, `Ready`, `Terminating` or `Failed`."),
        string("kubeconfig", Computed, "The tenant's admin kubeconfig (YAML).").sensitive(),
    ]);
    Schema {
        version: 0,
        description: "A Fabrik tenant: one team's Kubernetes-compatible cluster on the shared \
            host (a `tenants.fabrik.dev/v1alpha1` Tenant). Create waits until it is `Ready` and \
            exposes its admin kubeconfig.",
        attrs,
    }
}

/// The `fabrik_tenant` data source.
pub fn tenant_data_source() -> Schema {
    use Mode::{Computed, Required};
    let mut attrs = vec![
        string("id", Computed, "The tenant name."),
        string("name", Required, "Name of the tenant to read."),
    ];
    attrs.extend(spec_attrs(Computed));
    attrs.extend([
        string("endpoint", Computed, "URL of the tenant's API."),
        string(
            "phase",
            Computed,
            "`Pending`, `Ready`, `Terminating` or `Failed`.",
        ),
    ]);
    Schema {
        version: 0,
        description: "Reads an existing tenant: its spec and status.",
        attrs,
    }
}

/// The `fabrik_tenant_kubeconfig` data source.
pub fn tenant_kubeconfig_data_source() -> Schema {
    use Mode::{Computed, Required};
    Schema {
        version: 0,
        description: "The admin kubeconfig of an existing, `Ready` tenant.",
        attrs: vec![
            string("id", Computed, "The tenant name."),
            string("name", Required, "Name of the tenant."),
            string("endpoint", Computed, "URL of the tenant's API."),
            string(
                "kubeconfig",
                Computed,
                "The tenant's admin kubeconfig (YAML).",
            )
            .sensitive(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_attributes_are_single_objects() {
        let s = tenant_resource().to_proto();
        let block = s.block.expect("block");
        let quota = block
            .attributes
            .iter()
            .find(|a| a.name == "quota")
            .expect("quota");
        assert!(quota.r#type.is_empty());
        let nested = quota.nested_type.as_ref().expect("nested");
        assert_eq!(
            nested.nesting,
            pb::schema::object::NestingMode::Single as i32
        );
        assert!(nested
            .attributes
            .iter()
            .any(|a| a.name == "gpu_sharing" && a.optional));
        let kubeconfig = block
            .attributes
            .iter()
            .find(|a| a.name == "kubeconfig")
            .expect("kubeconfig");
        assert!(kubeconfig.sensitive && kubeconfig.computed && !kubeconfig.optional);
        let name = block
            .attributes
            .iter()
            .find(|a| a.name == "name")
            .expect("name");
        assert_eq!(name.r#type, b"\"string\"");
        assert!(name.required);
    }

    #[test]
    fn data_source_spec_is_computed() {
        let s = tenant_data_source();
        let Some(Attr {
            kind: Kind::Nested(q),
            mode,
            ..
        }) = s.attrs.iter().find(|a| a.name == "quota")
        else {
            panic!("quota is nested");
        };
        assert_eq!(*mode, Mode::Computed);
        assert!(q.iter().all(|a| a.mode == Mode::Computed));
    }
}
