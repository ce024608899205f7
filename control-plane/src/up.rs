//! `fabrik up`: open the data directory, serve the host cluster, write the admin kubeconfig
//! once ready, stop cleanly on SIGINT / SIGTERM.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use fabrik_apiserver::{Cluster, ClusterConfig, Settings};
use fabrik_store::{SledBackend, SledConfig, Store};

/// Arguments of `fabrik up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where all state lives (created if missing). Default: the user's data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address to serve HTTPS on; port 0 picks a free port (written into the kubeconfig).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// How often watches that allow bookmarks receive one.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, hide = true)]
    watch_bookmark_interval: u64,
    /// Change history kept for watches and paged lists, in revisions.
    #[arg(long, value_name = "REVISIONS", default_value_t = fabrik_store::DEFAULT_HISTORY)]
    history: u64,
    /// sled page-cache size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = fabrik_store::DEFAULT_CACHE_BYTES / (1024 * 1024))]
    cache_mib: u64,
}

fn default_data_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("fabrik")
}

fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    fabrik_apiserver::pki::write_private(path, contents.as_bytes())
        .with_context(|| format!("failed to write {}", path.display()))
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: UpArgs) -> Result<()> {
    let started = Instant::now();
    let dir = args.data_dir.unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    eprintln!("fabrik: data directory {}", dir.display());
    let backend = SledBackend::open(SledConfig {
        path: dir.join("store"),
        cache_capacity_bytes: args.cache_mib * 1024 * 1024,
        history: args.history,
    })
    .with_context(|| {
        format!(
            "cannot open the store in {} (is another `fabrik up` using this data directory?)",
            dir.join("store").display()
        )
    })?;
    let host: Arc<dyn Store> = Arc::new(
        backend
            .keyspace("host")
            .context("cannot open the host keyspace")?,
    );
    let cluster = Cluster::start(
        host,
        ClusterConfig {
            listen: args.listen,
            pki_dir: dir.join("pki"),
            settings: Settings {
                bookmark_interval: Duration::from_secs(args.watch_bookmark_interval.max(1)),
                ..Settings::default()
            },
        },
    )
    .await
    .with_context(|| format!("cannot start the host cluster on {}", args.listen))?;
    let kubeconfig = dir.join("host.kubeconfig");
    write_atomically(&kubeconfig, &cluster.admin_kubeconfig("fabrik-host")?)?;
    eprintln!(
        "fabrik: host cluster ready at {} in {} ms; kubeconfig: {}",
        cluster.url(),
        started.elapsed().as_millis(),
        kubeconfig.display()
    );
    eprintln!(
        "fabrik: try `KUBECONFIG={} kubectl get namespaces`",
        kubeconfig.display()
    );
    wait_for_signal().await?;
    eprintln!("fabrik: shutting down");
    cluster.shutdown().await;
    drop(backend);
    eprintln!("fabrik: stopped");
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for SIGINT")?,
        _ = term.recv() => {},
    }
    Ok(())
}
