//! Garbage collection by ownerReferences, as kube-controller-manager's collector does it.
//!
//! - An object whose owners are all gone (or replaced: another uid) is deleted in the
//!   background; references to gone owners are removed when a live owner remains.
//! - An owner deleted with `propagationPolicy=Foreground` (finalizer `foregroundDeletion`):
//!   its dependents are deleted (in the foreground if they have dependents of their own); its
//!   finalizer is removed once no dependent with `blockOwnerDeletion: true` is left.
//! - An owner deleted with `Orphan` (finalizer `orphan`): its reference is removed from every
//!   dependent, then the finalizer.
//!
//! The collector keeps a [`graph::Graph`] from metadata-only watches over every resource found
//! by discovery (list + watch + delete verbs; Events excluded). Changes enqueue the uids that
//! need a look; a worker pool processes them, a failed item is retried with backoff and never
//! hot-loops. Idle, it does nothing. Resources served later (a CRD created or given a new
//! version after the collector started) are found by discovering again whenever a
//! CustomResourceDefinition changes, and watched from then on.

pub mod graph;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiCapabilities, ApiResource, Discovery, Scope};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::shared::{backoff_delay, shutdown, Shutdown};
use graph::{Graph, Node, OwnerLink, OwnerState, Propagation, Verdict};

/// Errors of the garbage collector.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Discovery of the served resources failed.
    #[error("failed to discover resources: {why}", why = crate::shared::brief(.0))]
    Discovery(#[source] kube::Error),
    /// An ownerReference names a kind the server does not serve.
    #[error("owner kind {0} is not served")]
    UnknownKind(String),
    /// A read or write of an object failed.
    #[error("failed to {0}: {why}", why = crate::shared::brief(.1))]
    Api(&'static str, #[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How many items are processed at once.
const WORKERS: usize = 16;

/// Runs the garbage collector until `shutdown` resolves.
pub async fn run(client: kube::Client, shutdown_signal: impl Future<Output = ()> + Send + 'static) {
    let stop = shutdown(shutdown_signal);
    let resources = tokio::select! {
        r = discover(&client) => r,
        _ = stop.clone() => return,
    };
    let collector = Arc::new(Collector::new(client, resources));
    let (tx, rx) = mpsc::unbounded_channel();
    let queue = Queue {
        tx,
        pending: Mutex::new(HashSet::new()),
        failures: Mutex::new(HashMap::new()),
    };
    let collector_q = Arc::new((collector, queue));
    futures::join!(
        watch_all(collector_q.clone(), stop.clone()),
        work(collector_q, rx, stop)
    );
}

/// The resources served now that the collector watches.
async fn discover_once(client: &kube::Client) -> Result<Vec<(ApiResource, ApiCapabilities)>> {
    let d = Discovery::new(client.clone())
        .run()
        .await
        .map_err(Error::Discovery)?;
    Ok(d.groups()
        .flat_map(|g| g.recommended_resources())
        .filter(|(ar, caps)| {
            caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::WATCH)
                && caps.supports_operation(verbs::DELETE)
                && ar.plural != "events"
        })
        .collect())
}

/// Discovers the resources to watch, retrying with backoff.
async fn discover(client: &kube::Client) -> Vec<(ApiResource, ApiCapabilities)> {
    let mut failures = 0;
    loop {
        match discover_once(client).await {
            Ok(found) => return found,
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, "garbage collector waits for discovery");
                tokio::time::sleep(backoff_delay(failures)).await;
            }
        }
    }
}

/// The resources watched, append-only (an index names one for good).
#[derive(Default)]
struct Resources {
    list: Vec<(ApiResource, ApiCapabilities)>,
    /// (group, kind) → index in `list`.
    by_kind: HashMap<(String, String), usize>,
}

impl Resources {
    /// Adds those of `found` not watched yet; returns them with their indexes.
    fn add(&mut self, found: Vec<(ApiResource, ApiCapabilities)>) -> Vec<(usize, ApiResource)> {
        let mut added = Vec::new();
        for (ar, caps) in found {
            let key = (ar.group.clone(), ar.kind.clone());
            if self.by_kind.contains_key(&key) {
                continue;
            }
            let i = self.list.len();
            self.by_kind.insert(key, i);
            added.push((i, ar.clone()));
            self.list.push((ar, caps));
        }
        added
    }
}

struct Collector {
    client: kube::Client,
    resources: std::sync::RwLock<Resources>,
    graph: Mutex<Graph>,
}

