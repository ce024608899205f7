//! Admission webhooks (`admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration), in the host cluster and in every tenant:
//!
//! - [`config`]: the two kinds' defaults and validation;
//! - [`plugin`]: the admission plugin that matches and calls them;
//! - [`conversion`]: CRD conversion webhooks (the registry converts through them);
//! - [`call`]: the HTTPS client (caBundle, timeout, no redirects, bounded calls in flight);
//! - [`backends`]: where a `service` reference is served (the cluster decides);
//! - [`targets`]: which addresses a tenant's webhooks may reach.

pub mod backends;
pub mod call;
pub mod config;
pub mod conversion;
pub mod plugin;
pub mod targets;

use std::sync::Arc;

pub use backends::{Backend, Backends, ClusterIp, LocalPorts, LOCAL_PORT_ANNOTATION};
pub use call::Caller;
pub use plugin::Webhooks;
pub use targets::{Allowed, Targets};

/// How a cluster calls its webhooks: where Services are served and which addresses its
/// webhooks may reach.
#[derive(Clone)]
pub struct WebhookSettings {
    /// Where `service` references are served.
    pub backends: Arc<dyn Backends>,
    /// The address rules.
    pub targets: Arc<Targets>,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            backends: Arc::new(ClusterIp),
            targets: Arc::new(Targets::open()),
        }
    }
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}
