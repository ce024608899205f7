//! `fabrik`: the Fabrik control plane.
//!
//! `fabrik up --data-dir DIR --listen ADDR` runs a whole Fabrik on one machine; its command line
//! and the files it writes (`DIR/host.kubeconfig`) are a contract other tools depend on.

mod authn;
mod cluster;
mod control_plane;
mod dns;
mod keyspaces;
mod login;
mod metrics_http;
mod nodes;
mod pod_streams;
mod queue;
mod resource_metrics;
mod serve;
mod shards;
mod tenants;
mod up;
mod webhooks;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the API server allocates and frees JSON trees for
/// every request and watch event from many threads, and glibc's malloc spent about half of the
/// server's CPU in a pod burst (arena locks, consolidation); see docs/benchmarks.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "fabrik",
    version,
    about = "Fabrik: tenant Kubernetes clusters on one shared GPU pool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Fabrik on this machine: the embedded host cluster, the control plane and its
    /// tenants, served over HTTPS.
    Up(up::UpArgs),
    /// Run the control plane against a real host cluster: tenants only, at /clusters/<name>.
    Serve(Box<serve::ServeArgs>),
    /// Run simulated GPU nodes (kubelet stand-in and node agent) against any host cluster.
    Nodes(nodes::NodesArgs),
    /// Create, list, inspect and delete tenants.
    Tenant(tenants::cli::TenantArgs),
    /// Log in with OIDC: a kubectl exec credential plugin that prints an ExecCredential.
    Login(login::LoginArgs),
    /// Write a kubeconfig whose user logs in with OIDC through `fabrik login`.
    Kubeconfig(login::kubeconfig::KubeconfigArgs),
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    // Colour only for a terminal, and never with NO_COLOR set (https://no-color.org).
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FABRIK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fabrik: error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Up(args) => runtime.block_on(up::run(args)),
        Command::Serve(args) => runtime.block_on(serve::run(*args)),
        Command::Nodes(args) => runtime.block_on(nodes::run(args)),
        Command::Tenant(args) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            runtime.block_on(tenants::cli::run(args))
        }
        Command::Login(args) => Ok(runtime.block_on(login::run(args))?),
        Command::Kubeconfig(args) => Ok(login::run_kubeconfig(&args)?),
    }
}

/// A user error as one line: each cause once (a cause whose text the line already holds is
/// left out), no backtrace — user errors are not panics, whatever `RUST_BACKTRACE` says.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        // A parser's message may add a snippet of the input on further lines: its first line
        // says what is wrong.
        let full = cause.to_string();
        let text = full.lines().next().unwrap_or("").trim_end();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_one_line_with_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        let e = anyhow::Error::new(io)
            .context("failed to listen on 127.0.0.1:1: Address already in use")
            .context("cannot listen on 127.0.0.1:1");
        assert_eq!(
            one_line(&e),
            "cannot listen on 127.0.0.1:1: failed to listen on 127.0.0.1:1: Address already in use"
        );
        let yaml = anyhow::anyhow!("line 1 column 10: unclosed bracket\n --> <input>:1:10\n  |")
            .context("k.yaml is not a kubeconfig");
        assert_eq!(
            one_line(&yaml),
            "k.yaml is not a kubeconfig: line 1 column 10: unclosed bracket"
        );
    }
}
