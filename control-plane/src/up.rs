//! `fabrik up`: open the data directory, serve the host cluster, write the admin kubeconfig
//! once ready, start the simulated GPU nodes and their scheduler (`--nodes`, registering after
//! the kubeconfig is written), stop cleanly on SIGINT / SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use fabrik_api::tenant::{Tenant, TenantQuota, TenantSpec};
use fabrik_apiserver::client::{controller_identity, in_process_client};
use fabrik_apiserver::pki::Ca;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::Cluster;
use kube::api::{Api, PostParams};

use crate::control_plane::{self, CrdPolicy, ManagerConfig, TenantManager};
use fabrik_store::Store;

/// Arguments of `fabrik up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where all state lives (created if missing). Default: the user's data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address to serve HTTPS on; port 0 picks a free port (written into the kubeconfig).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// How often watches that allow bookmarks receive one (upstream: about once a minute).
    /// Every open watch pays for it — each tenant's controllers hold a dozen — so short
    /// intervals cost idle CPU in proportion to the tenants.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, hide = true)]
    watch_bookmark_interval: u64,
    /// Change history kept for watches and paged lists, in revisions.
    #[arg(long, value_name = "REVISIONS", default_value_t = fabrik_store::DEFAULT_HISTORY)]
    history: u64,
    /// sled page-cache size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = fabrik_store::DEFAULT_CACHE_BYTES / (1024 * 1024))]
    cache_mib: u64,
    /// The store (`--store`, `--etcd-*-file`): the host cluster and every tenant.
    #[command(flatten)]
    store: crate::keyspaces::StoreArgs,
    /// Simulated GPU nodes to run (kubelet stand-in + node agent each); 0 runs none and no
    /// scheduler.
    #[arg(long, value_name = "N", default_value_t = 2)]
    nodes: u32,
    /// GPUs per simulated node (1..=64).
    #[arg(long, value_name = "G", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    gpus_per_node: u32,
    /// GPU model of the simulated nodes.
    #[arg(long, value_enum, default_value_t = GpuModel::H200)]
    gpu_model: GpuModel,
    /// Seconds between writes of each simulated node's GPU-usage ConfigMap (only when
    /// changed); 0 publishes none (tenants' `status.usage.gpuSeconds` then stays 0).
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    usage_publish_interval: u64,
    /// Price of one GPU-hour in the OpenCost allocation export (`GET /opencost/allocation`):
    /// `MODEL=PRICE` (a model as the meter names it, e.g. `H200-141GB`) or `*=PRICE` for models
    /// not listed; repeatable. Default: 0 (GPU-hours without cost).
    #[arg(long = "gpu-hour-price", value_name = "MODEL=PRICE", value_parser = parse_price)]
    gpu_hour_prices: Vec<(String, f64)>,
    /// User authentication (OIDC).
    #[command(flatten)]
    auth: crate::authn::AuthArgs,
    /// The simulated pod network as its first two octets `A.B`: node `i`'s pods get
    /// `A.B.<i>.x`. `127.244` gives every simulated pod an address this machine can send
    /// from, as the pod would (to query the tenant DNS, say).
    #[arg(long, value_name = "A.B", default_value = "10.244", value_parser = crate::nodes::parse_pod_network)]
    pod_network: [u8; 2],
    /// Addresses the simulated host gives `type: LoadBalancer` Services (an IPv4 CIDR; its
    /// usable hosts, lowest first). Nothing answers on them: they let charts that wait for a
    /// load balancer's address finish. The default is in the benchmarking range (RFC 2544),
    /// never routed.
    #[arg(long, value_name = "CIDR", default_value = "198.18.0.0/24")]
    load_balancer_pool: fabrik_controllers::loadbalancer::Pool,
    /// Ports on this machine that may serve admission webhooks for Services of the host or
    /// of any tenant (`PORT` or `FIRST-LAST`): a Service annotated
    /// `sim.fabrik.dev/local-port: "<port>"` is called at `127.0.0.1:<port>` (TLS verified for
    /// `<name>.<namespace>.svc`), so a real webhook can run next to the simulated nodes.
    /// Off by default; a real host has no such setting.
    #[arg(long, value_name = "PORTS", value_parser = fabrik_apiserver::webhook::backends::parse_port_range)]
    local_backends: Option<std::ops::RangeInclusive<u16>>,
    /// The GPU queue.
    #[command(flatten)]
    queue: crate::queue::QueueArgs,
    /// The tenants' cluster DNS.
    #[command(flatten)]
    dns: crate::dns::DnsArgs,
    /// Run the host cluster and nodes only: no Tenant CRD, no tenant manager, no demo tenant
    /// (a plain host for a `fabrik serve` under test).
    #[arg(long, hide = true)]
    no_tenant_manager: bool,
}

