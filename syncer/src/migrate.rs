//! Host objects whose name is not the current translation of their origin ("strays"): copies
//! made under an earlier naming scheme (see [`fabrik_api::naming`]), found once when the syncer's
//! caches are listed.
//!
//! Migration, per kind:
//! * **Pods** are not restarted for a rename: a stray host pod stays the host pod of its tenant
//!   pod (status, binding, deletion go through its old name) until the tenant pod is gone.
//! * **Other kinds** get their copy under the new name at once; the stray is deleted when its
//!   tenant object is gone, or when no stray pod is left (a running stray pod may still mount the
//!   ConfigMaps, Secrets and claims it was created with).
//!
//! New strays never appear: every copy the syncer makes is named by the current scheme.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::cache::Cache;
use crate::kinds::Kind;
use crate::naming;
use crate::queue::Key;

/// The strays of one tenant, by the tenant object they were made for.
#[derive(Debug, Default)]
pub struct Strays {
    by_origin: Mutex<HashMap<Key, Vec<String>>>,
}

impl Strays {
    /// Finds the strays among the tenant's host objects (kinds whose host objects carry an
    /// origin; Events and Nodes do not).
    pub fn scan(tenant: &str, host_caches: &HashMap<Kind, Arc<Cache>>) -> Strays {
        let mut by_origin: HashMap<Key, Vec<String>> = HashMap::new();
        for (kind, cache) in host_caches {
            if matches!(kind, Kind::Event | Kind::Node | Kind::DeviceClass) {
                continue;
            }
            for obj in cache.list() {
                if let Some((key, host)) = stray(*kind, tenant, &obj) {
                    by_origin.entry(key).or_default().push(host);
                }
            }
        }
        Strays {
            by_origin: Mutex::new(by_origin),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<String>>> {
        self.by_origin.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the strays another scan found.
    pub fn replace(&self, found: Strays) {
        let found = found
            .by_origin
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        *self.lock() = found;
    }

    /// The stray host names of a tenant object.
    pub fn get(&self, key: &Key) -> Vec<String> {
        self.lock().get(key).cloned().unwrap_or_default()
    }

    /// Forgets one stray (it is gone from the host).
    pub fn forget(&self, key: &Key, host: &str) {
        let mut m = self.lock();
        if let Some(v) = m.get_mut(key) {
            v.retain(|h| h != host);
            if v.is_empty() {
                m.remove(key);
            }
        }
    }

    /// Whether any stray pod is left.
    pub fn pods_left(&self) -> bool {
        self.lock().keys().any(|k| k.kind == Kind::Pod)
    }

    /// Every tenant object with strays.
    pub fn keys(&self) -> Vec<Key> {
        self.lock().keys().cloned().collect()
    }

    /// How many strays are left.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// Whether none is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The origin key and host name of a host object, when it is a stray of this tenant.
pub fn stray(kind: Kind, tenant: &str, host: &Value) -> Option<(Key, String)> {
    let o = naming::origin(host).filter(|o| o.tenant == tenant)?;
    let name = host["metadata"]["name"].as_str()?;
    if name == naming::host_name(&o.name, &o.namespace, tenant) {
        return None;
    }
    Some((
        Key {
            kind,
            namespace: o.namespace,
            name: o.name,
        },
        name.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(name: &str, ns: &str, vname: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "fabrik-t",
            "labels": {"fabrik.dev/tenant": "t", "fabrik.dev/namespace": ns},
            "annotations": {"fabrik.dev/virtual-name": vname, "fabrik.dev/virtual-namespace": ns}}})
    }

    #[test]
    fn only_objects_named_by_another_scheme_are_strays() {
        let current = host(&naming::host_name("a", "b-x-c", "t"), "b-x-c", "a");
        assert!(stray(Kind::Pod, "t", &current).is_none());
        let old = host(&naming::legacy_host_name("a", "b-x-c", "t"), "b-x-c", "a");
        let (key, name) = stray(Kind::Pod, "t", &old).expect("a stray");
        assert_eq!((key.namespace.as_str(), key.name.as_str()), ("b-x-c", "a"));
        assert_eq!(name, "a-x-b-x-c-x-t");
        // Another tenant's object is never this tenant's stray.
        assert!(stray(Kind::Pod, "u", &old).is_none());
        // Unmarked host objects are not strays either.
        assert!(stray(Kind::Pod, "t", &json!({"metadata": {"name": "x"}})).is_none());
    }

    #[test]
    fn strays_are_forgotten_one_by_one() {
        let s = Strays::default();
        let key = Key {
            kind: Kind::Pod,
            namespace: "n".into(),
            name: "p".into(),
        };
        s.lock().insert(key.clone(), vec!["h1".into(), "h2".into()]);
        assert!(s.pods_left());
        s.forget(&key, "h1");
        assert_eq!(s.get(&key), vec!["h2".to_string()]);
        s.forget(&key, "h2");
        assert!(s.is_empty());
        assert!(!s.pods_left());
    }
}
