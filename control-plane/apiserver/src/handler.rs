//! The HTTP layer: turns a request into a registry call and the result into a response.
//! Handlers are infallible: every error becomes a Kubernetes `Status` here, in one place.
//!
//! Pipeline, in order: route (`request_info`) → authenticate (caller's identity from the TLS
//! layer) → decode (size limit, content type) → registry (strategy, store) → encode (JSON,
//! YAML, Table, metadata).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fabrik_machinery::fields::FieldSelector;
use fabrik_machinery::labels::Selector;
use futures::StreamExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::discovery;
use crate::error::{ApiError, Result};
use crate::negotiation::{self, BodyType, Output};
use crate::rbac::Attributes;
use crate::registry::{
    self, DeleteOptions, FieldValidation, ListParams, Part, Propagation, Registry, WatchParams,
    WriteOptions,
};
use crate::request_info::{self, ResourceRequest, Route, Verb};
use crate::resources::{ResourceDef, Subresource};
use crate::server::ApiServer;
use crate::table::{self, IncludeObject};

/// The response body: a whole document or a watch stream.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// A request body: the socket's, or an in-process client's (boxed so the pipeline is not generic).
pub type RequestBody =
    http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Requests larger than this are refused with 413 (upstream: 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub use crate::auth::UserInfo;

/// A response being built: status, body, content type, warnings.
struct Reply {
    status: StatusCode,
    body: Body,
    content_type: &'static str,
    warnings: Vec<String>,
    /// A stream accepted (status 101): its headers, and its session for an in-process caller.
    upgrade: Option<(http::HeaderMap, crate::pod_streams::PendingSession)>,
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

impl Reply {
    fn json(status: StatusCode, value: &Value) -> Reply {
        Reply {
            status,
            body: full(serde_json::to_vec(value).unwrap_or_default()),
            content_type: "application/json",
            warnings: Vec::new(),
            upgrade: None,
        }
    }

    fn encoded(status: StatusCode, value: &Value, output: Output) -> Reply {
        if output == Output::Yaml {
            let text = serde_yaml_ng::to_string(value).unwrap_or_default();
            return Reply {
                status,
                body: full(text),
                content_type: "application/yaml",
                warnings: Vec::new(),
                upgrade: None,
            };
        }
        Reply::json(status, value)
    }

    fn text(status: StatusCode, text: String, content_type: &'static str) -> Reply {
        Reply {
            status,
            body: full(text),
            content_type,
            warnings: Vec::new(),
            upgrade: None,
        }
    }

    fn with_warnings(mut self, warnings: Vec<String>) -> Reply {
        self.warnings = warnings;
        self
    }
}

/// Query parameters (last value wins, like upstream's decoding for scalars).
#[derive(Clone)]
struct Query(HashMap<String, String>);

impl Query {
    fn parse(query: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "invalid value {other:?} for {key}: must be a boolean"
            ))),
        }
    }

    fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("invalid value {v:?} for {key}: must be an integer"))
            }),
        }
    }

    fn dry_run(&self) -> Result<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "Invalid dry run value: {other:?}: supported values: \"All\""
            ))),
        }
    }

    /// Options of a write; the field manager is `fieldManager`, else (as upstream) the
    /// client's User-Agent up to its first `/`.
    fn write_options(&self, user_agent: Option<&str>) -> Result<WriteOptions> {
        let manager = match self.get("fieldManager") {
            Some(m) if !m.is_empty() => {
                if m.len() > 128 || m.chars().any(|c| c.is_control()) {
                    return Err(ApiError::BadRequest(
                        "fieldManager must be at most 128 printable characters".into(),
                    ));
                }
                m.to_string()
            }
            _ => user_agent
                .and_then(|ua| ua.split('/').next())
                .filter(|m| !m.is_empty())
                .unwrap_or("unknown")
                .chars()
                .filter(|c| !c.is_control())
                .take(128)
                .collect(),
        };
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation").unwrap_or(""))?,
            field_manager: Some(manager),
            user: None,
        })
    }

    fn selectors(&self) -> Result<(Selector, FieldSelector)> {
        use fabrik_machinery::labels::SelectorError;
        let labels = Selector::parse(self.get("labelSelector").unwrap_or("")).map_err(|e| {
            ApiError::BadRequest(match e {
                SelectorError::TooLong { .. } | SelectorError::TooManyRequirements { .. } => {
                    e.to_string()
                }
                e => format!("unable to parse requirement: {e}"),
            })
        })?;
        let fields = FieldSelector::parse(self.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(format!("invalid field selector: {e}")))?;
        Ok((labels, fields))
    }

    fn list_params(&self) -> Result<ListParams> {
        let (labels, fields) = self.selectors()?;
        // Upstream does not validate the sign: a limit of 0 or less means "no limit".
        let limit = match self.int("limit")? {
            Some(l) if l > 0 => usize::try_from(l).ok(),
            _ => None,
        };
        Ok(ListParams {
            labels,
            fields,
            limit,
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self.get("resourceVersionMatch").map(str::to_string),
        })
    }
}

