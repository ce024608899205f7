//! `fabrik-node-agent`: the GPU node agent (see the library documentation).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};

use node_agent::agent::{Agent, Config};
use node_agent::backend::{nvml::Nvml, simulated::Simulated, GpuBackend};
use node_agent::metering::{self, Meter};
use node_agent::network::{NetlinkBackend, NetlinkSegments, SegmentBackend, SimNetwork};

/// Which GPU backend to use.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendKind {
    /// Real GPUs through NVML.
    Nvml,
    /// GPUs declared in a simulation file.
    Simulated,
}

/// Which network backend builds tenant segments.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum NetworkKind {
    /// No tenant segments: the agent leaves the node's network alone.
    None,
    /// VXLAN devices and bridges through netlink (needs CAP_NET_ADMIN, `--underlay`, `--vtep`).
    Netlink,
    /// Segments recorded in memory (simulated nodes).
    Simulated,
}

/// The Fabrik GPU node agent.
#[derive(Debug, Parser)]
#[command(name = "fabrik-node-agent", version)]
struct Args {
    /// Kubeconfig of the host API server.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Name of the Node this agent manages.
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// GPU backend.
    #[arg(long, value_enum, default_value = "nvml")]
    backend: BackendKind,
    /// Simulation file (with `--backend simulated`).
    #[arg(long)]
    sim_file: Option<PathBuf>,
    /// Directory for the agent's state file (and the simulated GPUs' state).
    #[arg(long)]
    state_dir: PathBuf,
    /// Milliseconds between passes.
    #[arg(long, default_value_t = 2000)]
    interval_ms: u64,
    /// The DRA driver name of the node's ResourceSlice and of the DeviceClasses it creates
    /// (`<driver>`, `mig.<domain>`, `shared.<domain>`). NVIDIA's by default, so that claims and
    /// CEL selectors written for NVIDIA's DRA driver select these GPUs.
    #[arg(long, value_name = "NAME", default_value = fabrik_api::DRA_DRIVER)]
    dra_driver: String,
    /// Serve GPU-second metrics (Prometheus text) at `http://ADDR/metrics`.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Seconds between writes of the node's GPU-usage ConfigMap (`fabrik-gpu-usage-<node>` in
    /// `fabrik-system`, written only when changed); 0 publishes nothing.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    usage_publish_interval: u64,
    /// Namespace of the usage ConfigMaps (where Fabrik is installed; the control plane reads
    /// them there). The agent needs get, create and patch on ConfigMaps in it.
    #[arg(long, value_name = "NAMESPACE", default_value = fabrik_api::tenant::USAGE_NAMESPACE)]
    usage_namespace: String,
    /// Builds each tenant's network segment (its Tenant's `spec.network.segment`) while the
    /// tenant has pods on the node. The agent needs list on Tenants and Nodes.
    #[arg(long, value_enum, default_value = "none")]
    network: NetworkKind,
    /// The underlay (fabric) device VXLAN packets leave by (with `--network netlink`).
    #[arg(long, value_name = "DEVICE")]
    underlay: Option<String>,
    /// This node's VTEP address on the underlay (with `--network netlink`; optional with
    /// `--network simulated`). Published as the Node annotation `fabrik.dev/vtep`.
    #[arg(long, value_name = "IPV4")]
    vtep: Option<std::net::Ipv4Addr>,
}

fn backend(args: &Args) -> Result<Box<dyn GpuBackend>> {
    Ok(match args.backend {
        BackendKind::Nvml => Box::new(Nvml::init()?),
        BackendKind::Simulated => {
            let Some(file) = &args.sim_file else {
                bail!("--backend simulated needs --sim-file");
            };
            Box::new(Simulated::load(
                file,
                &args.node_name,
                Some(args.state_dir.join("simulated-mig.json")),
                Some(args.state_dir.join("sim-inject.yaml")),
            )?)
        }
    })
}

fn network(args: &Args) -> Result<Option<Box<dyn SegmentBackend>>> {
    Ok(match args.network {
        NetworkKind::None => None,
        NetworkKind::Netlink => {
            let (Some(underlay), Some(vtep)) = (&args.underlay, args.vtep) else {
                bail!("--network netlink needs --underlay DEVICE and --vtep IPV4");
            };
            let netlink = NetlinkBackend::connect().context("--network netlink")?;
            Some(Box::new(NetlinkSegments::new(netlink, underlay, vtep)))
        }
        NetworkKind::Simulated => Some(Box::new(SimNetwork::new(args.vtep))),
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let backend = backend(&args)?;
    let network = network(&args)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    // kube 5 retries 429 answers by default; for an eviction a 429 means "a PodDisruptionBudget
    // forbids it now", which the agent reports and retries on its next pass itself.
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    let mut agent = Agent::new(
        client.clone(),
        Config {
            node_name: args.node_name.clone(),
            state_dir: args.state_dir.clone(),
            interval: Duration::from_millis(args.interval_ms.max(10)),
            dra_driver: args.dra_driver.clone(),
        },
        backend,
    )?;
    if let Some(network) = network {
        agent = agent.with_network(network);
    }
    let publishing = args.usage_publish_interval > 0;
    let meter = (publishing || args.metrics_addr.is_some()).then(Meter::default);
    if let Some(meter) = &meter {
        agent = agent.with_meter(meter.clone());
    }
    if let (Some(addr), Some(meter)) = (args.metrics_addr, &meter) {
        let listener = metering::http::bind(addr).await?;
        tracing::info!(%addr, "serving /metrics");
        tokio::spawn(metering::http::serve(listener, meter.clone(), async {
            let _ = tokio::signal::ctrl_c().await;
        }));
    }
    let publisher = match (&meter, publishing) {
        (Some(meter), true) => {
            let publisher = metering::publish::Publisher::new(
                client.clone(),
                meter.clone(),
                vec![args.node_name.clone()],
                metering::publish::Config {
                    interval: Duration::from_secs(args.usage_publish_interval),
                    namespace: args.usage_namespace.clone(),
                },
            );
            Some(tokio::spawn(publisher.run(async {
                let _ = tokio::signal::ctrl_c().await;
            })))
        }
        _ => None,
    };
    agent
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    if let Some(p) = publisher {
        // Its last write, after the signal.
        let _ = tokio::time::timeout(Duration::from_secs(3), p).await;
    }
    Ok(())
}
