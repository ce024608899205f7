//! Where tenant keyspaces live: the embedded sled store of one process, or an etcd cluster
//! that several `fabrik serve` replicas share.
//!
//! [`StoreSpec`] is the parsed `--store` flag (`sled`, or `etcd://HOST:PORT[,HOST:PORT…]`);
//! [`Keyspaces`] opens and drops keyspaces on whichever backend it names, so the tenant
//! manager does not know which one it runs on.
//!
//! The etcd backend is the `etcd` cargo feature (its client's build needs `protoc`); a build
//! without it parses `--store etcd://…` and says how to get a build that has it.

use std::path::PathBuf;
use std::sync::Arc;

use fabrik_api::tenant::TenantQuota;
#[cfg(feature = "etcd")]
use fabrik_store::{EtcdBackend, EtcdConfig, EtcdTls};
use fabrik_store::{SledBackend, StorageLimits, Store, StoreError};

/// Bytes a tenant's objects may take in the store when `spec.quota.storage` is unset: 1 GiB.
///
/// Sized for a real tenant: Helm keeps each release revision in a Secret of up to 1 MiB
/// (typically tens of KiB) and ten revisions per release, so fifty releases with history take
/// well under 500 MiB; a few thousand pods, ConfigMaps and events take tens of MiB. etcd's own
/// default quota for a *whole* cluster is 2 GiB, so this keeps several tenants from filling a
/// shared store. The history of changes is bounded separately (64 MiB per tenant by default).
pub const DEFAULT_TENANT_STORAGE_BYTES: u64 = 1 << 30;

/// Objects a tenant may keep in the store when `spec.quota.objects` is unset: 100,000 (ten
/// times the objects of a busy 1,000-pod cluster: pods, ReplicaSets, endpoints, events,
/// Secrets and ConfigMaps).
pub const DEFAULT_TENANT_OBJECTS: u64 = 100_000;

/// The store quota of a tenant from its spec (`spec.quota.storage`, a quantity of bytes, and
/// `spec.quota.objects`), with the defaults above for unset fields.
pub fn tenant_storage_limits(quota: Option<&TenantQuota>) -> Result<StorageLimits, String> {
    let bytes = match quota.and_then(|q| q.storage.as_deref()) {
        None => DEFAULT_TENANT_STORAGE_BYTES,
        Some(text) => fabrik_api::validation::storage_bytes(text).map_err(|e| e.to_string())?,
    };
    let objects = match quota.and_then(|q| q.objects) {
        None => DEFAULT_TENANT_OBJECTS,
        Some(n) => {
            u64::try_from(n).map_err(|_| "spec.quota.objects must not be negative".to_string())?
        }
    };
    Ok(StorageLimits {
        bytes: Some(bytes),
        objects: Some(objects),
    })
}

/// Errors of the `--store` flag and of opening the store it names.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--store` is neither `sled` nor an `etcd://` list.
    #[error("--store {given:?}: {why} (expected `sled` or `etcd://HOST:PORT[,HOST:PORT…]`)")]
    Spec {
        /// The value given.
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// TLS files were given for the sled store, or a key without a certificate.
    #[error("{0}")]
    Tls(String),
    /// `--store etcd://…` in a build without the etcd backend.
    #[cfg(not(feature = "etcd"))]
    #[error(
        "--store etcd://…: this fabrik was built without the etcd store backend; build it with \
         `cargo build --release -p control-plane --features etcd` (needs `protoc`), or use the \
         chart's image"
    )]
    NotBuilt,
    /// etcd did not answer.
    #[cfg(feature = "etcd")]
    #[error("cannot connect to etcd at {endpoints}: {source}")]
    Connect {
        /// The endpoints tried.
        endpoints: String,
        /// The cause.
        #[source]
        source: StoreError,
    },
}

/// The store a `fabrik serve` keeps tenants in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// sled under the data directory: one replica.
    Sled,
    /// An etcd cluster: `HOST:PORT` of each member.
    Etcd(Vec<String>),
}

impl StoreSpec {
    /// Parses `sled` or `etcd://HOST:PORT[,HOST:PORT…]` (a member may also be written with
    /// its own `http://` or `https://` scheme, which is dropped: TLS follows the TLS flags).
    pub fn parse(text: &str) -> Result<StoreSpec, Error> {
        let bad = |why: &str| Error::Spec {
            given: text.to_string(),
            why: why.to_string(),
        };
        if text == "sled" {
            return Ok(StoreSpec::Sled);
        }
        let Some(list) = text.strip_prefix("etcd://") else {
            return Err(bad("unknown store"));
        };
        let mut members = Vec::new();
        for raw in list.split(',') {
            let member = raw
                .trim()
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .trim_end_matches('/');
            if member.is_empty() {
                return Err(bad("an empty etcd member"));
            }
            let Some((host, port)) = member.rsplit_once(':') else {
                return Err(bad(&format!("etcd member {member:?} has no port")));
            };
            if host.is_empty() || host.contains('/') || port.parse::<u16>().is_err() {
                return Err(bad(&format!("etcd member {member:?} is not HOST:PORT")));
            }
            members.push(member.to_string());
        }
        Ok(StoreSpec::Etcd(members))
    }

