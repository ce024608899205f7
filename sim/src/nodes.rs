//! Simulated GPU nodes for `fabrik up` and `fabrik nodes`: for each node, the agent's
//! reconcilers over the simulated backend ([`node_agent::agent`]) and a kubelet stand-in
//! ([`crate::kubelet`]); unless [`Config::scheduler`] is off (a host with its own
//! kube-scheduler), one GPU-aware scheduler ([`crate::scheduler`]) for the whole host; and one
//! publisher of the nodes' GPU-second counters ([`node_agent::metering::publish`]). All run as
//! tasks of the calling process over the `kube::Client` it passes (in `fabrik up`, the
//! in-process client; in `fabrik nodes`, a client for any host), until its shutdown future
//! completes.
//!
//! Each node's agent builds tenant segments with the simulated network backend
//! ([`node_agent::network::SimNetwork`], VTEP `10.0.0.<10+i>` like the node's InternalIP): the
//! segments of the tenants with pods on the node show in its `fabrik.dev/tenant-segments`
//! annotation and `TenantNetworks` condition, and in [`SimNodes::networks`].
//!
//! Node `i` is named `gpu-node-<i>`; its files (the generated simulation file, the agent's
//! state, simulated MIG state, and `sim-inject.yaml` for faults on demand) live in
//! `<state_dir>/gpu-node-<i>/`. GPUs are an HGX board: all NVLinked (NVSwitch), the first half
//! on NUMA node 0, the second on NUMA node 1.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use fabrik_gpu::metering::Meter;
use node_agent::agent::{self, Agent};
use node_agent::backend::simulated::{self, Simulated};
use node_agent::metering::publish;
use node_agent::network::SimNetwork;

use crate::kubelet::logs::LogStore;
use crate::kubelet::node::NodeShape;
use crate::kubelet::{self, Kubelet};
use crate::scheduler;

/// Errors starting the simulated nodes.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A node's directory or simulation file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The simulated backend refused the generated file.
    #[error(transparent)]
    Simulated(#[from] simulated::Error),
    /// The agent could not be built.
    #[error(transparent)]
    Agent(#[from] agent::Error),
    /// The settings are impossible.
    #[error("{0}")]
    Invalid(String),
}

/// GPU models a simulated node can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// NVIDIA H200 141 GB.
    H200,
    /// NVIDIA H100 80 GB.
    H100,
    /// NVIDIA A100 80 GB.
    A100,
}

