//! `fabrik nodes`: simulated GPU nodes (kubelet stand-in + node agent each, as in `fabrik up`)
//! registered into any host cluster named by a kubeconfig — a real Kubernetes control plane
//! without kubelets, as KWOK does — until SIGINT or SIGTERM.
//!
//! On such a host its own kube-scheduler binds the pods; Fabrik's GPU scheduler runs only with
//! `--scheduler` (for a host without one). Progress — the nodes' readiness and the pods running
//! on them — is printed to stderr when it changes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::control_plane;

/// Arguments of `fabrik nodes`.
#[derive(Args, Debug)]
pub struct NodesArgs {
    /// The host cluster's kubeconfig; the user needs to write Nodes, their status, Leases in
    /// `kube-node-lease`, Events, and the status of pods (cluster admin does).
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Simulated GPU nodes to run, named `gpu-node-<i>` (1..=250).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=250))]
    nodes: u32,
    /// GPUs per simulated node (1..=64).
    #[arg(long, value_name = "G", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus_per_node: u32,
    /// GPU model of the simulated nodes: h200, h100 or a100.
    #[arg(long, value_name = "MODEL", default_value = "h200", value_parser = parse_model)]
    gpu_model: fabrik_sim::Model,
    /// Where the nodes' files live (simulation files, agent state, `sim-inject.yaml` for
    /// faults); created if missing.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Also run Fabrik's GPU scheduler, which binds the host's pending pods. Only for a host
    /// without a scheduler of its own: two schedulers race for every pod.
    #[arg(long)]
    scheduler: bool,
    /// Seconds between writes of each node's GPU-usage ConfigMap (only when changed); 0
    /// publishes none.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    usage_publish_interval: u64,
    /// The pod network as its first two octets `A.B`: node `i`'s pods get `A.B.<i>.x`. A
    /// network in 127.0.0.0/8 (`127.244`) gives every simulated pod an address tests on this
    /// machine can send from, as the pod would (to query the tenant DNS, say).
    #[arg(long, value_name = "A.B", default_value = "10.244", value_parser = parse_pod_network)]
    pod_network: [u8; 2],
    /// The DRA driver name the nodes publish their GPUs under (ResourceSlices and the
    /// DeviceClasses `<driver>`, `mig.<domain>`, `shared.<domain>`). NVIDIA's by default.
    #[arg(long, value_name = "NAME", default_value = fabrik_api::DRA_DRIVER)]
    dra_driver: String,
}

pub(crate) fn parse_pod_network(s: &str) -> Result<[u8; 2], String> {
    let parts: Vec<&str> = s.split('.').collect();
    match parts.as_slice() {
        [a, b] => match (a.parse::<u8>(), b.parse::<u8>()) {
            (Ok(a), Ok(b)) => Ok([a, b]),
            _ => Err(format!("{s:?}: expected two octets, as in 10.244")),
        },
        _ => Err(format!("{s:?}: expected two octets, as in 10.244")),
    }
}

fn parse_model(s: &str) -> Result<fabrik_sim::Model, String> {
    use fabrik_sim::Model;
    match s.to_ascii_lowercase().as_str() {
        "h200" => Ok(Model::H200),
        "h100" => Ok(Model::H100),
        "a100" => Ok(Model::A100),
        _ => Err(format!("{s:?}: expected h200, h100 or a100")),
    }
}

/// How often progress is looked at.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: NodesArgs) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("cannot read --kubeconfig {}", args.kubeconfig.display()))?;
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .with_context(|| format!("invalid --kubeconfig {}", args.kubeconfig.display()))?;
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("cannot build the host client")?;
    // Fail early, naming the host, when it cannot be reached or the user cannot list Nodes.
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
        .with_context(|| format!("cannot list the Nodes of {url}"))?;
    std::fs::create_dir_all(&args.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            args.data_dir.display()
        )
    })?;

    let mut config = fabrik_sim::Config::new(
        args.nodes,
        args.gpus_per_node,
        args.gpu_model,
        args.data_dir.clone(),
    );
    config.scheduler = args.scheduler;
    config.pod_network = args.pod_network;
    config.dra_driver = args.dra_driver.clone();
    config.usage_publish_interval = Duration::from_secs(args.usage_publish_interval);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let nodes = fabrik_sim::start(client.clone(), config, async move {
        let _ = stop_rx.await;
    })
    .context("cannot start the simulated GPU nodes")?;
    eprintln!(
        "fabrik: {} simulated GPU nodes ({} × {} each) registering into {url}; {}",
        args.nodes,
        args.gpus_per_node,
        args.gpu_model.profile_name(),
        if args.scheduler {
            "Fabrik's GPU scheduler binds pods"
        } else {
            "the host's scheduler binds pods"
        }
    );

    let names = nodes.node_names.clone();
    let progress = tokio::spawn(async move {
        let mut last = String::new();
        loop {
            let line = match summary(&client, &names).await {
                Ok(line) => line,
                Err(e) => format!("cannot read progress: {e:#}"),
            };
            if line != last {
                eprintln!("fabrik: {line}");
                last = line;
            }
            tokio::time::sleep(PROGRESS_INTERVAL).await;
        }
    });
    control_plane::wait_for_signal().await?;
    eprintln!("fabrik: shutting down");
    progress.abort();
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), nodes.wait()).await;
    eprintln!("fabrik: stopped");
    Ok(())
}

/// "N/M nodes Ready, P pods running (Q not yet)" for the simulated nodes `names`.
async fn summary(client: &kube::Client, names: &[String]) -> Result<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let mut ready = 0;
    let mut running = 0;
    let mut other = 0;
    for name in names {
        let Some(node) = nodes.get_opt(name).await? else {
            continue;
        };
        let is_ready = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if is_ready {
            ready += 1;
        }
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        for p in list.items {
            match p.status.and_then(|s| s.phase).as_deref() {
                Some("Running") => running += 1,
                Some("Succeeded" | "Failed") => {}
                _ => other += 1,
            }
        }
    }
    Ok(format!(
        "{ready}/{} nodes Ready, {running} pods running on them ({other} starting)",
        names.len()
    ))
}
