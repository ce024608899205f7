//! `fabrik tenant create|list|get|delete|kubeconfig`: Tenant objects on the host, through
//! `--kubeconfig`, `KUBECONFIG`, or a `fabrik up` data directory's `host.kubeconfig`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fabrik_api::tenant::{host_namespace, Tenant, TenantQuota, TenantSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::ResourceExt;

use super::manager::{valid_name, KUBECONFIG_SECRET};

/// `fabrik tenant ...`
#[derive(Args, Debug)]
pub struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
    /// Host kubeconfig (default: `KUBECONFIG`, else `DATA_DIR/host.kubeconfig`).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// A `fabrik up` data directory whose `host.kubeconfig` to use.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum TenantCommand {
    /// Create a tenant.
    Create(CreateArgs),
    /// List tenants.
    List,
    /// Show one tenant as YAML.
    Get {
        /// Tenant name.
        name: String,
    },
    /// Delete a tenant (its host objects and its data go with it).
    Delete {
        /// Tenant name.
        name: String,
        /// Wait until it is gone.
        #[arg(long)]
        wait: bool,
    },
    /// Print a tenant's admin kubeconfig.
    Kubeconfig {
        /// Tenant name.
        name: String,
    },
}

#[derive(Args, Debug)]
struct CreateArgs {
    /// Tenant name (a DNS label of at most 40 characters).
    name: String,
    /// GPUs the tenant may use.
    #[arg(long)]
    gpus: Option<i64>,
    /// `whole`, `mig:PROFILE` (e.g. `mig:1g.18gb`) or `share:MEMORY_MIB,COMPUTE_PERCENT`.
    #[arg(long, value_name = "MODE")]
    gpu_sharing: Option<String>,
    /// CPU requests quota (e.g. `16`).
    #[arg(long)]
    cpu: Option<String>,
    /// Memory requests quota (e.g. `64Gi`).
    #[arg(long)]
    memory: Option<String>,
    /// Pod count quota.
    #[arg(long)]
    pods: Option<i64>,
    /// Node ports the tenant may hold (`NodePort` and `LoadBalancer` Services take one per
    /// port; host node ports are shared by every tenant). None unless given.
    #[arg(long, value_name = "N")]
    node_ports: Option<i64>,
    /// `LoadBalancer` Services the tenant may have. None unless given.
    #[arg(long, value_name = "N")]
    load_balancers: Option<i64>,
    /// An owner: `USER` or `group:GROUP` (repeatable); owners are cluster-admin inside.
    #[arg(long = "owner", value_name = "USER|group:G")]
    owners: Vec<String>,
    /// Wait until the tenant is Ready, showing progress.
    #[arg(long)]
    wait: bool,
    /// Write the tenant's kubeconfig here once Ready (implies --wait).
    #[arg(long, value_name = "FILE")]
    kubeconfig_out: Option<PathBuf>,
}

/// Checks a `--gpu-sharing` value.
pub fn parse_gpu_sharing(s: &str) -> Result<String> {
    if s == "whole" {
        return Ok(s.into());
    }
    if let Some(profile) = s.strip_prefix("mig:") {
        let ok = profile.split_once('.').is_some_and(|(slices, mem)| {
            slices.trim_end_matches('g').parse::<u8>().is_ok()
                && slices.ends_with('g')
                && mem.ends_with("gb")
        });
        if ok {
            return Ok(s.into());
        }
        bail!("--gpu-sharing {s:?}: a MIG profile looks like mig:1g.18gb");
    }
    if let Some(rest) = s.strip_prefix("share:") {
        let parts: Vec<&str> = rest.split(',').collect();
        if let [mem, compute] = parts.as_slice() {
            let mem: u64 = mem
                .parse()
                .with_context(|| format!("--gpu-sharing {s:?}: memory must be MiB, a number"))?;
            let compute: u64 = compute
                .parse()
                .with_context(|| format!("--gpu-sharing {s:?}: compute must be a percentage"))?;
            if mem > 0 && (1..=100).contains(&compute) {
                return Ok(s.into());
            }
        }
        bail!(
            "--gpu-sharing {s:?}: a shared slice looks like share:8192,25 (memory MiB, compute %)"
        );
    }
    bail!("--gpu-sharing {s:?}: use whole, mig:PROFILE or share:MEMORY_MIB,COMPUTE_PERCENT")
}

fn kubeconfig_path(args: &TenantArgs) -> Result<PathBuf> {
    if let Some(k) = &args.kubeconfig {
        return Ok(k.clone());
    }
    if let Some(d) = &args.data_dir {
        return Ok(d.join("host.kubeconfig"));
    }
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
        return Ok(PathBuf::from(k));
    }
    Ok(crate::up::default_data_dir().join("host.kubeconfig"))
}

