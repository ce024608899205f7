//! A Gateway API implementation for clusters that have none (`fabrik up`'s simulated host): the
//! GatewayClass [`CLASS_NAME`] of controller [`CONTROLLER_NAME`], whose Gateways and routes get
//! the status a real implementation writes — so that charts and operators waiting for
//! `Programmed` Gateways and `Accepted` routes finish, and route attachment (listeners,
//! hostnames, allowed namespaces, ReferenceGrants) can be tried out. Nothing routes traffic:
//! no proxy runs and nothing answers on a Gateway's addresses.
//!
//! ```text
//!   run
//!    ├── install   the CRDs (crds.rs) that are missing, wait until served; GatewayClass `fabrik`
//!    └── loop      watch classes, Gateways, routes, grants, Services, Namespaces (reflectors)
//!                   → a change (debounced) → World → status::plan → status writes
//! ```
//!
//! What it writes:
//! - **GatewayClass** with our `controllerName`: `Accepted=True`.
//! - **Gateway** of such a class: `Accepted=True` (reason `ListenersNotValid` when a listener is
//!   not HTTP/HTTPS or allows a kind it cannot serve), `Programmed=True`, and per listener its
//!   `supportedKinds` (HTTPRoute, GRPCRoute), `attachedRoutes` and `Accepted` / `Programmed` /
//!   `ResolvedRefs`. Addresses: the Gateway's `spec.addresses` of type `IPAddress` or `Hostname`
//!   are reported as they are; none are assigned otherwise. TLS certificate references are not
//!   checked.
//! - **HTTPRoute / GRPCRoute**: one `status.parents` entry per parentRef naming a Gateway of
//!   ours, with `Accepted` (attach.rs) and `ResolvedRefs` (refs.rs); entries of other
//!   controllers are kept as they are.
//!
//! Guarantees: the CRDs are only created, never changed (a platform may have installed a newer
//! release); the GatewayClass `fabrik` is created when missing at start, never changed. Every
//! pass recomputes every status from the watched state (the host is small), and writes only
//! those that change, `lastTransitionTime` aside, with the object's resourceVersion as
//! precondition — so our own writes wake one more pass that writes nothing. Each written change
//! is logged once; a failure is logged when its message changes and retried with backoff.

pub mod attach;
pub mod crds;
pub mod refs;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;
use tokio::time::{sleep, timeout_at, Instant};

use crate::shared::backoff_delay;
use attach::{RouteKind, GROUP};
pub use crds::crds;
use refs::Grant;
pub use status::CONTROLLER_NAME;
use status::{Object, Target, World, Write};

/// The GatewayClass created for this implementation.
pub const CLASS_NAME: &str = "fabrik";

/// How long a pass waits for more changes after the first (a burst becomes one pass).
const DEBOUNCE: Duration = Duration::from_millis(20);

/// The longest wait between two checks that the CRDs are served.
const SERVED_POLL_MAX: Duration = Duration::from_secs(2);

