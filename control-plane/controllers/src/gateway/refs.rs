//! Backend references: whether every `backendRef` of a route resolves, which is the route's
//! `ResolvedRefs` condition. A reference resolves when it names a core Service that exists,
//! in the route's namespace or in one whose ReferenceGrants let the route in.
//!
//! Everything here is pure: the route's references, the Services and the grants in, the first
//! problem (if any) out.

use serde::Deserialize;

use super::attach::{RouteKind, GROUP};

/// A `backendRef` (of a rule, or of a `RequestMirror` filter).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendRef {
    /// The referent's group; none: core.
    pub group: Option<String>,
    /// The referent's kind; none: `Service`.
    pub kind: Option<String>,
    /// The referent's name.
    pub name: String,
    /// The referent's namespace; none: the route's.
    pub namespace: Option<String>,
    /// The filters of this backend (a `RequestMirror` among them names one more backend).
    pub filters: Vec<Filter>,
}

/// A route filter, as far as references go.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Filter {
    /// A `RequestMirror` filter's settings.
    pub request_mirror: Option<Mirror>,
}

/// `requestMirror`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Mirror {
    /// Where requests are mirrored to.
    pub backend_ref: BackendRef,
}

/// A route rule, as far as references go.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    /// The rule's backends.
    pub backend_refs: Vec<BackendRef>,
    /// The rule's filters.
    pub filters: Vec<Filter>,
}

/// Every backend a route's rules name: each rule's backends and the mirrors of its filters and
/// of its backends' filters, in the order written.
pub fn backend_refs(rules: &[Rule]) -> Vec<&BackendRef> {
    fn mirrors(filters: &[Filter]) -> impl Iterator<Item = &BackendRef> {
        filters
            .iter()
            .filter_map(|f| f.request_mirror.as_ref().map(|m| &m.backend_ref))
    }
    rules
        .iter()
        .flat_map(|r| {
            r.backend_refs
                .iter()
                .flat_map(|b| std::iter::once(b).chain(mirrors(&b.filters)))
                .chain(mirrors(&r.filters))
        })
        .collect()
}

/// A ReferenceGrant (`gateway.networking.k8s.io/v1beta1`): in its namespace, lets the `from`
/// objects refer to the `to` objects.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Grant {
    /// The grant's namespace (filled in from its metadata, not its spec).
    #[serde(skip)]
    pub namespace: String,
    /// Who may refer.
    pub from: Vec<GrantFrom>,
    /// To what.
    pub to: Vec<GrantTo>,
}

/// `spec.from[]` of a ReferenceGrant.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrantFrom {
    /// The referrer's group.
    pub group: String,
    /// The referrer's kind.
    pub kind: String,
    /// The referrer's namespace.
    pub namespace: String,
}

/// `spec.to[]` of a ReferenceGrant.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrantTo {
    /// The referent's group (`""`: core).
    pub group: String,
    /// The referent's kind.
    pub kind: String,
    /// The referent's name; none or empty: every object of the kind.
    pub name: Option<String>,
}

/// Whether a grant in `to_ns` lets `kind` routes of `from_ns` refer to the Service `name`.
pub fn permitted(
    grants: &[Grant],
    kind: RouteKind,
    from_ns: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    grants.iter().filter(|g| g.namespace == to_ns).any(|g| {
        g.from
            .iter()
            .any(|f| f.group == GROUP && f.kind == kind.name() && f.namespace == from_ns)
            && g.to.iter().any(|t| {
                t.group.is_empty()
                    && t.kind == "Service"
                    && t.name.as_deref().is_none_or(|n| n.is_empty() || n == name)
            })
    })
}

/// Why a reference does not resolve: the reason of the route's `ResolvedRefs=False`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// Not a core Service.
    InvalidKind,
    /// In another namespace, and no ReferenceGrant there allows it.
    RefNotPermitted,
    /// The Service does not exist.
    BackendNotFound,
}

impl Unresolved {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Unresolved::InvalidKind => "InvalidKind",
            Unresolved::RefNotPermitted => "RefNotPermitted",
            Unresolved::BackendNotFound => "BackendNotFound",
        }
    }
}

/// The first reference of a route that does not resolve: why, and a message naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Why.
    pub why: Unresolved,
    /// What the condition's message says.
    pub message: String,
}

