//! Publishing GPU-second counters to the host: per node, a ConfigMap
//! `fabrik-gpu-usage-<node>` in `fabrik-system` whose `usage.json` is a
//! [`NodeGpuUsage`] (per tenant totals and per pod series), written at most once per interval
//! and only when it changed. The control plane sums these into `Tenant.status.usage` and
//! serves them as an OpenCost allocation.
//!
//! The document's format ([`document`], [`counters`], [`parse`]) is
//! [`fabrik_gpu::metering::wire`]'s; this module writes and reads it back.
//!
//! Counters survive a restart of the agent: before its first write for a node, the publisher
//! reads the node's ConfigMap back and adds what it holds to the meter
//! ([`Meter::restore`]), so published counters never go back.
//!
//! The same publisher serves the standalone agent (one node) and the simulated nodes of
//! `fabrik up` (one meter fed by several nodes, split by [`Meter::snapshot_of`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fabrik_api::tenant::{
    usage_configmap_name, NodeGpuUsage, LABEL_GPU_USAGE_NODE, USAGE_DATA_KEY, USAGE_NAMESPACE,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use thiserror::Error;

pub use fabrik_gpu::metering::wire::{counters, document, parse};
use fabrik_gpu::metering::{Meter, Snapshot};

/// The field manager of the usage ConfigMaps.
pub const FIELD_MANAGER: &str = "fabrik-node-agent-metering";

/// The default time between writes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);

/// Errors of one publishing round.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A host API call failed.
    #[error("host API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// A document could not be encoded.
    #[error("cannot encode the usage document: {0}")]
    Json(#[from] serde_json::Error),
}

/// Publisher settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Time between writes (at most one write per node per interval).
    pub interval: Duration,
    /// Namespace of the ConfigMaps.
    pub namespace: String,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            interval: DEFAULT_INTERVAL,
            namespace: USAGE_NAMESPACE.to_string(),
        }
    }
}

/// Writes the usage ConfigMaps of some nodes from one meter.
pub struct Publisher {
    client: Client,
    meter: Meter,
    nodes: Vec<String>,
    config: Config,
    /// Nodes whose earlier counters were read back into the meter.
    restored: BTreeSet<String>,
    /// The last document written (or read back) per node.
    written: BTreeMap<String, NodeGpuUsage>,
}

impl Publisher {
    /// A publisher of `nodes`' counters in `meter`.
    pub fn new(client: Client, meter: Meter, nodes: Vec<String>, config: Config) -> Publisher {
        Publisher {
            client,
            meter,
            nodes,
            config,
            restored: BTreeSet::new(),
            written: BTreeMap::new(),
        }
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// Reads a node's earlier counters back into the meter (once).
    async fn restore(&mut self, node: &str) -> Result<(), Error> {
        if self.restored.contains(node) {
            return Ok(());
        }
        let earlier = self.api().get_opt(&usage_configmap_name(node)).await?;
        match earlier.as_ref().map(parse) {
            Some(Some(doc)) => {
                self.meter.restore(node, &counters(&doc));
                self.written.insert(node.to_string(), doc);
            }
            // Rewritten at the next write.
            Some(None) => {
                tracing::warn!(%node, "the usage ConfigMap holds no readable usage; rewriting it");
            }
            // Nothing published yet: an empty document needs no write.
            None => {
                self.written
                    .insert(node.to_string(), document(node, &Snapshot::default()));
            }
        }
        self.restored.insert(node.to_string());
        Ok(())
    }

    async fn ensure_namespace(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": self.config.namespace}});
        match serde_json::from_value::<Namespace>(ns) {
            Ok(ns) => {
                if let Err(e) = namespaces.create(&PostParams::default(), &ns).await {
                    tracing::debug!(error = %e, "creating the usage namespace failed");
                }
            }
            Err(e) => tracing::debug!(error = %e, "usage namespace object"),
        }
    }

    async fn write(&self, doc: &NodeGpuUsage) -> Result<(), Error> {
        let name = usage_configmap_name(&doc.node);
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.config.namespace,
                "labels": {LABEL_GPU_USAGE_NODE: doc.node}},
            "data": {USAGE_DATA_KEY: serde_json::to_string(doc)?},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self.api().patch(&name, &params, &Patch::Apply(&cm)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                // The namespace is missing: make it, then try once more.
                self.ensure_namespace().await;
                self.api().patch(&name, &params, &Patch::Apply(&cm)).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One round: reads back what is not yet read back, then writes the documents that
    /// changed. Returns the number written. A node whose earlier counters could not be read is
    /// not written (that would lower its published counters).
    pub async fn publish(&mut self) -> Result<usize, Error> {
        let mut written = 0;
        let mut first_error = None;
        for node in self.nodes.clone() {
            if let Err(e) = self.restore(&node).await {
                first_error.get_or_insert(e);
                continue;
            }
            let doc = document(&node, &self.meter.snapshot_of(&node));
            if self.written.get(&node) == Some(&doc) {
                continue;
            }
            match self.write(&doc).await {
                Ok(()) => {
                    self.written.insert(node, doc);
                    written += 1;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// Publishes every interval until `shutdown` completes, then once more (best effort).
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let mut ticker =
            tokio::time::interval(self.config.interval.max(Duration::from_millis(100)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {
                    if let Err(e) = self.publish().await {
                        tracing::warn!(error = %e, "publishing GPU usage failed; retrying next tick");
                    }
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.publish()).await;
    }
}
