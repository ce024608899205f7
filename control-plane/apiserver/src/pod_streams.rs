//! The pod streaming subresources: `pods/log`, and `pods/exec`, `pods/attach`,
//! `pods/portforward`. What serves them depends on where the pod runs, so the API server asks
//! a [`PodStreams`] provider set by whoever runs the nodes: the simulated nodes of `fabrik up`
//! answer with what their kubelet stand-in recorded (and run a few commands); a tenant's server
//! asks the host for the host pod's log and proxies the streams to the host pod. The handler
//! does what is common: picking the container, `tailLines`, `limitBytes`, and the HTTP upgrade.
//!
//! A stream is an upgraded connection (WebSocket or SPDY): the provider answers the upgrade
//! request with the response headers and a [`Session`], which the handler runs on the client's
//! upgraded connection. A caller inside the process (no socket to upgrade) finds the session
//! in the response's extensions as a [`PendingSession`] and runs it on a connection of its own
//! — that is how a tenant's proxy reaches the host of `fabrik up` without a socket.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use http::{HeaderMap, Method};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::ApiError;

/// A duplex byte stream: an upgraded connection.
pub trait StreamIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> StreamIo for T {}

/// An upgraded connection, boxed.
pub type BoxedIo = Pin<Box<dyn StreamIo>>;

/// What runs on the client's upgraded connection once the upgrade is done.
pub type Session = Box<dyn FnOnce(BoxedIo) -> BoxFuture<'static, ()> + Send>;

/// A [`Session`] handed to an in-process caller through the response's extensions (which
/// must be `Clone`): the first to [`take`](PendingSession::take) it runs it.
#[derive(Clone)]
pub struct PendingSession(Arc<Mutex<Option<Session>>>);

impl PendingSession {
    /// Wraps `session`.
    pub fn new(session: Session) -> PendingSession {
        PendingSession(Arc::new(Mutex::new(Some(session))))
    }

    /// The session, once.
    pub fn take(&self) -> Option<Session> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

impl std::fmt::Debug for PendingSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingSession")
    }
}

/// An upgrade request for `exec`, `attach` or `portforward`.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    /// `exec`, `attach` or `portforward`.
    pub what: &'static str,
    /// The request's method (GET for WebSocket, POST for SPDY).
    pub method: Method,
    /// The raw query string (`command=…&container=…&stdin=true`, `ports=…`).
    pub query: String,
    /// The request's headers that negotiate the stream: `Connection`, `Upgrade`,
    /// `Sec-WebSocket-*`, `X-Stream-Protocol-Version`.
    pub headers: HeaderMap,
}

/// The upgrade, accepted: `101 Switching Protocols` with `headers`, then `session`.
pub struct StreamAnswer {
    /// Response headers (`Upgrade`, `Connection`, `Sec-WebSocket-Accept`, the protocol chosen).
    pub headers: HeaderMap,
    /// What runs on the upgraded connection.
    pub session: Session,
}

/// The headers of `all` that negotiate a stream, to pass on.
pub fn negotiation_headers(all: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in all {
        let n = name.as_str();
        if n == "connection"
            || n == "upgrade"
            || n.starts_with("sec-websocket-")
            || n == "x-stream-protocol-version"
        {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// A provider of pod logs and streams.
#[async_trait::async_trait]
pub trait PodStreams: Send + Sync {
    /// The whole current log of `container` of `pod` (the handler trims it).
    async fn logs(&self, pod: &Value, container: &str, previous: bool) -> Result<String, ApiError>;

    /// `kubectl logs --follow`: the log (its last `tail` lines, if given), then what the
    /// container prints, until it exits. A provider that cannot follow says why.
    async fn follow(
        &self,
        pod: &Value,
        container: &str,
        tail: Option<usize>,
    ) -> Result<futures::stream::BoxStream<'static, String>, ApiError> {
        let _ = (container, tail);
        Err(ApiError::BadRequest(format!(
            "following the log of pod {} is not served here; drop --follow",
            pod["metadata"]["name"].as_str().unwrap_or("")
        )))
    }

    /// Accepts the upgrade `req` for a stream into `pod`, or says why not, as an error.
    async fn stream(&self, pod: &Value, req: StreamRequest) -> Result<StreamAnswer, ApiError>;
}

/// The container a log request means: the one named, or the pod's only one.
pub fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names: Vec<&str> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => {
            let regular: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            match regular.as_slice() {
                [one] => Ok(one.to_string()),
                many => Err(ApiError::BadRequest(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                ))),
            }
        }
    }
}

/// Applies `tailLines` and `limitBytes` to a log.
pub fn trim(text: &str, tail_lines: Option<usize>, limit_bytes: Option<usize>) -> String {
    let mut out = match tail_lines {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            lines[start..].iter().map(|l| format!("{l}\n")).collect()
        }
        None => text.to_string(),
    };
    if let Some(limit) = limit_bytes {
        if out.len() > limit {
            let mut cut = limit;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_and_trimming_follow_upstream() {
        let one = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container_of(&one, None).expect("only one"), "app");
        let two = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let err = container_of(&two, None).expect_err("ambiguous").to_string();
        assert!(err.contains("choose one of: [a b]"), "{err}");
        assert!(container_of(&two, Some("c")).is_err());
        assert_eq!(trim("1\n2\n3\n", Some(2), None), "2\n3\n");
        assert_eq!(trim("abcdef", None, Some(3)), "abc");
    }
}
