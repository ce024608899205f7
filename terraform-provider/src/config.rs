//! The provider's configuration: how to reach the host cluster. A kubeconfig file
//! (`config_path`, optional `config_context`), inline credentials (`host` with PEM
//! certificates or a token), or else the `KUBECONFIG` environment variable.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use thiserror::Error;

use crate::diag::{path, Diag};
use crate::value::Value;

/// Errors building a host client.
#[derive(Debug, Error)]
pub enum Error {
    /// Nothing says where the host is.
    #[error(
        "no host cluster configured: set config_path, host, or the KUBECONFIG environment variable"
    )]
    NoHost,
    /// The kubeconfig file cannot be read or parsed.
    #[error("cannot read the kubeconfig {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `KUBECONFIG` names files that cannot be read.
    #[error("cannot read the kubeconfig named by KUBECONFIG: {0}")]
    Env(#[source] kube::config::KubeconfigError),
    /// The inline settings do not form a kubeconfig.
    #[error("invalid inline credentials: {0}")]
    Inline(#[source] serde_json::Error),
    /// The kubeconfig (its context, certificates, ...) is not usable.
    #[error("invalid host configuration: {0}")]
    Config(#[source] kube::config::KubeconfigError),
    /// The client cannot be built (TLS set-up).
    #[error("cannot build the host client: {0}")]
    Client(#[source] kube::Error),
}

/// `Result` with this module's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The provider's settings, as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// `config_path`.
    pub config_path: Option<String>,
    /// `config_context`.
    pub config_context: Option<String>,
    /// `host`.
    pub host: Option<String>,
    /// `cluster_ca_certificate` (PEM).
    pub cluster_ca_certificate: Option<String>,
    /// `client_certificate` (PEM).
    pub client_certificate: Option<String>,
    /// `client_key` (PEM).
    pub client_key: Option<String>,
    /// `token`.
    pub token: Option<String>,
}

impl Settings {
    /// Reads the settings from a provider configuration value.
    pub fn from_value(v: &Value) -> Settings {
        let s = |name: &str| v.get(name).as_str().map(str::to_string);
        Settings {
            config_path: s("config_path"),
            config_context: s("config_context"),
            host: s("host"),
            cluster_ca_certificate: s("cluster_ca_certificate"),
            client_certificate: s("client_certificate"),
            client_key: s("client_key"),
            token: s("token"),
        }
    }

    /// Which attribute names where the host is (for diagnostics).
    pub fn source_attr(&self) -> Option<&'static str> {
        if self.host.is_some() {
            Some("host")
        } else if self.config_path.is_some() {
            Some("config_path")
        } else {
            None
        }
    }
}

/// Checks a provider configuration without touching the network or files.
pub fn validate(v: &Value) -> Vec<Diag> {
    let mut diags = Vec::new();
    let set = |name: &str| !v.get(name).is_null();
    if set("host") && set("config_path") {
        diags.push(Diag::attr(
            path(&["host"]),
            "Conflicting host settings",
            "set either `host` (with inline credentials) or `config_path`, not both",
        ));
    }
    for inline in [
        "cluster_ca_certificate",
        "client_certificate",
        "client_key",
        "token",
    ] {
        if set(inline) && !set("host") {
            diags.push(Diag::attr(
                path(&[inline]),
                "Missing host",
                format!("`{inline}` is used with `host`; set `host` too"),
            ));
        }
    }
    if set("config_context") && set("host") {
        diags.push(Diag::attr(
            path(&["config_context"]),
            "Conflicting host settings",
            "`config_context` selects a context of `config_path`; it has no meaning with `host`",
        ));
    }
    if set("client_certificate") != set("client_key") {
        diags.push(Diag::attr(
            path(&[if set("client_key") {
                "client_certificate"
            } else {
                "client_key"
            }]),
            "Incomplete client certificate",
            "`client_certificate` and `client_key` go together",
        ));
    }
    if let Some(host) = v.get("host").as_str() {
        if !(host.starts_with("https://") || host.starts_with("http://")) {
            diags.push(Diag::attr(
                path(&["host"]),
                "Invalid host",
                format!("{host:?} is not a URL (e.g. https://127.0.0.1:6443)"),
            ));
        }
    }
    diags
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn inline_kubeconfig(s: &Settings, host: &str) -> Result<Kubeconfig> {
    let mut cluster = serde_json::json!({"server": host});
    if let Some(ca) = &s.cluster_ca_certificate {
        cluster["certificate-authority-data"] = b64(ca).into();
    }
    let mut user = serde_json::json!({});
    if let (Some(cert), Some(key)) = (&s.client_certificate, &s.client_key) {
        user["client-certificate-data"] = b64(cert).into();
        user["client-key-data"] = b64(key).into();
    }
    if let Some(token) = &s.token {
        user["token"] = token.clone().into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "host", "cluster": cluster}],
        "users": [{"name": "host", "user": user}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": "host"}}],
        "current-context": "host",
    }))
    .map_err(Error::Inline)
}

/// Builds the host client the settings describe. Nothing is contacted yet.
pub async fn client(s: &Settings) -> Result<(kube::Client, String)> {
    let kubeconfig = if let Some(host) = &s.host {
        inline_kubeconfig(s, host)?
    } else if let Some(p) = &s.config_path {
        let p = expand_home(p);
        Kubeconfig::read_from(&p).map_err(|source| Error::Read { path: p, source })?
    } else {
        Kubeconfig::from_env()
            .map_err(Error::Env)?
            .ok_or(Error::NoHost)?
    };
    let options = KubeConfigOptions {
        context: s.config_context.clone(),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(Error::Config)?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(60));
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(Error::Client)?;
    Ok((client, url))
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    fn config(fields: &[(&str, &str)]) -> Value {
        let mut v = Value::null_object(&schema::provider().ty());
        for (k, f) in fields {
            v.set(k, Value::string(*f));
        }
        v
    }

    #[test]
    fn conflicting_and_incomplete_settings() {
        let diags = validate(&config(&[
            ("host", "127.0.0.1:6443"),
            ("config_path", "x"),
            ("client_key", "k"),
        ]));
        let paths: Vec<String> = diags
            .iter()
            .map(|d| crate::diag::display(d.path.as_deref().unwrap_or(&[])))
            .collect();
        assert_eq!(paths, ["host", "client_certificate", "host"]);
        assert!(validate(&config(&[("config_path", "x"), ("config_context", "c")])).is_empty());
    }

    #[tokio::test]
    async fn inline_credentials_make_a_client() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let s = Settings {
            host: Some("https://127.0.0.1:1".into()),
            token: Some("t".into()),
            ..Default::default()
        };
        let (_client, url) = client(&s).await.expect("client");
        assert_eq!(url, "https://127.0.0.1:1/");
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_reported_with_its_path() {
        let s = Settings {
            config_path: Some("/nonexistent/kubeconfig".into()),
            ..Default::default()
        };
        let err = client(&s).await.err().expect("error");
        assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");
    }
}
