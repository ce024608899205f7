//! A real Kubernetes control plane for end-to-end tests: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler on loopback ports, their state and logs in a
//! temporary directory; stopped by their PIDs when dropped. The certificates are made here: the
//! cluster CA, the serving certificate, client certificates for an admin (`system:masters`), the
//! controller manager and the scheduler, the service-account key pair, and a front-proxy CA and
//! client for aggregation.
//!
//! There is no kubelet and no container runtime: tests register Fabrik's simulated GPU nodes
//! (`fabrik nodes`) into it, as KWOK does, so that the real scheduler binds pods and the
//! simulated kubelet reports their status.
//!
//! The binaries come from `FABRIK_K8S_BIN_DIR` (a directory holding plain `kube-apiserver`,
//! `kube-controller-manager` and `kube-scheduler`, such as the one `setup-envtest` downloads),
//! or else from the zstd-compressed builds in the `shared/k8s/bin` folder beside the repository,
//! decompressed once into `target/k8s-bin/` (with the `zstd` command) and checked against their
//! `SHA256SUMS`. Without either, [`RealHost::start`] fails saying so: a test that needs a real
//! host must not pass without one.
//!
//! One control plane takes about 600 MiB and a few seconds of CPU: start one per test binary.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use sha2::Digest;

use crate::etcd::{free_port, Etcd};

/// The environment variable naming a directory with the control-plane binaries.
pub const BIN_DIR_ENV: &str = "FABRIK_K8S_BIN_DIR";

/// The binaries a real host runs.
pub const BINARIES: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The Service range of the host (its first address is the `kubernetes` Service).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The compressed binaries and their checksums, beside the repository.
fn shared_k8s() -> PathBuf {
    crate::repo_root()
        .parent()
        .map(|p| p.join("shared").join("k8s"))
        .unwrap_or_else(|| PathBuf::from("shared/k8s"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"))
}

/// The directory holding the control-plane binaries: `FABRIK_K8S_BIN_DIR`, or the shared
/// compressed builds decompressed into `target/k8s-bin/` (once; safe when several test
/// processes do it at the same time: each writes a file of its own and renames it).
pub fn binaries() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        let dir = PathBuf::from(dir);
        for b in BINARIES {
            if !dir.join(b).is_file() {
                bail!(
                    "{BIN_DIR_ENV}={} has no {b}: it must hold {}",
                    dir.display(),
                    BINARIES.join(", ")
                );
            }
        }
        return Ok(dir);
    }
    let shared = shared_k8s();
    let sums_file = shared.join("SHA256SUMS");
    let sums = std::fs::read_to_string(&sums_file).map_err(|e| {
        anyhow!(
            "no Kubernetes control-plane binaries: set {BIN_DIR_ENV} to a directory with {} \
             (e.g. what `setup-envtest use -p path` prints), or provide {} ({e})",
            BINARIES.join(", "),
            sums_file.display()
        )
    })?;
    let out = target_dir().join("k8s-bin");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for b in BINARIES {
        let want = sums
            .lines()
            .filter_map(|l| l.split_once("  "))
            .find(|(_, name)| name.trim() == b)
            .map(|(sum, _)| sum.trim().to_ascii_lowercase())
            .with_context(|| format!("{} names no {b}", sums_file.display()))?;
        let dest = out.join(b);
        if dest.is_file() {
            // Only a checked file is ever renamed into place.
            continue;
        }
        let src = shared.join("bin").join(format!("{b}.zst"));
        let tmp = out.join(format!(".{b}.{}.tmp", std::process::id()));
        let status = Command::new("zstd")
            .args(["-d", "-q", "-f"])
            .arg(&src)
            .arg("-o")
            .arg(&tmp)
            .stdin(Stdio::null())
            .status()
            .context("running zstd (install it: scripts/install-test-deps.sh)")?;
        if !status.success() {
            let _ = std::fs::remove_file(&tmp);
            bail!("zstd -d {} exited with {status}", src.display());
        }
        let got = sha256(&tmp)?;
        if got != want {
            let _ = std::fs::remove_file(&tmp);
            bail!(
                "{} decompressed to SHA-256 {got}, {} says {want}",
                src.display(),
                sums_file.display()
            );
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, &dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))?;
    }
    Ok(out)
}

