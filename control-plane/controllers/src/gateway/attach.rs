//! Route attachment: which listeners of a Gateway a route attaches to through one of its
//! parentRefs, or why none does (the reasons of the route's `Accepted=False`).
//!
//! Everything here is pure: the Gateway's listeners, the route and its namespace's labels in,
//! listener indexes or a [`Refusal`] out.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

use crate::shared::selector_matches;

/// The Gateway API group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// The route kinds this implementation serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// `HTTPRoute`.
    Http,
    /// `GRPCRoute`.
    Grpc,
}

impl RouteKind {
    /// Both kinds, in the order listeners report them.
    pub const ALL: [RouteKind; 2] = [RouteKind::Http, RouteKind::Grpc];

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
        }
    }

    /// The kind called `name` in the Gateway API group.
    pub fn named(name: &str) -> Option<RouteKind> {
        RouteKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A Gateway listener, as far as attachment reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Listener {
    /// Its name, unique in the Gateway (a parentRef's `sectionName`).
    pub name: String,
    /// The host names it serves (`*.example.com` included); none: every name.
    pub hostname: Option<String>,
    /// Its port.
    pub port: i64,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP` or an implementation's own.
    pub protocol: String,
    /// Which routes may attach.
    pub allowed_routes: AllowedRoutes,
}

/// A listener's `allowedRoutes`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedRoutes {
    /// Which namespaces' routes.
    pub namespaces: RouteNamespaces,
    /// Which kinds; none: every kind the protocol supports.
    pub kinds: Option<Vec<RouteGroupKind>>,
}

/// `allowedRoutes.namespaces`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    pub from: Option<String>,
    /// The namespaces' labels for `Selector`.
    pub selector: Option<LabelSelector>,
}

/// An entry of `allowedRoutes.kinds`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteGroupKind {
    /// The group; none: the Gateway API group.
    pub group: Option<String>,
    /// The kind.
    pub kind: String,
}

/// A route's `parentRefs[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentRef {
    /// The parent's group; none: the Gateway API group.
    pub group: Option<String>,
    /// The parent's kind; none: `Gateway`.
    pub kind: Option<String>,
    /// The parent's namespace; none: the route's.
    pub namespace: Option<String>,
    /// The parent's name.
    pub name: String,
    /// The listener's name, if only one.
    pub section_name: Option<String>,
    /// The listeners' port, if only those.
    pub port: Option<i64>,
}

impl ParentRef {
    /// The Gateway it names, as (namespace, name), for a route in `route_ns`; none when the
    /// parent is not a Gateway.
    pub fn gateway(&self, route_ns: &str) -> Option<(String, String)> {
        let group = self.group.as_deref().unwrap_or(GROUP);
        let kind = self.kind.as_deref().unwrap_or("Gateway");
        (group == GROUP && kind == "Gateway").then(|| {
            let ns = self.namespace.as_deref().unwrap_or(route_ns);
            (ns.to_string(), self.name.clone())
        })
    }

    /// The same reference with its defaults written out, for comparing two of them.
    pub fn normalized(&self, route_ns: &str) -> ParentRef {
        ParentRef {
            group: Some(self.group.clone().unwrap_or_else(|| GROUP.to_string())),
            kind: Some(self.kind.clone().unwrap_or_else(|| "Gateway".to_string())),
            namespace: Some(
                self.namespace
                    .clone()
                    .unwrap_or_else(|| route_ns.to_string()),
            ),
            ..self.clone()
        }
    }
}

/// What attachment needs to know about a route.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// Its kind.
    pub kind: RouteKind,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its `spec.hostnames`.
    pub hostnames: &'a [String],
    /// The labels of its namespace (empty when the namespace is not known).
    pub namespace_labels: &'a BTreeMap<String, String>,
}

/// Why a route does not attach to a Gateway it names: the reason of its `Accepted=False`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No listener has the parentRef's `sectionName` / `port`.
    NoMatchingParent,
    /// The listeners it names refuse its namespace or its kind.
    NotAllowedByListeners,
    /// The listeners that allow it serve none of its host names.
    NoMatchingListenerHostname,
}

impl Refusal {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NoMatchingParent => "NoMatchingParent",
            Refusal::NotAllowedByListeners => "NotAllowedByListeners",
            Refusal::NoMatchingListenerHostname => "NoMatchingListenerHostname",
        }
    }

    /// The condition's message.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::NoMatchingParent => "no listener of the Gateway matches the sectionName/port",
            Refusal::NotAllowedByListeners => {
                "the listeners' allowedRoutes refuse the route's namespace or kind"
            }
            Refusal::NoMatchingListenerHostname => {
                "no listener hostname intersects the route's hostnames"
            }
        }
    }
}

