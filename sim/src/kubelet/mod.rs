//! A kubelet stand-in for a simulated node of `fabrik up`: it registers the Node (see [`node`])
//! and runs the pods bound to it — starts them (`Running`, Ready, a pod IP from the node's
//! range, running container statuses), lets them exit when told to, and finishes their deletion
//! (see [`lifecycle`]). It records a short synthetic log per container ([`logs`]) and, when
//! given a [`Meter`], meters the GPU time of its pods: from their app containers' start to their
//! stop, the instants of the passes that started and stopped them, which it also writes on GPU
//! pods with nanoseconds
//! ([`metering::ANNOTATION_STARTED_AT`], [`metering::ANNOTATION_FINISHED_AT`]).
//!
//! It renews the node's Lease in `kube-node-lease` ([`lease`]), the heartbeat a real host's node
//! lifecycle controller needs to keep the node `Ready`.
//!
//! Nothing is executed: containers are simulated. [`exec`] answers a few commands over the
//! kubelet's stream protocol; serving `logs` is the API server's (from [`logs`]).
//! It polls the pods of its node every `interval`.

pub mod exec;
pub mod ips;
pub mod lease;
pub mod lifecycle;
pub mod logs;
pub mod node;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::{json, Value};
use thiserror::Error;

use self::ips::PodIps;
use self::lifecycle::Step;
use self::logs::LogStore;
use self::node::NodeShape;
use fabrik_gpu::metering::{self, Meter};

/// Errors of the simulated kubelet.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An API call failed.
    #[error("{op}: {source}")]
    Api {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A Node document could not be decoded.
    #[error("building the node: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn api(op: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let op = op.into();
    move |source| Error::Api { op, source }
}

/// Settings of one simulated kubelet.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node.
    pub shape: NodeShape,
    /// Time between passes.
    pub interval: Duration,
    /// GPU model name for metering labels.
    pub gpu_model: String,
    /// Simulated GPU utilization (0..=1) for metering.
    pub utilization: f64,
    /// The pod network `A.B` (this node's pods get `A.B.<node index>.x`).
    pub pod_network: [u8; 2],
}

/// How often the Node's registration is re-checked.
const REGISTRATION_CHECK: Duration = Duration::from_secs(10);

/// A simulated kubelet.
pub struct Kubelet {
    client: Client,
    config: Config,
    logs: LogStore,
    meter: Option<Meter>,
    ips: PodIps,
    /// Pods started, by UID: their namespace/name and IP.
    started: BTreeMap<String, (String, String, String)>,
    checked: Option<Instant>,
    /// The Node's UID, once read (the owner of its Lease).
    node_uid: Option<String>,
    /// The MIG profile of the node when its GPU feature labels say NVIDIA's single strategy
    /// (its `nvidia.com/gpu` are MIG devices, metered as such); read with the Node.
    single_mig: Option<String>,
    renewed: Option<Instant>,
}

impl Kubelet {
    /// A kubelet for `config.shape`, recording logs into `logs`.
    pub fn new(client: Client, config: Config, logs: LogStore, meter: Option<Meter>) -> Kubelet {
        let ips = PodIps::new(config.pod_network, config.shape.index);
        Kubelet {
            client,
            config,
            logs,
            meter,
            ips,
            started: BTreeMap::new(),
            checked: None,
            node_uid: None,
            single_mig: None,
            renewed: None,
        }
    }

