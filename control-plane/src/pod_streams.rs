//! Who serves `kubectl logs`, `exec`, `attach` and `port-forward`:
//!
//! - [`SimulatedNodes`] for the host of `fabrik up`: the log the kubelet stand-in of a
//!   simulated node recorded, and `exec` of the few commands a simulated container answers
//!   ([`fabrik_sim::kubelet::exec`]); `attach` and `port-forward` are refused with the reason
//!   (no process runs, nothing listens);
//! - [`HostPods`] for a tenant's API server: the tenant pod's host pod — its log read from the
//!   host API, its streams proxied to the host's `pods/exec|attach|portforward` (on a real host
//!   cluster, its kubelet): the upgrade is passed on and the bytes are copied both ways, so
//!   whatever protocol the client and the host agree on (WebSocket or SPDY) passes unchanged.

use fabrik_apiserver::pod_streams::{
    self as streams, BoxedIo, PendingSession, PodStreams, StreamAnswer, StreamRequest,
};
use fabrik_apiserver::ApiError;
use fabrik_sim::kubelet::exec::{self, ExecOptions, SimContainer};
use fabrik_sim::kubelet::logs::LogStore;
use futures::stream::BoxStream;
use futures::{AsyncBufReadExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use serde_json::Value;

fn name_of(pod: &Value) -> (&str, &str) {
    (
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or(""),
    )
}

/// The simulated nodes' recorded logs.
pub struct SimulatedNodes {
    /// What the kubelet stand-ins recorded.
    pub logs: LogStore,
}

#[async_trait::async_trait]
impl PodStreams for SimulatedNodes {
    async fn logs(&self, pod: &Value, container: &str, previous: bool) -> Result<String, ApiError> {
        let (ns, name) = name_of(pod);
        if previous {
            return Err(ApiError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        self.logs.get(ns, name, container).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: no log yet"
            ))
        })
    }

    async fn follow(
        &self,
        pod: &Value,
        container: &str,
        tail: Option<usize>,
    ) -> Result<BoxStream<'static, String>, ApiError> {
        let (ns, name) = name_of(pod);
        self.logs.follow(ns, name, container, tail).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: no log yet"
            ))
        })
    }

    async fn stream(&self, pod: &Value, req: StreamRequest) -> Result<StreamAnswer, ApiError> {
        let (_, name) = name_of(pod);
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or("no node")
            .to_string();
        if req.what != "exec" {
            let why = if req.what == "attach" {
                "a simulated container runs no process to attach to"
            } else {
                "nothing listens in a simulated container"
            };
            return Err(ApiError::BadRequest(format!(
                "pod {name} runs on simulated node {node}: {} is not available there ({why}; \
                 `kubectl logs` shows what the simulation recorded, `kubectl exec` answers {})",
                req.what,
                exec::COMMANDS
            )));
        }
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        if phase != "Running" {
            return Err(ApiError::BadRequest(format!(
                "pod {name} is not running (phase {phase}): there is no container to exec into"
            )));
        }
        let opts =
            ExecOptions::from_query(&req.query).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let container = streams::container_of(pod, opts.container.as_deref())?;
        let header = |h: header::HeaderName| req.headers.get(h).and_then(|v| v.to_str().ok());
        if !header(header::UPGRADE).is_some_and(|u| u.eq_ignore_ascii_case("websocket")) {
            return Err(ApiError::BadRequest(format!(
                "simulated node {node} serves exec over WebSocket only (kubectl 1.30 and later \
                 use it); SPDY is not spoken there"
            )));
        }
        let Some(key) = header(header::SEC_WEBSOCKET_KEY) else {
            return Err(ApiError::BadRequest(
                "a WebSocket upgrade needs Sec-WebSocket-Key".into(),
            ));
        };
        let offered = header(header::SEC_WEBSOCKET_PROTOCOL).unwrap_or("");
        let Some(protocol) = exec::choose_protocol(offered) else {
            return Err(ApiError::BadRequest(format!(
                "none of the stream protocols offered ({offered}) is served; offer one of {}",
                exec::PROTOCOLS.join(", ")
            )));
        };
        // A pod's hostname is `spec.hostname` when set (the syncer sets the tenant's), else
        // its name.
        let hostname = pod["spec"]["hostname"]
            .as_str()
            .filter(|h| !h.is_empty())
            .unwrap_or(name)
            .to_string();
        let mut env: Vec<(String, String)> = vec![("HOSTNAME".into(), hostname.clone())];
        let spec = ["containers", "initContainers"]
            .iter()
            .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
            .find(|c| c["name"].as_str() == Some(container.as_str()));
        for e in spec.and_then(|c| c["env"].as_array()).into_iter().flatten() {
            if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
                env.push((k.to_string(), v.to_string()));
            }
        }
        let sim = SimContainer {
            node,
            hostname,
            env,
        };
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static(protocol),
        );
        let accept = HeaderValue::from_str(&exec::accept_key(key))
            .map_err(|e| ApiError::Internal(format!("a WebSocket accept key: {e}")))?;
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        Ok(StreamAnswer {
            headers,
            session: Box::new(move |io: BoxedIo| Box::pin(exec::serve(io, protocol, opts, sim))),
        })
    }
}