fn sha256(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The host's certificates and keys, PEM.
struct Pki {
    ca_cert: String,
    ca_key: String,
    serving: (String, String),
    admin: (String, String),
    controller_manager: (String, String),
    scheduler: (String, String),
    service_account_key: String,
    service_account_pub: String,
    front_proxy_ca: String,
    front_proxy_client: (String, String),
}

fn ca(name: &str) -> Result<(String, String, Issuer<'static, KeyPair>)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), key_pem, Issuer::new(params, key)))
}

fn serving(issuer: &Issuer<'_, KeyPair>) -> Result<(String, String)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    let mut sans = vec![
        SanType::IpAddress([127, 0, 0, 1].into()),
        SanType::IpAddress([10, 96, 0, 1].into()),
    ];
    for name in [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ] {
        sans.push(SanType::DnsName(name.try_into()?));
    }
    params.subject_alt_names = sans;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn client(
    issuer: &Issuer<'_, KeyPair>,
    user: &str,
    group: Option<&str>,
) -> Result<(String, String)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, user);
    if let Some(g) = group {
        dn.push(DnType::OrganizationName, g);
    }
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl Pki {
    fn generate() -> Result<Pki> {
        let (ca_cert, ca_key, issuer) = ca("fabrik e2e real host CA")?;
        // Aggregation: the API server proxies with this client certificate, signed by a CA
        // of its own.
        let (front_proxy_ca, _, front_proxy) = ca("fabrik e2e real host front-proxy CA")?;
        // ECDSA P-256 (rcgen's default): the private key PKCS#8, the public key apart (kube
        // does not read it out of a PKCS#8 private key).
        let sa = KeyPair::generate()?;
        Ok(Pki {
            serving: serving(&issuer)?,
            admin: client(&issuer, "fabrik-e2e-admin", Some("system:masters"))?,
            controller_manager: client(&issuer, "system:kube-controller-manager", None)?,
            scheduler: client(&issuer, "system:kube-scheduler", None)?,
            service_account_key: sa.serialize_pem(),
            service_account_pub: sa.public_key_pem(),
            front_proxy_client: client(&front_proxy, "front-proxy-client", None)?,
            front_proxy_ca,
            ca_cert,
            ca_key,
        })
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig for `server` trusting `ca_pem`, whose user authenticates with `auth` (the
/// `user:` fields, e.g. a client certificate or a token).
fn kubeconfig(server: &str, ca_pem: &str, user: &str, auth: serde_json::Value) -> Result<String> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real-host", "cluster": {
            "server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": "real-host", "context": {"cluster": "real-host", "user": user}}],
        "current-context": "real-host",
    });
    Ok(serde_yaml_ng::to_string(&doc)?)
}

fn cert_kubeconfig(
    server: &str,
    ca_pem: &str,
    user: &str,
    pair: &(String, String),
) -> Result<String> {
    kubeconfig(
        server,
        ca_pem,
        user,
        serde_json::json!({
            "client-certificate-data": b64(&pair.0),
            "client-key-data": b64(&pair.1),
        }),
    )
}

/// One process of the control plane.
struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// A running real control plane.
pub struct RealHost {
    // Field order is drop order after `Drop::drop`: the components are stopped there, then
    // etcd, then the directory is removed.
    components: Vec<Component>,
    etcd: Etcd,
    dir: tempfile::TempDir,
    url: String,
    ca_pem: String,
}