struct Queue {
    tx: mpsc::UnboundedSender<String>,
    pending: Mutex<HashSet<String>>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Queue {
    fn add(&self, uids: impl IntoIterator<Item = String>) {
        let Ok(mut pending) = self.pending.lock() else {
            return;
        };
        for uid in uids {
            if pending.insert(uid.clone()) {
                let _ = self.tx.send(uid);
            }
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl Collector {
    fn new(client: kube::Client, resources: Vec<(ApiResource, ApiCapabilities)>) -> Collector {
        let mut watched = Resources::default();
        watched.add(resources);
        Collector {
            client,
            resources: std::sync::RwLock::new(watched),
            graph: Mutex::new(Graph::default()),
        }
    }

    /// Starts watching what `found` has that is not watched yet; returns it.
    fn add_resources(
        &self,
        found: Vec<(ApiResource, ApiCapabilities)>,
    ) -> Vec<(usize, ApiResource)> {
        self.resources
            .write()
            .map(|mut r| r.add(found))
            .unwrap_or_default()
    }

    fn index_of(&self, group: &str, kind: &str) -> Option<usize> {
        self.resources
            .read()
            .ok()?
            .by_kind
            .get(&(group.to_string(), kind.to_string()))
            .copied()
    }

    fn api(&self, resource: usize, namespace: Option<&str>) -> Option<Api<Meta>> {
        let (ar, scope) = {
            let r = self.resources.read().ok()?;
            let (ar, caps) = r.list.get(resource)?;
            (ar.clone(), caps.scope.clone())
        };
        Some(match (scope, namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Scope::Namespaced, None) => return None,
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &ar),
        })
    }

    fn with_graph<T>(&self, f: impl FnOnce(&mut Graph) -> T) -> Option<T> {
        self.graph.lock().ok().map(|mut g| f(&mut g))
    }

    /// The state of one owner of `dep`: from the graph, or confirmed with a live read.
    async fn owner_state(&self, dep: &Node, owner: &OwnerLink) -> Result<OwnerState> {
        if let Some(state) = self
            .with_graph(|g| {
                g.get(&owner.uid).map(|o| {
                    if o.waiting_for_dependents() {
                        OwnerState::Waiting
                    } else {
                        OwnerState::Solid
                    }
                })
            })
            .flatten()
        {
            return Ok(state);
        }
        let idx = self
            .index_of(group_of(&owner.api_version), &owner.kind)
            .ok_or_else(|| Error::UnknownKind(format!("{}/{}", owner.api_version, owner.kind)))?;
        let Some(api) = self.api(idx, dep.namespace.as_deref()) else {
            // A namespaced owner of a cluster-scoped object cannot exist.
            return Ok(OwnerState::Dangling);
        };
        match api.get_opt(&owner.name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(owner.uid.as_str()) => {
                let deleting = o.metadata.deletion_timestamp.is_some();
                let fg = o
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == graph::FOREGROUND);
                Ok(if deleting && fg {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                })
            }
            Ok(_) => Ok(OwnerState::Dangling),
            Err(e) => Err(Error::Api("read owner", e)),
        }
    }

    /// Looks at one object: collects it if its owners are gone, and runs its own foreground or
    /// orphan deletion. Returns uids to look at next.
    async fn process(&self, uid: &str) -> Result<Vec<String>> {
        let Some(node) = self.with_graph(|g| g.get(uid).cloned()).flatten() else {
            return Ok(vec![]);
        };
        let mut next = Vec::new();
        if node.waiting_for_dependents() {
            next.extend(self.foreground(&node).await?);
        } else if node.orphaning() {
            self.orphan(&node).await?;
        }
        if !node.deleting && !node.owners.is_empty() {
            self.collect(&node).await?;
        }
        Ok(next)
    }

    async fn collect(&self, node: &Node) -> Result<()> {
        let mut owners = Vec::with_capacity(node.owners.len());
        for o in &node.owners {
            owners.push((o.uid.clone(), self.owner_state(node, o).await?));
        }
        let has_dependents = self
            .with_graph(|g| !g.dependents(&node.uid).is_empty())
            .unwrap_or(false);
        match graph::verdict(&owners, has_dependents) {
            Verdict::Keep => Ok(()),
            Verdict::RemoveRefs(uids) => self.remove_refs(node, &uids).await,
            Verdict::Delete(p) => self.delete(node, p).await,
        }
    }

    async fn delete(&self, node: &Node, propagation: Propagation) -> Result<()> {
        let Some(api) = self.api(node.resource, node.namespace.as_deref()) else {
            return Ok(());
        };
        let dp = DeleteParams {
            propagation_policy: Some(match propagation {
                Propagation::Background => kube::api::PropagationPolicy::Background,
                Propagation::Foreground => kube::api::PropagationPolicy::Foreground,
            }),
            preconditions: Some(Preconditions {
                uid: Some(node.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        tracing::debug!(name = %node.name, ?propagation, "collecting dependent");
        match api.delete(&node.name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(Error::Api("delete dependent", e)),
        }
    }

    /// Removes the references to `owner_uids` from the object.
    async fn remove_refs(&self, node: &Node, owner_uids: &[String]) -> Result<()> {
        let Some(api) = self.api(node.resource, node.namespace.as_deref()) else {
            return Ok(());
        };
        let current = match api.get_opt(&node.name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(node.uid.as_str()) => o,
            Ok(_) => return Ok(()),
            Err(e) => return Err(Error::Api("read dependent", e)),
        };
        let refs = current.metadata.owner_references.unwrap_or_default();
        let kept: Vec<_> = refs
            .iter()
            .filter(|r| !owner_uids.contains(&r.uid))
            .cloned()
            .collect();
        if kept.len() == refs.len() {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "resourceVersion": current.metadata.resource_version,
            "ownerReferences": if kept.is_empty() { json!(null) } else { json!(kept) },
        }});
        match api
            .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Error::Api("remove owner reference", e)),
        }
    }

    /// Removes `finalizer` from the object.
    async fn remove_finalizer(&self, node: &Node, finalizer: &str) -> Result<()> {
        let Some(api) = self.api(node.resource, node.namespace.as_deref()) else {
            return Ok(());
        };
        let current = match api.get_opt(&node.name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(node.uid.as_str()) => o,
            Ok(_) => return Ok(()),
            Err(e) => return Err(Error::Api("read owner", e)),
        };
        let finalizers = current.metadata.finalizers.unwrap_or_default();
        if !finalizers.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
        let patch = json!({"metadata": {
            "resourceVersion": current.metadata.resource_version,
            "finalizers": kept,
        }});
        match api
            .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Error::Api("remove finalizer", e)),
        }
    }

    /// Foreground deletion of `owner`: wake its dependents (they see a waiting owner and are
    /// deleted), and drop the finalizer once nothing blocks.
    async fn foreground(&self, owner: &Node) -> Result<Vec<String>> {
        let (done, wake) = self
            .with_graph(|g| {
                let deps = g.dependents(&owner.uid);
                let wake: Vec<String> = deps
                    .iter()
                    .filter(|d| !d.deleting)
                    .map(|d| d.uid.clone())
                    .collect();
                (graph::foreground_done(&owner.uid, &deps), wake)
            })
            .unwrap_or((false, vec![]));
        if done {
            self.remove_finalizer(owner, graph::FOREGROUND).await?;
        }
        Ok(wake)
    }

    /// Orphan deletion of `owner`: drop its reference from every dependent, then the finalizer.
    async fn orphan(&self, owner: &Node) -> Result<()> {
        let deps: Vec<Node> = self
            .with_graph(|g| g.dependents(&owner.uid).into_iter().cloned().collect())
            .unwrap_or_default();
        for d in &deps {
            self.remove_refs(d, std::slice::from_ref(&owner.uid))
                .await?;
        }
        self.remove_finalizer(owner, graph::ORPHAN).await
    }
}

