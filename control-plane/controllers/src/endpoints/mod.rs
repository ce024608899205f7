//! Endpoints and EndpointSlices for Services with a selector: ready pods as addresses, the
//! rest as `notReadyAddresses` (slices: `ready` / `serving` / `terminating` conditions), named
//! target ports resolved against each pod's container ports. Slices carry
//! `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
//! endpointslice-controller.k8s.io` and are named `<service>-<hash of their ports>`; stale ones
//! are deleted. Both are owned by the Service (garbage collection removes them with it).
//!
//! Services without a selector are left alone (their endpoints are the user's). Woken by
//! changes to Services and to pods (every Service of the pod's namespace is re-checked, so a
//! pod whose labels stopped matching is removed too).

pub mod plan;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;

use crate::shared::{owner_ref, shutdown, Context};

/// Errors of the endpoints controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Service has no namespace (never for a served one).
    #[error("service has no namespace")]
    NoNamespace,
    /// Listing pods or slices failed.
    #[error("failed to list {0}: {why}", why = crate::shared::brief(.1))]
    List(&'static str, #[source] kube::Error),
    /// Reading the Endpoints failed.
    #[error("failed to read endpoints: {why}", why = crate::shared::brief(.0))]
    Get(#[source] kube::Error),
    /// Writing Endpoints or a slice failed.
    #[error("failed to write {0} {1}: {why}", why = crate::shared::brief(.2))]
    Write(&'static str, String, #[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the endpoints controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let ctx = Context::new(client.clone(), "endpointslice-controller");
    let controller = Controller::new(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    controller
        .watches(
            Api::<Pod>::all(client),
            watcher::Config::default(),
            move |pod| {
                let ns = pod.namespace();
                store
                    .state()
                    .iter()
                    .filter(|s| s.namespace() == ns && plan::managed(s))
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |s, e, ctx: Arc<Context>| ctx.failed(s.as_ref(), e),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    if !plan::managed(&svc) || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = svc.namespace().ok_or(Error::NoNamespace)?;
    let name = svc.name_any();
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::List("pods", e))?
        .items;
    let groups = plan::members(&svc, &pods);
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let owner = {
        let mut o = owner_ref(svc.as_ref());
        o.block_owner_deletion = None;
        o
    };

    // Endpoints.
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        "endpoints.kubernetes.io/managed-by".into(),
        "endpoint-controller".into(),
    );
    let want = Endpoints {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        subsets: plan::subsets(&groups, publish),
    };
    let eps: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &ns);
    match eps.get_opt(&name).await.map_err(Error::Get)? {
        None => match eps.create(&PostParams::default(), &want).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::Write("endpoints", name, e)),
        },
        Some(have) => {
            if have.subsets != want.subsets || have.metadata.labels != want.metadata.labels {
                let mut next = want.clone();
                next.metadata.resource_version = have.metadata.resource_version.clone();
                eps.replace(&name, &PostParams::default(), &next)
                    .await
                    .map_err(|e| Error::Write("endpoints", name.clone(), e))?;
            }
        }
    }

    // EndpointSlices.
    let slices_api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = slices_api
        .list(&ListParams::default().labels(&format!(
            "{}={name},{}={}",
            plan::SERVICE_NAME_LABEL,
            plan::MANAGED_BY_LABEL,
            plan::MANAGED_BY
        )))
        .await
        .map_err(|e| Error::List("endpointslices", e))?
        .items;
    let wanted = plan::slices(&svc, &groups, owner);
    for slice in &wanted {
        let sname = slice.name_any();
        match existing.iter().find(|e| e.name_any() == sname) {
            None => match slices_api.create(&PostParams::default(), slice).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(Error::Write("endpointslice", sname, e)),
            },
            Some(have) => {
                if have.endpoints != slice.endpoints
                    || have.ports != slice.ports
                    || have.metadata.labels != slice.metadata.labels
                {
                    let mut next = slice.clone();
                    next.metadata.resource_version = have.metadata.resource_version.clone();
                    slices_api
                        .replace(&sname, &PostParams::default(), &next)
                        .await
                        .map_err(|e| Error::Write("endpointslice", sname.clone(), e))?;
                }
            }
        }
    }
    for stale in existing
        .iter()
        .filter(|e| !wanted.iter().any(|w| w.name_any() == e.name_any()))
    {
        match slices_api
            .delete(&stale.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Write("endpointslice", stale.name_any(), e)),
        }
    }
    ctx.succeeded(svc.as_ref());
    Ok(Action::await_change())
}
