//! Which tenant a query's source IP belongs to, and each tenant's [`View`], kept current.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::view::{Domain, Objects, View};

/// How long a tenant's view waits after a change for more changes before it is rebuilt.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// The tenants, their views, and which tenant each source IP belongs to. Cheap to clone (one
/// shared state).
///
/// # Guarantees
///
/// * A source IP selects a tenant only while exactly one tenant has a running pod with that IP.
///   An IP claimed by two tenants (stale data, a reused address) selects neither, and is
///   logged once when the conflict starts.
/// * Readers ([`Directory::view_for`]) hold a read lock for one or two hash lookups; a new view
///   is built outside the lock, which a writer holds only to swap it in and to update the IPs
///   that changed.
/// * Every watch task of a tenant ends when the tenant is removed or replaced, or when its
///   [`TenantHandle`] is dropped.
#[derive(Clone)]
pub struct Directory {
    inner: Arc<Inner>,
}

struct Inner {
    domain: Domain,
    routes: RwLock<Routes>,
    next_generation: AtomicU64,
}

#[derive(Default)]
struct Routes {
    tenants: HashMap<Arc<str>, Tenant>,
    /// Every tenant that has a pod with the IP; the IP selects a tenant when there is one.
    claims: HashMap<IpAddr, Vec<Arc<str>>>,
}

struct Tenant {
    view: Arc<View>,
    /// Tells this tenant's watch task from one of an earlier tenant of the same name.
    generation: u64,
    /// The watch task started by [`Directory::add_tenant`], if any.
    watch: Option<AbortHandle>,
}

impl Directory {
    /// An empty directory for the cluster domain `domain`.
    pub fn new(domain: Domain) -> Self {
        Self {
            inner: Arc::new(Inner {
                domain,
                routes: RwLock::new(Routes::default()),
                next_generation: AtomicU64::new(1),
            }),
        }
    }

    /// The cluster domain of every view.
    pub fn domain(&self) -> &Domain {
        &self.inner.domain
    }

    /// Adds (or replaces) a tenant whose objects are watched through `client`: Services,
    /// EndpointSlices and Pods of all namespaces. Its view is empty until all three are listed
    /// (a replaced tenant keeps its old view until then); afterwards it is rebuilt shortly after
    /// each change. Watch errors are retried with backoff and logged once per distinct error.
    ///
    /// Must be called inside a Tokio runtime. The watches stop when the returned handle is
    /// dropped or [`Directory::remove_tenant`] is called.
    pub fn add_tenant(&self, name: &str, client: kube::Client) -> TenantHandle {
        let name: Arc<str> = Arc::from(name);
        let generation = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
        {
            let mut routes = self.write();
            let view = match routes.tenants.remove(&name) {
                Some(old) => {
                    if let Some(watch) = old.watch {
                        watch.abort();
                    }
                    old.view
                }
                None => Arc::new(View::empty(self.inner.domain.clone())),
            };
            let tenant = Tenant {
                view,
                generation,
                watch: None,
            };
            routes.tenants.insert(name.clone(), tenant);
        }
        let weak = Arc::downgrade(&self.inner);
        let task = tokio::spawn(watch_tenant(weak, name.clone(), generation, client));
        match self.write().tenants.get_mut(&name) {
            Some(t) if t.generation == generation => t.watch = Some(task.abort_handle()),
            // Removed or replaced in the meantime.
            _ => task.abort(),
        }
        tracing::info!(tenant = %name, "cluster DNS watching tenant");
        TenantHandle {
            directory: self.clone(),
            name,
            generation,
        }
    }

    /// Replaces a tenant's objects (adding the tenant if it is new) and so its view and the
    /// source IPs that select it. The watches of [`Directory::add_tenant`] call this same path.
    pub fn set_objects(&self, tenant: &str, objects: &Objects) {
        self.apply(tenant, None, objects);
    }

    /// Removes a tenant: stops its watches, forgets its view and its source IPs. Returns whether
    /// there was such a tenant.
    pub fn remove_tenant(&self, name: &str) -> bool {
        self.remove(name, None)
    }

    /// The view that answers queries from `source`, if exactly one tenant has a pod with that IP.
    pub fn view_for(&self, source: IpAddr) -> Option<Arc<View>> {
        let source = source.to_canonical();
        let routes = self.read();
        match routes.claims.get(&source)?.as_slice() {
            [tenant] => routes.tenants.get(tenant).map(|t| t.view.clone()),
            _ => None,
        }
    }

