//! `fabrik serve`: the control plane against a real host cluster (what the Helm chart runs).
//!
//! It reaches the host with a normal HTTPS `kube::Client` (`--host-kubeconfig FILE
//! [--context NAME]`, or the in-cluster configuration when run in a pod), installs the Tenant
//! CRD there when it is missing, runs the tenant manager over the host's Tenants, and serves
//! each tenant at `/clusters/<tenant>` on its own HTTPS listener. There is no cluster at `/`:
//! only the health paths answer there (see `Router::tenants_only`).
//!
//! State: tenant keyspaces in sled under `--data-dir` or, with `--store etcd://HOST:PORT,…`,
//! in an etcd cluster; and the listener's serving CA in `DIR/pki` or, with
//! `--serving-ca-secret NAMESPACE/NAME`, in a host Secret that every replica shares (the CA
//! goes into every tenant kubeconfig, so it must outlive the pod).
//!
//! High availability: on etcd, several replicas share the tenants by shard (see
//! [`crate::shards`]): each runs the tenants of the shards whose host Lease it holds, and
//! serves every other tenant from the shared store.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use fabrik_apiserver::pki::Ca;
use fabrik_apiserver::router::Router;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

use crate::control_plane::{self, CrdPolicy, ManagerConfig, TenantManager};
use crate::keyspaces::{Keyspaces, StoreArgs, StoreSpec};
use crate::shards::{ShardConfig, Shards};

/// How long open connections may finish after SIGTERM.
const DRAIN: Duration = Duration::from_secs(5);

/// Arguments of `fabrik serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Kubeconfig of the host cluster. Default: the in-cluster configuration in a pod, else
    /// `KUBECONFIG` or `~/.kube/config`.
    #[arg(long, value_name = "FILE")]
    host_kubeconfig: Option<PathBuf>,
    /// Context of the host kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Where tenant keyspaces (sled) and the serving CA (`DIR/pki`) live; created if missing.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on; port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:6443")]
    listen: SocketAddr,
    /// Where to serve the control plane's own figures (the GPU queue's) for Prometheus, at
    /// `/metrics` on plain HTTP (default: not served).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// The URL tenant kubeconfigs name (`https://HOST[:PORT]`). Default: from `--listen`
    /// (`https://127.0.0.1:PORT` when listening on all interfaces).
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Another DNS name or IP address for the serving certificate (repeatable); `localhost`,
    /// the loopback addresses, the listen address and the public URL's host are always in it.
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
    /// Keep the serving CA in this host Secret (`NAMESPACE/NAME`, created when missing)
    /// instead of `DIR/pki`, so that every replica serves with the same CA.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    serving_ca_secret: Option<String>,
    /// The host Service in front of these replicas (`NAMESPACE/NAME`): tenant pods reach their
    /// tenant's API at its ClusterIP and port (`KUBERNETES_SERVICE_HOST`/`PORT` in every synced
    /// container; the request goes to the tenant whose token it carries), and its ClusterIP and
    /// DNS names join the serving certificate. The Helm chart sets it; without it, synced pods
    /// get no tenant API address.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    api_service: Option<String>,
    /// Host namespace where the node agents publish GPU usage (ConfigMaps
    /// `fabrik-gpu-usage-<node>`, summed into `Tenant.status.usage`); the agents'
    /// `--usage-namespace` must name the same.
    #[arg(long, value_name = "NAMESPACE", default_value = fabrik_api::tenant::USAGE_NAMESPACE)]
    usage_namespace: String,
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
    /// The store (`--store`, `--etcd-*-file`).
    #[command(flatten)]
    store: StoreArgs,
    /// This replica's id among the replicas sharing an etcd store (default: $HOSTNAME, the
    /// pod name in a Deployment).
    #[arg(long, value_name = "ID")]
    replica_id: Option<String>,
    /// Host namespace of the shard and membership Leases (with an etcd store).
    #[arg(long, value_name = "NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// How long a replica's Leases last: a dead replica's tenants move after about this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    lease_duration_seconds: u64,
    /// User authentication (OIDC).
    #[command(flatten)]
    auth: crate::authn::AuthArgs,
    /// The GPU queue.
    #[command(flatten)]
    queue: crate::queue::QueueArgs,
    /// The tenants' cluster DNS.
    #[command(flatten)]
    dns: crate::dns::DnsArgs,
}

