//! Who serves `kubectl logs` (and answers `exec`, `attach`, `port-forward`):
//!
//! - [`SimulatedNodes`] for the host of `fabrik up`: the log the kubelet stand-in of a
//!   simulated node recorded; `exec` and friends are refused with the reason (nothing runs on a
//!   simulated node);
//! - [`HostPods`] for a tenant's API server: the log of the tenant pod's host pod, read from the
//!   host API (on a real host cluster, from its kubelet).

use fabrik_apiserver::pod_streams::PodStreams;
use fabrik_apiserver::ApiError;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use node_agent::kubelet::logs::LogStore;
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

    async fn stream(&self, pod: &Value, what: &str) -> Result<(), ApiError> {
        let (_, name) = name_of(pod);
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("no node");
        Err(ApiError::BadRequest(format!(
            "pod {name} runs on simulated node {node}: {what} is not available there (simulated \
             nodes run no containers; `kubectl logs` shows what the simulation recorded)"
        )))
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
        let host_name = syncer::naming::host_name(name, ns, &self.tenant);
        let pods: Api<Pod> = Api::namespaced(
            self.host.clone(),
            &syncer::naming::host_namespace(&self.tenant),
        );
        let params = LogParams {
            container: Some(container.to_string()),
            previous,
            ..LogParams::default()
        };
        pods.logs(&host_name, &params).await.map_err(|e| match e {
            // The host's refusal, in the host's words but without the host pod's name.
            kube::Error::Api(s) => ApiError::BadRequest(
                s.message
                    .replace(&host_name, name)
                    .replace(&syncer::naming::host_namespace(&self.tenant), ns),
            ),
            other => ApiError::Internal(format!("reading the host pod's log: {other}")),
        })
    }

    async fn stream(&self, pod: &Value, what: &str) -> Result<(), ApiError> {
        let (_, name) = name_of(pod);
        Err(ApiError::BadRequest(format!(
            "{what} into tenant pods is not proxied to the host yet (pod {name}); use `kubectl logs`"
        )))
    }
}
