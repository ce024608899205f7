//! Parses a request path and method into what it asks for: the verb, the group-version, the
//! resource, namespace, name and subresource (the equivalent of upstream's RequestInfo).
//!
//! Guarantees: every segment that later becomes part of a storage key (namespace, name) is
//! checked here to be a single, non-empty path segment without `/`, so no request can address a
//! key outside its resource's prefix.

use crate::error::ApiError;

/// What a resource request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: Verb,
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name as in the path.
    pub resource: String,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, ...), if any.
    pub subresource: Option<String>,
}

/// The verbs of the resource API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Read one object.
    Get,
    /// Read a collection.
    List,
    /// Stream changes.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// The verb as RBAC and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// What a path addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`, `/livez`, `/readyz` (and their sub-checks).
    Health,
    /// `/version`.
    Version,
    /// `/metrics`.
    Metrics,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`.
    GroupVersion(String, String),
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`.
    OpenApiV3Index,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/<g>/<v>`: the group and version.
    OpenApiV3(String, String),
    /// `/.well-known/openid-configuration`: the service-account issuer's discovery document.
    OidcDiscovery,
    /// `/openid/v1/jwks`: the service-account signing keys.
    Jwks,
    /// Any other path outside `/api` and `/apis`: served when the embedder registered a route
    /// for it ([`crate::server::ApiServer::add_route`]), else 404. The path, trailing `/` cut.
    Extension(String),
    /// A resource request.
    Resource(ResourceRequest),
}

impl Route {
    /// Paths served without credentials.
    pub fn is_public(&self) -> bool {
        matches!(
            self,
            Route::Health | Route::Version | Route::OidcDiscovery | Route::Jwks
        )
    }
}

/// Subresources of namespaces that sit directly under `/namespaces/<name>/`.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// A namespace, name or subresource segment: percent-decoded like upstream, then refused when
/// it could address anything but one object (`.`, `..`, `/`, `%` after decoding).
fn segment(s: &str) -> Result<String, ApiError> {
    let decoded = percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map_err(|_| ApiError::BadRequest(format!("invalid path segment {s:?}: not UTF-8")))?;
    if decoded.is_empty()
        || decoded == "."
        || decoded == ".."
        || decoded.contains('/')
        || decoded.contains('%')
    {
        return Err(ApiError::BadRequest(format!("invalid path segment {s:?}")));
    }
    Ok(decoded.into_owned())
}

/// Parses `path` (as sent: segments are percent-decoded here) with the HTTP `method` and whether
/// `watch` was asked in the query.
pub fn parse(method: &http::Method, path: &str, watch_param: bool) -> Result<Route, ApiError> {
    let trimmed = path.trim_end_matches('/');
    let parts: Vec<&str> = trimmed.split('/').skip(1).collect();
    match parts.as_slice() {
        [] | [""] => return Err(ApiError::NoRoute),
        ["healthz", ..] | ["livez", ..] | ["readyz", ..] => return Ok(Route::Health),
        ["version"] => return Ok(Route::Version),
        ["metrics"] => return Ok(Route::Metrics),
        [".well-known", "openid-configuration"] => return Ok(Route::OidcDiscovery),
        ["openid", "v1", "jwks"] => return Ok(Route::Jwks),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["apis", g] => return Ok(Route::Group(g.to_string())),
        ["api", v] => return Ok(Route::GroupVersion(String::new(), v.to_string())),
        ["apis", g, v] => return Ok(Route::GroupVersion(g.to_string(), v.to_string())),
        ["openapi", "v2"] => return Ok(Route::OpenApiV2),
        ["openapi", "v3"] => return Ok(Route::OpenApiV3Index),
        ["openapi", "v3", "api", v] => return Ok(Route::OpenApiV3(String::new(), v.to_string())),
        ["openapi", "v3", "apis", g, v] => {
            return Ok(Route::OpenApiV3(g.to_string(), v.to_string()))
        }
        _ => {}
    }
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        ["api" | "apis", ..] => return Err(ApiError::NoRoute),
        _ => return Ok(Route::Extension(trimmed.to_string())),
    };
    // Legacy watch paths (`/api/v1/watch/...`) are deprecated upstream; treat like `?watch=1`.
    let (rest, watch_prefix) = match rest {
        ["watch", tail @ ..] => (tail, true),
        _ => (rest, false),
    };
    let mut namespace = None;
    let mut rest: &[&str] = rest;
    if let ["namespaces", ns, tail @ ..] = rest {
        if !tail.is_empty() && !NAMESPACE_SUBRESOURCES.contains(&tail[0]) {
            namespace = Some(segment(ns)?);
            rest = tail;
        }
    }
    let (resource, name, subresource) = match rest {
        [r] => (r.to_string(), None, None),
        [r, n] => (r.to_string(), Some(segment(n)?), None),
        [r, n, s] => (r.to_string(), Some(segment(n)?), Some(segment(s)?)),
        _ => return Err(ApiError::NoRoute),
    };
    // `/api/v1/namespaces/<ns>` names the namespace itself; keep it cluster-scoped.
    let watch = watch_param || watch_prefix;
    let verb = match (method.as_str(), name.is_some()) {
        ("GET", _) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    Ok(Route::Resource(ResourceRequest {
        verb,
        group,
        version,
        resource,
        namespace,
        name,
        subresource,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn res(method: Method, path: &str) -> ResourceRequest {
        match parse(&method, path, false) {
            Ok(Route::Resource(r)) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn namespaced_object() {
        let r = res(Method::GET, "/api/v1/namespaces/default/pods/web");
        assert_eq!(r.verb, Verb::Get);
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(r.resource, "pods");
        assert_eq!(r.name.as_deref(), Some("web"));
    }

    #[test]
    fn namespace_itself_and_its_subresources() {
        let r = res(Method::GET, "/api/v1/namespaces/default");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("default"), None)
        );
        let r = res(Method::PUT, "/api/v1/namespaces/x/finalize");
        assert_eq!(r.subresource.as_deref(), Some("finalize"));
        assert_eq!(r.namespace, None);
    }

    #[test]
    fn group_subresource_and_collection_verbs() {
        let r = res(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
        );
        assert_eq!(
            (r.group.as_str(), r.verb, r.subresource.as_deref()),
            ("apps", Verb::Update, Some("scale"))
        );
        assert_eq!(
            res(Method::DELETE, "/api/v1/namespaces/a/pods").verb,
            Verb::DeleteCollection
        );
        assert_eq!(res(Method::GET, "/api/v1/pods").verb, Verb::List);
        assert_eq!(
            parse(&Method::GET, "/api/v1/pods", true).ok(),
            Some(Route::Resource(ResourceRequest {
                verb: Verb::Watch,
                ..res(Method::GET, "/api/v1/pods")
            }))
        );
    }

    #[test]
    fn bad_paths() {
        assert!(matches!(
            parse(&Method::GET, "/api/v1/namespaces/a/pods/x/y/z", false),
            Err(ApiError::NoRoute)
        ));
        assert!(matches!(
            parse(&Method::GET, "/api/v1/namespaces/../pods/x", false),
            Err(ApiError::BadRequest(_))
        ));
        for encoded in [
            "/api/v1/namespaces/default/configmaps/..%2Fsecrets",
            "/api/v1/namespaces/..%2Fkube-system/configmaps",
            "/api/v1/namespaces/default/configmaps/%2e%2e",
            "/api/v1/namespaces/default/configmaps/a%25b",
            "/api/v1/namespaces/default/configmaps/%ff",
        ] {
            assert!(
                matches!(
                    parse(&Method::GET, encoded, false),
                    Err(ApiError::BadRequest(_))
                ),
                "{encoded}"
            );
        }
        // Encoded characters that are legal in names decode to them.
        let r = res(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aview",
        );
        assert_eq!(r.name.as_deref(), Some("system:view"));
        assert!(matches!(
            parse(&Method::PUT, "/api/v1/pods", false),
            Err(ApiError::MethodNotAllowed)
        ));
        // Paths outside /api and /apis are the embedder's (404 unless it registered them).
        assert_eq!(
            parse(&Method::GET, "/opencost/allocation/", false).ok(),
            Some(Route::Extension("/opencost/allocation".into()))
        );
        assert!(matches!(
            parse(&Method::GET, "/apis/g/v/ns/too/many/parts/here/x", false),
            Err(ApiError::NoRoute)
        ));
    }
}