/// Errors in what `fabrik serve` is given.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--public-url` is not an https URL with a host.
    #[error("--public-url {url:?}: {why}")]
    PublicUrl {
        /// The value given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// `--serving-ca-secret` is not `NAMESPACE/NAME`.
    #[error("--serving-ca-secret {0:?}: expected NAMESPACE/NAME")]
    SecretName(String),
    /// `--api-service` is not `NAMESPACE/NAME`.
    #[error("--api-service {0:?}: expected NAMESPACE/NAME")]
    ServiceName(String),
    /// The `--api-service` Service cannot carry tenant API traffic.
    #[error("--api-service {service}: {why}")]
    ApiService {
        /// `NAMESPACE/NAME`.
        service: String,
        /// What is wrong with it.
        why: String,
    },
    /// The serving CA Secret holds no usable CA.
    #[error("host Secret {0} holds no CA (expected data keys ca.crt and ca.key)")]
    SecretContent(String),
    /// `--replica-id` is not usable in a Lease name.
    #[error("--replica-id {0:?}: expected 1 to 63 lower-case letters, digits, '-' or '.'")]
    ReplicaId(String),
}

/// This replica's id: `--replica-id`, else `$HOSTNAME`, else a random one.
fn replica_id(given: Option<&str>) -> Result<String, Error> {
    let id = match given {
        Some(id) => id.to_string(),
        None => std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| h.to_lowercase())
            .unwrap_or_else(|| {
                use rand::Rng;
                format!("fabrik-{:08x}", rand::rng().random::<u32>())
            }),
    };
    let valid = !id.is_empty()
        && id.len() <= 63
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !id.starts_with(['-', '.'])
        && !id.ends_with(['-', '.']);
    if valid {
        Ok(id)
    } else {
        Err(Error::ReplicaId(id))
    }
}

/// A checked public URL: `https://HOST[:PORT]` without a path, and its host.
#[derive(Debug, PartialEq, Eq)]
struct PublicUrl {
    url: String,
    host: String,
}

fn parse_public_url(text: &str) -> Result<PublicUrl, Error> {
    let bad = |why: &str| Error::PublicUrl {
        url: text.to_string(),
        why: why.to_string(),
    };
    let url = reqwest::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "https" {
        return Err(bad("must be an https URL"));
    }
    if url.path() != "/" && !url.path().is_empty() {
        return Err(bad(
            "must not have a path (tenants are served at /clusters/<name>)",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad("must be only https://HOST[:PORT]"));
    }
    // `host_str` keeps an IPv6 address in brackets, as a URL writes it; a certificate does not.
    let Some(in_url) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(bad("has no host"));
    };
    let host = in_url
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let clean = match url.port() {
        Some(p) => format!("https://{in_url}:{p}"),
        None => format!("https://{in_url}"),
    };
    Ok(PublicUrl { url: clean, host })
}

/// The names the serving certificate is issued for.
fn serving_hosts(listen: SocketAddr, public_host: &str, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !listen.ip().is_unspecified() {
        hosts.push(listen.ip().to_string());
    }
    hosts.push(public_host.to_string());
    hosts.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    hosts.retain(|h| !h.is_empty() && seen.insert(h.clone()));
    hosts
}

fn split_secret_name(text: &str) -> Result<(String, String), Error> {
    split_name(text).ok_or_else(|| Error::SecretName(text.to_string()))
}

fn split_name(text: &str) -> Option<(String, String)> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Some((ns.to_string(), name.to_string()))
        }
        _ => None,
    }
}

