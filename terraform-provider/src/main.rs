//! `terraform-provider-fabrik`: a Terraform provider for Fabrik tenants, speaking Terraform's
//! plugin protocol 6 over gRPC.
//!
//! Terraform starts this binary, reads one handshake line from its stdout, and connects over
//! mutual TLS ([`plugin`]). The provider ([`server`]) serves the `fabrik_tenant` resource and
//! the `fabrik_tenant` and `fabrik_tenant_kubeconfig` data sources ([`schema`]): values arrive
//! as MessagePack ([`value`]), are checked and mapped onto Tenant objects ([`tenant`]), and
//! are created, changed, read and deleted on the host cluster ([`host`], [`config`]) by the
//! lifecycle in [`resource`]. Problems come back as diagnostics naming the attribute
//! ([`diag`]).
//!
//! Run by hand, it explains how to use it and exits.

mod config;
mod diag;
mod host;
mod plugin;
mod proto;
mod resource;
mod schema;
mod server;
mod tenant;
mod value;

use std::sync::Arc;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let cookie = std::env::var(plugin::handshake::MAGIC_COOKIE_KEY).ok();
    let versions = std::env::var("PLUGIN_PROTOCOL_VERSIONS").ok();
    if let Err(e) = plugin::handshake::check_env(cookie.as_deref(), versions.as_deref()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    // Logs go to stderr, which go-plugin forwards into Terraform's log (TF_LOG).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FABRIK_PROVIDER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Terraform handles interrupts itself (StopProvider, then Shutdown); a Ctrl-C that
        // reaches the whole process group must not kill the provider mid-operation.
        tokio::spawn(async {
            while tokio::signal::ctrl_c().await.is_ok() {
                tracing::debug!("interrupt ignored: Terraform stops the provider");
            }
        });
        plugin::serve(
            Arc::new(server::Provider::new()),
            plugin::Env::from_process(),
        )
        .await
        .context("the provider server failed")
    })
}
