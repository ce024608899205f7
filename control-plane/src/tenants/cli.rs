//! `fabrik tenant create|list|get|delete|kubeconfig`: Tenant objects on the host, through
//! `--kubeconfig`, `KUBECONFIG`, or a `fabrik up` data directory's `host.kubeconfig`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fabrik_api::tenant::{host_namespace, Tenant, TenantQueue, TenantQuota, TenantSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::ResourceExt;

use super::manager::KUBECONFIG_SECRET;

/// `fabrik tenant ...`
#[derive(Args, Debug)]
pub struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
    /// Host kubeconfig (default: `--data-dir`'s `host.kubeconfig`, else `KUBECONFIG`, else
    /// the default data directory's).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// A `fabrik up` data directory whose `host.kubeconfig` to use.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum TenantCommand {
    /// Create a tenant.
    Create(Box<CreateArgs>),
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
    /// GPUs of each of its kinds guaranteed to the tenant (its quota; its guaranteed share in
    /// the GPU queue).
    #[arg(long, allow_negative_numbers = true)]
    gpus: Option<i64>,
    /// GPUs the tenant may borrow beyond `--gpus` while other tenants leave theirs idle
    /// (reclaimed when their owners need them). None unless given.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    borrow_gpus: Option<i64>,
    /// Of its idle guaranteed GPUs, how many others may borrow (default: all).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    lend_gpus: Option<i64>,
    /// The tenant's weight when borrowers share idle GPUs (1 to 1000; default 1).
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    queue_weight: Option<i64>,
    /// The group (a department of several tenants) whose members' idle guaranteed GPUs go to
    /// each other first; the group shares the rest of the factory's idle GPUs as one.
    #[arg(long, value_name = "GROUP")]
    queue_group: Option<String>,
    /// What `nvidia.com/gpu` is: `whole`, `mig:PROFILE` (e.g. `mig:1g.18gb`),
    /// `share:MEMORY_MIB,COMPUTE_PERCENT` or `timeslice`.
    #[arg(long, value_name = "MODE")]
    gpu_sharing: Option<String>,
    /// A further GPU kind the tenant may request by NVIDIA's name (same syntax; repeat for
    /// more): `mig:1g.18gb` as `nvidia.com/mig-1g.18gb`, `timeslice` as `nvidia.com/gpu.shared`.
    #[arg(long = "gpu-type", value_name = "MODE")]
    gpu_types: Vec<String>,
    /// CPU requests quota (e.g. `16`).
    #[arg(long, allow_hyphen_values = true)]
    cpu: Option<String>,
    /// Memory requests quota (e.g. `64Gi`).
    #[arg(long, allow_hyphen_values = true)]
    memory: Option<String>,
    /// Pod count quota.
    #[arg(long, allow_negative_numbers = true)]
    pods: Option<i64>,
    /// Node ports the tenant may hold (`NodePort` and `LoadBalancer` Services take one per
    /// port; host node ports are shared by every tenant). None unless given.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    node_ports: Option<i64>,
    /// `LoadBalancer` Services the tenant may have. None unless given.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
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
    let kc = match kube::config::Kubeconfig::read_from(&path) {
        Ok(kc) => kc,
        Err(_) if !path.exists() => bail!(
            "no host kubeconfig at {} (is `fabrik up` running? pass --kubeconfig or --data-dir)",
            path.display()
        ),
        Err(e) => bail!("{} is not a kubeconfig: {e}", path.display()),
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .context("invalid host kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
}

/// What a kube error means here: a tenant that is not there, or a cluster that serves no
/// Tenants at all (a tenant's kubeconfig given where the host's is needed).
fn explain(e: kube::Error, name: Option<&str>) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("requested resource") => {
            anyhow::anyhow!(
                "this cluster serves no Tenants: the kubeconfig points at a tenant cluster (or a \
                 cluster without Fabrik), not a Fabrik host"
            )
        }
        kube::Error::Api(s) if s.code == 404 => match name {
            Some(name) => anyhow::anyhow!("tenant {name} not found"),
            None => anyhow::anyhow!("not found: {}", s.message),
        },
        kube::Error::Api(s) => anyhow::anyhow!("{} ({})", s.message, s.reason),
        other => other.into(),
    }
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

/// Checks that `out` can be written before anything is created: its directory exists.
fn check_output(out: &std::path::Path) -> Result<()> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "--kubeconfig-out {}: the directory {} does not exist; nothing was created",
            out.display(),
            dir.display()
        );
    }
    if out.is_dir() {
        bail!(
            "--kubeconfig-out {} is a directory; give a file name; nothing was created",
            out.display()
        );
    }
    Ok(())
}

