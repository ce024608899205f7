//! Admission: one chain, run on every create and update after the kind's defaulting and before
//! anything is stored — first every plugin's **mutating** phase, then the kind's validation,
//! then every plugin's **validating** phase. A plugin refuses with an `ApiError` (`Forbidden`
//! naming the reason, `Invalid`), may add `Warning` headers, and may hold a guard until the
//! write is committed (the quota plugin serialises the writes it counts this way, so that
//! concurrent creates never over-admit).
//!
//! Plugins, one module each, in upstream's order: [`namespace_lifecycle`], [`service_account`],
//! [`priority`], [`limit_ranger`], [`pod_security`], [`policy`] (ValidatingAdmissionPolicy with
//! CEL), the
//! admission webhooks ([`crate::webhook`]), [`resource_quota`] last, and RBAC's escalation
//! check ([`crate::rbac::escalation`]). The tenant manager adds the syncer's pod policy and the
//! tenant quota. Where a plugin goes is its [`Order`]: built-in plugins first (in the order
//! added), then the webhooks, then the quotas — so webhooks see what the built-in plugins
//! mutated, and quotas count only what everything else admitted, never holding their guard
//! while a webhook is called.
//!
//! Deletes and connections to pods are admitted too ([`Chain::validate_delete`],
//! [`Chain::validate_connect`]), by the plugins that look at them.

pub mod cluster_quota;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod objects;
pub mod pod_security;
pub mod policy;
pub mod priority;

pub mod resource_quota;
pub mod rules;
pub mod service_account;

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;

use crate::auth::UserInfo;
use crate::error::ApiError;
use crate::resources::ResourceDef;

pub use objects::Objects;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (PUT, PATCH, apply, subresource writes that change the object).
    Update,
    /// A delete (only [`Admission::validate_delete`] sees it).
    Delete,
    /// A connection to a pod (`exec`, `attach`, `portforward`; only
    /// [`Admission::validate_connect`] sees it).
    Connect,
}

impl Operation {
    /// Upstream's name (`CREATE`, `UPDATE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What is being admitted.
pub struct Request<'a> {
    /// The resource.
    pub def: &'a ResourceDef,
    /// Create or update.
    pub op: Operation,
    /// The subresource written (`status`, ...), if any.
    pub subresource: Option<&'a str>,
    /// The namespace (namespaced kinds).
    pub namespace: Option<&'a str>,
    /// Who asks; None for the server's own writes (bootstrap, registry-level controllers).
    pub user: Option<&'a UserInfo>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The cluster's objects, for plugins that read others.
    pub objects: &'a dyn Objects,
    /// `Warning` headers plugins add in their mutating phase (the validating phase returns
    /// its own in its [`Verdict`]).
    pub warnings: std::sync::Mutex<Vec<String>>,
}

impl Request<'_> {
    /// Whether the object is a core/v1 `kind` (by plural).
    pub fn is_core(&self, plural: &str) -> bool {
        self.def.group.is_empty() && self.def.plural == plural
    }

    /// Adds a `Warning` for the client.
    pub fn warn(&self, text: String) {
        if let Ok(mut w) = self.warnings.lock() {
            w.push(text);
        }
    }

    fn take_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }
}

/// Where a plugin runs in the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Order {
    /// The built-in plugins, in the order they are added.
    Builtin,
    /// The admission webhooks: after every built-in plugin's mutation.
    Webhooks,
    /// Quotas: last, counting only what every other plugin admitted.
    Quota,
}

/// A validating plugin's answer.
#[derive(Default)]
pub struct Verdict {
    /// `Warning` headers for the client.
    pub warnings: Vec<String>,
    /// Kept until the write is committed (or abandoned).
    pub hold: Option<Box<dyn Any + Send>>,
}

impl Verdict {
    /// Admitted, nothing to add.
    pub fn ok() -> Verdict {
        Verdict::default()
    }
}

