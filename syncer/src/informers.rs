//! Shared host watches: one watch per kind for the whole process, fanned out to tenants.
//!
//! Each host kind is watched once (started on the first subscription), filtered on the host by
//! the `fabrik.dev/tenant` label (Events, which host components create unlabelled, are routed by
//! their namespace `fabrik-<tenant>`; Nodes are shared by every tenant). Every object is routed to
//! its tenant's cache only when its namespace is that tenant's host namespace as well, so a
//! mislabelled object cannot reach another tenant. The number of host watches is the number of
//! kinds ([`HostInformers::watch_count`]), whatever the number of tenants.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fabrik_api::LABEL_TENANT;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::Value;

use crate::cache::{key_of, Cache, ObjKey};
use crate::kinds::Kind;
use crate::naming;

/// Called with each host object of a tenant that changed (or went away).
pub type Notifier = Arc<dyn Fn(&Value) + Send + Sync>;

/// The process's host watches. Cheap to clone; the watches stop when the last clone is dropped.
#[derive(Clone)]
pub struct HostInformers {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    kinds: Mutex<HashMap<Kind, Arc<Informer>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|e| e.into_inner());
        for t in tasks.drain(..) {
            t.abort();
        }
    }
}

/// One kind's watch: per-tenant caches and subscribers.
#[derive(Default)]
struct Informer {
    state: Mutex<InformerState>,
    listed: std::sync::atomic::AtomicBool,
    /// The host does not serve the kind (or Fabrik may not list it).
    unavailable: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct InformerState {
    caches: HashMap<String, Arc<Cache>>,
    subscribers: HashMap<String, HashMap<u64, Notifier>>,
    next_id: u64,
}

/// The tenant key under which shared (cluster-scoped) objects are kept.
const SHARED: &str = "";

impl Informer {
    fn cache(&self, tenant: &str) -> Arc<Cache> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let cache = s.caches.entry(tenant.to_string()).or_default().clone();
        cache.set_unavailable(self.unavailable.load(std::sync::atomic::Ordering::SeqCst));
        if self.listed.load(std::sync::atomic::Ordering::SeqCst) {
            cache.set_ready();
        }
        cache
    }

    /// The tenant's cache, without marking it ready (while a listing is being applied).
    fn cache_unready(&self, tenant: &str) -> Arc<Cache> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.caches.entry(tenant.to_string()).or_default().clone()
    }

    /// Marks the kind listed — or unavailable at the host — and every cache ready, so that
    /// caches made later start ready as well.
    fn settle(&self, unavailable: bool) {
        self.unavailable
            .store(unavailable, std::sync::atomic::Ordering::SeqCst);
        self.listed.store(true, std::sync::atomic::Ordering::SeqCst);
        let all: Vec<Arc<Cache>> = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .caches
            .values()
            .cloned()
            .collect();
        for c in all {
            c.set_unavailable(unavailable);
            c.set_ready();
        }
    }

    fn notifiers(&self, tenant: Option<&str>) -> Vec<Notifier> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match tenant {
            Some(t) => s
                .subscribers
                .get(t)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default(),
            None => s
                .subscribers
                .values()
                .flat_map(|m| m.values().cloned())
                .collect(),
        }
    }
}

/// Which tenant a host object belongs to (`Some("")` for shared Nodes), or `None` to drop it.
fn route(kind: Kind, obj: &Value) -> Option<String> {
    if kind.shared_on_host() {
        return Some(SHARED.to_string());
    }
    let ns = obj["metadata"]["namespace"].as_str()?;
    let by_namespace = naming::tenant_of_namespace(ns)?;
    if kind == Kind::Event {
        return Some(by_namespace.to_string());
    }
    let by_label = obj["metadata"]["labels"][LABEL_TENANT].as_str()?;
    (by_label == by_namespace).then(|| by_label.to_string())
}

/// A tenant's view of one host kind; unsubscribes when dropped.
pub struct Subscription {
    /// The tenant's host objects of the kind (all Nodes for [`Kind::Node`]).
    pub cache: Arc<Cache>,
    informer: Arc<Informer>,
    tenant: String,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut s = self
            .informer
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(m) = s.subscribers.get_mut(&self.tenant) {
            m.remove(&self.id);
            if m.is_empty() {
                s.subscribers.remove(&self.tenant);
            }
        }
    }
}

impl HostInformers {
    /// Host watches over `host`; nothing is watched until a tenant subscribes.
    pub fn new(host: kube::Client) -> Self {
        HostInformers {
            inner: Arc::new(Inner {
                client: host,
                kinds: Mutex::default(),
                tasks: Mutex::default(),
            }),
        }
    }

    /// The host client (the syncers write through it).
    pub fn client(&self) -> kube::Client {
        self.inner.client.clone()
    }

