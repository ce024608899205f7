//! `fabrik kubeconfig --oidc`: a kubeconfig whose user runs `fabrik login` as a kubectl exec
//! credential plugin, for a server given directly (`--server`, `--certificate-authority`) or
//! taken from a `fabrik up` tenant kubeconfig (`--tenant NAME --data-dir DIR`).

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{json, Value};

use super::exec_credential::V1;
use super::OidcArgs;

/// Errors building the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Only OIDC kubeconfigs are written by this command.
    #[error(
        "pass --oidc: this command writes OIDC (exec plugin) kubeconfigs; a tenant's admin \
         kubeconfig comes from `fabrik tenant kubeconfig NAME`"
    )]
    NotOidc,
    /// Neither `--server` nor `--tenant` was given.
    #[error(
        "pass --server URL (with --certificate-authority FILE), or --tenant NAME --data-dir DIR"
    )]
    NoServer,
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The tenant kubeconfig is not usable.
    #[error("{} is not a usable kubeconfig: {reason} (is the tenant Ready? `fabrik tenant get NAME`)", path.display())]
    TenantKubeconfig {
        /// The file.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// The kubeconfig cannot be encoded.
    #[error("cannot encode the kubeconfig: {0}")]
    Encode(#[source] serde_yaml_ng::Error),
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `fabrik kubeconfig --oidc`: write a kubeconfig whose user logs in through `fabrik login`.
#[derive(clap::Args, Clone, Debug)]
pub struct KubeconfigArgs {
    /// Write a kubeconfig that logs in with OIDC through `fabrik login` (required).
    #[arg(long)]
    pub oidc: bool,
    /// The API server URL (e.g. `https://fabrik.example.com:6443/clusters/acme`).
    #[arg(long, conflicts_with = "tenant")]
    pub server: Option<String>,
    /// The CA that signs the API server's certificate (PEM file; embedded in the kubeconfig).
    #[arg(long, value_name = "FILE", conflicts_with = "tenant")]
    pub certificate_authority: Option<PathBuf>,
    /// Take the server and its CA from `DATA_DIR/tenants/NAME.kubeconfig` (written by `fabrik up`).
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// The `fabrik up` data directory for --tenant (default: the one `fabrik up` uses).
    #[arg(long, value_name = "DIR", requires = "tenant")]
    pub data_dir: Option<PathBuf>,
    /// Name of the cluster, user and context (default: `fabrik-<tenant>`, or `fabrik`).
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Write the kubeconfig here (mode 0600) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The command kubectl runs for credentials (default: `fabrik`, found on the PATH).
    #[arg(long, default_value = "fabrik")]
    pub exec_command: String,
    /// The `fabrik login` settings the kubeconfig passes on.
    #[command(flatten)]
    pub login: OidcArgs,
}

/// Where the API server is and how to trust it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// Its URL.
    pub url: String,
    /// Its CA, PEM, if not a public one.
    pub ca_pem: Option<Vec<u8>>,
}

/// Runs `fabrik kubeconfig`.
pub fn run(args: &KubeconfigArgs) -> Result<()> {
    if !args.oidc {
        return Err(Error::NotOidc);
    }
    let (server, default_name) = match (&args.tenant, &args.server) {
        (Some(tenant), _) => {
            let dir = args
                .data_dir
                .clone()
                .unwrap_or_else(crate::up::default_data_dir);
            let path = dir.join("tenants").join(format!("{tenant}.kubeconfig"));
            (server_from_kubeconfig(&path)?, format!("fabrik-{tenant}"))
        }
        (None, Some(url)) => {
            let ca_pem = match &args.certificate_authority {
                Some(p) => Some(read(p)?),
                None => None,
            };
            (
                Server {
                    url: url.clone(),
                    ca_pem,
                },
                "fabrik".to_string(),
            )
        }
        (None, None) => return Err(Error::NoServer),
    };
    let name = args.cluster_name.clone().unwrap_or(default_name);
    let login = args.login.absolute();
    let doc = render(&name, &server, &args.exec_command, &login.forward_args());
    let yaml = serde_yaml_ng::to_string(&doc).map_err(Error::Encode)?;
    match &args.out {
        Some(path) => {
            write_private(path, yaml.as_bytes()).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            eprintln!("kubeconfig written to {}", path.display());
        }
        None => print!("{yaml}"),
    }
    Ok(())
}

/// The kubeconfig document.
pub fn render(name: &str, server: &Server, command: &str, login_args: &[String]) -> Value {
    let mut cluster = json!({"server": server.url});
    if let Some(pem) = &server.ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let user = format!("{name}-oidc");
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": V1,
            "command": command,
            "args": login_args,
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": false,
        }}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
        "preferences": {},
    })
}

