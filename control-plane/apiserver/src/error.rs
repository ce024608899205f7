//! Every error the API can answer, and its one rendering as a Kubernetes `meta.k8s.io/v1 Status`.
//!
//! Handlers never build error JSON themselves: they return an [`ApiError`], and
//! [`ApiError::to_status`] turns it into the upstream reason and code.

use fabrik_machinery::validation::FieldError;
use fabrik_store::StoreError;
use serde_json::{json, Value};

/// Names a resource in messages the way upstream does: `pods`, `deployments.apps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupResource {
    /// API group; empty for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group-resource pair.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// An API error: each variant is one upstream `StatusReason`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// What was looked for.
        resource: GroupResource,
        /// Its name.
        name: String,
    },
    /// 404 for a path that names no resource or route.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// 409: create of a name already taken.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// The resource.
        resource: GroupResource,
        /// The taken name.
        name: String,
    },
    /// 409: a write raced with another (stale resourceVersion, failed precondition).
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        /// The resource.
        resource: GroupResource,
        /// The object's name.
        name: String,
        /// Why.
        message: String,
    },
    /// 409: a server-side apply changes fields other managers own.
    #[error("{message}")]
    ApplyConflict {
        /// The resource.
        resource: GroupResource,
        /// The object's name.
        name: String,
        /// Upstream's "Apply failed with N conflicts: ..." text.
        message: String,
        /// (field, message) per conflict.
        causes: Vec<(String, String)>,
    },
    /// 422: the object fails validation.
    #[error("{kind} \"{name}\" is invalid: {}", render_causes(.causes))]
    Invalid {
        /// Kind of the object.
        kind: String,
        /// Group of the kind.
        group: String,
        /// The object's name.
        name: String,
        /// Each failing field.
        causes: Vec<FieldError>,
    },
    /// 400: the request itself is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// 403: refused by policy (namespace terminating, not permitted).
    #[error("{0}")]
    Forbidden(String),
    /// 401: no acceptable credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 405: the verb is not supported on this resource.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 406: no representation the client accepts.
    #[error("{0}")]
    NotAcceptable(String),
    /// 415: a body type the server does not handle for this resource.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 410: the requested resourceVersion or continue token is too old.
    #[error("{0}")]
    Gone(String),
    /// 413: the body is larger than the server accepts.
    #[error("the request is too large: limit is {limit} bytes")]
    RequestEntityTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// 413: the object, as it would be stored, is larger than the store accepts (etcd's
    /// default request limit): the body may be up to 3 MiB, the stored object only 1.5 MiB.
    #[error(
        "Request entity too large: the object would take {size} bytes in storage, limit is {limit}"
    )]
    ObjectTooLarge {
        /// The encoded size.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// 429: refused for now (a disruption budget, rate limits).
    #[error("{0}")]
    TooManyRequests(String),
    /// 429: the caller's share of the server is used up; retry after the given seconds.
    #[error("{message}")]
    Throttled {
        /// Why.
        message: String,
        /// When to retry (the `Retry-After` header and `details.retryAfterSeconds`).
        retry_after: u64,
    },
    /// 503: what serves the request is not available (an aggregated API's backend).
    #[error("{0}")]
    Unavailable(String),
    /// 504: the server could not answer in time (e.g. a future resourceVersion).
    #[error("{0}")]
    Timeout(String),
    /// 500: something failed inside the server.
    #[error("internal error: {0}")]
    Internal(String),
    /// A refusal with the code, reason and details another component chose (an admission
    /// webhook's `status`): passed to the client as it was given.
    #[error("{}", .0.message)]
    Denied(Box<Refusal>),
}

/// The `Status` of a refusal another component chose ([`ApiError::Denied`]).
#[derive(Debug)]
pub struct Refusal {
    /// The HTTP code (at least 400).
    pub code: u16,
    /// The `StatusReason` (may be empty).
    pub reason: String,
    /// The message.
    pub message: String,
    /// `details`, if given.
    pub details: Option<Value>,
}

fn render_causes(causes: &[FieldError]) -> String {
    let parts: Vec<String> = causes.iter().map(|c| c.message_string()).collect();
    if parts.len() == 1 {
        parts.join("")
    } else {
        format!("[{}]", parts.join(", "))
    }
}