    /// Whether this store can be shared by several replicas.
    pub fn is_shared(&self) -> bool {
        matches!(self, StoreSpec::Etcd(_))
    }
}

/// The store flags of `fabrik up` and `fabrik serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// Where state lives: `sled` (under --data-dir) or `etcd://HOST:PORT[,HOST:PORT…]`. With
    /// `fabrik serve`, replicas sharing an etcd store split the tenants by shard.
    #[arg(long, value_name = "STORE", default_value = "sled", value_parser = StoreSpec::parse)]
    pub store: StoreSpec,
    /// CA certificate of the etcd servers (PEM); turns on TLS to etcd.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate for etcd (PEM); needs --etcd-key-file.
    #[arg(long, value_name = "FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// Private key of --etcd-cert-file (PEM).
    #[arg(long, value_name = "FILE")]
    pub etcd_key_file: Option<PathBuf>,
}

impl StoreArgs {
    /// The TLS files, checked against the store: only with etcd, a certificate with its key.
    pub fn tls(&self) -> Result<EtcdTlsFiles, Error> {
        let tls = EtcdTlsFiles {
            ca: self.etcd_ca_file.clone(),
            cert: self.etcd_cert_file.clone(),
            key: self.etcd_key_file.clone(),
        };
        tls.check(&self.store)?;
        Ok(tls)
    }

    /// Opens the store: sled under `dir/store` (page cache `cache_mib`, `history` revisions),
    /// or etcd by connecting to its members.
    pub async fn open(
        &self,
        dir: &std::path::Path,
        cache_mib: u64,
        history: u64,
    ) -> anyhow::Result<Keyspaces> {
        let tls = self.tls()?;
        Ok(match &self.store {
            StoreSpec::Sled => crate::control_plane::open_store(dir, cache_mib, history)?.into(),
            #[cfg(feature = "etcd")]
            StoreSpec::Etcd(members) => {
                let etcd = connect_etcd(members, &tls).await?;
                eprintln!("fabrik: store: etcd at {}", members.join(","));
                Keyspaces::Etcd(etcd)
            }
            #[cfg(not(feature = "etcd"))]
            StoreSpec::Etcd(_) => {
                let _ = tls;
                return Err(Error::NotBuilt.into());
            }
        })
    }
}

/// TLS files for the connection to etcd (`--etcd-ca-file`, `--etcd-cert-file`,
/// `--etcd-key-file`).
#[derive(Clone, Debug, Default)]
pub struct EtcdTlsFiles {
    /// CA of the etcd servers.
    pub ca: Option<PathBuf>,
    /// Client certificate.
    pub cert: Option<PathBuf>,
    /// Its private key.
    pub key: Option<PathBuf>,
}

impl EtcdTlsFiles {
    fn any(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// Checks the files fit `spec`: only with etcd, a certificate and its key together.
    pub fn check(&self, spec: &StoreSpec) -> Result<(), Error> {
        if self.any() && !spec.is_shared() {
            return Err(Error::Tls(
                "--etcd-ca-file, --etcd-cert-file and --etcd-key-file need --store etcd://…".into(),
            ));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(Error::Tls(
                "--etcd-cert-file and --etcd-key-file go together".into(),
            ));
        }
        Ok(())
    }

    /// The etcd client configuration for `members` (`https://` when any TLS file is given).
    #[cfg(feature = "etcd")]
    pub fn etcd_config(&self, members: &[String]) -> EtcdConfig {
        let scheme = if self.any() { "https" } else { "http" };
        let mut config = EtcdConfig::new(members.iter().map(|m| format!("{scheme}://{m}")));
        if self.any() {
            config.tls = Some(EtcdTls {
                ca_file: self.ca.clone(),
                cert_file: self.cert.clone(),
                key_file: self.key.clone(),
                server_name: None,
            });
        }
        config
    }
}

/// Connects to the etcd cluster of `members`.
#[cfg(feature = "etcd")]
pub async fn connect_etcd(members: &[String], tls: &EtcdTlsFiles) -> Result<EtcdBackend, Error> {
    EtcdBackend::connect(tls.etcd_config(members))
        .await
        .map_err(|source| Error::Connect {
            endpoints: members.join(","),
            source,
        })
}

/// The keyspaces of tenant clusters, on either backend. Cheap to clone.
#[derive(Clone, Debug)]
pub enum Keyspaces {
    /// One process's sled database.
    Sled(SledBackend),
    /// A shared etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(EtcdBackend),
}

impl From<SledBackend> for Keyspaces {
    fn from(backend: SledBackend) -> Self {
        Keyspaces::Sled(backend)
    }
}

impl Keyspaces {
    /// Opens (creating when new) the keyspace `name`.
    pub async fn open(&self, name: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(match self {
            Keyspaces::Sled(b) => Arc::new(b.keyspace(name)?),
            #[cfg(feature = "etcd")]
            Keyspaces::Etcd(b) => Arc::new(b.keyspace(name).await?),
        })
    }