fn parse_price(s: &str) -> Result<(String, f64), String> {
    let (model, price) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected MODEL=PRICE (or *=PRICE)"))?;
    let price: f64 = price
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the price {price:?} is not a number"))?;
    if !price.is_finite() || price < 0.0 {
        return Err(format!("{s:?}: a price must be a finite number >= 0"));
    }
    if model.trim().is_empty() {
        return Err(format!("{s:?}: the model is empty (use * for the default)"));
    }
    Ok((model.trim().to_string(), price))
}

/// GPU models of simulated nodes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum GpuModel {
    /// H200 141 GB.
    H200,
    /// H100 80 GB.
    H100,
    /// A100 80 GB.
    A100,
}

impl From<GpuModel> for fabrik_sim::Model {
    fn from(m: GpuModel) -> Self {
        match m {
            GpuModel::H200 => fabrik_sim::Model::H200,
            GpuModel::H100 => fabrik_sim::Model::H100,
            GpuModel::A100 => fabrik_sim::Model::A100,
        }
    }
}

/// The data directory when `--data-dir` is not given.
pub fn default_data_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("fabrik")
}

fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    fabrik_apiserver::pki::write_private(path, contents.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// Takes the data directory for this process (`DIR/fabrik.lock`, held until the process
/// ends, whatever the store): refused while another `fabrik up` holds it.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("fabrik.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "the data directory {} is in use by another fabrik up; stop it first, or give \
             another --data-dir",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: UpArgs) -> Result<()> {
    let started = Instant::now();
    let args_nodes = NodeArgs {
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        gpu_model: args.gpu_model,
        usage_publish_interval: Duration::from_secs(args.usage_publish_interval),
        pod_network: args.pod_network,
    };
    let dir = args.data_dir.unwrap_or_else(default_data_dir);
    // Nothing is created or removed before the listener is bound and the store is open: a
    // port in use leaves no data directory behind, and a second `fabrik up` on a directory in
    // use (its store is locked) never touches the running server's files.
    let bound = fabrik_apiserver::bind(args.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (is another fabrik up running?)",
            args.listen
        )
    })?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let _in_use = lock_data_dir(&dir)?;
    eprintln!("fabrik: data directory {}", dir.display());
    let backend = args.store.open(&dir, args.cache_mib, args.history).await?;
    // A kubeconfig left by an earlier run names its old port: remove it, so that the file
    // appears only once this run serves (the contract tools wait on).
    match std::fs::remove_file(dir.join("host.kubeconfig")) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot remove the stale {}",
                    dir.join("host.kubeconfig").display()
                )
            })
        }
    }
    let host: Arc<dyn Store> = backend
        .open("host")
        .await
        .context("cannot open the host keyspace")?;
    let settings = control_plane::api_settings(
        args.watch_bookmark_interval,
        bound.addr.to_string(),
        args.auth.oidc()?,
    );
    let host_ca =
        Ca::load_or_create(&dir.join("pki"), "fabrik-ca").context("cannot load the cluster CA")?;
    let mut host_settings = settings.clone();
    host_settings.auth.service_account_key =
        Some(crate::authn::host_signing_key(&dir.join("pki"))?);
    host_settings.auth.service_account_issuer = bound.url();
    let host_ca_pem = host_ca.cert_pem().to_string();
    let controllers = crate::cluster::Controllers {
        root_ca_pem: Some(host_ca_pem.clone()),
        load_balancer_pool: Some(args.load_balancer_pool),
        // Its scheduler (the node agents') allocates its ResourceClaims.
        releases_claims: true,
        pod_api_address: None,
    };
    // The host's own webhooks: its Services, read through its client once it is started.
    let host_services = Arc::new(crate::webhooks::HostServices::default());
    // Its resource metrics: what its simulated nodes report.
    let usage = Arc::new(crate::resource_metrics::SimulatedUsage::default());
    host_settings.resource_metrics = Some(usage.clone());
    host_settings.webhooks.backends = crate::webhooks::with_local(
        Arc::new(crate::webhooks::OwnServices(host_services.clone())),
        args.local_backends.as_ref(),
    );
    // Tenants are checked as they are written, with the rules the manager runs them by.
    let tenant_validation: std::sync::Arc<dyn fabrik_apiserver::admission::Admission> =
        std::sync::Arc::new(crate::tenants::admission::TenantValidation);
    let cluster = crate::cluster::builder(host, host_ca, host_settings, controllers)
        .admission([tenant_validation])
        .start()
        .await
        .context("cannot start the host cluster")?;
    host_services.set_client(in_process_client(
        cluster.server.clone(),
        controller_identity("webhook-backends"),
    ));
    usage.set_client(in_process_client(
        cluster.server.clone(),
        controller_identity("resource-metrics"),
    ));
    let router = Router::new(cluster.server.clone());
    let url = bound.url();
    let listen_addr = bound.addr;
    let listener = bound
        .serve(router.clone(), &cluster.ca)
        .context("cannot serve HTTPS")?;

    let dns = crate::dns::start(&args.dns, router.clone()).await?;
    // Pods can be given a nameserver only on port 53 (resolv.conf names no port).
    let dns_nameserver = dns.as_ref().and_then(|d| {
        if d.local_addr.port() != 53 {
            return None;
        }
        Some(match d.local_addr.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            ip => ip.to_string(),
        })
    });
    if let Some(d) = &dns {
        eprintln!("fabrik: tenant DNS on {} (UDP and TCP)", d.local_addr);
    }

    // The control plane's host side: the Tenant CRD, the tenant manager, a first tenant.
    let mut manager = if args.no_tenant_manager {
        eprintln!("fabrik: no tenant manager (--no-tenant-manager): serving the host only");
        None
    } else {
        let host_client = in_process_client(
            cluster.server.clone(),
            controller_identity("tenant-manager"),
        );
        control_plane::install_tenant_crd(&host_client, CrdPolicy::Apply).await?;
        let manager = TenantManager::start(
            ManagerConfig {
                host: host_client.clone(),
                router,
                backend: backend.clone(),
                shards: None,
                settings,
                public_url: url.clone(),
                serving_ca_pem: host_ca_pem,
                data_dir: Some(dir.clone()),
                usage_namespace: fabrik_api::tenant::USAGE_NAMESPACE.to_string(),
                // The simulated nodes run on this machine: pods reach the listener directly.
                api_address: Some(syncer::ApiAddress {
                    host: match listen_addr.ip() {
                        ip if ip.is_unspecified() => "127.0.0.1".to_string(),
                        ip => ip.to_string(),
                    },
                    port: listen_addr.port(),
                }),
                dns_nameserver,
                local_backends: args.local_backends.clone(),
                gpu_queue: args.queue.settings(fabrik_api::tenant::USAGE_NAMESPACE),
            },
            cluster.server.shutdown_signal(),
        );
        let marker = dir.join(".demo-tenant-created");
        if !marker.exists() {
            create_demo_tenant(&host_client).await?;
            std::fs::write(&marker, b"")
                .with_context(|| format!("cannot write {}", marker.display()))?;
        }
        let mut prices = fabrik_gpu::metering::opencost::Prices::default();
        for (model, price) in &args.gpu_hour_prices {
            if model == "*" {
                prices.default_per_gpu_hour = *price;
            } else {
                prices.per_gpu_hour.insert(model.clone(), *price);
            }
        }
        cluster.server.add_route(
            crate::tenants::usage::ALLOCATION_PATH,
            crate::tenants::usage::allocation_route(
                manager.usage_history(),
                prices,
                "fabrik".to_string(),
            ),
        );
        if let Some(figures) = manager.queue_figures() {
            cluster
                .server
                .add_metrics_source(Arc::new(move || figures.metrics_text()));
        }
        Some(manager)
    };

    let kubeconfig = dir.join("host.kubeconfig");
    write_atomically(&kubeconfig, &cluster.admin_kubeconfig("fabrik-host", &url)?)?;
    eprintln!(
        "fabrik: host cluster ready at {url} in {} ms; kubeconfig: {}",
        started.elapsed().as_millis(),
        kubeconfig.display()
    );
    eprintln!(
        "fabrik: try `KUBECONFIG={} kubectl get namespaces`",
        kubeconfig.display()
    );
    eprintln!(
        "fabrik: tenants: `fabrik tenant list --data-dir {}`; their kubeconfigs are written to {}",
        dir.display(),
        dir.join("tenants").display()
    );
    // Simulated GPU nodes register after the kubeconfig is written; they stop with the server.
    let nodes = start_nodes(
        &args_nodes,
        &cluster,
        &dir,
        cluster.server.shutdown_signal(),
    )?;
    if let Some(nodes) = &nodes {
        cluster
            .server
            .set_pod_streams(Arc::new(crate::pod_streams::SimulatedNodes {
                logs: nodes.logs.clone(),
            }));
        // The nodes' GPU-second counters, per tenant, pod and partition, on the host's /metrics.
        let meter = nodes.meter.clone();
        cluster
            .server
            .add_metrics_source(Arc::new(move || meter.metrics_text()));
    }
    control_plane::wait_for_signal().await?;
    eprintln!("fabrik: shutting down");
    // The GPU queue saves its ledger while the host still answers.
    if let Some(m) = manager.as_mut() {
        m.stop_queue().await;
    }
    listener.shutdown().await;
    cluster.shutdown().await;
    if let Some(nodes) = nodes {
        let _ = tokio::time::timeout(Duration::from_secs(5), nodes.wait()).await;
    }
    if let Some(manager) = manager {
        manager.stopped().await;
    }
    drop(backend);
    if let Some(d) = dns {
        d.stop();
    }
    eprintln!("fabrik: stopped");
    Ok(())
}

