//! The request pipeline: turns a request into a registry call and the result into a response.
//! Handlers are infallible: every error becomes a Kubernetes `Status` here, in one place.
//!
//! The stages, in the order a request meets them (composed in [`ApiServer::route`]; the
//! tenant routing before them is [`crate::router`]'s):
//! 1. [`authenticate`]: the caller's identity (TLS client certificate, bearer token, or the
//!    in-process caller), then impersonation;
//! 2. request info ([`crate::request_info`]): the path and method as a [`Route`] — verb,
//!    group, resource, subresource, namespace, name;
//! 3. [`authorize`]: RBAC on the request's attributes;
//! 4. [`seats`]: fairness — a tenant's seat in the listener's pool, a lane for heavy requests;
//! 5. [`aggregated`]: a group and version an APIService serves goes to its backend (or to the
//!    built-in [`metrics_api`] when none is registered for it);
//! 6. the verbs: [`resource`] (each verb and subresource to its registry call, with [`objects`]
//!    to decode and encode one object, [`list`] and [`watch`]) or [`non_resource`]
//!    (discovery, OpenAPI, version, health);
//!
//! Then [`ApiServer::handle`] writes the [`reply`] (status, content type, warnings, metrics).
//! [`query`] reads query parameters, headers and bodies for every stage.

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

mod aggregated;
mod authenticate;
mod authorize;
mod list;
mod metrics_api;
mod non_resource;
mod objects;
mod query;
mod reply;
mod resource;
mod seats;
mod watch;

use query::{header_str, read_body, Query};
use reply::{full, success_status, Reply};

impl ApiServer {
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

    /// The pipeline of one request: authenticate, route, authorize, then dispatch (seats and
    /// verbs). Returns the reply or the error, with the verb and resource for metrics.
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
        self.authorize(&user, &route, &lower, req.uri().path())
            .map_err(|e| (e, verb.clone(), resource.clone()))?;
        let result = self.dispatch(req, query, route, user, network).await;
        match result {
            Ok(reply) => Ok((reply, verb, resource)),
            Err(e) => Err((e, verb, resource)),
        }
    }
}