fn node_of(resource: usize, obj: &Meta) -> Option<Node> {
    let m = &obj.metadata;
    Some(Node {
        resource,
        namespace: m.namespace.clone(),
        name: m.name.clone()?,
        uid: m.uid.clone()?,
        owners: m
            .owner_references
            .iter()
            .flatten()
            .map(|r| OwnerLink {
                uid: r.uid.clone(),
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                block: r.block_owner_deletion == Some(true),
            })
            .collect(),
        deleting: m.deletion_timestamp.is_some(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
    })
}

type Shared = Arc<(Arc<Collector>, Queue)>;

/// An object's metadata, of any resource.
type Meta = PartialObjectMeta<DynamicObject>;

/// Feeds every resource's metadata watch into the graph and the queue.
/// The metadata events of one watched resource, tagged with its index.
fn watch_resource(
    client: &kube::Client,
    i: usize,
    ar: &ApiResource,
) -> BoxStream<'static, (usize, watcher::Event<Meta>)> {
    let api: Api<Meta> = Api::all_with(client.clone(), ar);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |ev| async move {
            match ev {
                Ok(ev) => Some((i, ev)),
                Err(e) => {
                    tracing::debug!(error = %e, "garbage collector watch error");
                    None
                }
            }
        })
        .boxed()
}