    /// How many host watches run (one per kind in use).
    pub fn watch_count(&self) -> usize {
        self.inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Subscribes `tenant` to host objects of `kind`, starting that kind's watch if needed.
    /// Must be called inside a tokio runtime.
    pub fn subscribe(&self, kind: Kind, tenant: &str, notify: Notifier) -> Subscription {
        let informer = self.informer(kind);
        let cache_key = if kind.shared_on_host() {
            SHARED
        } else {
            tenant
        };
        let cache = informer.cache(cache_key);
        let id = {
            let mut s = informer.state.lock().unwrap_or_else(|e| e.into_inner());
            s.next_id += 1;
            let id = s.next_id;
            s.subscribers
                .entry(tenant.to_string())
                .or_default()
                .insert(id, notify);
            id
        };
        Subscription {
            cache,
            informer,
            tenant: tenant.to_string(),
            id,
        }
    }

    fn informer(&self, kind: Kind) -> Arc<Informer> {
        let mut kinds = self.inner.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = kinds.get(&kind) {
            return i.clone();
        }
        let informer = Arc::new(Informer::default());
        kinds.insert(kind, informer.clone());
        let api: Api<DynamicObject> =
            Api::all_with(self.inner.client.clone(), &kind.api_resource());
        let config = match kind {
            Kind::Node | Kind::Event | Kind::DeviceClass => watcher::Config::default(),
            _ => watcher::Config::default().labels(LABEL_TENANT),
        };
        let task = tokio::spawn(run_informer(kind, api, config, informer.clone()));
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        informer
    }
}

/// Runs one kind's watch forever, routing objects to tenant caches.
async fn run_informer(
    kind: Kind,
    api: Api<DynamicObject>,
    config: watcher::Config,
    inf: Arc<Informer>,
) {
    let stream = watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut relist: HashMap<String, HashMap<ObjKey, Arc<Value>>> = HashMap::new();
    // Whether the host was found not to serve the kind (said once, not per retry).
    let mut unserved = false;
    let mut last_error: Option<String> = None;
    let notify = |tenant: &str, v: &Value| {
        let who = if tenant == SHARED { None } else { Some(tenant) };
        for n in inf.notifiers(who) {
            n(v);
        }
    };
    while let Some(event) = stream.next().await {
        let to_value = |o: DynamicObject| serde_json::to_value(o).ok();
        match event {
            Ok(watcher::Event::Apply(obj)) => {
                let Some(v) = to_value(obj) else { continue };
                let Some(t) = route(kind, &v) else { continue };
                inf.cache(&t).apply(v.clone());
                notify(&t, &v);
            }
            Ok(watcher::Event::Delete(obj)) => {
                let Some(v) = to_value(obj) else { continue };
                let Some(t) = route(kind, &v) else { continue };
                inf.cache(&t).delete(&key_of(&v));
                notify(&t, &v);
            }
            Ok(watcher::Event::Init) => relist.clear(),
            Ok(watcher::Event::InitApply(obj)) => {
                let Some(v) = to_value(obj) else { continue };
                let Some(t) = route(kind, &v) else { continue };
                relist.entry(t).or_default().insert(key_of(&v), Arc::new(v));
            }
            Ok(watcher::Event::InitDone) => {
                unserved = false;
                last_error = None;
                let mut listed = std::mem::take(&mut relist);
                tracing::debug!(
                    ?kind,
                    tenants = listed.len(),
                    objects = listed.values().map(HashMap::len).sum::<usize>(),
                    "host objects listed"
                );
                // Each tenant once: a tenant both subscribed and listed must not be visited a
                // second time with nothing left to give it (that emptied its cache).
                let tenants: std::collections::BTreeSet<String> = {
                    let s = inf.state.lock().unwrap_or_else(|e| e.into_inner());
                    s.caches
                        .keys()
                        .cloned()
                        .chain(listed.keys().cloned())
                        .collect()
                };
                for t in tenants {
                    let objects = listed.remove(&t).unwrap_or_default();
                    let now: Vec<Arc<Value>> = objects.values().cloned().collect();
                    // Filled before it is ready: a syncer must never see an empty cache that
                    // only looks listed (it would take present host pods for lost ones).
                    let cache = inf.cache_unready(&t);
                    let gone = cache.replace(objects);
                    cache.set_ready();
                    for v in now.iter().chain(gone.iter()) {
                        notify(&t, v);
                    }
                }
                // Caches created while the listing was applied had nothing in it: ready too.
                inf.settle(false);
            }
            Err(e) if kind.optional() && is_unavailable(&e) => {
                // Not served by this host (or not permitted to Fabrik): none of these objects
                // are synced, the caches are ready (empty), and the watch keeps trying in case
                // the host is upgraded or the rights granted.
                if !unserved {
                    unserved = true;
                    tracing::warn!(?kind, error = %e,
                        "the host does not serve (or Fabrik may not list) this kind; nothing of it is synced");
                }
                inf.settle(true);
            }
            Err(e) => {
                // Once per different error, not once per retry.
                let message = e.to_string();
                if last_error.as_deref() != Some(message.as_str()) {
                    tracing::warn!(?kind, error = %message, "host watch failed; retrying");
                    last_error = Some(message);
                } else {
                    tracing::debug!(?kind, "host watch failed again; retrying");
                }
            }
        }
    }
}

/// Whether a watch error says the resource is not served (404) or not permitted (403).
fn is_unavailable(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404 || s.code == 403)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_route_by_label_and_namespace_together() {
        let pod = |ns: &str, t: Option<&str>| {
            let mut v = json!({"metadata": {"name": "p", "namespace": ns}});
            if let Some(t) = t {
                v["metadata"]["labels"] = json!({"fabrik.dev/tenant": t});
            }
            v
        };
        assert_eq!(
            route(Kind::Pod, &pod("fabrik-a", Some("a"))),
            Some("a".into())
        );
        assert_eq!(route(Kind::Pod, &pod("fabrik-a", Some("b"))), None);
        assert_eq!(route(Kind::Pod, &pod("default", Some("a"))), None);
        assert_eq!(route(Kind::Pod, &pod("fabrik-a", None)), None);
        assert_eq!(route(Kind::Event, &pod("fabrik-a", None)), Some("a".into()));
        assert_eq!(route(Kind::Event, &pod("kube-system", None)), None);
        assert_eq!(
            route(Kind::Node, &json!({"metadata": {"name": "n"}})),
            Some(String::new())
        );
    }
}