    /// Runs passes until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()> + Send) {
        tracing::info!(node = %self.config.shape.name, "simulated kubelet starting");
        let mut ticker = tokio::time::interval(self.config.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {
                    if let Err(e) = self.pass().await {
                        tracing::warn!(node = %self.config.shape.name, error = %e, "kubelet pass failed");
                    }
                }
            }
        }
        tracing::info!(node = %self.config.shape.name, "simulated kubelet stopped");
    }

    /// Registers the Node or repairs what the kubelet owns on it.
    pub async fn register(&mut self) -> Result<()> {
        self.ensure_registered().await.map(|_| ())
    }

    /// [`Kubelet::register`], returning the Node's UID.
    async fn ensure_registered(&mut self) -> Result<Option<String>> {
        let shape = &self.config.shape;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let now = serde_json::to_value(Time(Timestamp::now()))?;
        let existing = nodes
            .get_opt(&shape.name)
            .await
            .map_err(api("reading the node"))?;
        let node = match existing {
            Some(n) => n,
            None => {
                let body: Node = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": shape.name, "labels": node::labels(shape)},
                }))?;
                match nodes.create(&PostParams::default(), &body).await {
                    Ok(n) => n,
                    Err(kube::Error::Api(s)) if s.code == 409 => nodes
                        .get(&shape.name)
                        .await
                        .map_err(api("reading the node"))?,
                    Err(e) => return Err(api("registering the node")(e)),
                }
            }
        };
        let uid = node.metadata.uid.clone();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        self.single_mig = metering::single_mig_profile(&labels);
        let want = node::labels(shape);
        let missing = want.as_object().is_some_and(|m| {
            m.iter()
                .any(|(k, v)| labels.get(k).map(|s| json!(s)) != Some(v.clone()))
        });
        if missing {
            let patch = json!({"metadata": {"labels": want}});
            nodes
                .patch(&shape.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api("labelling the node"))?;
        }
        let status = node.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let has_cpu = status
            .allocatable
            .as_ref()
            .is_some_and(|a| a.contains_key("cpu"));
        if !ready || !has_cpu {
            nodes
                .patch_status(
                    &shape.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&node::status(shape, &now)),
                )
                .await
                .map_err(api("publishing the node status"))?;
            tracing::info!(node = %shape.name, "registered (Ready)");
        }
        Ok(uid)
    }

    /// One pass: registration when due, then every pod of the node.
    pub async fn pass(&mut self) -> Result<()> {
        if self
            .checked
            .is_none_or(|t| t.elapsed() >= REGISTRATION_CHECK)
        {
            self.node_uid = self.ensure_registered().await?;
            self.checked = Some(Instant::now());
        }
        if self
            .renewed
            .is_none_or(|t| t.elapsed() >= lease::RENEW_INTERVAL)
        {
            // A failed renewal is retried on the next pass; the pods are handled regardless.
            match lease::renew(
                &self.client,
                &self.config.shape.name,
                self.node_uid.as_deref(),
            )
            .await
            {
                Ok(()) => self.renewed = Some(Instant::now()),
                Err(e) => {
                    tracing::warn!(node = %self.config.shape.name, error = %e, "lease renewal failed")
                }
            }
        }
        let name = self.config.shape.name.clone();
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .map_err(api("listing the node's pods"))?
            .items;
        let now = Timestamp::now();
        let mut seen = Vec::new();
        let mut usage = Vec::new();
        for pod in &list {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            seen.push(uid.clone());
            let step = lifecycle::step(pod, self.started.contains_key(&uid), now);
            let result = match step {
                Step::Start => self.start(pod, now).await,
                Step::InitNext => self.init_next(pod, now).await,
                Step::Exit(code) => {
                    let status = lifecycle::exited_status(pod, code, now);
                    self.exit(pod, code, status, now).await
                }
                Step::DeadlineExceeded => {
                    let status = lifecycle::deadline_exceeded_status(pod, now);
                    self.exit(pod, 137, status, now).await
                }
                Step::Crash(code) => self.crash(pod, code, now).await,
                Step::Restart => self.restart(pod, now).await,
                Step::Finish => self.finish(pod).await,
                Step::Wait => Ok(()),
            };
            let done = result.is_ok();
            if let Err(e) = result {
                tracing::warn!(node = %name, error = %e, "pod step failed");
            }
            // Metering: the pods whose app containers run (their devices stay held through
            // a crash loop's back-off), up to now; those whose containers stopped now, up
            // to now and no further.
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Running") {
                // As busy as the pod says its GPUs are (as `kubectl top` reports them), else
                // as the node's.
                let utilization =
                    lifecycle::gpu_utilization(pod).unwrap_or(self.config.utilization);
                let mut held = metering::usages(pod, &self.config.gpu_model, utilization);
                if let Some(profile) = &self.single_mig {
                    metering::as_single_mig(&mut held, profile);
                }
                if done && matches!(step, Step::Exit(_) | Step::DeadlineExceeded | Step::Finish) {
                    for u in &mut held {
                        u.stopped = Some(now);
                    }
                }
                usage.extend(held);
            }
        }
        // Pods deleted for good by someone else.
        let gone: Vec<String> = self
            .started
            .keys()
            .filter(|u| !seen.contains(u))
            .cloned()
            .collect();
        for uid in gone {
            if let Some((ns, pod, ip)) = self.started.remove(&uid) {
                if !ip.is_empty() {
                    self.ips.release(&ip);
                }
                self.logs.remove_pod(&ns, &pod);
            }
        }
        if let Some(meter) = &self.meter {
            meter.observe_at(&name, now, usage);
        }
        Ok(())
    }

    async fn start(&mut self, pod: &Pod, now: Timestamp) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let existing = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        let ip = match existing {
            Some(ip) if self.ips.reserve(&ip) => ip,
            _ => match self.ips.allocate() {
                Some(ip) => ip,
                None => {
                    tracing::warn!(pod = %name, "no free pod IP on this node");
                    return Ok(());
                }
            },
        };
        let host_ip = self.config.shape.host_ip();
        let initializing = !lifecycle::regular_inits(pod).is_empty();
        let status = if initializing {
            lifecycle::initializing_status(pod, &host_ip, &ip, 0, now)
        } else {
            lifecycle::running_status(pod, &host_ip, &ip, now)
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            self.ips.release(&ip);
            return Err(api(format!("starting pod {ns}/{name}"))(e));
        }
        if initializing {
            self.log_init_turn(pod, 0, now);
        } else {
            self.log_sidecars_started(pod, usize::MAX, now);
            self.log_app_started(pod, &ip, now);
            self.record_run(pod, metering::ANNOTATION_STARTED_AT, now)
                .await;
        }
        self.started.insert(uid, (ns, name, ip));
        Ok(())
    }

    /// The running init container completed: the next one runs, or the app containers start.
    async fn init_next(&mut self, pod: &Pod, now: Timestamp) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let regular = lifecycle::regular_inits(pod);
        let done = (lifecycle::inits_done(pod) + 1).min(regular.len());
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .or_else(|| self.started.get(&uid).map(|(_, _, ip)| ip.clone()))
            .unwrap_or_default();
        let host_ip = self.config.shape.host_ip();
        let status = if done < regular.len() {
            lifecycle::initializing_status(pod, &host_ip, &ip, done, now)
        } else {
            lifecycle::running_status(pod, &host_ip, &ip, now)
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api(format!("initializing pod {ns}/{name}")))?;
        if let Some(finished) = done.checked_sub(1).and_then(|i| regular.get(i)) {
            self.logs.append(
                &ns,
                &name,
                finished,
                format!("{now} init container {finished} completed with code 0"),
            );
            self.logs.end(&ns, &name, finished);
        }
        if done < regular.len() {
            self.log_init_turn(pod, done, now);
        } else {
            self.log_sidecars_started(pod, done, now);
            self.log_app_started(pod, &ip, now);
            self.record_run(pod, metering::ANNOTATION_STARTED_AT, now)
                .await;
        }
        Ok(())
    }

    /// Records on a GPU pod when its app containers first started or stopped for good
    /// (`annotation`: [`metering::ANNOTATION_STARTED_AT`] or
    /// [`metering::ANNOTATION_FINISHED_AT`]), with nanoseconds, unless it says so already: the
    /// times the meter credits the pod between (the status's `startedAt` and `finishedAt`
    /// hold whole seconds). Best effort: without it the meter reads the status.
    async fn record_run(&self, pod: &Pod, annotation: &str, at: Timestamp) {
        let recorded = pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotation));
        if recorded || metering::usages(pod, "", 0.0).is_empty() {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let patch = lifecycle::run_annotation(annotation, at);
        if let Err(e) = pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(pod = %name, error = %e, "recording the containers' run time failed");
        }
    }

    /// Logs the start of regular init container number `done` and of the sidecars declared
    /// just before it.
    fn log_init_turn(&mut self, pod: &Pod, done: usize, now: Timestamp) {
        self.log_sidecars_started(pod, done, now);
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if let Some(c) = lifecycle::regular_inits(pod).get(done) {
            self.logs.append(
                &ns,
                &name,
                c,
                format!("{now} simulated init container {c} started"),
            );
        }
    }

    /// Logs the start of the sidecars that start once `done` regular init containers have
    /// completed (those declared after the `done`-th one and before the next; every sidecar
    /// declared after the last one when `done` is past the end).
    fn log_sidecars_started(&mut self, pod: &Pod, done: usize, now: Timestamp) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let regular_count = lifecycle::regular_inits(pod).len();
        let mut regular_seen = 0;
        for (c, image, sidecar) in lifecycle::init_containers(pod) {
            if !sidecar {
                regular_seen += 1;
                continue;
            }
            let turn = regular_seen.min(regular_count);
            if turn == done || (done == usize::MAX && turn == regular_count) {
                self.logs.append(
                    &ns,
                    &name,
                    &c,
                    format!("{now} simulated sidecar {c} (image {image}) started"),
                );
            }
        }
    }

    /// Logs the start of the app containers, with the pod IP and the GPU devices they see.
    fn log_app_started(&mut self, pod: &Pod, ip: &str, now: Timestamp) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        // The devices of its extended resources and of its ResourceClaims.
        let gpus = [
            fabrik_api::ANNOTATION_GPU_IDS,
            fabrik_api::ANNOTATION_CLAIM_GPU_IDS,
        ]
        .iter()
        .filter_map(|k| pod.metadata.annotations.as_ref()?.get(*k))
        .filter(|v| !v.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
        for (c, image) in lifecycle::container_names(pod) {
            self.logs.append(
                &ns,
                &name,
                &c,
                format!("{now} simulated container {c} (image {image}) started on node {} with pod IP {ip}", self.config.shape.name),
            );
            let visible = if gpus.is_empty() {
                "none"
            } else {
                gpus.as_str()
            };
            self.logs
                .append(&ns, &name, &c, format!("{now} GPU devices: {visible}"));
        }
    }

    /// Its containers stopped for good with `code`; `status` says how.
    async fn exit(&mut self, pod: &Pod, code: i32, status: Value, now: Timestamp) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api(format!("completing pod {ns}/{name}")))?;
        self.record_run(pod, metering::ANNOTATION_FINISHED_AT, now)
            .await;
        for (c, _) in lifecycle::container_names(pod) {
            self.logs
                .append(&ns, &name, &c, format!("{now} exited with code {code}"));
            self.logs.end(&ns, &name, &c);
        }
        for c in lifecycle::sidecars(pod) {
            self.logs.append(
                &ns,
                &name,
                &c,
                format!("{now} sidecar {c} stopped after the app containers"),
            );
            self.logs.end(&ns, &name, &c);
        }
        // The finished pod's sandbox is gone: its address returns to the node's pool (the
        // status keeps it, as a kubelet's does). Without this a node ran out of addresses
        // after 253 finished pods that nobody deleted (a Job's).
        if let Some(entry) = pod
            .metadata
            .uid
            .as_ref()
            .and_then(|u| self.started.get_mut(u))
        {
            let ip = std::mem::take(&mut entry.2);
            if !ip.is_empty() {
                self.ips.release(&ip);
            }
        }
        Ok(())
    }

    /// The containers exited and will be restarted after a back-off.
    async fn crash(&mut self, pod: &Pod, code: i32, now: Timestamp) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let status = lifecycle::crashed_status(pod, code, now);
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api(format!("restarting pod {ns}/{name}")))?;
        let wait = status["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for (c, _) in lifecycle::container_names(pod) {
            self.logs.append(
                &ns,
                &name,
                &c,
                format!("{now} exited with code {code}; {wait}"),
            );
        }
        Ok(())
    }

    /// The back-off is over: the containers run again.
    async fn restart(&mut self, pod: &Pod, now: Timestamp) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&lifecycle::restarted_status(pod, now)),
        )
        .await
        .map_err(api(format!("restarting pod {ns}/{name}")))?;
        for (c, _) in lifecycle::container_names(pod) {
            self.logs.append(
                &ns,
                &name,
                &c,
                format!("{now} simulated container {c} restarted"),
            );
        }
        Ok(())
    }

    async fn finish(&mut self, pod: &Pod) -> Result<()> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(api(format!("finishing pod {ns}/{name}"))(e)),
        }
        if let Some(uid) = &pod.metadata.uid {
            if let Some((_, _, ip)) = self.started.remove(uid) {
                if !ip.is_empty() {
                    self.ips.release(&ip);
                }
            }
        }
        self.logs.remove_pod(&ns, &name);
        Ok(())
    }
}