/// Everything the chain produced for one write: warnings, and the guards to keep.
#[derive(Default)]
pub struct Admitted {
    /// Warnings for the client.
    pub warnings: Vec<String>,
    _holds: Vec<Box<dyn Any + Send>>,
}

/// One admission plugin.
#[async_trait::async_trait]
pub trait Admission: Send + Sync {
    /// The plugin's name (upstream's where there is one).
    fn name(&self) -> &'static str;

    /// Where the plugin runs.
    fn order(&self) -> Order {
        Order::Builtin
    }

    /// Mutating phase: may change `obj`.
    async fn mutate(
        &self,
        _req: &Request<'_>,
        _obj: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Validating phase: admits `obj` (with the stored `old` on update), or refuses it.
    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError>;

    /// Admits a connection to object `name` with `options` (`PodExecOptions`, ...); most
    /// plugins admit every connection.
    async fn validate_connect(
        &self,
        _req: &Request<'_>,
        _name: &str,
        _options: &Value,
    ) -> Result<Verdict, ApiError> {
        Ok(Verdict::ok())
    }

    /// Admits the delete of `old` (the stored object); most plugins admit every delete.
    async fn validate_delete(&self, _req: &Request<'_>, _old: &Value) -> Result<Verdict, ApiError> {
        Ok(Verdict::ok())
    }
}

/// The plugins of a cluster, in order. Assembled before the registry that runs it and never
/// changed afterwards: no write can run with some plugins and not others.
#[derive(Default)]
pub struct Chain {
    plugins: Vec<Arc<dyn Admission>>,
}

impl Chain {
    /// The default chain of every cluster.
    pub fn standard() -> Chain {
        Chain::default().with([
            Arc::new(namespace_lifecycle::NamespaceLifecycle) as Arc<dyn Admission>,
            Arc::new(service_account::ServiceAccount),
            Arc::new(priority::Priority),
            Arc::new(limit_ranger::LimitRanger::namespaced()),
            Arc::new(pod_security::PodSecurity),
            Arc::new(policy::ValidatingAdmissionPolicy),
            Arc::new(resource_quota::ResourceQuota::default()),
        ])
    }

    /// The chain with `plugins` added, each after every plugin of its [`Order`] and the orders
    /// before.
    pub fn with(mut self, plugins: impl IntoIterator<Item = Arc<dyn Admission>>) -> Chain {
        for plugin in plugins {
            let at = self
                .plugins
                .partition_point(|q| q.order() <= plugin.order());
            self.plugins.insert(at, plugin);
        }
        self
    }

    /// The plugins' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// The mutating phase of every plugin.
    pub async fn mutate(
        &self,
        req: &Request<'_>,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for p in &self.plugins {
            p.mutate(req, obj, old).await?;
        }
        Ok(())
    }

    /// The validating phase of every plugin.
    pub async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Admitted, ApiError> {
        let mut out = Admitted {
            warnings: req.take_warnings(),
            ..Admitted::default()
        };
        for p in &self.plugins {
            let v = p.validate(req, obj, old).await?;
            out.warnings.extend(v.warnings);
            if let Some(h) = v.hold {
                out._holds.push(h);
            }
        }
        Ok(out)
    }

    /// Admits a connection to `name` with `options` by every plugin.
    pub async fn validate_connect(
        &self,
        req: &Request<'_>,
        name: &str,
        options: &Value,
    ) -> Result<Admitted, ApiError> {
        let mut out = Admitted::default();
        for p in &self.plugins {
            let v = p.validate_connect(req, name, options).await?;
            out.warnings.extend(v.warnings);
        }
        Ok(out)
    }

    /// Admits the delete of `old` by every plugin.
    pub async fn validate_delete(
        &self,
        req: &Request<'_>,
        old: &Value,
    ) -> Result<Admitted, ApiError> {
        let mut out = Admitted::default();
        for p in &self.plugins {
            let v = p.validate_delete(req, old).await?;
            out.warnings.extend(v.warnings);
            if let Some(h) = v.hold {
                out._holds.push(h);
            }
        }
        Ok(out)
    }
}