/// The simulated-node flags.
struct NodeArgs {
    nodes: u32,
    gpus_per_node: u32,
    gpu_model: GpuModel,
    usage_publish_interval: Duration,
    pod_network: [u8; 2],
}

/// Starts the simulated GPU nodes and the scheduler over the in-process client (none with
/// `--nodes 0`). Their GPU-second counters (`SimNodes::meter`, Prometheus text from
/// `meter.render()`) and container logs (`SimNodes::logs`) are what a `/metrics` route and
/// `pods/log` can serve once the server mounts them.
fn start_nodes(
    args: &NodeArgs,
    cluster: &Cluster,
    dir: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Option<fabrik_sim::SimNodes>> {
    if args.nodes == 0 {
        return Ok(None);
    }
    let client = fabrik_apiserver::client::in_process_client(
        cluster.server.clone(),
        fabrik_apiserver::client::controller_identity("node-sim"),
    );
    let mut config = fabrik_sim::Config::new(
        args.nodes,
        args.gpus_per_node,
        args.gpu_model.into(),
        dir.join("nodes"),
    );
    config.usage_publish_interval = args.usage_publish_interval;
    config.pod_network = args.pod_network;
    let nodes = fabrik_sim::start(client, config, shutdown)
        .context("cannot start the simulated GPU nodes")?;
    eprintln!(
        "fabrik: {} simulated GPU nodes ({} × {:?} each) and the GPU scheduler started",
        args.nodes, args.gpus_per_node, args.gpu_model
    );
    Ok(Some(nodes))
}

/// The first tenant of a new `fabrik up`: `demo`, with 8 GPUs.
async fn create_demo_tenant(host: &kube::Client) -> Result<()> {
    let tenants: Api<Tenant> = Api::all(host.clone());
    let spec = TenantSpec {
        quota: Some(TenantQuota {
            gpus: Some(8),
            gpu_sharing: Some("whole".into()),
            pods: Some(100),
            ..Default::default()
        }),
        ..Default::default()
    };
    match tenants
        .create(&PostParams::default(), &Tenant::new("demo", spec))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).context("cannot create the demo tenant"),
    }
}