    /// A tenant's current view.
    pub fn view_of(&self, tenant: &str) -> Option<Arc<View>> {
        self.read().tenants.get(tenant).map(|t| t.view.clone())
    }

    /// Builds and swaps in a tenant's view. With `generation`, only while the tenant is still
    /// the one the watch task belongs to (a removed tenant is not brought back by its watch).
    fn apply(&self, tenant: &str, generation: Option<u64>, objects: &Objects) {
        let view = Arc::new(View::build(&self.inner.domain, objects));
        let mut routes = self.write();
        let routes = &mut *routes;
        let old = match (routes.tenants.get_mut(tenant), generation) {
            (Some(t), Some(g)) if t.generation != g => return,
            (None, Some(_)) => return,
            (Some(t), _) => std::mem::replace(&mut t.view, view.clone()),
            (None, None) => {
                let generation = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
                let t = Tenant {
                    view: view.clone(),
                    generation,
                    watch: None,
                };
                routes.tenants.insert(Arc::from(tenant), t);
                Arc::new(View::empty(self.inner.domain.clone()))
            }
        };
        let Some((name, _)) = routes.tenants.get_key_value(tenant) else {
            return;
        };
        let name = name.clone();
        for ip in old.pod_ips().difference(view.pod_ips()) {
            release(&mut routes.claims, *ip, &name);
        }
        for ip in view.pod_ips().difference(old.pod_ips()) {
            claim(&mut routes.claims, *ip, &name);
        }
    }

    /// Removes a tenant; with `generation`, only that one (a handle of a replaced tenant must
    /// not remove its successor).
    fn remove(&self, name: &str, generation: Option<u64>) -> bool {
        let mut routes = self.write();
        let routes = &mut *routes;
        match (routes.tenants.get(name), generation) {
            (None, _) => return false,
            (Some(t), Some(g)) if t.generation != g => return false,
            _ => {}
        }
        let Some((name, tenant)) = routes.tenants.remove_entry(name) else {
            return false;
        };
        if let Some(watch) = tenant.watch {
            watch.abort();
        }
        for ip in tenant.view.pod_ips() {
            release(&mut routes.claims, *ip, &name);
        }
        tracing::info!(tenant = %name, "cluster DNS forgot tenant");
        true
    }

    fn read(&self) -> RwLockReadGuard<'_, Routes> {
        // A panic while the lock was held leaves a consistent map: every write is one call.
        self.inner.routes.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Routes> {
        self.inner.routes.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes = self.read();
        f.debug_struct("Directory")
            .field("domain", &self.inner.domain)
            .field("tenants", &routes.tenants.len())
            .field("source_ips", &routes.claims.len())
            .finish()
    }
}

/// Records that `tenant` has a pod with `ip`.
fn claim(claims: &mut HashMap<IpAddr, Vec<Arc<str>>>, ip: IpAddr, tenant: &Arc<str>) {
    let owners = claims.entry(ip).or_default();
    if owners.contains(tenant) {
        return;
    }
    owners.push(tenant.clone());
    if owners.len() == 2 {
        let tenants: Vec<&str> = owners.iter().map(|t| &**t).collect();
        tracing::warn!(%ip, ?tenants, "pod IP claimed by two tenants; it gets no DNS answers");
    }
}

/// Records that `tenant` no longer has a pod with `ip`.
fn release(claims: &mut HashMap<IpAddr, Vec<Arc<str>>>, ip: IpAddr, tenant: &Arc<str>) {
    let Some(owners) = claims.get_mut(&ip) else {
        return;
    };
    let before = owners.len();
    owners.retain(|t| t != tenant);
    match owners.as_slice() {
        [] => {
            claims.remove(&ip);
        }
        [owner] if before == 2 => {
            tracing::info!(%ip, tenant = %owner, "pod IP conflict resolved");
        }
        _ => {}
    }
}

/// Stops a tenant's watches when dropped (see [`Directory::add_tenant`]).
#[must_use = "dropping the handle removes the tenant"]
pub struct TenantHandle {
    directory: Directory,
    name: Arc<str>,
    generation: u64,
}

impl TenantHandle {
    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the tenant now (the same as dropping the handle).
    pub fn remove(self) {
        drop(self);
    }
}