/// Runs a `fabrik tenant` command.
pub async fn run(args: TenantArgs) -> Result<()> {
    let client = host_client(&args).await?;
    let api: Api<Tenant> = Api::all(client.clone());
    match &args.command {
        TenantCommand::Create(c) => {
            if let Err(why) = fabrik_api::validation::validate_name(&c.name) {
                bail!("invalid tenant name {:?}: {}", c.name, why.message);
            }
            let spec = TenantSpec {
                owners: c.owners.clone(),
                quota: Some(TenantQuota {
                    cpu: c.cpu.clone(),
                    memory: c.memory.clone(),
                    pods: c.pods,
                    gpus: c.gpus,
                    gpu_sharing: c.gpu_sharing.clone(),
                    gpu_types: c.gpu_types.clone(),
                    node_ports: c.node_ports,
                    load_balancers: c.load_balancers,
                    ..Default::default()
                }),
                queue: (c.borrow_gpus.is_some()
                    || c.lend_gpus.is_some()
                    || c.queue_weight.is_some()
                    || c.queue_group.is_some())
                .then_some(TenantQueue {
                    borrowing_limit: c.borrow_gpus,
                    lending_limit: c.lend_gpus,
                    weight: c.queue_weight,
                    parent: c.queue_group.clone(),
                }),
                ..Default::default()
            };
            let tenant = Tenant::new(&c.name, spec);
            let problems = fabrik_api::validation::validate_spec(&tenant.spec);
            if !problems.is_empty() {
                bail!(
                    "invalid tenant {:?}: {}",
                    c.name,
                    fabrik_api::validation::describe(&problems)
                );
            }
            if let Some(out) = &c.kubeconfig_out {
                check_output(out)?;
            }
            let params = PostParams {
                field_manager: Some("fabrik-cli".into()),
                ..Default::default()
            };
            api.create(&params, &tenant).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 409 => {
                    anyhow::anyhow!("tenant {} already exists", c.name)
                }
                other => explain(other, None),
            })?;
            println!("tenant/{} created", c.name);
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
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| explain(e, None))?;
            let rows: Vec<[String; 4]> = list
                .items
                .iter()
                .map(|t| {
                    let gpus = t
                        .spec
                        .quota
                        .as_ref()
                        .and_then(|q| q.gpus)
                        .map(|g| g.to_string())
                        .unwrap_or_default();
                    let endpoint = t
                        .status
                        .as_ref()
                        .and_then(|s| s.endpoint.clone())
                        .unwrap_or_default();
                    [t.name_any(), phase(t), gpus, endpoint]
                })
                .collect();
            let mut out = std::io::stdout().lock();
            write!(
                out,
                "{}",
                table(&["NAME", "PHASE", "GPUS", "ENDPOINT"], &rows)
            )?;
        }
        TenantCommand::Get { name } => {
            let mut t = api.get(name).await.map_err(|e| explain(e, Some(name)))?;
            // As `kubectl get -o yaml` shows it by default: without managedFields.
            t.metadata.managed_fields = None;
            print!("{}", serde_yaml_ng::to_string(&t)?);
        }
        TenantCommand::Delete { name, wait } => {
            api.delete(name, &DeleteParams::default())
                .await
                .map_err(|e| explain(e, Some(name)))?;
            println!("tenant/{name} deleted");
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
        TenantCommand::Kubeconfig { name } => {
            api.get(name).await.map_err(|e| explain(e, Some(name)))?;
            print!("{}", kubeconfig_of(&client, name).await?)
        }
    }
    Ok(())
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart (as kubectl
/// prints tables); no trailing spaces.
fn table(header: &[&str], rows: &[[String; 4]]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                l.push_str(&format!("{cell:<w$}  "));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_to_their_widest_cell() {
        let rows = [
            [
                "a-very-long-tenant-name-of-forty-chars-x".to_string(),
                "Ready".into(),
                String::new(),
                "https://x".into(),
            ],
            ["b".into(), "Pending".into(), "2".into(), String::new()],
        ];
        let t = table(&["NAME", "PHASE", "GPUS", "ENDPOINT"], &rows);
        let lines: Vec<&str> = t.lines().collect();
        let col = |l: &str| l.find("Ready").or(l.find("Pending")).or(l.find("PHASE"));
        assert_eq!(col(lines[0]), col(lines[1]));
        assert_eq!(col(lines[1]), col(lines[2]));
        assert!(lines.iter().all(|l| !l.ends_with(' ')), "{t}");
    }
}