impl RealHost {
    /// Starts etcd, kube-apiserver (waiting for `/readyz`), kube-controller-manager and
    /// kube-scheduler.
    pub fn start() -> Result<RealHost> {
        let bin = binaries()?;
        let dir = tempfile::tempdir().context("tempdir")?;
        let pki = Pki::generate()?;
        let etcd = Etcd::start()?;
        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let mut host = RealHost {
            components: Vec::new(),
            etcd,
            url,
            ca_pem: pki.ca_cert.clone(),
            dir,
        };
        let d = host.dir.path().to_path_buf();
        let write = |name: &str, text: &str| -> Result<String> {
            let p = d.join(name);
            std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
            Ok(p.display().to_string())
        };
        let ca = write("ca.crt", &pki.ca_cert)?;
        let ca_key = write("ca.key", &pki.ca_key)?;
        let tls_cert = write("apiserver.crt", &pki.serving.0)?;
        let tls_key = write("apiserver.key", &pki.serving.1)?;
        let sa = write("sa.key", &pki.service_account_key)?;
        let sa_pub = write("sa.pub", &pki.service_account_pub)?;
        let proxy_ca = write("front-proxy-ca.crt", &pki.front_proxy_ca)?;
        let proxy_cert = write("front-proxy-client.crt", &pki.front_proxy_client.0)?;
        let proxy_key = write("front-proxy-client.key", &pki.front_proxy_client.1)?;
        write(
            "admin.kubeconfig",
            &cert_kubeconfig(&host.url, &pki.ca_cert, "admin", &pki.admin)?,
        )?;
        let kcm = write(
            "controller-manager.kubeconfig",
            &cert_kubeconfig(
                &host.url,
                &pki.ca_cert,
                "system:kube-controller-manager",
                &pki.controller_manager,
            )?,
        )?;
        let sched = write(
            "scheduler.kubeconfig",
            &cert_kubeconfig(
                &host.url,
                &pki.ca_cert,
                "system:kube-scheduler",
                &pki.scheduler,
            )?,
        )?;

        let etcd_url = format!("http://{}", host.etcd.member());
        host.spawn(
            &bin,
            "kube-apiserver",
            &[
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--etcd-servers={etcd_url}"),
                &format!("--client-ca-file={ca}"),
                &format!("--tls-cert-file={tls_cert}"),
                &format!("--tls-private-key-file={tls_key}"),
                "--authorization-mode=Node,RBAC",
                &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                &format!("--service-account-key-file={sa_pub}"),
                &format!("--service-account-signing-key-file={sa}"),
                // A loopback advertise address is not a valid Endpoints IP.
                "--endpoint-reconciler-type=none",
                &format!("--requestheader-client-ca-file={proxy_ca}"),
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                &format!("--proxy-client-cert-file={proxy_cert}"),
                &format!("--proxy-client-key-file={proxy_key}"),
                &format!("--cert-dir={}", d.join("apiserver-certs").display()),
            ],
        )?;
        host.wait_ready()?;
        let kcm_port = free_port()?;
        host.spawn(
            &bin,
            "kube-controller-manager",
            &[
                &format!("--kubeconfig={kcm}"),
                &format!("--authentication-kubeconfig={kcm}"),
                &format!("--authorization-kubeconfig={kcm}"),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={kcm_port}"),
                "--leader-elect=false",
                &format!("--root-ca-file={ca}"),
                &format!("--service-account-private-key-file={sa}"),
                &format!("--cluster-signing-cert-file={ca}"),
                &format!("--cluster-signing-key-file={ca_key}"),
                "--use-service-account-credentials=true",
                &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                &format!("--cert-dir={}", d.join("kcm-certs").display()),
            ],
        )?;
        let sched_port = free_port()?;
        host.spawn(
            &bin,
            "kube-scheduler",
            &[
                &format!("--kubeconfig={sched}"),
                &format!("--authentication-kubeconfig={sched}"),
                &format!("--authorization-kubeconfig={sched}"),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={sched_port}"),
                "--leader-elect=false",
                &format!("--cert-dir={}", d.join("scheduler-certs").display()),
            ],
        )?;
        Ok(host)
    }