impl Drop for TenantHandle {
    fn drop(&mut self) {
        self.directory.remove(&self.name, Some(self.generation));
    }
}

impl std::fmt::Debug for TenantHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantHandle")
            .field("name", &self.name)
            .field("generation", &self.generation)
            .finish()
    }
}

/// One tenant's watches: three reflectors, and a loop that rebuilds the view from their stores
/// once all three are listed and again after each change (debounced). Runs until aborted or the
/// directory is gone.
async fn watch_tenant(
    directory: Weak<Inner>,
    tenant: Arc<str>,
    generation: u64,
    client: kube::Client,
) {
    let changed = Notify::new();
    let (services, services_w) = reflector::store::<Service>();
    let (slices, slices_w) = reflector::store::<EndpointSlice>();
    let (pods, pods_w) = reflector::store::<Pod>();
    let config = watcher::Config::default;
    let services_s = watcher(Api::<Service>::all(client.clone()), config())
        .default_backoff()
        .modify(|s: &mut Service| trim_metadata(s));
    let slices_s = watcher(Api::<EndpointSlice>::all(client.clone()), config())
        .default_backoff()
        .modify(|s: &mut EndpointSlice| trim_metadata(s));
    let pods_s = watcher(Api::<Pod>::all(client), config())
        .default_backoff()
        .modify(trim_pod);
    let rebuild = async {
        let listed = futures::future::try_join3(
            services.wait_until_ready(),
            slices.wait_until_ready(),
            pods.wait_until_ready(),
        );
        if listed.await.is_err() {
            return;
        }
        tracing::debug!(%tenant, "tenant objects listed");
        loop {
            let Some(inner) = directory.upgrade() else {
                return;
            };
            let objects = Objects {
                services: services.state(),
                endpoint_slices: slices.state(),
                pods: pods.state(),
            };
            Directory { inner }.apply(&tenant, Some(generation), &objects);
            changed.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
        }
    };
    tokio::select! {
        () = follow(&tenant, "services", reflector::reflector(services_w, services_s), &changed) => {}
        () = follow(&tenant, "endpointslices", reflector::reflector(slices_w, slices_s), &changed) => {}
        () = follow(&tenant, "pods", reflector::reflector(pods_w, pods_s), &changed) => {}
        () = rebuild => {}
    }
}

/// Drives one reflector stream: signals `changed` on every change of the store, and logs watch
/// errors once per distinct error (the stream itself backs off and retries).
async fn follow<K>(
    tenant: &str,
    kind: &'static str,
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    changed: &Notify,
) {
    let mut stream = std::pin::pin!(stream);
    let mut failing: Option<String> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                if let Some(error) = failing.take() {
                    tracing::info!(tenant, kind, %error, "tenant watch recovered");
                }
                let done = matches!(
                    event,
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
                );
                if done {
                    changed.notify_one();
                }
            }
            Err(e) => {
                let error = e.to_string();
                if failing.as_deref() != Some(error.as_str()) {
                    tracing::warn!(tenant, kind, %error, "tenant watch failed; retrying");
                    failing = Some(error);
                }
            }
        }
    }
}

/// Drops what the DNS never reads and what can be large (managed fields, annotations such as
/// `last-applied-configuration`).
fn trim_metadata<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}