/// The route kinds a listener serves: its protocol's (HTTPRoute and GRPCRoute for HTTP and
/// HTTPS, none for the others), narrowed to `allowedRoutes.kinds` when that is set.
pub fn supported_kinds(listener: &Listener) -> Vec<RouteKind> {
    let by_protocol: &[RouteKind] = match listener.protocol.as_str() {
        "HTTP" | "HTTPS" => &RouteKind::ALL,
        _ => &[],
    };
    match &listener.allowed_routes.kinds {
        None => by_protocol.to_vec(),
        Some(kinds) => by_protocol
            .iter()
            .copied()
            .filter(|k| kinds.iter().any(|gk| names_kind(gk, *k)))
            .collect(),
    }
}

/// The `allowedRoutes.kinds` entries the listener cannot serve (its `ResolvedRefs=False`,
/// reason `InvalidRouteKinds`), as `group/kind`.
pub fn invalid_kinds(listener: &Listener) -> Vec<String> {
    let served = supported_kinds(&Listener {
        allowed_routes: AllowedRoutes::default(),
        ..listener.clone()
    });
    listener
        .allowed_routes
        .kinds
        .iter()
        .flatten()
        .filter(|gk| !served.iter().any(|k| names_kind(gk, *k)))
        .map(|gk| format!("{}/{}", gk.group.as_deref().unwrap_or(GROUP), gk.kind))
        .collect()
}

fn names_kind(gk: &RouteGroupKind, kind: RouteKind) -> bool {
    gk.group.as_deref().unwrap_or(GROUP) == GROUP && gk.kind == kind.name()
}

/// Whether a listener of a Gateway in `gateway_ns` lets routes of `route`'s namespace attach:
/// `Same` (the default) its own namespace, `All` every one, `Selector` those whose labels the
/// selector matches (no selector: none).
pub fn namespace_allowed(listener: &Listener, gateway_ns: &str, route: &Route) -> bool {
    let namespaces = &listener.allowed_routes.namespaces;
    match namespaces.from.as_deref().unwrap_or("Same") {
        "Same" => route.namespace == gateway_ns,
        "All" => true,
        "Selector" => namespaces
            .selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, route.namespace_labels)),
        _ => false,
    }
}

/// Whether a listener's hostname and a route's hostnames have a name in common, as upstream:
/// no listener hostname or no route hostnames match everything; `*.example.com` stands for
/// every name under `example.com` (one label or more), on either side.
pub fn hostnames_intersect(listener: Option<&str>, route: &[String]) -> bool {
    let Some(listener) = listener.filter(|h| !h.is_empty()) else {
        return true;
    };
    route.is_empty() || route.iter().any(|r| hostname_pair(listener, r))
}

fn hostname_pair(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    match (a.strip_prefix("*."), b.strip_prefix("*.")) {
        (None, None) => a == b,
        (Some(suffix), None) => under(&b, suffix),
        (None, Some(suffix)) => under(&a, suffix),
        // Two wildcards share the names under the longer suffix.
        (Some(x), Some(y)) => x == y || under(x, y) || under(y, x),
    }
}

