//! A watch-fed cache of JSON objects by namespace and name, with a "listed once" flag.
//!
//! The syncer's only state: everything it decides is read from these caches of what the two API
//! servers hold, so a restarted syncer rebuilds it by listing.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::Value;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// The key of an object.
pub fn key_of(obj: &Value) -> ObjKey {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap_or("").to_string(),
        m["name"].as_str().unwrap_or("").to_string(),
    )
}

/// Objects of one kind (for one tenant).
#[derive(Debug)]
pub struct Cache {
    objects: RwLock<HashMap<ObjKey, Arc<Value>>>,
    ready: tokio::sync::watch::Sender<bool>,
    /// The kind is not served where the cache is fed from (or may not be listed there).
    unavailable: std::sync::atomic::AtomicBool,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            objects: RwLock::default(),
            ready: tokio::sync::watch::Sender::new(false),
            unavailable: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Cache {
    /// The object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.values().cloned().collect()
    }

    /// Stores an object.
    pub fn apply(&self, obj: Value) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.insert(key_of(&obj), Arc::new(obj));
    }

    /// Forgets an object.
    pub fn delete(&self, key: &ObjKey) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.remove(key);
    }

    /// Replaces the content after a (re)list; returns the objects that went away.
    pub fn replace(&self, new: HashMap<ObjKey, Arc<Value>>) -> Vec<Arc<Value>> {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        let gone = objects
            .iter()
            .filter(|(k, _)| !new.contains_key(*k))
            .map(|(_, v)| v.clone())
            .collect();
        *objects = new;
        gone
    }

    /// Says whether the kind is unavailable at the source (not served, or not permitted).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable
            .store(unavailable, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the kind is unavailable at the source: the cache is empty for that reason.
    pub fn is_unavailable(&self) -> bool {
        self.unavailable.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Marks the cache as listed.
    pub fn set_ready(&self) {
        self.ready.send_replace(true);
    }

    /// Whether the cache has been listed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the cache has been listed.
    pub async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }
}

/// Feeds `cache` from a watcher stream until it ends, calling `changed` with every object
/// stored or removed (after the cache is updated). For an `optional` kind, a source that does
/// not serve it (404) or may not list it (403) makes the cache ready and unavailable (empty)
/// while the watch keeps trying.
pub async fn feed(
    cache: Arc<Cache>,
    stream: impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
    optional: bool,
    changed: impl Fn(&Value),
) {
    let mut stream = std::pin::pin!(stream);
    let mut relist: HashMap<ObjKey, Arc<Value>> = HashMap::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(obj)) => {
                if let Ok(v) = serde_json::to_value(obj) {
                    cache.apply(v.clone());
                    changed(&v);
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let Ok(v) = serde_json::to_value(obj) {
                    cache.delete(&key_of(&v));
                    changed(&v);
                }
            }
            Ok(watcher::Event::Init) => relist.clear(),
            Ok(watcher::Event::InitApply(obj)) => {
                if let Ok(v) = serde_json::to_value(obj) {
                    relist.insert(key_of(&v), Arc::new(v));
                }
            }
            Ok(watcher::Event::InitDone) => {
                let listed = std::mem::take(&mut relist);
                let now: Vec<Arc<Value>> = listed.values().cloned().collect();
                let gone = cache.replace(listed);
                cache.set_unavailable(false);
                cache.set_ready();
                for v in now.iter().chain(gone.iter()) {
                    changed(v);
                }
            }
            Err(watcher::Error::InitialListFailed(kube::Error::Api(s)))
                if optional && (s.code == 404 || s.code == 403) =>
            {
                if !cache.is_unavailable() || !cache.is_ready() {
                    tracing::debug!(code = s.code, "kind not served here; its cache stays empty");
                }
                cache.set_unavailable(true);
                cache.set_ready();
            }
            Err(e) => tracing::debug!(error = %e, "watch failed; retrying"),
        }
    }
}