/// The server and CA of a kubeconfig's current context (or its first cluster).
pub fn server_from_kubeconfig(path: &Path) -> Result<Server> {
    let text = read(path)?;
    let bad = |reason: &str| Error::TenantKubeconfig {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let doc: Value = serde_yaml_ng::from_slice(&text).map_err(|e| bad(&e.to_string()))?;
    let clusters = doc["clusters"]
        .as_array()
        .ok_or_else(|| bad("no clusters"))?;
    let wanted = doc["current-context"].as_str().and_then(|ctx| {
        doc["contexts"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == ctx)?["context"]["cluster"]
            .as_str()
    });
    let entry = match wanted {
        Some(w) => clusters.iter().find(|c| c["name"] == w),
        None => clusters.first(),
    }
    .ok_or_else(|| bad("the current context's cluster is missing"))?;
    let cluster = &entry["cluster"];
    let url = cluster["server"]
        .as_str()
        .ok_or_else(|| bad("the cluster has no server"))?
        .to_string();
    let ca_pem = match (
        cluster["certificate-authority-data"].as_str(),
        cluster["certificate-authority"].as_str(),
    ) {
        (Some(data), _) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| bad(&format!("certificate-authority-data: {e}")))?,
        ),
        (None, Some(file)) => Some(read(Path::new(file))?),
        (None, None) => None,
    };
    Ok(Server { url, ca_pem })
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path` (created with mode 0600: the kubeconfig may hold a client secret).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_exec_user() {
        let server = Server {
            url: "https://h:6443/clusters/t".into(),
            ca_pem: Some(b"PEM".to_vec()),
        };
        let args = vec![
            "login".to_string(),
            "--issuer-url".into(),
            "https://idp".into(),
        ];
        let doc = render("fabrik-t", &server, "fabrik", &args);
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://h:6443/clusters/t"
        );
        assert_eq!(
            doc["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        let exec = &doc["users"][0]["user"]["exec"];
        assert_eq!(exec["apiVersion"], V1);
        assert_eq!(exec["command"], "fabrik");
        assert_eq!(exec["args"][2], "https://idp");
        assert_eq!(exec["interactiveMode"], "IfAvailable");
        assert_eq!(doc["contexts"][0]["context"]["user"], "fabrik-t-oidc");
        assert_eq!(doc["current-context"], "fabrik-t");
    }

    #[test]
    fn reads_server_and_ca_of_the_current_context() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|source| Error::Io {
            path: "tempdir".into(),
            source,
        })?;
        let path = dir.path().join("t.kubeconfig");
        let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster:\n    server: https://wrong\n- name: fabrik-t\n  cluster:\n    server: https://127.0.0.1:1/clusters/t\n    certificate-authority-data: UEVN\ncontexts:\n- name: fabrik-t\n  context:\n    cluster: fabrik-t\n    user: admin\ncurrent-context: fabrik-t\n";
        std::fs::write(&path, text).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let server = server_from_kubeconfig(&path)?;
        assert_eq!(server.url, "https://127.0.0.1:1/clusters/t");
        assert_eq!(server.ca_pem.as_deref(), Some(&b"PEM"[..]));
        Ok(())
    }

    #[test]
    fn a_missing_tenant_kubeconfig_names_the_file() {
        let err = server_from_kubeconfig(Path::new("/nonexistent/tenants/x.kubeconfig"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("/nonexistent/tenants/x.kubeconfig"));
    }
}