/// Whether `name` is strictly under `domain`.
fn under(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain)
        .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
}

/// The indexes of the listeners `route` attaches to through `parent` (which names this
/// Gateway, in `gateway_ns`), or why it attaches to none. Checked in upstream's order: the
/// listeners the parentRef names (`sectionName`, `port`), then those that allow the route
/// (kind and namespace), then those whose hostname intersects the route's.
pub fn attach(
    listeners: &[Listener],
    gateway_ns: &str,
    parent: &ParentRef,
    route: &Route,
) -> Result<Vec<usize>, Refusal> {
    let named: Vec<usize> = (0..listeners.len())
        .filter(|&i| {
            let l = &listeners[i];
            parent.section_name.as_ref().is_none_or(|s| *s == l.name)
                && parent.port.is_none_or(|p| p == l.port)
        })
        .collect();
    if named.is_empty() {
        return Err(Refusal::NoMatchingParent);
    }
    let allowed: Vec<usize> = named
        .into_iter()
        .filter(|&i| {
            let l = &listeners[i];
            supported_kinds(l).contains(&route.kind) && namespace_allowed(l, gateway_ns, route)
        })
        .collect();
    if allowed.is_empty() {
        return Err(Refusal::NotAllowedByListeners);
    }
    let matching: Vec<usize> = allowed
        .into_iter()
        .filter(|&i| hostnames_intersect(listeners[i].hostname.as_deref(), route.hostnames))
        .collect();
    if matching.is_empty() {
        return Err(Refusal::NoMatchingListenerHostname);
    }
    Ok(matching)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listener(v: serde_json::Value) -> Listener {
        serde_json::from_value(v).expect("listener")
    }

    fn names(hs: &[&str]) -> Vec<String> {
        hs.iter().map(|h| h.to_string()).collect()
    }

    #[test]
    fn hostnames_intersect_as_upstream() {
        let cases: [(Option<&str>, &[&str], bool); 14] = [
            (None, &["a.example.com"], true),
            (Some("a.example.com"), &[], true),
            (Some("a.example.com"), &["a.example.com"], true),
            (Some("a.example.com"), &["b.example.com"], false),
            (Some("*.example.com"), &["a.example.com"], true),
            (Some("*.example.com"), &["a.b.example.com"], true),
            (Some("*.example.com"), &["example.com"], false),
            (Some("*.example.com"), &["badexample.com"], false),
            (Some("a.example.com"), &["*.example.com"], true),
            (Some("example.com"), &["*.example.com"], false),
            (Some("*.example.com"), &["*.a.example.com"], true),
            (Some("*.a.example.com"), &["*.example.com"], true),
            (
                Some("*.example.com"),
                &["*.example.org", "x.example.com"],
                true,
            ),
            (Some("A.Example.com"), &["a.example.COM"], true),
        ];
        for (i, (l, r, want)) in cases.into_iter().enumerate() {
            assert_eq!(hostnames_intersect(l, &names(r)), want, "case {i}");
        }
    }

    #[test]
    fn allowed_routes_namespaces() {
        let labels: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        let none = BTreeMap::new();
        let route = |ns, labels| Route {
            kind: RouteKind::Http,
            namespace: ns,
            hostnames: &[],
            namespace_labels: labels,
        };
        let same = listener(json!({"name": "l", "port": 80, "protocol": "HTTP"}));
        assert!(namespace_allowed(&same, "gw", &route("gw", &none)));
        assert!(!namespace_allowed(&same, "gw", &route("apps", &none)));
        let all = listener(json!({"name": "l", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}));
        assert!(namespace_allowed(&all, "gw", &route("apps", &none)));
        let sel = listener(json!({"name": "l", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "Selector",
                "selector": {"matchLabels": {"team": "a"}}}}}));
        assert!(namespace_allowed(&sel, "gw", &route("apps", &labels)));
        assert!(!namespace_allowed(&sel, "gw", &route("apps", &none)));
        let no_selector = listener(json!({"name": "l", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "Selector"}}}));
        assert!(!namespace_allowed(
            &no_selector,
            "gw",
            &route("gw", &labels)
        ));
    }

    #[test]
    fn kinds_follow_protocol_and_allowed_kinds() {
        let http = listener(json!({"name": "l", "port": 80, "protocol": "HTTP"}));
        assert_eq!(supported_kinds(&http), RouteKind::ALL.to_vec());
        assert!(invalid_kinds(&http).is_empty());
        let tcp = listener(json!({"name": "l", "port": 80, "protocol": "TCP"}));
        assert!(supported_kinds(&tcp).is_empty());
        let only_grpc = listener(json!({"name": "l", "port": 443, "protocol": "HTTPS",
            "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}, {"kind": "TCPRoute"}]}}));
        assert_eq!(supported_kinds(&only_grpc), vec![RouteKind::Grpc]);
        assert_eq!(
            invalid_kinds(&only_grpc),
            vec!["gateway.networking.k8s.io/TCPRoute"]
        );
    }

    #[test]
    fn attach_names_listeners_then_allows_then_matches_hostnames() {
        let listeners: Vec<Listener> = serde_json::from_value(json!([
            {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.example.com"},
            {"name": "https", "port": 443, "protocol": "HTTPS",
             "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "grpc-only", "port": 8080, "protocol": "HTTP",
             "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}},
        ]))
        .expect("listeners");
        let labels = BTreeMap::new();
        let hosts = names(&["a.example.com"]);
        let route = Route {
            kind: RouteKind::Http,
            namespace: "gw",
            hostnames: &hosts,
            namespace_labels: &labels,
        };
        let parent =
            |v: serde_json::Value| -> ParentRef { serde_json::from_value(v).expect("ref") };
        assert_eq!(
            attach(&listeners, "gw", &parent(json!({"name": "g"})), &route),
            Ok(vec![0, 1])
        );
        assert_eq!(
            attach(
                &listeners,
                "gw",
                &parent(json!({"name": "g", "sectionName": "https"})),
                &route
            ),
            Ok(vec![1])
        );
        assert_eq!(
            attach(
                &listeners,
                "gw",
                &parent(json!({"name": "g", "port": 9})),
                &route
            ),
            Err(Refusal::NoMatchingParent)
        );
        assert_eq!(
            attach(
                &listeners,
                "gw",
                &parent(json!({"name": "g", "port": 8080})),
                &route
            ),
            Err(Refusal::NotAllowedByListeners)
        );
        let elsewhere = Route {
            namespace: "apps",
            ..route
        };
        assert_eq!(
            attach(
                &listeners,
                "gw",
                &parent(json!({"name": "g", "sectionName": "http"})),
                &elsewhere
            ),
            Err(Refusal::NotAllowedByListeners)
        );
        let other_host = names(&["a.example.org"]);
        let other = Route {
            hostnames: &other_host,
            ..route
        };
        assert_eq!(
            attach(
                &listeners,
                "gw",
                &parent(json!({"name": "g", "sectionName": "http"})),
                &other
            ),
            Err(Refusal::NoMatchingListenerHostname)
        );
    }

    #[test]
    fn parent_refs_default_to_a_gateway_in_the_routes_namespace() {
        let p: ParentRef = serde_json::from_value(json!({"name": "g"})).expect("ref");
        assert_eq!(p.gateway("apps"), Some(("apps".into(), "g".into())));
        assert_eq!(
            p.normalized("apps"),
            serde_json::from_value::<ParentRef>(json!({"name": "g", "namespace": "apps",
                "group": GROUP, "kind": "Gateway"}))
            .expect("ref")
        );
        let svc: ParentRef =
            serde_json::from_value(json!({"name": "s", "group": "", "kind": "Service"}))
                .expect("ref");
        assert_eq!(svc.gateway("apps"), None);
    }
}