/// Checks a route's backend references in order; the first that does not resolve decides the
/// outcome (none: `ResolvedRefs=True`). `service_exists(namespace, name)` says whether the
/// Service exists.
pub fn resolve(
    kind: RouteKind,
    route_ns: &str,
    refs: &[&BackendRef],
    grants: &[Grant],
    service_exists: impl Fn(&str, &str) -> bool,
) -> Option<Problem> {
    refs.iter().find_map(|r| {
        let group = r.group.as_deref().unwrap_or("");
        let ref_kind = r.kind.as_deref().unwrap_or("Service");
        let ns = r.namespace.as_deref().unwrap_or(route_ns);
        let (why, message) = if !group.is_empty() || ref_kind != "Service" {
            let gk = if group.is_empty() {
                ref_kind.to_string()
            } else {
                format!("{ref_kind}.{group}")
            };
            (
                Unresolved::InvalidKind,
                format!(
                    "backendRef {gk} {ns}/{}: only core Services are supported",
                    r.name
                ),
            )
        } else if ns != route_ns && !permitted(grants, kind, route_ns, ns, &r.name) {
            (
                Unresolved::RefNotPermitted,
                format!(
                    "backendRef Service {ns}/{}: no ReferenceGrant in {ns} allows {} of {route_ns}",
                    r.name,
                    kind.name()
                ),
            )
        } else if !service_exists(ns, &r.name) {
            (
                Unresolved::BackendNotFound,
                format!("backendRef Service {ns}/{} not found", r.name),
            )
        } else {
            return None;
        };
        Some(Problem { why, message })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(v: serde_json::Value) -> Vec<Rule> {
        serde_json::from_value(v).expect("rules")
    }

    fn grant(ns: &str, v: serde_json::Value) -> Grant {
        Grant {
            namespace: ns.into(),
            ..serde_json::from_value(v).expect("grant")
        }
    }

    #[test]
    fn backends_include_mirrors() {
        let rs = rules(json!([
            {"backendRefs": [{"name": "a", "filters": [
                {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "m1"}}}]}],
             "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "m2"}}}]},
            {"backendRefs": [{"name": "b"}]}
        ]));
        let names: Vec<&str> = backend_refs(&rs).iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["a", "m1", "m2", "b"]);
    }

    #[test]
    fn resolved_refs_outcomes() {
        let services = [("apps", "web"), ("other", "api")];
        let exists = |ns: &str, n: &str| services.contains(&(ns, n));
        let to_api = grant(
            "other",
            json!({"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "apps"}],
                   "to": [{"group": "", "kind": "Service", "name": "api"}]}),
        );
        let cases: [(serde_json::Value, Vec<Grant>, Option<Unresolved>); 8] = [
            (json!({"name": "web"}), vec![], None),
            (
                json!({"name": "gone"}),
                vec![],
                Some(Unresolved::BackendNotFound),
            ),
            (
                json!({"name": "web", "kind": "Pod"}),
                vec![],
                Some(Unresolved::InvalidKind),
            ),
            (
                json!({"name": "web", "group": "example.com", "kind": "Service"}),
                vec![],
                Some(Unresolved::InvalidKind),
            ),
            (
                json!({"name": "api", "namespace": "other"}),
                vec![],
                Some(Unresolved::RefNotPermitted),
            ),
            (
                json!({"name": "api", "namespace": "other"}),
                vec![to_api.clone()],
                None,
            ),
            // The grant names another Service.
            (
                json!({"name": "db", "namespace": "other"}),
                vec![to_api.clone()],
                Some(Unresolved::RefNotPermitted),
            ),
            // A grant for every Service, but this one does not exist.
            (
                json!({"name": "db", "namespace": "other"}),
                vec![grant(
                    "other",
                    json!({"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "apps"}],
                           "to": [{"group": "", "kind": "Service"}]}),
                )],
                Some(Unresolved::BackendNotFound),
            ),
        ];
        for (i, (r, grants, want)) in cases.into_iter().enumerate() {
            let r: BackendRef = serde_json::from_value(r).expect("ref");
            let got = resolve(RouteKind::Http, "apps", &[&r], &grants, exists);
            assert_eq!(got.map(|p| p.why), want, "case {i}");
        }
    }

    #[test]
    fn grants_are_per_kind_namespace_and_target_namespace() {
        let g = grant(
            "other",
            json!({"from": [{"group": GROUP, "kind": "GRPCRoute", "namespace": "apps"}],
                   "to": [{"group": "", "kind": "Service", "name": ""}]}),
        );
        let grants = [g];
        assert!(permitted(&grants, RouteKind::Grpc, "apps", "other", "x"));
        assert!(!permitted(&grants, RouteKind::Http, "apps", "other", "x"));
        assert!(!permitted(&grants, RouteKind::Grpc, "team", "other", "x"));
        assert!(!permitted(&grants, RouteKind::Grpc, "apps", "third", "x"));
    }

    #[test]
    fn the_first_unresolved_reference_decides() {
        let a: BackendRef = serde_json::from_value(json!({"name": "gone"})).expect("ref");
        let b: BackendRef =
            serde_json::from_value(json!({"name": "x", "kind": "Pod"})).expect("ref");
        let p = resolve(RouteKind::Http, "apps", &[&a, &b], &[], |_, _| false).expect("problem");
        assert_eq!(p.why, Unresolved::BackendNotFound);
        assert_eq!(p.message, "backendRef Service apps/gone not found");
    }
}