fn header_str(req: &Request<RequestBody>, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// How much of an oversized body is still read (and discarded) before answering 413: a client
/// that is still writing when the connection closes sees a broken pipe instead of the Status.
const MAX_DRAIN_BYTES: usize = 4 * MAX_BODY_BYTES;

async fn read_body<B>(mut body: B) -> Result<Bytes>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen > MAX_BODY_BYTES {
            buf = Vec::new();
            if seen > MAX_DRAIN_BYTES {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&data);
    }
    if seen > MAX_BODY_BYTES {
        return Err(ApiError::RequestEntityTooLarge {
            limit: MAX_BODY_BYTES,
        });
    }
    Ok(Bytes::from(buf))
}

/// Request bodies larger than this make a request heavy (see [`is_heavy`]).
const HEAVY_BODY_BYTES: u64 = 64 * 1024;

/// Whether handling `req` costs in proportion to data of unbounded size, so that it must not
/// run on the async workers (see [`crate::fairness`]): a collection read or delete (a list
/// is encoded in one piece; a watch is not heavy, it encodes event by event), or a body over
/// [`HEAVY_BODY_BYTES`] or of unknown length.
fn is_heavy(req: &Request<RequestBody>, route: &Route) -> bool {
    if matches!(route, Route::Resource(r) if matches!(r.verb, Verb::List | Verb::DeleteCollection))
    {
        return true;
    }
    if !matches!(
        *req.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH
    ) {
        return false;
    }
    match header_str(req, header::CONTENT_LENGTH).map(str::parse::<u64>) {
        Some(Ok(length)) => length > HEAVY_BODY_BYTES,
        _ => true,
    }
}

impl ApiServer {
    /// The write options of a request, with its user for admission.
    fn write_options(
        &self,
        query: &Query,
        user_agent: Option<&str>,
        user: &UserInfo,
    ) -> Result<WriteOptions> {
        let mut opts = query.write_options(user_agent)?;
        opts.user = Some(Arc::new(user.clone()));
        Ok(opts)
    }