impl Model {
    /// The built-in profile-table name.
    pub fn profile_name(self) -> &'static str {
        match self {
            Model::H200 => "H200-141GB",
            Model::H100 => "H100-80GB",
            Model::A100 => "A100-80GB",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Model::H200 => "h200",
            Model::H100 => "h100",
            Model::A100 => "a100",
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of nodes (0 runs nothing).
    pub nodes: u32,
    /// GPUs per node (1..=64).
    pub gpus_per_node: u32,
    /// GPU model.
    pub model: Model,
    /// Where the nodes' files live.
    pub state_dir: PathBuf,
    /// Time between agent passes.
    pub agent_interval: Duration,
    /// Time between kubelet passes.
    pub kubelet_interval: Duration,
    /// Whether to run Fabrik's GPU scheduler, which binds the host's pending pods. Off on a
    /// host whose own kube-scheduler binds them (two schedulers would race for every pod).
    pub scheduler: bool,
    /// Time between scheduling rounds.
    pub scheduler_interval: Duration,
    /// Simulated GPU utilization for metering (0..=1).
    pub utilization: f64,
    /// Time between writes of the nodes' usage ConfigMaps ([`publish`]); zero publishes
    /// nothing.
    pub usage_publish_interval: Duration,
    /// The pod network `A.B`: node `i`'s pods get `A.B.<i>.x` (see [`crate::kubelet::ips`]).
    pub pod_network: [u8; 2],
    /// The DRA driver name the nodes publish their GPUs under.
    pub dra_driver: String,
}

impl Config {
    /// `nodes` × `gpus_per_node` GPUs of `model` with the default intervals.
    pub fn new(nodes: u32, gpus_per_node: u32, model: Model, state_dir: PathBuf) -> Config {
        Config {
            nodes,
            gpus_per_node,
            model,
            state_dir,
            agent_interval: Duration::from_secs(2),
            kubelet_interval: Duration::from_millis(200),
            scheduler: true,
            scheduler_interval: Duration::from_millis(200),
            utilization: 0.6,
            usage_publish_interval: publish::DEFAULT_INTERVAL,
            pod_network: crate::kubelet::ips::PodIps::DEFAULT_NETWORK,
            dra_driver: fabrik_api::DRA_DRIVER.to_string(),
        }
    }
}

/// The running simulated nodes.
pub struct SimNodes {
    /// Container logs the kubelets recorded (for a future `pods/log`).
    pub logs: LogStore,
    /// GPU-second counters (`meter.render()` is the `/metrics` body to mount).
    pub meter: Meter,
    /// Node names.
    pub node_names: Vec<String>,
    /// Each node's simulated tenant segments, in the order of `node_names`.
    pub networks: Vec<SimNetwork>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimNodes {
    /// Waits for every task to stop (after the shutdown future completed).
    pub async fn wait(self) {
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The simulation file of one node.
pub fn sim_file(model: Model, gpus: u32) -> String {
    let half = gpus.div_ceil(2);
    let numa: Vec<String> = (0..gpus)
        .map(|i| if i < half { "0" } else { "1" }.to_string())
        .collect();
    format!(
        "# Generated by fabrik up: one simulated HGX board.\n\
         gpus:\n  - model: {}\n    count: {gpus}\n    numaNodes: [{}]\n\
         nvlink:\n  all: true\n",
        model.profile_name(),
        numa.join(", ")
    )
}

fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Starts the nodes and (with [`Config::scheduler`]) the scheduler; they stop when `shutdown`
/// completes.
pub fn start(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<SimNodes, Error> {
    if config.nodes > 250 {
        return Err(Error::Invalid("at most 250 simulated nodes".into()));
    }
    if config.nodes > 0 && !(1..=64).contains(&config.gpus_per_node) {
        return Err(Error::Invalid("GPUs per node must be 1..=64".into()));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let logs = LogStore::default();
    let meter = Meter::default();
    let mut tasks = Vec::new();
    let mut node_names = Vec::new();
    let mut networks = Vec::new();
    for i in 0..config.nodes {
        let name = format!("gpu-node-{i}");
        let dir = config.state_dir.join(&name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let file = dir.join("node.yaml");
        std::fs::write(&file, sim_file(config.model, config.gpus_per_node)).map_err(io(&file))?;
        let backend = Simulated::load(
            &file,
            &name,
            Some(dir.join("simulated-mig.json")),
            Some(dir.join("sim-inject.yaml")),
        )?;
        let agent = Agent::new(
            client.clone(),
            agent::Config {
                node_name: name.clone(),
                state_dir: dir.clone(),
                interval: config.agent_interval,
                dra_driver: config.dra_driver.clone(),
            },
            Box::new(backend),
        )?;
        let index = u8::try_from(i).unwrap_or(u8::MAX);
        let network = SimNetwork::new(Some(std::net::Ipv4Addr::new(
            10,
            0,
            0,
            index.saturating_add(10),
        )));
        let agent = agent.with_network(Box::new(network.clone()));
        let shape = NodeShape {
            name: name.clone(),
            index,
            cpus: 28 * config.gpus_per_node,
            memory_gib: 256 * u64::from(config.gpus_per_node),
            max_pods: 110,
            instance_type: format!("sim-{}x{}", config.model.short(), config.gpus_per_node),
        };
        let kubelet = Kubelet::new(
            client.clone(),
            kubelet::Config {
                shape,
                interval: config.kubelet_interval,
                gpu_model: config.model.profile_name().to_string(),
                utilization: config.utilization,
                pod_network: config.pod_network,
            },
            logs.clone(),
            Some(meter.clone()),
        );
        tasks.push(tokio::spawn(kubelet.run(stopped())));
        tasks.push(tokio::spawn(agent.run(stopped())));
        node_names.push(name);
        networks.push(network);
    }
    if config.nodes > 0 && !config.usage_publish_interval.is_zero() {
        // One publisher for all nodes: each node's counters go to its own ConfigMap.
        let publisher = publish::Publisher::new(
            client.clone(),
            meter.clone(),
            node_names.clone(),
            publish::Config {
                interval: config.usage_publish_interval,
                ..Default::default()
            },
        );
        tasks.push(tokio::spawn(publisher.run(stopped())));
    }
    if config.nodes > 0 && config.scheduler {
        tasks.push(tokio::spawn(scheduler::run(
            client,
            scheduler::Config {
                interval: config.scheduler_interval,
            },
            stopped(),
        )));
    }
    tasks.push(tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    }));
    Ok(SimNodes {
        logs,
        meter,
        node_names,
        networks,
        tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_file_is_a_valid_hgx_board() {
        let text = sim_file(Model::H200, 8);
        let spec = simulated::parse(std::path::Path::new("gen"), &text).expect("valid");
        assert_eq!(spec.gpus[0].count, 8);
        assert_eq!(
            spec.gpus[0].numa_nodes.as_deref(),
            Some(&[0, 0, 0, 0, 1, 1, 1, 1][..])
        );
        assert!(spec.nvlink.all);
        let text = sim_file(Model::A100, 3);
        assert!(simulated::parse(std::path::Path::new("gen"), &text).is_ok());
    }
}
