//! The agent loop: one pass per interval reads the Node and the GPUs, folds health signals,
//! reconciles the layout and (with a network backend) the tenant segments, publishes inventory
//! (labels, status, ResourceSlice) and carries out remediation, recording an Event for every
//! step. A failing pass is logged and retried on the next tick; nothing in a pass panics on what
//! the API server or the GPUs return. Segment problems never fail the pass: they are reported on
//! the Node (see [`crate::network::reconcile`]) and retried with backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use serde_json::json;
use thiserror::Error;

use crate::backend::{self, GpuBackend};
use crate::health::{self, Transition};
use crate::host::events::{Kind, Recorder};
use crate::host::{self, node, pods, slices};
use crate::inventory;
use crate::metering::{self, Meter};
use crate::network::backend::SegmentBackend;
use crate::network::reconcile::{self, Reconciler};
use crate::partition::{self, Busy};
use crate::remediation::{self, Action, NodeFacts};
use crate::state::{self, AgentState, Phase};

/// Errors that end a pass.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A host API call failed.
    #[error(transparent)]
    Host(#[from] host::Error),
    /// The GPU backend failed.
    #[error("GPU backend: {0}")]
    Backend(#[from] backend::Error),
    /// Partitioning could not run.
    #[error(transparent)]
    Partition(#[from] partition::Error),
    /// The state file failed.
    #[error(transparent)]
    State(#[from] state::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Agent settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Node this agent manages.
    pub node_name: String,
    /// Where the state file lives.
    pub state_dir: PathBuf,
    /// Time between passes.
    pub interval: Duration,
    /// The DRA driver name of its ResourceSlice and DeviceClasses
    /// ([`fabrik_api::DRA_DRIVER`], NVIDIA's, by default).
    pub dra_driver: String,
}

/// The agent.
pub struct Agent {
    client: Client,
    config: Config,
    backend: Box<dyn GpuBackend>,
    state: AgentState,
    /// Pods whose eviction a PDB refused, already reported.
    blocked: BTreeSet<String>,
    /// GPU-second counters, when this agent meters (the standalone binary).
    meter: Option<Meter>,
    /// Tenant segments, when this agent builds them.
    network: Option<Network>,
}

/// The segment backend and the reconciler's memory.
struct Network {
    backend: Box<dyn SegmentBackend>,
    reconciler: Reconciler,
}

/// What the segment step publishes on the Node.
struct NetworkReport {
    annotations: BTreeMap<String, Option<String>>,
    condition: node::ConditionSpec,
}

impl Agent {
    /// The mode of the layout in force (`whole` before any).
    fn layout_mode(&self) -> String {
        self.state
            .target
            .as_ref()
            .map(|t| t.mode.clone())
            .unwrap_or_else(|| "whole".into())
    }

    /// Builds the agent, loading its state file.
    pub fn new(client: Client, config: Config, backend: Box<dyn GpuBackend>) -> Result<Agent> {
        let state = state::load(&state::path(&config.state_dir))?;
        Ok(Agent {
            client,
            config,
            backend,
            state,
            blocked: BTreeSet::new(),
            meter: None,
            network: None,
        })
    }

    /// Builds the segments of the tenants whose pods are bound to the node, through `backend`,
    /// on every pass (see [`crate::network::reconcile`]).
    pub fn with_network(mut self, backend: Box<dyn SegmentBackend>) -> Agent {
        self.network = Some(Network {
            backend,
            reconciler: Reconciler::new(),
        });
        self
    }

    /// Meters the GPU time of the node's pods into `meter` on every pass.
    pub fn with_meter(mut self, meter: Meter) -> Agent {
        self.meter = Some(meter);
        self
    }

    /// Runs passes until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tracing::info!(
            node = %self.config.node_name,
            backend = self.backend.name(),
            network = self.network.as_ref().map_or("none", |n| n.backend.name()),
            "starting"
        );
        let mut ticker = tokio::time::interval(self.config.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {
                    if let Err(e) = self.pass().await {
                        tracing::warn!(error = %e, "pass failed; retrying next tick");
                    }
                }
            }
        }
        tracing::info!("stopped");
    }

    fn save(&self) -> Result<()> {
        Ok(state::save(
            &state::path(&self.config.state_dir),
            &self.state,
        )?)
    }

    /// One pass.
    pub async fn pass(&mut self) -> Result<()> {
        let name = self.config.node_name.clone();
        let (n, registered) = node::get_or_register(&self.client, &name).await?;
        let events = Recorder::new(self.client.clone(), &n);
        if registered {
            let msg = format!("registered by fabrik-node-agent ({})", self.backend.name());
            events.record(Kind::Normal, "Registered", &msg).await?;
        }

        // Health.
        match self.backend.poll_health() {
            Ok(signals) => {
                let transitions = health::apply(&mut self.state.unhealthy, &signals);
                if !transitions.is_empty() {
                    self.save()?;
                }
                for t in transitions {
                    match t {
                        Transition::Unhealthy { gpu, reason } => {
                            let msg = format!("GPU {gpu} marked unusable: {reason}");
                            events.record(Kind::Warning, "GPUUnhealthy", &msg).await?;
                        }
                        Transition::Recovered { gpu } => {
                            let msg = format!("GPU {gpu} is healthy again");
                            events.record(Kind::Normal, "GPURecovered", &msg).await?;
                        }
                        Transition::Noted { gpu, message } => {
                            let msg = format!("GPU {gpu}: {message}");
                            events.record(Kind::Normal, "GPUNotice", &msg).await?;
                        }
                    }
                }
            }
            Err(e) => {
                let msg = format!("reading GPU health failed: {e}");
                events
                    .record(Kind::Warning, "HealthPollFailed", &msg)
                    .await?;
            }
        }

        // Who uses which GPU.
        let gpus = self.backend.inventory()?;
        let uuids = inventory::uuids_by_gpu(&gpus);
        let node_pods = pods::list(&self.client, &name).await?;
        let on_node = pods::refs(&node_pods, &name, &uuids);
        if let Some(meter) = &self.meter {
            self.backend.observe_pods(&node_pods, &uuids);
            let utilization = self.backend.utilization();
            let model = gpus.first().map(|g| g.model.name).unwrap_or("");
            let mut usage = metering::node_usages(&node_pods, &uuids, &utilization, model);
            if let Some(profile) = inventory::single_mig_profile(&gpus, &self.layout_mode()) {
                metering::as_single_mig(&mut usage, &profile);
            }
            meter.observe(&name, usage);
        }
        let network = self.segments(&events, &node_pods).await?;
        let mut busy = Busy::new();
        for p in &on_node {
            for g in &p.gpus {
                busy.entry(*g)
                    .or_default()
                    .push(format!("{}/{}", p.namespace, p.name));
            }
        }

        // Partitioning.
        let desired = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_LAYOUT))
            .cloned();
        let path = state::path(&self.config.state_dir);
        let outcome = partition::reconcile(
            self.backend.as_mut(),
            desired.as_deref(),
            &busy,
            &mut self.state,
            &mut |s| state::save(&path, s),
        )?;
        for step in &outcome.done {
            events.record(Kind::Normal, "LayoutStep", step).await?;
        }
        if outcome.changed {
            let (kind, reason) = match outcome.phase {
                Phase::Pending => (Kind::Normal, "LayoutPending"),
                Phase::Applied => (Kind::Normal, "LayoutApplied"),
                Phase::Failed => (Kind::Warning, "LayoutFailed"),
            };
            events.record(kind, reason, &outcome.reason).await?;
        }

        // Inventory.
        let gpus = self.backend.inventory()?;
        // A GPU that waits for its pods to end before its layout changes is not offered
        // meanwhile (as an unhealthy one is not), so that it drains.
        let withheld: BTreeSet<u32> = self
            .state
            .unhealthy
            .keys()
            .copied()
            .chain(outcome.waiting.keys().copied())
            .collect();
        let inv = inventory::compute(&gpus, &self.state.applied, &withheld, &self.layout_mode());
        let status_doc = json!({
            "state": outcome.phase.as_str(),
            "reason": outcome.reason,
            "waitingGpus": outcome.waiting.keys().collect::<Vec<_>>(),
            "waitingFor": outcome.waiting,
        })
        .to_string();
        let mut annotations = BTreeMap::from([(
            fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS.to_string(),
            Some(status_doc),
        )]);
        if let Some(report) = &network {
            annotations.extend(report.annotations.clone());
        }
        node::publish_metadata(&self.client, &n, &inv.labels, &annotations).await?;
        let (h_status, h_reason, h_message) = health::condition(&self.state.unhealthy);
        let layout_status = if outcome.phase == Phase::Applied {
            "True"
        } else {
            "False"
        };
        let layout_reason = match outcome.phase {
            Phase::Pending => "Pending",
            Phase::Applied => "Applied",
            Phase::Failed => "Failed",
        };
        let mut conditions = vec![
            (
                fabrik_api::CONDITION_GPU_HEALTHY,
                h_status,
                h_reason.to_string(),
                h_message,
            ),
            (
                fabrik_api::CONDITION_GPU_LAYOUT,
                layout_status,
                layout_reason.to_string(),
                outcome.reason.clone(),
            ),
        ];
        conditions.extend(network.map(|r| r.condition));
        node::publish_status(&self.client, &n, &inv, &conditions).await?;
        if slices::publish(
            &self.client,
            &self.config.dra_driver,
            &name,
            node::owner(&n),
            inv.devices.clone(),
        )
        .await?
        {
            let msg = format!("ResourceSlice published with {} devices", inv.devices.len());
            events
                .record(Kind::Normal, "InventoryPublished", &msg)
                .await?;
        }

        // Remediation.
        let spec = n.spec.clone().unwrap_or_default();
        let facts = NodeFacts {
            unschedulable: spec.unschedulable.unwrap_or(false),
            cordoned_by_agent: n
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(fabrik_api::ANNOTATION_CORDONED_BY_AGENT)),
            tainted: spec
                .taints
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == fabrik_api::TAINT_GPU_UNHEALTHY),
        };
        let actions = remediation::plan(&self.state.unhealthy, gpus.len(), &facts, &on_node);
        self.remediate(&events, actions).await
    }

    /// The tenant-segment step: reads the Tenants and Nodes, reconciles the node's segments and
    /// records Events for what changed and for each problem once. `None` without a network
    /// backend. Only Event writes can fail it.
    async fn segments(
        &mut self,
        events: &Recorder,
        node_pods: &[Pod],
    ) -> Result<Option<NetworkReport>> {
        let name = self.config.node_name.clone();
        let Some(net) = self.network.as_mut() else {
            return Ok(None);
        };
        let outcome = match host::tenants::list(&self.client).await {
            Err(e) => net
                .reconciler
                .blocked(format!("cannot read the Tenants: {e}")),
            Ok(tenants) => match host::tenants::nodes(&self.client).await {
                Err(e) => net
                    .reconciler
                    .blocked(format!("cannot read the Nodes: {e}")),
                Ok(nodes) => {
                    let here = reconcile::tenants_on_node(node_pods, &name);
                    let desired = reconcile::desired(&here, &tenants);
                    let remotes = reconcile::remotes(&nodes, &name);
                    net.reconciler
                        .pass(net.backend.as_ref(), &desired, &remotes, Instant::now())
                        .await
                }
            },
        };
        for (tenant, vni) in &outcome.changed {
            let msg =
                format!("segment {vni} of tenant {tenant} built or updated (vx-{vni} on br-{vni})");
            events
                .record(Kind::Normal, "TenantSegmentBuilt", &msg)
                .await?;
        }
        for vni in &outcome.removed {
            let msg = format!("segment {vni} removed: no pod of its tenant is on the node");
            events
                .record(Kind::Normal, "TenantSegmentRemoved", &msg)
                .await?;
        }
        for msg in &outcome.new_errors {
            tracing::warn!(problem = %msg, "tenant segment");
            events
                .record(Kind::Warning, "TenantSegmentFailed", msg)
                .await?;
        }
        for subject in &outcome.resolved {
            tracing::info!(%subject, "tenant segment problem resolved");
        }
        let (segments, status, reason, message) = reconcile::report(&outcome);
        let vtep = net.backend.vtep().map(|v| v.to_string());
        Ok(Some(NetworkReport {
            annotations: BTreeMap::from([
                (
                    reconcile::ANNOTATION_TENANT_SEGMENTS.to_string(),
                    Some(segments),
                ),
                (reconcile::ANNOTATION_VTEP.to_string(), vtep),
            ]),
            condition: (
                reconcile::CONDITION_TENANT_NETWORKS,
                status,
                reason.to_string(),
                message,
            ),
        }))
    }

    async fn remediate(&mut self, events: &Recorder, actions: Vec<Action>) -> Result<()> {
        let name = self.config.node_name.clone();
        let mut taint = None;
        let mut cordon = None;
        for a in &actions {
            match a {
                Action::Taint => taint = Some(true),
                Action::Untaint => taint = Some(false),
                Action::Cordon => cordon = Some(true),
                Action::Uncordon => cordon = Some(false),
                Action::Evict { .. } => {}
            }
        }
        if taint.is_some() || cordon.is_some() {
            node::set_taint_and_cordon(&self.client, &name, taint, cordon).await?;
            if taint == Some(true) {
                let msg = format!("tainted {}:NoSchedule", fabrik_api::TAINT_GPU_UNHEALTHY);
                events.record(Kind::Warning, "NodeTainted", &msg).await?;
            }
            if cordon == Some(true) {
                events
                    .record(
                        Kind::Warning,
                        "NodeCordoned",
                        "cordoned: a node-level GPU fault (NVLink, or half of the GPUs unhealthy)",
                    )
                    .await?;
            }
            if taint == Some(false) || cordon == Some(false) {
                events
                    .record(
                        Kind::Normal,
                        "NodeReturned",
                        "all GPUs healthy: taint removed, node returned to service",
                    )
                    .await?;
            }
        }
        for a in actions {
            let Action::Evict {
                namespace,
                name,
                gpu,
            } = a
            else {
                continue;
            };
            let key = format!("{namespace}/{name}");
            match pods::evict(&self.client, &namespace, &name).await {
                Ok(()) => {
                    self.blocked.remove(&key);
                    let msg = format!("evicted {key}: it uses unhealthy GPU {gpu}");
                    events.record(Kind::Warning, "PodEvicted", &msg).await?;
                }
                Err(e) if host::status_code(&e) == Some(429) => {
                    if self.blocked.insert(key.clone()) {
                        let msg = format!(
                            "cannot evict {key} yet (uses unhealthy GPU {gpu}): \
                             a PodDisruptionBudget forbids it; retrying"
                        );
                        events
                            .record(Kind::Warning, "EvictionBlocked", &msg)
                            .await?;
                    }
                }
                Err(e) if host::status_code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