/// Errors of the simulated Gateway controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bundled CRD is not a CRD object (a bug of this crate: its tests parse them).
    #[error("bundled CRD is malformed: {0}")]
    BadCrd(#[source] serde_json::Error),
    /// Reading or creating a CRD failed.
    #[error("failed to install CRD {0}: {why}", why = crate::shared::brief(.1))]
    Install(String, #[source] kube::Error),
    /// A Gateway API resource is not served (yet).
    #[error("{0} not served yet: {why}", why = crate::shared::brief(.1))]
    NotServed(&'static str, #[source] kube::Error),
    /// Reading or creating the GatewayClass failed.
    #[error("failed to create GatewayClass {CLASS_NAME}: {why}", why = crate::shared::brief(.0))]
    Class(#[source] kube::Error),
    /// Writing a status failed.
    #[error("failed to write the status of {0}: {why}", why = crate::shared::brief(.1))]
    Status(String, #[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The Gateway API resources watched, with their served version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    GatewayClasses,
    Gateways,
    HttpRoutes,
    GrpcRoutes,
    ReferenceGrants,
}

impl Resource {
    const ALL: [Resource; 5] = [
        Resource::GatewayClasses,
        Resource::Gateways,
        Resource::HttpRoutes,
        Resource::GrpcRoutes,
        Resource::ReferenceGrants,
    ];

    fn api_resource(self) -> ApiResource {
        let (version, kind, plural) = match self {
            Resource::GatewayClasses => ("v1", "GatewayClass", "gatewayclasses"),
            Resource::Gateways => ("v1", "Gateway", "gateways"),
            Resource::HttpRoutes => ("v1", "HTTPRoute", "httproutes"),
            Resource::GrpcRoutes => ("v1", "GRPCRoute", "grpcroutes"),
            Resource::ReferenceGrants => ("v1beta1", "ReferenceGrant", "referencegrants"),
        };
        ApiResource {
            group: GROUP.into(),
            version: version.into(),
            api_version: format!("{GROUP}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Resource::GatewayClasses => "gatewayclasses",
            Resource::Gateways => "gateways",
            Resource::HttpRoutes => "httproutes",
            Resource::GrpcRoutes => "grpcroutes",
            Resource::ReferenceGrants => "referencegrants",
        }
    }

    fn of(target: Target) -> Resource {
        match target {
            Target::GatewayClass => Resource::GatewayClasses,
            Target::Gateway => Resource::Gateways,
            Target::Route(RouteKind::Http) => Resource::HttpRoutes,
            Target::Route(RouteKind::Grpc) => Resource::GrpcRoutes,
        }
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown: impl Future<Output = ()> + Send + 'static) {
    let work = async move {
        install(&client).await;
        watch_and_write(client).await;
    };
    futures::future::select(Box::pin(work), Box::pin(shutdown)).await;
}

/// Logs a failure when its message changes, and says how long to wait before the next try.
#[derive(Default)]
struct Failures {
    count: u32,
    last: String,
}

impl Failures {
    fn record(&mut self, e: &Error) -> Duration {
        self.count = self.count.saturating_add(1);
        let message = e.to_string();
        if message != self.last {
            tracing::warn!(error = %message, "simulated gateway");
            self.last = message;
        }
        backoff_delay(self.count)
    }

    fn clear(&mut self) {
        if self.count > 0 {
            tracing::info!("simulated gateway recovered");
        }
        *self = Failures::default();
    }
}

/// Installs what is missing (CRDs, then the GatewayClass) once they are served, retrying with
/// backoff until it succeeds.
async fn install(client: &kube::Client) {
    let mut failures = Failures::default();
    loop {
        match install_once(client).await {
            Ok(()) => {
                failures.clear();
                return;
            }
            Err(e) => {
                let mut delay = failures.record(&e);
                if matches!(e, Error::NotServed(..)) {
                    delay = delay.min(SERVED_POLL_MAX);
                }
                sleep(delay).await;
            }
        }
    }
}

async fn install_once(client: &kube::Client) -> Result<()> {
    let crd_resource = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crd_api: Api<DynamicObject> = Api::all_with(client.clone(), &crd_resource);
    for crd in crds() {
        let crd: DynamicObject = serde_json::from_value(crd).map_err(Error::BadCrd)?;
        let name = crd.name_any();
        let exists = crd_api
            .get_metadata_opt(&name)
            .await
            .map_err(|e| Error::Install(name.clone(), e))?
            .is_some();
        if exists {
            continue;
        }
        match crd_api.create(&PostParams::default(), &crd).await {
            Ok(_) => tracing::info!(crd = %name, "installed the Gateway API CRD"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::Install(name, e)),
        }
    }
    for r in Resource::ALL {
        Api::<DynamicObject>::all_with(client.clone(), &r.api_resource())
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| Error::NotServed(r.plural(), e))?;
    }
    let classes: Api<DynamicObject> =
        Api::all_with(client.clone(), &Resource::GatewayClasses.api_resource());
    if classes
        .get_metadata_opt(CLASS_NAME)
        .await
        .map_err(Error::Class)?
        .is_none()
    {
        let class: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "GatewayClass",
            "metadata": {"name": CLASS_NAME},
            "spec": {
                "controllerName": CONTROLLER_NAME,
                "description": "Fabrik's simulated Gateway: status only",
            },
        }))
        .map_err(Error::BadCrd)?;
        match classes.create(&PostParams::default(), &class).await {
            Ok(_) => tracing::info!(class = CLASS_NAME, "created the GatewayClass"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::Class(e)),
        }
    }
    Ok(())
}

/// The caches a pass reads.
struct Stores {
    gateway_api: Vec<(Resource, Store<DynamicObject>)>,
    services: Store<PartialObjectMeta<Service>>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
}

impl Stores {
    /// Whether every cache has been filled once.
    fn ready(&self) -> bool {
        fn ready<K>(s: &Store<K>) -> bool
        where
            K: kube::runtime::reflector::Lookup + Clone + 'static,
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            matches!(s.wait_until_ready().now_or_never(), Some(Ok(())))
        }
        self.gateway_api.iter().all(|(_, s)| ready(s))
            && ready(&self.services)
            && ready(&self.namespaces)
    }

    /// The snapshot [`status::plan`] reads.
    fn world(&self) -> World {
        let mut world = World::default();
        for (resource, store) in &self.gateway_api {
            for o in store.state() {
                match resource {
                    Resource::GatewayClasses => world.classes.push(object(&o)),
                    Resource::Gateways => world.gateways.push(object(&o)),
                    Resource::HttpRoutes => world.routes.push((RouteKind::Http, object(&o))),
                    Resource::GrpcRoutes => world.routes.push((RouteKind::Grpc, object(&o))),
                    Resource::ReferenceGrants => {
                        if let Ok(g) = serde_json::from_value::<Grant>(o.data["spec"].clone()) {
                            world.grants.push(Grant {
                                namespace: o.namespace().unwrap_or_default(),
                                ..g
                            });
                        }
                    }
                }
            }
        }
        world.services = self
            .services
            .state()
            .iter()
            .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
            .collect::<BTreeSet<_>>();
        world.namespaces = self
            .namespaces
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect::<BTreeMap<_, _>>();
        world
    }
}

fn object(o: &DynamicObject) -> Object {
    Object {
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        generation: o.metadata.generation.unwrap_or(0),
        resource_version: o.resource_version(),
        spec: o.data["spec"].clone(),
        status: o.data["status"].clone(),
    }
}

/// A cache of `api`, and a stream that fills it and yields once per change.
fn cache<K>(api: Api<K>, writer: Writer<K>) -> BoxStream<'static, ()>
where
    K: kube::runtime::reflector::Lookup
        + kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    <K as kube::runtime::reflector::Lookup>::DynamicType:
        Eq + std::hash::Hash + Clone + Send + Sync,
{
    reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .map(|event| {
        if let Err(e) = event {
            tracing::debug!(error = %e, "simulated gateway: watch failed");
        }
    })
    .boxed()
}

/// Recomputes and writes the statuses on every change, until the task is dropped.
async fn watch_and_write(client: kube::Client) {
    let mut streams = Vec::new();
    let mut gateway_api = Vec::new();
    for r in Resource::ALL {
        let ar = r.api_resource();
        let writer = Writer::new(ar.clone());
        gateway_api.push((r, writer.as_reader()));
        streams.push(cache(
            Api::<DynamicObject>::all_with(client.clone(), &ar),
            writer,
        ));
    }
    let services = Writer::default();
    let namespaces = Writer::default();
    let stores = Stores {
        gateway_api,
        services: services.as_reader(),
        namespaces: namespaces.as_reader(),
    };
    streams.push(cache(Api::all(client.clone()), services));
    streams.push(cache(Api::all(client.clone()), namespaces));
    let mut changes = stream::select_all(streams);

    let mut failures = Failures::default();
    let mut retry_at: Option<Instant> = None;
    loop {
        let woke = match retry_at {
            Some(at) => tokio::select! {
                c = changes.next() => c.is_some(),
                () = tokio::time::sleep_until(at) => true,
            },
            None => changes.next().await.is_some(),
        };
        if !woke {
            return;
        }
        let until = Instant::now() + DEBOUNCE;
        while let Ok(Some(())) = timeout_at(until, changes.next()).await {}
        if !stores.ready() {
            continue;
        }
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let writes = status::plan(&stores.world(), &now);
        match write_all(&client, writes).await {
            Ok(()) => {
                failures.clear();
                retry_at = None;
            }
            Err(e) => retry_at = Some(Instant::now() + failures.record(&e)),
        }
    }
}

/// Writes the statuses; returns the first failure after trying them all. A conflict or a
/// vanished object is no failure: its newer state is on its way through the watch.
async fn write_all(client: &kube::Client, writes: Vec<Write>) -> Result<()> {
    let mut first_error = None;
    for w in writes {
        let ar = Resource::of(w.target).api_resource();
        let api: Api<DynamicObject> = if w.namespace.is_empty() {
            Api::all_with(client.clone(), &ar)
        } else {
            Api::namespaced_with(client.clone(), &w.namespace, &ar)
        };
        let patch = json!({
            "metadata": {"resourceVersion": w.resource_version},
            "status": w.status,
        });
        let what = format!("{} {}/{}", w.target.kind(), w.namespace, w.name);
        match api
            .patch_status(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(object = %what, status = %w.summary, "simulated gateway"),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                tracing::debug!(object = %what, code = s.code, "status write skipped");
            }
            Err(e) => {
                first_error.get_or_insert(Error::Status(what, e));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}