    fn spawn(&mut self, bin: &Path, name: &'static str, args: &[&str]) -> Result<()> {
        let log = self.dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin.join(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.join(name).display()))?;
        self.components.push(Component { name, child, log });
        Ok(())
    }

    /// Waits until `/readyz` answers `ok`, or fails with the API server's log.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + crate::STARTUP;
        loop {
            let last = match readyz(&self.url, &self.ca_pem) {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(e) => format!("{e:#}"),
            };
            self.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready within {} s (last answer: {last})\n{}",
                    crate::STARTUP.as_secs(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Fails, with the logs, if a component has exited.
    pub fn check_running(&mut self) -> Result<()> {
        for c in &mut self.components {
            if let Some(status) = c.child.try_wait()? {
                let name = c.name;
                bail!("{name} exited with {status}\n{}", self.logs());
            }
        }
        Ok(())
    }

    /// The API server's URL, `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cluster CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig file whose user is in `system:masters`.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A kubeconfig for this host whose user authenticates with a bearer `token` (e.g. a
    /// service account's).
    pub fn token_kubeconfig(&self, token: &str) -> Result<String> {
        kubeconfig(
            &self.url,
            &self.ca_pem,
            "token-user",
            serde_json::json!({ "token": token }),
        )
    }

    /// A directory for the test's own files; removed with the host.
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last lines of each component's log (etcd's included).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for c in &self.components {
            let text = std::fs::read_to_string(&c.log).unwrap_or_default();
            out.push_str(&format!("--- {} log (last 40 lines) ---\n", c.name));
            out.push_str(&tail(&text, 40));
        }
        out.push_str("--- etcd log (last 10 lines) ---\n");
        out.push_str(&tail(&self.etcd.log(), 10));
        out
    }

    /// The full log of one component (`kube-apiserver`, ...).
    pub fn log(&self, name: &str) -> String {
        self.components
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| std::fs::read_to_string(&c.log).ok())
            .unwrap_or_default()
    }

    /// The names and process ids of the running components (etcd not included).
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.components
            .iter()
            .map(|c| (c.name, c.child.id()))
            .collect()
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let mut out = lines[start..].join("\n");
    out.push('\n');
    out
}

/// `GET /readyz` (anonymous, which upstream allows) over HTTPS trusting `ca_pem`; run on a
/// thread of its own so that it works inside and outside an async runtime.
fn readyz(url: &str, ca_pem: &str) -> Result<String> {
    crate::init_crypto();
    let url = format!("{url}/readyz");
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes())?;
    std::thread::spawn(move || -> Result<String> {
        let client = reqwest::blocking::Client::builder()
            .add_root_certificate(ca)
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()?;
        Ok(client.get(url).send()?.text()?)
    })
    .join()
    .map_err(|_| anyhow!("readyz thread panicked"))?
}

impl Drop for RealHost {
    fn drop(&mut self) {
        // The API server's clients first, then the API server; etcd goes with its own Drop.
        while let Some(mut c) = self.components.pop() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

impl RealHost {
    /// A kube-rs client of this host with the admin kubeconfig (`system:masters`).
    pub async fn admin_client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.admin_kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }
}

/// Creates the chart's Tenant CRD (`helm/fabrik/crds/tenants.fabrik.dev.yaml`) with `client`
/// and waits (up to 60 s) until the API server reports it Established.
pub async fn install_tenant_crd(client: &kube::Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let path = crate::repo_root()
        .join("helm")
        .join("fabrik")
        .join("crds")
        .join("tenants.fabrik.dev.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let name = crd.metadata.name.clone().unwrap_or_default();
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    api.create(&Default::default(), &crd)
        .await
        .with_context(|| format!("creating CRD {name}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = api.get(&name).await?;
        let established = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not Established within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