    /// Serves one request from `caller`.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<RequestBody>,
        caller: Caller,
    ) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = Query::parse(req.uri().query());
        let mut retry_after = None;
        let routed = match self.tenancy() {
            Some(t) => crate::fairness::serving(t.name, self.route(req, &query, caller)).await,
            None => self.route(req, &query, caller).await,
        };
        let (reply, verb, resource) = match routed {
            Ok(ok) => ok,
            Err((err, verb, resource)) => {
                if err.code() >= 500 {
                    tracing::warn!(%method, %path, error = %err, "request failed");
                }
                retry_after = err.retry_after();
                (
                    Reply::json(
                        StatusCode::from_u16(err.code())
                            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        &err.to_status(),
                    ),
                    verb,
                    resource,
                )
            }
        };
        self.metrics
            .observe(&verb, &resource, reply.status.as_u16(), started.elapsed());
        let mut resp = Response::new(reply.body);
        *resp.status_mut() = reply.status;
        match reply.upgrade {
            Some((headers, session)) => {
                resp.headers_mut().extend(headers);
                resp.extensions_mut().insert(session);
            }
            None => {
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(reply.content_type),
                );
            }
        }
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        for w in reply.warnings {
            let text = format!("299 - \"{}\"", w.replace('"', "\\\""));
            if let Ok(v) = HeaderValue::from_str(&text) {
                resp.headers_mut().append(header::WARNING, v);
            }
        }
        resp
    }

    /// Who the request comes from: the in-process caller as given, a network caller by its
    /// certificate or bearer token, then impersonation if asked (and allowed).
    async fn identify(
        &self,
        req: &Request<RequestBody>,
        caller: Caller,
    ) -> Result<Option<UserInfo>> {
        let user = match caller {
            Caller::Trusted(u) => Some(u),
            Caller::Network(cert) => match self
                .auth
                .authenticate(req.headers(), cert.as_ref(), &self.registry)
                .await
            {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "authentication failed");
                    return Err(ApiError::Unauthorized);
                }
            },
        };
        match user {
            Some(u) => crate::auth::impersonation::apply(req.headers(), u, &self.authz).map(Some),
            None => Ok(None),
        }
    }

    async fn route(
        self: &Arc<Self>,
        req: Request<RequestBody>,
        query: &Query,
        caller: Caller,
    ) -> std::result::Result<(Reply, String, String), (ApiError, String, String)> {
        let method = req.method().clone();
        let lower = method.as_str().to_ascii_lowercase();
        let network = matches!(caller, Caller::Network(_));
        let tenancy = self.tenancy();
        // Authentication comes before routing (as upstream): an anonymous caller gets 401 for
        // every path but the public ones (none on a tenant: whether a tenant exists is not
        // told to unauthenticated callers), and learns nothing about which paths exist.
        let user = self
            .identify(&req, caller)
            .await
            .map_err(|e| (e, lower.clone(), String::new()))?;
        let public_path = request_info::parse(&method, req.uri().path(), false)
            .map(|r| r.is_public())
            .unwrap_or(false);
        let Some(user) = user else {
            if public_path && tenancy.is_none() {
                let route = request_info::parse(&method, req.uri().path(), false)
                    .map_err(|e| (e, lower.clone(), String::new()))?;
                return self
                    .non_resource(&req, route)
                    .await
                    .map(|r| (r, lower.clone(), String::new()))
                    .map_err(|e| (e, lower, String::new()));
            }
            return Err((ApiError::Unauthorized, lower, String::new()));
        };
        let watch = query
            .flag("watch")
            .map_err(|e| (e, "watch".to_string(), String::new()))?;
        let route = request_info::parse(&method, req.uri().path(), watch)
            .map_err(|e| (e, lower.clone(), String::new()))?;
        let (verb, resource) = match &route {
            Route::Resource(r) => (r.verb.as_str().to_string(), r.resource.clone()),
            _ => (lower.clone(), String::new()),
        };
        if !route.is_public() {
            let attrs = match &route {
                Route::Resource(r) => Attributes::resource(
                    r.verb.as_str(),
                    &r.group,
                    &r.resource,
                    r.subresource.as_deref().unwrap_or(""),
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or(""),
                ),
                _ => Attributes::non_resource(&lower, req.uri().path()),
            };
            let attrs = match &route {
                // `namespaces/<name>` is the namespace itself: RBAC sees it in that namespace.
                Route::Resource(r)
                    if r.group.is_empty() && r.resource == "namespaces" && r.name.is_some() =>
                {
                    Attributes {
                        namespace: r.name.clone().unwrap_or_default(),
                        ..attrs
                    }
                }
                _ => attrs,
            };
            // A stream into a pod (a WebSocket upgrade is a GET) also needs `create`, as
            // upstream has required since 1.31: `get` alone must not open a shell.
            let streams = matches!(
                &route,
                Route::Resource(r) if r.group.is_empty() && r.resource == "pods"
                    && matches!(r.subresource.as_deref(), Some("exec" | "attach" | "portforward"))
            );
            let create = Attributes {
                verb: "create".into(),
                ..attrs.clone()
            };
            for attrs in std::iter::once(&attrs).chain(streams.then_some(&create)) {
                if !self.authz.authorize(&user, attrs).allowed() {
                    return Err((
                        ApiError::Forbidden(crate::rbac::forbidden_message(&user, attrs)),
                        verb,
                        resource,
                    ));
                }
            }
        }
        // A tenant's network requests take a seat of the listener's shared pool for as long as
        // they are handled (a watch: until it has written the events it had at once, its
        // initial list, as upstream's watch initialization).
        let mut seat = match (&tenancy, network) {
            (Some(t), true) => match t.fairness.acquire(&t.name, &user.name).await {
                Ok(seat) => Some(seat),
                Err(e) => return Err((e, verb, resource)),
            },
            _ => None,
        };
        // A heavy request also takes a lane of its tenant and runs off the listener's workers.
        let result = match &tenancy {
            Some(t) if seat.is_some() && is_heavy(&req, &route) => {
                let (server, query) = (self.clone(), query.clone());
                let work = async move {
                    let mut seat = seat;
                    server
                        .serve_route(req, &query, route, user, network, &mut seat)
                        .await
                };
                match t.fairness.off_workers(&t.name, work).await {
                    Ok(result) => result,
                    Err(e) => return Err((e, verb, resource)),
                }
            }
            _ => {
                self.serve_route(req, query, route, user, network, &mut seat)
                    .await
            }
        };
        match result {
            Ok(reply) => Ok((reply, verb, resource)),
            Err(e) => Err((e, verb, resource)),
        }
    }

    async fn serve_route(
        &self,
        req: Request<RequestBody>,
        query: &Query,
        route: Route,
        user: UserInfo,
        network: bool,
        seat: &mut Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        match route {
            Route::Resource(r) => self.resource(req, query, r, user, network, seat).await,
            other => self.non_resource(&req, other).await,
        }
    }

    async fn non_resource(&self, req: &Request<RequestBody>, route: Route) -> Result<Reply> {
        let accept = header_str(req, header::ACCEPT);
        let catalog = self.registry.catalog();
        match route {
            Route::Health => Ok(Reply::text(
                StatusCode::OK,
                "ok".into(),
                "text/plain; charset=utf-8",
            )),
            Route::Version => Ok(Reply::json(StatusCode::OK, &crate::server::version_info())),
            Route::Metrics => {
                let mut text = self.metrics.render();
                let extra = self
                    .metrics_sources
                    .read()
                    .map(|s| s.clone())
                    .unwrap_or_default();
                for source in extra {
                    text.push_str(&source());
                }
                Ok(Reply::text(
                    StatusCode::OK,
                    text,
                    "text/plain; version=0.0.4",
                ))
            }
            Route::CoreVersions | Route::Groups => {
                let core = route == Route::CoreVersions;
                match negotiation::output(accept)? {
                    Output::Discovery(v) => {
                        let doc = discovery::aggregated(catalog, core, v);
                        let mut reply = Reply::json(StatusCode::OK, &doc);
                        reply.content_type = if v == "v2" {
                            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
                        } else {
                            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
                        };
                        Ok(reply)
                    }
                    _ if core => Ok(Reply::json(
                        StatusCode::OK,
                        &discovery::core_versions(&self.settings.server_address),
                    )),
                    _ => Ok(Reply::json(StatusCode::OK, &discovery::group_list(catalog))),
                }
            }
            Route::Group(g) => discovery::group(catalog, &g)
                .map(|d| Reply::json(StatusCode::OK, &d))
                .ok_or(ApiError::NoRoute),
            Route::GroupVersion(g, v) => discovery::resource_list(catalog, &g, &v)
                .map(|d| Reply::json(StatusCode::OK, &d))
                .ok_or(ApiError::NoRoute),
            Route::OpenApiV2 => {
                let wants_proto = accept.is_some_and(|a| a.contains("protobuf"));
                let doc = self.openapi.v2(catalog)?;
                if wants_proto {
                    let bytes = self.openapi.v2_protobuf(catalog)?;
                    return Ok(Reply {
                        status: StatusCode::OK,
                        body: full(bytes),
                        content_type: "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                        warnings: Vec::new(),
                        upgrade: None,
                    });
                }
                Ok(Reply::json(StatusCode::OK, &doc))
            }
            Route::OpenApiV3Index => Ok(Reply::json(
                StatusCode::OK,
                &self.openapi.v3_index(catalog)?,
            )),
            Route::OpenApiV3(g, v) => self
                .openapi
                .v3(catalog, &g, &v)
                .map(|d| Reply::json(StatusCode::OK, &d)),
            Route::OidcDiscovery => {
                Ok(Reply::json(StatusCode::OK, &self.auth.tokens().discovery()))
            }
            Route::Jwks => {
                let mut reply = Reply::json(StatusCode::OK, &self.auth.tokens().jwks());
                reply.content_type = "application/jwk-set+json";
                Ok(reply)
            }
            Route::Extension(path) => {
                let route = self
                    .routes
                    .read()
                    .ok()
                    .and_then(|r| r.get(&path).cloned())
                    .ok_or(ApiError::NoRoute)?;
                if req.method() != http::Method::GET {
                    return Err(ApiError::MethodNotAllowed);
                }
                let query = Query::parse(req.uri().query());
                Ok(Reply::json(StatusCode::OK, &route(&query.0)?))
            }
            Route::Resource(_) => Err(ApiError::NoRoute),
        }
    }

    async fn resource(
        &self,
        mut req: Request<RequestBody>,
        query: &Query,
        r: ResourceRequest,
        user: UserInfo,
        network: bool,
        seat: &mut Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        let def = self
            .registry
            .catalog()
            .get(&r.group, &r.version, &r.resource)
            .ok_or(ApiError::NoRoute)?;
        let sub = match r.subresource.as_deref() {
            None => None,
            Some(s) => Some(
                Subresource::parse(s)
                    .filter(|s| def.has(*s))
                    .ok_or(ApiError::NoRoute)?,
            ),
        };
        if !def.namespaced && r.namespace.is_some() {
            return Err(ApiError::NoRoute);
        }
        let collection_verb = matches!(r.verb, Verb::List | Verb::Watch | Verb::DeleteCollection);
        if def.namespaced && r.namespace.is_none() && !(collection_verb && r.name.is_none()) {
            return Err(ApiError::NoRoute);
        }
        let ns = r.namespace.as_deref();
        let output = negotiation::output(header_str(&req, header::ACCEPT))?;
        if def.create_only {
            if r.verb != Verb::Create || r.name.is_some() {
                return Err(ApiError::MethodNotAllowed);
            }
            let content_type = header_str(&req, header::CONTENT_TYPE).map(str::to_string);
            let body = self.decode(req, content_type.as_deref(), false).await?;
            let answer = self.review(&def, ns, &user, body).await?;
            return Ok(Reply::encoded(StatusCode::CREATED, &answer, output));
        }
        let content_type = header_str(&req, header::CONTENT_TYPE).map(str::to_string);
        let user_agent = header_str(&req, header::USER_AGENT).map(str::to_string);
        let reg: &Registry = &self.registry;
        let name = r.name.clone().unwrap_or_default();
        match (r.verb, sub) {
            (Verb::Get, None | Some(Subresource::Status)) => {
                let obj = reg.get(&def, ns, &name).await?;
                Ok(self.render_object(&def, StatusCode::OK, obj, output, query))
            }
            (Verb::Get, Some(Subresource::Scale)) => {
                let obj = reg.get(&def, ns, &name).await?;
                Ok(Reply::encoded(
                    StatusCode::OK,
                    &registry::scale_of(&def, &obj),
                    output,
                ))
            }
            (Verb::List, None) => {
                self.list(&def, ns, &query.list_params()?, output, query)
                    .await
            }
            (Verb::Watch, None) => {
                // Watches of network users are counted (in-process callers, the cluster's own
                // controllers, are not).
                let slot = if network {
                    Some(self.open_watch(&user.name)?)
                } else {
                    None
                };
                self.watch(&def, ns, query, output, slot, seat.take()).await
            }
            (Verb::Create, None) if r.name.is_none() => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let w = reg
                    .create(
                        &def,
                        ns,
                        body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::CREATED, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Create, Some(Subresource::Binding)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                reg.bind_pod(&def, ns, &name, &body).await?;
                Ok(Reply::json(StatusCode::CREATED, &success_status()))
            }
            (Verb::Get, Some(Subresource::Log)) => {
                let pod = reg.get(&def, ns, &name).await?;
                let container = crate::pod_streams::container_of(&pod, query.get("container"))?;
                let number = |k: &str| -> Result<Option<usize>> {
                    match query.get(k) {
                        None | Some("") => Ok(None),
                        Some(v) => v.parse::<usize>().map(Some).map_err(|_| {
                            ApiError::BadRequest(format!("{k} must be a non-negative integer"))
                        }),
                    }
                };
                let (tail, limit) = (number("tailLines")?, number("limitBytes")?);
                let previous = query.flag("previous")?;
                let streams = self.pod_streams.read().ok().and_then(|s| s.clone());
                let Some(streams) = streams else {
                    return Err(ApiError::BadRequest(format!(
                        "pod {name} does not run on a node that serves logs"
                    )));
                };
                if query.flag("follow")? && !previous {
                    // limitBytes counts over the whole stream.
                    let chunks = streams.follow(&pod, &container, tail).await?.scan(
                        limit.unwrap_or(usize::MAX),
                        |left, chunk| {
                            if *left == 0 {
                                return std::future::ready(None);
                            }
                            let cut = crate::pod_streams::trim(&chunk, None, Some(*left));
                            *left -= cut.len();
                            std::future::ready(Some(Ok::<_, std::convert::Infallible>(
                                Frame::data(Bytes::from(cut)),
                            )))
                        },
                    );
                    return Ok(Reply {
                        status: StatusCode::OK,
                        body: StreamBody::new(chunks).boxed_unsync(),
                        content_type: "text/plain",
                        warnings: Vec::new(),
                        upgrade: None,
                    });
                }
                let text = streams.logs(&pod, &container, previous).await?;
                Ok(Reply::text(
                    StatusCode::OK,
                    crate::pod_streams::trim(&text, tail, limit),
                    "text/plain",
                ))
            }
            (
                Verb::Create | Verb::Get,
                Some(sub @ (Subresource::Exec | Subresource::Attach | Subresource::PortForward)),
            ) => {
                let pod = reg.get(&def, ns, &name).await?;
                let streams = self.pod_streams.read().ok().and_then(|s| s.clone());
                let Some(streams) = streams else {
                    return Err(ApiError::BadRequest(format!(
                        "pod {name} does not run on a node that serves {}",
                        sub.name()
                    )));
                };
                let wants_upgrade = header_str(&req, header::CONNECTION)
                    .is_some_and(|c| c.to_ascii_lowercase().contains("upgrade"))
                    && req.headers().contains_key(header::UPGRADE);
                if !wants_upgrade {
                    return Err(ApiError::BadRequest(format!(
                        "{} needs a streaming connection (an HTTP upgrade to WebSocket or SPDY)",
                        sub.name()
                    )));
                }
                let ask = crate::pod_streams::StreamRequest {
                    what: sub.name(),
                    method: req.method().clone(),
                    query: req.uri().query().unwrap_or("").to_string(),
                    headers: crate::pod_streams::negotiation_headers(req.headers()),
                };
                let answer = streams.stream(&pod, ask).await?;
                let pending = crate::pod_streams::PendingSession::new(answer.session);
                // A network caller's connection is upgraded once this reply is sent; an
                // in-process caller takes the session from the reply.
                if let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>()
                {
                    let session = pending.clone();
                    tokio::spawn(async move {
                        match on_upgrade.await {
                            Ok(upgraded) => {
                                if let Some(run) = session.take() {
                                    run(Box::pin(hyper_util::rt::TokioIo::new(upgraded))).await;
                                }
                            }
                            Err(e) => tracing::debug!(error = %e, "a stream upgrade failed"),
                        }
                    });
                }
                Ok(Reply {
                    status: StatusCode::SWITCHING_PROTOCOLS,
                    body: full(Bytes::new()),
                    content_type: "",
                    warnings: Vec::new(),
                    upgrade: Some((answer.headers, pending)),
                })
            }
            (Verb::Create, Some(Subresource::Token)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let answer = self
                    .token_request(&def, ns.unwrap_or(""), &name, body)
                    .await?;
                Ok(Reply::encoded(StatusCode::CREATED, &answer, output))
            }
            (Verb::Create, Some(Subresource::Eviction)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                reg.evict_pod(&def, ns, &name, &body).await?;
                Ok(Reply::json(StatusCode::CREATED, &success_status()))
            }
            (Verb::Update, None | Some(Subresource::Status) | Some(Subresource::Finalize)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let w = reg
                    .update(
                        &def,
                        ns,
                        &name,
                        body,
                        Part::of(sub),
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::OK, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Update, Some(Subresource::Scale)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let scale = reg
                    .update_scale(
                        &def,
                        ns,
                        &name,
                        &body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(Reply::encoded(StatusCode::OK, &scale, output))
            }
            (Verb::Patch, None | Some(Subresource::Status)) => {
                let ty = negotiation::body_type(content_type.as_deref())?;
                let body = self.decode(req, content_type.as_deref(), true).await?;
                if ty == BodyType::ApplyPatch {
                    let force = query.flag("force")?;
                    let manager = query.get("fieldManager").unwrap_or("").to_string();
                    let mut opts = self.write_options(query, user_agent.as_deref(), &user)?;
                    opts.field_manager = None;
                    let w = reg
                        .apply(&def, ns, &name, body, Part::of(sub), &manager, force, &opts)
                        .await?;
                    let status = if w.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(self
                        .render_object(&def, status, w.object, output, query)
                        .with_warnings(w.warnings));
                }
                let w = reg
                    .patch(
                        &def,
                        ns,
                        &name,
                        ty,
                        &body,
                        Part::of(sub),
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::OK, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Patch, Some(Subresource::Scale)) => {
                let ty = negotiation::body_type(content_type.as_deref())?;
                let body = self.decode(req, content_type.as_deref(), true).await?;
                let scale = reg
                    .patch_scale(
                        &def,
                        ns,
                        &name,
                        ty,
                        &body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(Reply::encoded(StatusCode::OK, &scale, output))
            }
            (Verb::Delete, None) => {
                let opts = self.delete_options(req, query).await?;
                let (obj, gone) = reg.delete(&def, ns, &name, &opts).await?;
                let status = if gone {
                    StatusCode::OK
                } else {
                    StatusCode::ACCEPTED
                };
                Ok(self.render_object(&def, status, obj, output, query))
            }
            (Verb::DeleteCollection, None) => {
                let opts = self.delete_options(req, query).await?;
                let items = reg
                    .delete_collection(&def, ns, &query.list_params()?, &opts)
                    .await?;
                let list = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": {},
                    "items": items,
                });
                Ok(Reply::encoded(StatusCode::OK, &list, output))
            }
            _ => Err(ApiError::MethodNotAllowed),
        }
    }

    async fn decode(
        &self,
        req: Request<RequestBody>,
        content_type: Option<&str>,
        patch: bool,
    ) -> Result<Value> {
        let ty = negotiation::body_type(content_type)?;
        let is_patch_type = matches!(
            ty,
            BodyType::JsonPatch
                | BodyType::MergePatch
                | BodyType::StrategicMergePatch
                | BodyType::ApplyPatch
        );
        if patch != is_patch_type {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                if patch {
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                } else {
                    "application/json, application/yaml"
                }
            )));
        }
        let bytes = read_body(req.into_body()).await?;
        negotiation::decode_body(&bytes, ty)
    }

    async fn delete_options(
        &self,
        req: Request<RequestBody>,
        query: &Query,
    ) -> Result<DeleteOptions> {
        let ty = negotiation::body_type(header_str(&req, header::CONTENT_TYPE))?;
        let bytes = read_body(req.into_body()).await?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            match ty {
                BodyType::Json | BodyType::Yaml | BodyType::Protobuf => {
                    negotiation::decode_body(&bytes, ty)?
                }
                _ => {
                    return Err(ApiError::UnsupportedMediaType(
                        "DeleteOptions must be JSON, YAML or protobuf".into(),
                    ))
                }
            }
        };
        let propagation = match body["propagationPolicy"].as_str().or(query.get("propagationPolicy")) {
            None | Some("") if body["orphanDependents"].as_bool() == Some(true) || query.get("orphanDependents") == Some("true") => {
                Some(Propagation::Orphan)
            }
            None | Some("") => None,
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Orphan") => Some(Propagation::Orphan),
            Some(p) => {
                return Err(ApiError::BadRequest(format!(
                    "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                )))
            }
        };
        let body_dry = body["dryRun"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "All"));
        Ok(DeleteOptions {
            dry_run: body_dry || query.dry_run()?,
            grace_period: body["gracePeriodSeconds"]
                .as_i64()
                .or(query.int("gracePeriodSeconds")?),
            propagation,
            uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
        })
    }

    fn render_object(
        &self,
        def: &ResourceDef,
        status: StatusCode,
        obj: Value,
        output: Output,
        query: &Query,
    ) -> Reply {
        match output {
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                Reply::json(status, &table::table(def, &[obj], include, meta))
            }
            Output::Metadata => Reply::json(status, &table::partial_metadata(&obj)),
            other => Reply::encoded(status, &obj, other),
        }
    }

    /// Lists, encoding each object as it is read: a large list is never held in memory as
    /// objects, only as its encoded bytes (JSON) or rows (Table).
    async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        params: &ListParams,
        output: Output,
        query: &Query,
    ) -> Result<Reply> {
        let list_meta = |m: &registry::ListMeta| {
            let mut meta = json!({"resourceVersion": m.resource_version.to_string()});
            if let Some(c) = &m.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(r) = m.remaining {
                meta["remainingItemCount"] = json!(r);
            }
            meta
        };
        match output {
            Output::Json => {
                let mut items: Vec<u8> = Vec::new();
                let meta = self
                    .registry
                    .list_each(def, ns, params, &mut |obj| {
                        if !items.is_empty() {
                            items.push(b',');
                        }
                        serde_json::to_writer(&mut items, &obj).map_err(|e| {
                            ApiError::Internal(format!("failed to encode an object: {e}"))
                        })
                    })
                    .await?;
                let head = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": list_meta(&meta),
                });
                let mut body = serde_json::to_vec(&head).unwrap_or_default();
                // Replace the closing brace with the items array.
                body.pop();
                body.extend_from_slice(b",\"items\":[");
                body.extend_from_slice(&items);
                body.extend_from_slice(b"]}");
                Ok(Reply {
                    status: StatusCode::OK,
                    body: full(body),
                    content_type: "application/json",
                    warnings: Vec::new(),
                    upgrade: None,
                })
            }
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                let mut rows = Vec::new();
                let meta = self
                    .registry
                    .list_each(def, ns, params, &mut |obj| {
                        rows.push(table::row(def, &obj, include));
                        Ok(())
                    })
                    .await?;
                Ok(Reply::json(
                    StatusCode::OK,
                    &table::from_rows(def, rows, list_meta(&meta)),
                ))
            }
            _ => {
                let page = self.registry.list(def, ns, params).await?;
                Ok(self.render_list(def, page, output, query))
            }
        }
    }

    fn render_list(
        &self,
        def: &ResourceDef,
        page: registry::ListPage,
        output: Output,
        query: &Query,
    ) -> Reply {
        let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(c) = &page.continue_token {
            meta["continue"] = json!(c);
        }
        if let Some(r) = page.remaining {
            meta["remainingItemCount"] = json!(r);
        }
        match output {
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                Reply::json(
                    StatusCode::OK,
                    &table::table(def, &page.items, include, meta),
                )
            }
            Output::Metadata => Reply::json(
                StatusCode::OK,
                &table::partial_metadata_list(&page.items, meta),
            ),
            other => {
                let mut list = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": meta,
                });
                list["items"] = Value::Array(page.items);
                Reply::encoded(StatusCode::OK, &list, other)
            }
        }
    }

    async fn watch(
        &self,
        def: &Arc<ResourceDef>,
        ns: Option<&str>,
        query: &Query,
        output: Output,
        slot: Option<crate::server::WatchSlot>,
        seat: Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        let (labels, fields) = query.selectors()?;
        let send_initial = match query.get("sendInitialEvents") {
            None | Some("") => None,
            Some(_) => Some(query.flag("sendInitialEvents")?),
        };
        let params = WatchParams {
            labels,
            fields,
            resource_version: query.get("resourceVersion").map(str::to_string),
            resource_version_match: query.get("resourceVersionMatch").map(str::to_string),
            bookmarks: query.flag("allowWatchBookmarks")?,
            send_initial_events: send_initial,
            bookmark_interval: self.settings.bookmark_interval,
        };
        let timeout = match query.int("timeoutSeconds")? {
            Some(t) if t > 0 => Duration::from_secs(t as u64),
            _ => self.settings.max_watch,
        };
        let events =
            crate::fairness::hold_until_idle(self.registry.watch(def, ns, params).await?, seat);
        let def = def.clone();
        let include =
            IncludeObject::parse(query.get("includeObject").unwrap_or("")).unwrap_or_default();
        let shutdown = self.shutdown_signal();
        let deadline = tokio::time::sleep(timeout);
        let frames = events
            .map(move |ev| {
                let convert = |_ty: &str, obj: Value| -> Value {
                    match output {
                        Output::Table => table::table(&def, &[obj], include, json!({})),
                        Output::Metadata => table::partial_metadata(&obj),
                        _ => obj,
                    }
                };
                // The watch is counted for as long as its stream lives.
                let _counted = &slot;
                let mut line = serde_json::to_vec(&ev.to_json(&def, &convert)).unwrap_or_default();
                line.push(b'\n');
                Ok::<_, Infallible>(Frame::data(Bytes::from(line)))
            })
            .take_until(async move {
                tokio::select! {
                    _ = deadline => {},
                    _ = shutdown => {},
                }
            });
        Ok(Reply {
            status: StatusCode::OK,
            body: StreamBody::new(frames).boxed_unsync(),
            content_type: "application/json",
            warnings: Vec::new(),
            upgrade: None,
        })
    }
}

fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn body_limit() {
        let small = read_body(Full::new(Bytes::from_static(b"{}"))).await;
        assert_eq!(small.ok(), Some(Bytes::from_static(b"{}")));
        let exact = read_body(Full::new(Bytes::from(vec![b'x'; MAX_BODY_BYTES]))).await;
        assert_eq!(exact.map(|b| b.len()).ok(), Some(MAX_BODY_BYTES));
        let over = read_body(Full::new(Bytes::from(vec![b'x'; MAX_BODY_BYTES + 1]))).await;
        assert!(matches!(over, Err(ApiError::RequestEntityTooLarge { .. })));
    }

    #[test]
    fn heavy_requests_are_collection_reads_and_large_or_unsized_bodies() {
        let heavy = |method: &str, path: &str, watch: bool, length: Option<usize>| {
            let method = http::Method::from_bytes(method.as_bytes()).expect("method");
            let route = request_info::parse(&method, path, watch).expect("route");
            let mut req = Request::builder().method(method).uri(path);
            if let Some(n) = length {
                req = req.header(header::CONTENT_LENGTH, n.to_string());
            }
            let req = req
                .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                .expect("request");
            is_heavy(&req, &route)
        };
        let pods = "/api/v1/namespaces/default/pods";
        assert!(heavy("GET", pods, false, None), "a list");
        assert!(heavy("DELETE", pods, false, None), "a collection delete");
        assert!(
            !heavy("GET", pods, true, None),
            "a watch encodes event by event"
        );
        assert!(
            !heavy("GET", &format!("{pods}/p"), false, None),
            "one object"
        );
        assert!(!heavy("POST", pods, false, Some(2_000)), "a small body");
        assert!(heavy("POST", pods, false, Some(900 * 1024)), "a large body");
        assert!(
            heavy("PATCH", &format!("{pods}/p"), false, None),
            "a body of unknown length"
        );
        assert!(
            !heavy("DELETE", &format!("{pods}/p"), false, None),
            "a delete of one object"
        );
    }
}
