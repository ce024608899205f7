//! Service accounts: every namespace that is not terminating has a `default` ServiceAccount.
//!
//! Woken by namespace changes and by changes to ServiceAccounts named `default` (a deleted one
//! is created again).

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;

use crate::shared::{shutdown, Context};

/// Name of the ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

/// Errors of the service account controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating the `default` ServiceAccount failed.
    #[error("failed to create service account: {why}", why = crate::shared::brief(.0))]
    Create(#[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the service account controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "serviceaccount-controller");
    Controller::new(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<ServiceAccount>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={DEFAULT}")),
        |sa| sa.namespace().map(|ns| ObjectRef::new(&ns)),
    )
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        reconcile,
        |ns, e, ctx: Arc<Context>| ctx.failed(ns.as_ref(), e),
        ctx,
    )
    .for_each(|_| async {})
    .await;
}

/// Whether a namespace should have its default ServiceAccount.
pub fn wants_default(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    if !wants_default(&ns) {
        return Ok(Action::await_change());
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ns.name_any());
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        // Exists already; a namespace that began terminating meanwhile refuses it (403).
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => {}
        Err(e) => return Err(Error::Create(e)),
    }
    ctx.succeeded(ns.as_ref());
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminating_namespaces_get_nothing() {
        let mut ns = Namespace::default();
        assert!(wants_default(&ns));
        ns.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some("Terminating".into()),
            ..Default::default()
        });
        assert!(!wants_default(&ns));
    }
}