/// Where tenant pods reach the tenant API through `--api-service`: its ClusterIP and port
/// (the one named `https`, else the only one), the names the serving certificate needs, and
/// whether it has a port `dns` (UDP 53) to the tenant DNS.
async fn api_service(
    host: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(syncer::ApiAddress, Vec<String>, bool)> {
    let full = format!("{ns}/{name}");
    let bad = |why: &str| Error::ApiService {
        service: full.clone(),
        why: why.to_string(),
    };
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(host.clone(), ns);
    let Some(service) = services
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read the host Service {full}"))?
    else {
        return Err(bad("no such Service on the host").into());
    };
    let spec = service.spec.unwrap_or_default();
    let ip = spec
        .cluster_ip
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or_else(|| bad("has no ClusterIP (a headless Service cannot be used)"))?;
    let ports = spec.ports.unwrap_or_default();
    let port = match ports.iter().find(|p| p.name.as_deref() == Some("https")) {
        Some(p) => p.port,
        None if ports.len() == 1 => ports[0].port,
        None => return Err(bad("has no port named https and not exactly one port").into()),
    };
    let port = u16::try_from(port).map_err(|_| bad("its port is out of range"))?;
    let sans = vec![
        ip.clone(),
        name.to_string(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.cluster.local"),
    ];
    let dns = ports.iter().any(|p| {
        p.name.as_deref() == Some("dns") && p.port == 53 && p.protocol.as_deref() == Some("UDP")
    });
    Ok((syncer::ApiAddress { host: ip, port }, sans, dns))
}

/// The host client from the flags (see [`ServeArgs::host_kubeconfig`]) and the host's URL.
async fn host_client(args: &ServeArgs) -> Result<(kube::Client, String)> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.host_kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read --host-kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("invalid --host-kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("cannot load the host kubeconfig for --context")?,
        None => kube::Config::infer().await.context(
            "no host cluster: give --host-kubeconfig, or run in a pod (in-cluster configuration)",
        )?,
    };
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config).context("cannot build the host client")?;
    Ok((client, url))
}