async fn host_client(args: &TenantArgs) -> Result<kube::Client> {
    let path = kubeconfig_path(args)?;
    let kc = kube::config::Kubeconfig::read_from(&path)
        .with_context(|| format!("cannot read the host kubeconfig {} (is `fabrik up` running? pass --kubeconfig or --data-dir)", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .context("invalid host kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
}

async fn kubeconfig_of(client: &kube::Client, name: &str) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &host_namespace(name));
    let secret = secrets.get_opt(KUBECONFIG_SECRET).await?.with_context(|| {
        format!("tenant {name} has no kubeconfig yet (is it Ready? `fabrik tenant get {name}`)")
    })?;
    let data = secret
        .data
        .and_then(|d| d.get("kubeconfig").cloned())
        .context("the kubeconfig Secret has no `kubeconfig` key")?;
    Ok(String::from_utf8(data.0)?)
}

fn phase(t: &Tenant) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into())
}

/// Runs a `fabrik tenant` command.
pub async fn run(args: TenantArgs) -> Result<()> {
    let client = host_client(&args).await?;
    let api: Api<Tenant> = Api::all(client.clone());
    match &args.command {
        TenantCommand::Create(c) => {
            if let Err(why) = valid_name(&c.name) {
                bail!("invalid tenant name {:?}: {why}", c.name);
            }
            let gpu_sharing = c
                .gpu_sharing
                .as_deref()
                .map(parse_gpu_sharing)
                .transpose()?;
            let spec = TenantSpec {
                owners: c.owners.clone(),
                quota: Some(TenantQuota {
                    cpu: c.cpu.clone(),
                    memory: c.memory.clone(),
                    pods: c.pods,
                    gpus: c.gpus,
                    gpu_sharing,
                    node_ports: c.node_ports,
                    load_balancers: c.load_balancers,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let tenant = Tenant::new(&c.name, spec);
            if let Err(why) = super::manager::valid_quota(&tenant) {
                bail!("{why}");
            }
            api.create(&PostParams::default(), &tenant)
                .await
                .map_err(|e| match e {
                    kube::Error::Api(s) if s.code == 409 => {
                        anyhow::anyhow!("tenant {} already exists", c.name)
                    }
                    other => other.into(),
                })?;
            eprintln!("tenant/{} created", c.name);
            if c.wait || c.kubeconfig_out.is_some() {
                let started = Instant::now();
                let mut last = String::new();
                loop {
                    let t = api.get(&c.name).await?;
                    let p = phase(&t);
                    if p != last {
                        eprintln!("  {:>5} ms  {p}", started.elapsed().as_millis());
                        last = p.clone();
                    }
                    match p.as_str() {
                        "Ready" => break,
                        "Failed" => {
                            let why = t
                                .status
                                .and_then(|s| s.conditions.first().map(|c| c.message.clone()))
                                .unwrap_or_default();
                            bail!("tenant {} failed: {why}", c.name);
                        }
                        _ => {}
                    }
                    if started.elapsed() > Duration::from_secs(120) {
                        bail!("tenant {} is not Ready after 2 minutes (phase {p}); see `fabrik tenant get {}`", c.name, c.name);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if let Some(out) = &c.kubeconfig_out {
                    let k = kubeconfig_of(&client, &c.name).await?;
                    fabrik_apiserver::pki::write_private(out, k.as_bytes())
                        .with_context(|| format!("cannot write {}", out.display()))?;
                    eprintln!("kubeconfig written to {}", out.display());
                }
            }
        }
        TenantCommand::List => {
            let list = api.list(&ListParams::default()).await?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{:<24} {:<10} {:<6} ENDPOINT", "NAME", "PHASE", "GPUS")?;
            for t in list.items {
                let gpus = t
                    .spec
                    .quota
                    .as_ref()
                    .and_then(|q| q.gpus)
                    .map(|g| g.to_string())
                    .unwrap_or_else(|| "-".into());
                let endpoint = t
                    .status
                    .as_ref()
                    .and_then(|s| s.endpoint.clone())
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{:<24} {:<10} {:<6} {endpoint}",
                    t.name_any(),
                    phase(&t),
                    gpus
                )?;
            }
        }
        TenantCommand::Get { name } => {
            let t = api.get(name).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!("tenant {name} not found"),
                other => other.into(),
            })?;
            print!("{}", serde_yaml_ng::to_string(&t)?);
        }
        TenantCommand::Delete { name, wait } => {
            api.delete(name, &DeleteParams::default())
                .await
                .map_err(|e| match e {
                    kube::Error::Api(s) if s.code == 404 => {
                        anyhow::anyhow!("tenant {name} not found")
                    }
                    other => other.into(),
                })?;
            eprintln!("tenant/{name} deleted");
            if *wait {
                let started = Instant::now();
                while api.get_opt(name).await?.is_some() {
                    if started.elapsed() > Duration::from_secs(120) {
                        bail!("tenant {name} still exists after 2 minutes");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                eprintln!("tenant/{name} gone in {} ms", started.elapsed().as_millis());
            }
        }
        TenantCommand::Kubeconfig { name } => print!("{}", kubeconfig_of(&client, name).await?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_sharing_values() {
        for ok in ["whole", "mig:1g.18gb", "mig:7g.141gb", "share:8192,25"] {
            assert!(parse_gpu_sharing(ok).is_ok(), "{ok}");
        }
        for bad in [
            "half",
            "mig:big",
            "share:8192",
            "share:x,10",
            "share:100,0",
            "share:100,101",
        ] {
            assert!(parse_gpu_sharing(bad).is_err(), "{bad}");
        }
    }
}