    /// Removes the keyspace `name` and its data (absent is not an error).
    pub async fn drop(&self, name: &str) -> Result<(), StoreError> {
        match self {
            Keyspaces::Sled(b) => b.drop_keyspace(name),
            #[cfg(feature = "etcd")]
            Keyspaces::Etcd(b) => b.drop_keyspace(name).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_storage_limits_default_and_parse() {
        let defaults = tenant_storage_limits(None).expect("defaults");
        assert_eq!(defaults.bytes, Some(DEFAULT_TENANT_STORAGE_BYTES));
        assert_eq!(defaults.objects, Some(DEFAULT_TENANT_OBJECTS));
        let quota = TenantQuota {
            storage: Some("512Mi".into()),
            objects: Some(10),
            ..Default::default()
        };
        let set = tenant_storage_limits(Some(&quota)).expect("valid quota");
        assert_eq!(set.bytes, Some(512 << 20));
        assert_eq!(set.objects, Some(10));
        for bad in [
            TenantQuota {
                storage: Some("lots".into()),
                ..Default::default()
            },
            TenantQuota {
                storage: Some("-1Gi".into()),
                ..Default::default()
            },
            TenantQuota {
                objects: Some(-1),
                ..Default::default()
            },
        ] {
            let err = tenant_storage_limits(Some(&bad)).expect_err("invalid quota");
            assert!(err.starts_with("spec.quota."), "{err}");
        }
    }

    #[test]
    fn store_flags_name_sled_or_etcd_members() {
        assert_eq!(StoreSpec::parse("sled").ok(), Some(StoreSpec::Sled));
        assert_eq!(
            StoreSpec::parse("etcd://etcd-0.etcd:2379,https://10.0.0.2:2379/").ok(),
            Some(StoreSpec::Etcd(vec![
                "etcd-0.etcd:2379".into(),
                "10.0.0.2:2379".into()
            ]))
        );
        for bad in [
            "etcd://",
            "etcd://a:2379,",
            "etcd://a",
            "etcd://a:port",
            "etcd://:2379",
            "etcd://a/b:1",
            "postgres://a:1",
            "",
        ] {
            let err = StoreSpec::parse(bad).expect_err(bad);
            assert!(err.to_string().contains("--store"), "{err}");
        }
    }

    #[test]
    fn tls_files_need_etcd_and_pair_up() {
        let etcd = StoreSpec::Etcd(vec!["a:2379".into()]);
        let ca = EtcdTlsFiles {
            ca: Some("ca.crt".into()),
            ..Default::default()
        };
        assert!(ca.check(&etcd).is_ok());
        assert!(ca.check(&StoreSpec::Sled).is_err());
        let half = EtcdTlsFiles {
            cert: Some("c.crt".into()),
            ..Default::default()
        };
        assert!(half.check(&etcd).is_err());
        #[cfg(feature = "etcd")]
        {
            let config = ca.etcd_config(&["a:2379".into()]);
            assert_eq!(config.endpoints, ["https://a:2379"]);
            assert!(config.tls.is_some());
            let plain = EtcdTlsFiles::default().etcd_config(&["a:2379".into()]);
            assert_eq!(plain.endpoints, ["http://a:2379"]);
            assert!(plain.tls.is_none());
        }
    }

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn without_the_etcd_feature_an_etcd_store_says_how_to_get_one() {
        let args = StoreArgs {
            store: StoreSpec::Etcd(vec!["a:2379".into()]),
            etcd_ca_file: None,
            etcd_cert_file: None,
            etcd_key_file: None,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let err = args
            .open(dir.path(), 8, 100)
            .await
            .expect_err("no etcd backend in this build");
        assert!(err.to_string().contains("--features etcd"), "{err}");
    }
}
