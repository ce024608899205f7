//! Tenants on the host cluster: create, change, wait until `Ready`, read, delete and wait until
//! gone (with the host namespace), and the tenant's admin kubeconfig Secret, as the
//! `fabrik tenant` CLI reads it.

use std::time::{Duration, Instant};

use fabrik_api::tenant::{host_namespace, Tenant, TenantSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::Status;
use thiserror::Error;
use tokio::sync::watch;

/// The Secret in the tenant's host namespace holding its admin kubeconfig (key `kubeconfig`).
pub const KUBECONFIG_SECRET: &str = "fabrik-kubeconfig";

/// How often waits look again.
const POLL: Duration = Duration::from_millis(100);

/// Errors of host operations.
#[derive(Debug, Error)]
pub enum Error {
    /// The host API cannot be reached (connection refused, TLS, timeout).
    #[error("cannot reach the host cluster at {url}: {source}")]
    Unreachable {
        /// The host's URL.
        url: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The host API refused the request.
    #[error("the host refused the request: {}", .0.message)]
    Rejected(Box<Status>),
    /// A tenant of that name already exists.
    #[error("tenant {0:?} already exists (import it with `terraform import`)")]
    Exists(String),
    /// The tenant does not exist.
    #[error("tenant {0:?} not found")]
    NotFound(String),
    /// The tenant manager marked the tenant `Failed`.
    #[error("tenant {name:?} failed: {message}")]
    Failed {
        /// Tenant.
        name: String,
        /// The `Ready` condition's message.
        message: String,
    },
    /// The tenant did not get where it should in time.
    #[error("tenant {name:?} is not {goal} after {secs} s (phase {phase})")]
    Timeout {
        /// Tenant.
        name: String,
        /// What was waited for.
        goal: &'static str,
        /// Seconds waited.
        secs: u64,
        /// Its phase when the wait ended.
        phase: String,
    },
    /// Terraform asked the provider to stop.
    #[error("stopped by Terraform")]
    Stopped,
    /// The tenant is `Ready` but its kubeconfig Secret is missing or malformed.
    #[error("tenant {0:?} has no kubeconfig in Secret {KUBECONFIG_SECRET}")]
    NoKubeconfig(String),
}

/// `Result` with this module's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The host cluster.
#[derive(Clone)]
pub struct Host {
    client: kube::Client,
    url: String,
    stop: watch::Receiver<bool>,
}

/// The phase of a tenant (`Pending` until the manager says otherwise).
pub fn phase(t: &Tenant) -> String {
    t.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into())
}

impl Host {
    /// A host reached through `client` at `url`; waits end early once `stop` turns true.
    pub fn new(client: kube::Client, url: String, stop: watch::Receiver<bool>) -> Host {
        Host { client, url, stop }
    }

    /// The host's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn tenants(&self) -> Api<Tenant> {
        Api::all(self.client.clone())
    }

    fn classify(&self, e: kube::Error) -> Error {
        match e {
            kube::Error::Api(status) => Error::Rejected(status),
            other => Error::Unreachable {
                url: self.url.clone(),
                source: other,
            },
        }
    }

    /// Checks that the host answers (its `/version`).
    pub async fn probe(&self) -> Result<()> {
        self.client
            .apiserver_version()
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e))
    }

    /// The tenant, if it exists.
    pub async fn get(&self, name: &str) -> Result<Option<Tenant>> {
        self.tenants()
            .get_opt(name)
            .await
            .map_err(|e| self.classify(e))
    }

    /// Creates a tenant.
    pub async fn create(&self, name: &str, spec: TenantSpec) -> Result<Tenant> {
        let tenant = Tenant::new(name, spec);
        match self.tenants().create(&PostParams::default(), &tenant).await {
            Ok(t) => Ok(t),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Exists(name.into())),
            Err(e) => Err(self.classify(e)),
        }
    }

    /// Replaces a tenant's spec (read, change, write; again on a conflict).
    pub async fn update_spec(&self, name: &str, spec: &TenantSpec) -> Result<Tenant> {
        let api = self.tenants();
        for _ in 0..5 {
            let mut current = self.get(name).await?.ok_or(Error::NotFound(name.into()))?;
            current.spec = spec.clone();
            match api.replace(name, &PostParams::default(), &current).await {
                Ok(t) => return Ok(t),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    return Err(Error::NotFound(name.into()))
                }
                Err(e) => return Err(self.classify(e)),
            }
        }
        Err(Error::Rejected(Box::new(Status::failure(
            "the tenant kept changing while it was updated (409 conflicts)",
            "Conflict",
        ))))
    }

    async fn pause(&self) -> Result<()> {
        let mut stop = self.stop.clone();
        if *stop.borrow() {
            return Err(Error::Stopped);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => Ok(()),
            _ = stop.changed() => Err(Error::Stopped),
        }
    }

    /// Waits until the tenant is `Ready` for `generation` (its status describes that
    /// generation or a later one), or `Failed`.
    pub async fn wait_ready(
        &self,
        name: &str,
        generation: Option<i64>,
        timeout: Duration,
    ) -> Result<Tenant> {
        let started = Instant::now();
        loop {
            let t = self.get(name).await?.ok_or(Error::NotFound(name.into()))?;
            let status = t.status.clone().unwrap_or_default();
            let current = |observed: Option<i64>| match (generation, observed) {
                (Some(g), Some(o)) => o >= g,
                _ => true,
            };
            match status.phase.as_deref() {
                Some("Ready") if current(status.observed_generation) => return Ok(t),
                Some("Failed") => {
                    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
                    if current(ready.and_then(|c| c.observed_generation)) {
                        return Err(Error::Failed {
                            name: name.into(),
                            message: ready.map(|c| c.message.clone()).unwrap_or_default(),
                        });
                    }
                }
                _ => {}
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    name: name.into(),
                    goal: "Ready",
                    secs: timeout.as_secs(),
                    phase: phase(&t),
                });
            }
            self.pause().await?;
        }
    }

    /// Deletes a tenant and waits until it and its host namespace are gone. A tenant already
    /// gone is not an error.
    pub async fn delete(&self, name: &str, timeout: Duration) -> Result<()> {
        match self.tenants().delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(self.classify(e)),
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = host_namespace(name);
        let started = Instant::now();
        loop {
            let tenant = self.get(name).await?;
            let namespace = namespaces
                .get_opt(&ns)
                .await
                .map_err(|e| self.classify(e))?;
            if tenant.is_none() && namespace.is_none() {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    name: name.into(),
                    goal: "deleted",
                    secs: timeout.as_secs(),
                    phase: tenant
                        .as_ref()
                        .map(phase)
                        .unwrap_or_else(|| format!("gone, namespace {ns} still there")),
                });
            }
            self.pause().await?;
        }
    }

    /// The tenant's admin kubeconfig, if its Secret exists.
    pub async fn kubeconfig(&self, name: &str) -> Result<Option<String>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &host_namespace(name));
        let secret = secrets
            .get_opt(KUBECONFIG_SECRET)
            .await
            .map_err(|e| self.classify(e))?;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let data = secret
            .data
            .and_then(|d| d.get("kubeconfig").cloned())
            .ok_or_else(|| Error::NoKubeconfig(name.into()))?;
        String::from_utf8(data.0)
            .map(Some)
            .map_err(|_| Error::NoKubeconfig(name.into()))
    }
}