/// Keeps only what a [`View`] reads of a pod: its name and namespace, `hostname`, `subdomain`,
/// `hostNetwork`, phase and IPs. A tenant's pods are the bulk of what is watched.
fn trim_pod(pod: &mut Pod) {
    trim_metadata(pod);
    pod.metadata.labels = None;
    pod.metadata.owner_references = None;
    let spec = pod.spec.take().unwrap_or_default();
    pod.spec = Some(PodSpec {
        hostname: spec.hostname,
        subdomain: spec.subdomain,
        host_network: spec.host_network,
        ..PodSpec::default()
    });
    let status = pod.status.take().unwrap_or_default();
    pod.status = Some(PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        pod_ips: status.pod_ips,
        ..PodStatus::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, ip: &str) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(ns.to_string());
        pod.metadata.name = Some(name.to_string());
        pod.status = Some(PodStatus {
            phase: Some("Running".to_string()),
            pod_ip: Some(ip.to_string()),
            ..PodStatus::default()
        });
        Arc::new(pod)
    }

    fn pods(list: Vec<Arc<Pod>>) -> Objects {
        Objects {
            pods: list,
            ..Objects::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    fn tenant_of(d: &Directory, source: &str) -> Option<String> {
        let view = d.view_for(ip(source))?;
        let routes = d.read();
        let found = routes
            .tenants
            .iter()
            .find(|(_, t)| Arc::ptr_eq(&t.view, &view));
        found.map(|(name, _)| name.to_string())
    }

    #[test]
    fn source_ip_selects_its_tenant() {
        let d = Directory::new(Domain::default());
        d.set_objects("a", &pods(vec![pod("x", "p", "10.0.0.1")]));
        d.set_objects("b", &pods(vec![pod("x", "p", "10.0.0.2")]));
        assert_eq!(tenant_of(&d, "10.0.0.1").as_deref(), Some("a"));
        assert_eq!(tenant_of(&d, "10.0.0.2").as_deref(), Some("b"));
        assert_eq!(tenant_of(&d, "::ffff:10.0.0.2").as_deref(), Some("b"));
        assert!(d.view_for(ip("10.0.0.3")).is_none());
    }

    #[test]
    fn gone_pods_release_their_ips() {
        let d = Directory::new(Domain::default());
        d.set_objects(
            "a",
            &pods(vec![pod("x", "p", "10.0.0.1"), pod("x", "q", "10.0.0.5")]),
        );
        d.set_objects("a", &pods(vec![pod("x", "q", "10.0.0.5")]));
        assert!(d.view_for(ip("10.0.0.1")).is_none());
        assert!(d.view_for(ip("10.0.0.5")).is_some());
        assert!(d.remove_tenant("a"));
        assert!(d.view_for(ip("10.0.0.5")).is_none());
        assert!(!d.remove_tenant("a"));
    }

    #[test]
    fn an_ip_of_two_tenants_selects_neither_until_one_lets_go() {
        let d = Directory::new(Domain::default());
        d.set_objects("a", &pods(vec![pod("x", "p", "10.0.0.1")]));
        d.set_objects("b", &pods(vec![pod("y", "q", "10.0.0.1")]));
        assert!(d.view_for(ip("10.0.0.1")).is_none());
        d.set_objects("a", &Objects::default());
        assert_eq!(tenant_of(&d, "10.0.0.1").as_deref(), Some("b"));
    }

    #[test]
    fn finished_and_host_network_pods_select_nothing() {
        let d = Directory::new(Domain::default());
        let mut done = (*pod("x", "done", "10.0.0.1")).clone();
        if let Some(s) = done.status.as_mut() {
            s.phase = Some("Succeeded".to_string());
        }
        let mut host = (*pod("x", "host", "192.168.0.9")).clone();
        host.spec = Some(PodSpec {
            host_network: Some(true),
            ..PodSpec::default()
        });
        d.set_objects("a", &pods(vec![Arc::new(done), Arc::new(host)]));
        assert!(d.view_for(ip("10.0.0.1")).is_none());
        assert!(d.view_for(ip("192.168.0.9")).is_none());
    }

    #[test]
    fn a_stale_generation_does_not_bring_a_tenant_back() {
        let d = Directory::new(Domain::default());
        d.set_objects("a", &pods(vec![pod("x", "p", "10.0.0.1")]));
        let generation = d.read().tenants.get("a").map(|t| t.generation);
        assert!(d.remove_tenant("a"));
        d.apply("a", generation, &pods(vec![pod("x", "p", "10.0.0.1")]));
        assert!(d.view_of("a").is_none());
        assert!(d.view_for(ip("10.0.0.1")).is_none());
    }

    #[test]
    fn trimmed_pods_keep_what_the_view_reads() {
        let mut p = (*pod("x", "p", "10.0.0.1")).clone();
        p.spec = Some(PodSpec {
            hostname: Some("h".to_string()),
            subdomain: Some("s".to_string()),
            containers: vec![Default::default()],
            ..PodSpec::default()
        });
        trim_pod(&mut p);
        let spec = p.spec.unwrap_or_default();
        assert!(spec.containers.is_empty());
        assert_eq!(spec.hostname.as_deref(), Some("h"));
        assert_eq!(spec.subdomain.as_deref(), Some("s"));
        let status = p.status.unwrap_or_default();
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
    }
}
