//! Configuration of the etcd backend and its documented defaults.

use std::path::PathBuf;
use std::time::Duration;

/// Default root of every key Fabrik writes to etcd.
pub const DEFAULT_ETCD_PREFIX: &str = "/fabrik";

/// Default time a request keeps being retried through transient failures (no leader, a member
/// going away, a connection reset): 30 s, long enough for an etcd leader election and a
/// client reconnect, short enough that a dead cluster surfaces as an error.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Default period of the background compactor: 5 minutes, like kube-apiserver's
/// `--etcd-compaction-interval`. Each run compacts to the revision seen one period earlier, so
/// watches and lists can start at least this far in the past.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// TLS settings for the connection to etcd (endpoints must then be `https://`).
#[derive(Clone, Debug, Default)]
pub struct EtcdTls {
    /// PEM file of the CA that signed the etcd server certificates; None = the system roots
    /// are not consulted, so set this unless the servers use a publicly trusted CA.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (etcd `--client-cert-auth`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Server name to verify instead of the endpoint's host (when certificates name a DNS name
    /// but endpoints are IP addresses).
    pub server_name: Option<String>,
}

/// How to connect an [`EtcdBackend`](crate::EtcdBackend).
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members, e.g. `http://127.0.0.1:2379`. Give all of them:
    /// requests are balanced over the members and retried on another one when a member fails.
    pub endpoints: Vec<String>,
    /// Root of every key this backend writes; see [`DEFAULT_ETCD_PREFIX`]. Several Fabrik
    /// installations can share one etcd cluster under different prefixes.
    pub prefix: String,
    /// TLS to etcd; None = plain `http://` endpoints.
    pub tls: Option<EtcdTls>,
    /// Timeout of one connection attempt.
    pub connect_timeout: Duration,
    /// Timeout of one unary request (a streaming watch has none).
    pub request_timeout: Duration,
    /// How long a request is retried through transient failures; see
    /// [`DEFAULT_RETRY_TIMEOUT`].
    pub retry_timeout: Duration,
    /// Period of the background compactor; None = never compact from this process (another
    /// replica, an operator or etcd's `--auto-compaction-*` does it). See
    /// [`DEFAULT_COMPACTION_INTERVAL`].
    pub compaction_interval: Option<Duration>,
    /// etcd user name and password, when etcd authentication is enabled.
    pub user: Option<(String, String)>,
}

impl EtcdConfig {
    /// A config for `endpoints` with the default prefix, timeouts and compaction, no TLS.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_ETCD_PREFIX.to_owned(),
            tls: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
            compaction_interval: Some(DEFAULT_COMPACTION_INTERVAL),
            user: None,
        }
    }
}