async fn watch_all(state: Shared, stop: Shutdown) {
    let (collector, queue) = (&state.0, &state.1);
    let initial: Vec<(usize, ApiResource)> = collector
        .resources
        .read()
        .map(|r| {
            r.list
                .iter()
                .enumerate()
                .map(|(i, (ar, _))| (i, ar.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut events = stream::select_all(
        initial
            .iter()
            .map(|(i, ar)| watch_resource(&collector.client, *i, ar)),
    );
    // A CRD created, changed (a version added, established) or deleted may change what is
    // served: discover again and watch what is new.
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let mut crd_changes = watcher(
        Api::<Meta>::all_with(collector.client.clone(), &crds),
        watcher::Config::default(),
    )
    .default_backoff()
    .filter_map(|ev| async move {
        match ev {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                Some(())
            }
            _ => None,
        }
    })
    .boxed();
    let mut relisting: HashMap<usize, HashSet<String>> = HashMap::new();
    let mut stop = std::pin::pin!(stop);
    // A failed discovery is tried again with backoff (and logged when its error changes), so a
    // CRD created while discovery failed is not left unwatched until the next CRD change.
    let mut failures: u32 = 0;
    let mut last_error = String::new();
    let retry = tokio::time::sleep(Duration::MAX);
    let mut retry = std::pin::pin!(retry);
    let mut retrying = false;
    loop {
        let rediscover = tokio::select! {
            _ = &mut stop => return,
            Some(()) = crd_changes.next() => true,
            _ = &mut retry, if retrying => true,
            next = events.next() => match next {
                Some(item) => {
                    handle_event(collector, queue, &mut relisting, item);
                    false
                }
                None => return,
            },
        };
        if !rediscover {
            continue;
        }
        retrying = false;
        match discover_once(&collector.client).await {
            Ok(found) => {
                failures = 0;
                last_error.clear();
                for (i, ar) in collector.add_resources(found) {
                    tracing::debug!(resource = %ar.plural, group = %ar.group,
                        "garbage collector watches a resource served since it started");
                    events.push(watch_resource(&collector.client, i, &ar));
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let delay = backoff_delay(failures);
                let message = e.to_string();
                if message != last_error {
                    tracing::warn!(error = %message, retry_in = ?delay,
                        "garbage collector cannot discover resources; retrying");
                    last_error = message;
                }
                retry.as_mut().reset(tokio::time::Instant::now() + delay);
                retrying = true;
            }
        }
    }
}

/// Applies one watch event of resource `i` to the graph and queues what needs a look.
fn handle_event(
    collector: &Collector,
    queue: &Queue,
    relisting: &mut HashMap<usize, HashSet<String>>,
    (i, ev): (usize, watcher::Event<Meta>),
) {
    let work = match ev {
        watcher::Event::Init => {
            relisting.insert(i, HashSet::new());
            vec![]
        }
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
            let Some(node) = node_of(i, &o) else { return };
            if let Some(seen) = relisting.get_mut(&i) {
                seen.insert(node.uid.clone());
            }
            collector.with_graph(|g| g.upsert(node)).unwrap_or_default()
        }
        watcher::Event::InitDone => {
            let seen = relisting.remove(&i).unwrap_or_default();
            collector
                .with_graph(|g| g.retain_resource(i, &seen))
                .unwrap_or_default()
        }
        watcher::Event::Delete(o) => match o.metadata.uid.as_deref() {
            Some(uid) => collector.with_graph(|g| g.remove(uid)).unwrap_or_default(),
            None => vec![],
        },
    };
    queue.add(work);
}

/// Processes queued uids with a bounded pool; failures are retried after a backoff.
async fn work(state: Shared, rx: mpsc::UnboundedReceiver<String>, stop: Shutdown) {
    let items = tokio_stream_of(rx).take_until(stop);
    items
        .for_each_concurrent(WORKERS, |uid| {
            let state = state.clone();
            async move {
                let (collector, queue) = (&state.0, &state.1);
                if let Ok(mut p) = queue.pending.lock() {
                    p.remove(&uid);
                }
                match collector.process(&uid).await {
                    Ok(next) => {
                        if let Ok(mut f) = queue.failures.lock() {
                            f.remove(&uid);
                        }
                        queue.add(next);
                    }
                    Err(e) => {
                        let n = queue
                            .failures
                            .lock()
                            .map(|mut f| {
                                let n = f.entry(uid.clone()).or_insert(0);
                                *n = n.saturating_add(1);
                                *n
                            })
                            .unwrap_or(1);
                        tracing::warn!(%uid, error = %e, failures = n, "garbage collection failed");
                        let state = state.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(backoff_delay(n).max(Duration::from_millis(100)))
                                .await;
                            state.1.add([uid]);
                        });
                    }
                }
            }
        })
        .await;
}

/// The receiver as a stream.
fn tokio_stream_of(mut rx: mpsc::UnboundedReceiver<String>) -> BoxStream<'static, String> {
    stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