/// The serving CA kept in a host Secret; the first replica to start creates it.
async fn ca_from_secret(host: &kube::Client, namespace: &str, name: &str) -> Result<Ca> {
    let secrets: Api<Secret> = Api::namespaced(host.clone(), namespace);
    let full = format!("{namespace}/{name}");
    let text = |s: &Secret, key: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
    };
    // Two rounds: if another replica creates the Secret between our read and our create, the
    // second read finds it.
    for _ in 0..2 {
        if let Some(s) = secrets
            .get_opt(name)
            .await
            .with_context(|| format!("cannot read the serving CA Secret {full}"))?
        {
            let (Some(cert), Some(key)) = (text(&s, "ca.crt"), text(&s, "ca.key")) else {
                return Err(Error::SecretContent(full).into());
            };
            return Ca::from_pem(&cert, &key)
                .with_context(|| format!("invalid CA in the host Secret {full}"));
        }
        let ca = Ca::generate("fabrik-serving-ca").context("cannot generate the serving CA")?;
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/component".to_string(),
                    "serving-ca".to_string(),
                )])),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([
                (
                    "ca.crt".to_string(),
                    ByteString(ca.pair().cert_pem.clone().into_bytes()),
                ),
                (
                    "ca.key".to_string(),
                    ByteString(ca.pair().key_pem.clone().into_bytes()),
                ),
            ])),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                eprintln!("fabrik: created the serving CA in the host Secret {full}");
                return Ok(ca);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create the host Secret {full}"))
            }
        }
    }
    anyhow::bail!("the host Secret {full} was created and then disappeared; start again")
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: ServeArgs) -> Result<()> {
    let started = Instant::now();
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Everything given is checked before anything is started.
    let public = args
        .public_url
        .as_deref()
        .map(parse_public_url)
        .transpose()?;
    let ca_secret = args
        .serving_ca_secret
        .as_deref()
        .map(split_secret_name)
        .transpose()?;
    let api_service_name = args
        .api_service
        .as_deref()
        .map(|s| split_name(s).ok_or_else(|| Error::ServiceName(s.to_string())))
        .transpose()?;
    let oidc = args.auth.oidc()?;
    args.store.tls()?;
    let replica = match args.store.store {
        StoreSpec::Etcd(_) => Some(replica_id(args.replica_id.as_deref())?),
        StoreSpec::Sled => None,
    };
    let dir = args.data_dir.clone();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    eprintln!("fabrik: data directory {}", dir.display());

    let (host, host_url) = host_client(&args).await?;
    let version = host
        .apiserver_version()
        .await
        .with_context(|| format!("cannot reach the host cluster at {host_url}"))?;
    eprintln!(
        "fabrik: host cluster {host_url} (Kubernetes {})",
        version.git_version
    );
    let mut tls_sans = args.tls_sans.clone();
    let mut dns_nameserver = None;
    let api_address = match &api_service_name {
        Some((ns, name)) => {
            let (address, sans, dns_port) = api_service(&host, ns, name).await?;
            eprintln!(
                "fabrik: tenant pods reach their API at {}:{} (host Service {ns}/{name})",
                address.host, address.port
            );
            match (dns_port, args.dns.dns_listen) {
                (true, Some(_)) => {
                    eprintln!("fabrik: tenant pods resolve cluster names at {}:53", address.host);
                    dns_nameserver = Some(address.host.clone());
                }
                (true, None) => eprintln!(
                    "fabrik: warning: host Service {ns}/{name} has a dns port but no --dns-listen serves it; tenant pods use the host's DNS"
                ),
                (false, Some(_)) => eprintln!(
                    "fabrik: warning: host Service {ns}/{name} has no port dns (UDP 53); tenant pods are not given the tenant DNS"
                ),
                (false, None) => {}
            }
            tls_sans.extend(sans);
            Some(address)
        }
        None => None,
    };
    if control_plane::install_tenant_crd(&host, CrdPolicy::IfMissing).await? {
        eprintln!(
            "fabrik: installed the Tenant CRD ({})",
            control_plane::TENANT_CRD
        );
    }

    let backend: Keyspaces = args.store.open(&dir, args.cache_mib, args.history).await?;
    let shards = replica.map(|replica| {
        eprintln!(
            "fabrik: replica {replica}: tenants are sharded over the replicas by the Leases in namespace {}",
            args.lease_namespace
        );
        if ca_secret.is_none() {
            eprintln!(
                "fabrik: warning: without --serving-ca-secret each replica serves with its own CA"
            );
        }
        Shards::new(ShardConfig {
            namespace: args.lease_namespace.clone(),
            replica,
            lease_duration: Duration::from_secs(args.lease_duration_seconds),
        })
    });
    let ca = match &ca_secret {
        Some((ns, name)) => ca_from_secret(&host, ns, name).await?,
        None => Ca::load_or_create(&dir.join("pki"), "fabrik-serving-ca").with_context(|| {
            format!(
                "cannot load the serving CA in {}",
                dir.join("pki").display()
            )
        })?,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let public = match public {
        Some(p) => p,
        None => parse_public_url(&fabrik_apiserver::url_of(addr))?,
    };
    let router = Router::tenants_only();
    let serving = ca
        .issue_server(&serving_hosts(addr, &public.host, &tls_sans))
        .context("cannot issue the serving certificate")?;
    let tls = fabrik_apiserver::server::tls_config(&serving, router.client_verifier())
        .context("cannot configure TLS")?;
    let (stop, stop_rx) = watch::channel(false);
    let serving_task = tokio::spawn(fabrik_apiserver::server::serve(
        listener,
        router.clone(),
        tls,
        stop_rx.clone(),
        DRAIN,
    ));

    let dns = crate::dns::start(&args.dns, router.clone()).await?;
    if let Some(d) = &dns {
        eprintln!("fabrik: tenant DNS on {} (UDP and TCP)", d.local_addr);
    }

    let mut shutdown = stop_rx;
    let manager = TenantManager::start(
        ManagerConfig {
            host,
            router,
            backend: backend.clone(),
            shards,
            settings: control_plane::api_settings(
                args.watch_bookmark_interval,
                public.url.clone(),
                oidc,
            ),
            public_url: public.url.clone(),
            serving_ca_pem: ca.cert_pem().to_string(),
            data_dir: None,
            usage_namespace: args.usage_namespace.clone(),
            api_address,
            dns_nameserver,
            local_backends: None,
            gpu_queue: args.queue.settings(&args.usage_namespace),
        },
        async move {
            let _ = shutdown.wait_for(|s| *s).await;
        },
    );
    let metrics = match args.metrics_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} (--metrics-listen)"))?;
            let at = listener
                .local_addr()
                .with_context(|| format!("cannot listen on {at} (--metrics-listen)"))?;
            let sources: Vec<crate::metrics_http::Source> = manager
                .queue_figures()
                .map(|figures| {
                    std::sync::Arc::new(move || figures.metrics_text())
                        as crate::metrics_http::Source
                })
                .into_iter()
                .collect();
            eprintln!("fabrik: the control plane's metrics on http://{at}/metrics");
            Some(tokio::spawn(crate::metrics_http::serve(
                listener,
                sources,
                stop.subscribe(),
            )))
        }
        None => None,
    };
    eprintln!(
        "fabrik: serving tenants at {}/clusters/<tenant> (listening on {addr}) in {} ms",
        public.url,
        started.elapsed().as_millis()
    );
    eprintln!(
        "fabrik: create a tenant on the host: `fabrik tenant create NAME --kubeconfig HOST_KUBECONFIG --wait`"
    );

    control_plane::wait_for_signal().await?;
    eprintln!("fabrik: shutting down");
    let _ = stop.send(true);
    manager.stopped().await;
    if let Some(m) = metrics {
        let _ = tokio::time::timeout(Duration::from_secs(1), m).await;
    }
    match tokio::time::timeout(DRAIN + Duration::from_secs(1), serving_task).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the listener stopped with an error"),
        Ok(_) => {}
        Err(_) => tracing::warn!("the listener did not stop in time"),
    }
    if let Some(d) = dns {
        d.stop();
    }
    drop(backend);
    eprintln!("fabrik: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_https_hosts_without_paths() {
        let ok = parse_public_url("https://fabrik.example.com").expect("plain host");
        assert_eq!(ok.url, "https://fabrik.example.com");
        assert_eq!(ok.host, "fabrik.example.com");
        let ok = parse_public_url("https://10.0.0.7:6443/").expect("ip and port");
        assert_eq!(ok.url, "https://10.0.0.7:6443");
        assert_eq!(ok.host, "10.0.0.7");
        let ok = parse_public_url("https://[::1]:6443").expect("ipv6");
        assert_eq!(ok.url, "https://[::1]:6443");
        assert_eq!(ok.host, "::1");
        for bad in [
            "http://fabrik.example.com",
            "https://fabrik.example.com/clusters",
            "fabrik.example.com",
            "https://u@fabrik.example.com",
            "https://fabrik.example.com/?a=b",
        ] {
            let err = parse_public_url(bad).expect_err(bad);
            assert!(err.to_string().contains("--public-url"), "{err}");
        }
    }

    #[test]
    fn the_certificate_names_the_public_host_once() {
        let listen: SocketAddr = "0.0.0.0:6443".parse().expect("addr");
        let hosts = serving_hosts(listen, "localhost", &["fabrik.svc".into(), "".into()]);
        assert_eq!(hosts, ["localhost", "127.0.0.1", "::1", "fabrik.svc"]);
        let listen: SocketAddr = "10.1.2.3:6443".parse().expect("addr");
        let hosts = serving_hosts(listen, "fabrik.example.com", &[]);
        assert!(hosts.contains(&"10.1.2.3".to_string()));
        assert!(hosts.contains(&"fabrik.example.com".to_string()));
    }

    #[test]
    fn replica_ids_fit_lease_names() {
        assert_eq!(replica_id(Some("r0")).ok().as_deref(), Some("r0"));
        assert_eq!(
            replica_id(Some("fabrik-7d9f-x2")).ok().as_deref(),
            Some("fabrik-7d9f-x2")
        );
        for bad in ["", "R0", "a_b", "-a", "a.", &"x".repeat(64)] {
            let err = replica_id(Some(bad)).expect_err(bad);
            assert!(err.to_string().contains("--replica-id"), "{err}");
        }
        assert!(replica_id(None).is_ok());
    }

    #[test]
    fn secret_names_are_namespace_slash_name() {
        assert_eq!(
            split_secret_name("fabrik-system/ca").expect("valid"),
            ("fabrik-system".to_string(), "ca".to_string())
        );
        for bad in ["ca", "/ca", "ns/", "a/b/c"] {
            assert!(split_secret_name(bad).is_err(), "{bad}");
        }
    }
}