impl HostPods {
    /// The host pod of tenant pod `ns/name`: its name by the current scheme, or, when no such
    /// host pod exists, a host pod named by an earlier scheme that the syncer keeps running
    /// until the tenant pod ends (found by its origin marks).
    async fn host_pod_name(&self, ns: &str, name: &str) -> String {
        let current = syncer::naming::host_name(name, ns, &self.tenant);
        let pods: Api<Pod> = Api::namespaced(
            self.host.clone(),
            &syncer::naming::host_namespace(&self.tenant),
        );
        match pods.get_opt(&current).await {
            Ok(None) => {}
            _ => return current,
        }
        let selector = format!(
            "{}={},{}={ns}",
            fabrik_api::LABEL_TENANT,
            self.tenant,
            fabrik_api::LABEL_NAMESPACE
        );
        let Ok(list) = pods
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
        else {
            return current;
        };
        list.items
            .into_iter()
            .find(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(fabrik_api::ANNOTATION_VIRTUAL_NAME))
                    .is_some_and(|v| v == name)
            })
            .and_then(|p| p.metadata.name)
            .unwrap_or(current)
    }

    /// The host's refusal, in the host's words but without the host pod's name.
    fn host_refusal(&self, e: kube::Error, name: &str, ns: &str, host_name: &str) -> ApiError {
        match e {
            kube::Error::Api(s) => ApiError::BadRequest(
                s.message
                    .replace(host_name, name)
                    .replace(&syncer::naming::host_namespace(&self.tenant), ns),
            ),
            other => ApiError::Internal(format!("reading the host pod's log: {other}")),
        }
    }
}

/// A tenant's pods, served from their host pods.
pub struct HostPods {
    /// The host API.
    pub host: kube::Client,
    /// The tenant.
    pub tenant: String,
}

#[async_trait::async_trait]
impl PodStreams for HostPods {
    async fn logs(&self, pod: &Value, container: &str, previous: bool) -> Result<String, ApiError> {
        let (ns, name) = name_of(pod);
        let host_name = self.host_pod_name(ns, name).await;
        let pods: Api<Pod> = Api::namespaced(
            self.host.clone(),
            &syncer::naming::host_namespace(&self.tenant),
        );
        let params = LogParams {
            container: Some(container.to_string()),
            previous,
            ..LogParams::default()
        };
        pods.logs(&host_name, &params)
            .await
            .map_err(|e| self.host_refusal(e, name, ns, &host_name))
    }

    async fn follow(
        &self,
        pod: &Value,
        container: &str,
        tail: Option<usize>,
    ) -> Result<BoxStream<'static, String>, ApiError> {
        let (ns, name) = name_of(pod);
        let host_name = self.host_pod_name(ns, name).await;
        let pods: Api<Pod> = Api::namespaced(
            self.host.clone(),
            &syncer::naming::host_namespace(&self.tenant),
        );
        let params = LogParams {
            container: Some(container.to_string()),
            follow: true,
            tail_lines: tail.and_then(|t| i64::try_from(t).ok()),
            ..LogParams::default()
        };
        let lines = pods
            .log_stream(&host_name, &params)
            .await
            .map_err(|e| self.host_refusal(e, name, ns, &host_name))?
            .lines();
        Ok(lines
            .take_while(|l| std::future::ready(l.is_ok()))
            .filter_map(|l| std::future::ready(l.ok().map(|l| format!("{l}\n"))))
            .boxed())
    }

    async fn stream(&self, pod: &Value, req: StreamRequest) -> Result<StreamAnswer, ApiError> {
        let (ns, name) = name_of(pod);
        let host_ns = syncer::naming::host_namespace(&self.tenant);
        let host_name = self.host_pod_name(ns, name).await;
        // The host request is built by allow-list: the stream's own parameters only.
        let query = {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (k, v) in form_urlencoded::parse(req.query.as_bytes()) {
                if matches!(
                    k.as_ref(),
                    "command" | "container" | "stdin" | "stdout" | "stderr" | "tty" | "ports"
                ) {
                    query.append_pair(&k, &v);
                }
            }
            query.finish()
        };
        let uri = format!(
            "/api/v1/namespaces/{host_ns}/pods/{host_name}/{}?{query}",
            req.what
        );
        let mut builder = http::Request::builder().method(req.method.clone()).uri(uri);
        for (k, v) in &req.headers {
            builder = builder.header(k, v);
        }
        let request = builder
            .body(kube::client::Body::empty())
            .map_err(|e| ApiError::Internal(format!("building the host stream request: {e}")))?;
        let mut res =
            self.host.send(request).await.map_err(|e| {
                ApiError::Internal(format!("opening the stream to the host pod: {e}"))
            })?;
        if res.status() != StatusCode::SWITCHING_PROTOCOLS {
            let code = res.status();
            let body = res
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let message = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|s| s["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned())
                .replace(&host_name, name)
                .replace(&host_ns, ns);
            return Err(match code {
                StatusCode::BAD_REQUEST => ApiError::BadRequest(message),
                StatusCode::NOT_FOUND => ApiError::BadRequest(format!(
                    "pod {name} has no host pod yet (it is not scheduled): {message}"
                )),
                _ => ApiError::Internal(format!("the host refused the stream ({code}): {message}")),
            });
        }
        let headers = streams::negotiation_headers(res.headers());
        // The host in this process hands its session over; a host across the network upgrades
        // the connection, and the bytes are copied both ways.
        if let Some(session) = res
            .extensions()
            .get::<PendingSession>()
            .and_then(PendingSession::take)
        {
            return Ok(StreamAnswer { headers, session });
        }
        let host_side = hyper::upgrade::on(&mut res);
        Ok(StreamAnswer {
            headers,
            session: Box::new(move |mut client: BoxedIo| {
                Box::pin(async move {
                    match host_side.await {
                        Ok(up) => {
                            let mut host = hyper_util::rt::TokioIo::new(up);
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut host).await;
                        }
                        Err(e) => tracing::debug!(error = %e, "the host pod's stream did not open"),
                    }
                })
            }),
        })
    }
}