/// `type Result<T, E = ApiError>` for the API layer.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    /// The HTTP code of this error.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::NoRoute => 404,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. } => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::Forbidden(_) => 403,
            ApiError::Unauthorized => 401,
            ApiError::MethodNotAllowed => 405,
            ApiError::NotAcceptable(_) => 406,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Gone(_) => 410,
            ApiError::RequestEntityTooLarge { .. } | ApiError::ObjectTooLarge { .. } => 413,
            ApiError::TooManyRequests(_) | ApiError::Throttled { .. } => 429,
            ApiError::Unavailable(_) => 503,
            ApiError::Timeout(_) => 504,
            ApiError::Internal(_) => 500,
            ApiError::Denied(r) => r.code,
        }
    }

    /// Seconds a client should wait before retrying (429s), for the `Retry-After` header.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::TooManyRequests(_) => Some(1),
            ApiError::Throttled { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The upstream `StatusReason`.
    pub fn reason(&self) -> &str {
        match self {
            ApiError::NotFound { .. } | ApiError::NoRoute => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Gone(_) => "Expired",
            ApiError::RequestEntityTooLarge { .. } | ApiError::ObjectTooLarge { .. } => {
                "RequestEntityTooLarge"
            }
            ApiError::TooManyRequests(_) | ApiError::Throttled { .. } => "TooManyRequests",
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::Timeout(_) => "Timeout",
            ApiError::Internal(_) => "InternalError",
            ApiError::Denied(r) => &r.reason,
        }
    }

    /// The `meta.k8s.io/v1 Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. } => Some(json!({
                "name": name,
                "group": resource.group,
                "kind": resource.resource,
            })),
            ApiError::Invalid {
                kind,
                group,
                name,
                causes,
            } => Some(json!({
                "name": name,
                "group": group,
                "kind": kind,
                "causes": causes.iter().map(|c| json!({
                    "reason": c.kind.cause_type(),
                    "message": c.body(),
                    "field": c.field,
                })).collect::<Vec<_>>(),
            })),
            ApiError::ApplyConflict {
                resource,
                name,
                causes,
                ..
            } => Some(json!({
                "name": name,
                "group": resource.group,
                "kind": resource.resource,
                "causes": causes.iter().map(|(field, message)| json!({
                    "reason": "FieldManagerConflict",
                    "message": message,
                    "field": field,
                })).collect::<Vec<_>>(),
            })),
            ApiError::TooManyRequests(_) | ApiError::Throttled { .. } => {
                Some(json!({"retryAfterSeconds": self.retry_after().unwrap_or(1)}))
            }
            ApiError::Denied(r) => r.details.clone(),
            _ => None,
        };
        if let (Some(details), Some(obj)) = (details, status.as_object_mut()) {
            obj.insert("details".into(), details);
        }
        status
    }

    /// Maps a storage error about `name` of `resource`.
    pub fn from_store(err: StoreError, resource: &GroupResource, name: &str) -> ApiError {
        match err {
            StoreError::NotFound { .. } => ApiError::NotFound {
                resource: resource.clone(),
                name: name.to_string(),
            },
            StoreError::AlreadyExists { .. } => ApiError::AlreadyExists {
                resource: resource.clone(),
                name: name.to_string(),
            },
            StoreError::Conflict { .. } => ApiError::conflict(resource, name),
            StoreError::Compacted {
                requested,
                compacted,
            } => ApiError::Gone(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            StoreError::FutureRevision { requested, current } => ApiError::Timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            )),
            // 403 like an exceeded ResourceQuota: the client cannot succeed by retrying, only
            // by deleting objects (deletes are never refused) or by a larger quota.
            quota @ StoreError::QuotaExceeded { .. } => {
                ApiError::Forbidden(format!("{resource} \"{name}\" is forbidden: {quota}"))
            }
            other => ApiError::Internal(other.to_string()),
        }
    }

    /// The upstream optimistic-concurrency conflict.
    pub fn conflict(resource: &GroupResource, name: &str) -> ApiError {
        ApiError::Conflict {
            resource: resource.clone(),
            name: name.to_string(),
            message: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ApiError::from_store(err, &GroupResource::new("", ""), "")
    }
}
