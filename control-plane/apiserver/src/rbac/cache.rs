//! The watch-fed copy of a cluster's RBAC objects and the index decisions are made from.
//!
//! One store watch over the `rbac.authorization.k8s.io` prefix (all four kinds) feeds a map of
//! raw objects; the first decision after a change rebuilds the index (bursts of changes cost one
//! rebuild). A lost watch (compaction) relists.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use fabrik_store::{EventKind, ListOptions, WatchItem};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::{binding_subjects, Grant, Index, Rule};
use crate::object;
use crate::registry::Registry;

/// Where the RBAC kinds live in the store.
pub const PREFIX: &str = "/rbac.authorization.k8s.io/";

/// The cache.
pub struct RbacCache {
    raw: Mutex<BTreeMap<String, Value>>,
    index: RwLock<Arc<Index>>,
    dirty: AtomicBool,
    synced: watch::Sender<bool>,
}

impl Default for RbacCache {
    fn default() -> Self {
        RbacCache {
            raw: Mutex::new(BTreeMap::new()),
            index: RwLock::new(Arc::new(Index::default())),
            dirty: AtomicBool::new(false),
            synced: watch::channel(false).0,
        }
    }
}

impl RbacCache {
    /// The current index (rebuilt first if objects changed).
    pub(crate) fn index(&self) -> Arc<Index> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            let built = match self.raw.lock() {
                Ok(raw) => Arc::new(build(&raw)),
                Err(_) => return Arc::new(Index::default()),
            };
            if let Ok(mut i) = self.index.write() {
                *i = built.clone();
            }
            return built;
        }
        self.index
            .read()
            .map(|i| i.clone())
            .unwrap_or_else(|_| Arc::new(Index::default()))
    }

    /// Waits until the first full list has been loaded.
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn replace_all(&self, items: BTreeMap<String, Value>) {
        if let Ok(mut raw) = self.raw.lock() {
            *raw = items;
        }
        self.dirty.store(true, Ordering::Release);
    }

    fn apply(&self, key: String, value: Option<Value>) {
        if let Ok(mut raw) = self.raw.lock() {
            match value {
                Some(v) => raw.insert(key, v),
                None => raw.remove(&key),
            };
        }
        self.dirty.store(true, Ordering::Release);
    }

    /// Keeps the cache current until `shutdown` resolves.
    pub async fn run(
        self: Arc<Self>,
        registry: Arc<Registry>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = self.follow(&registry) => {}
            }
            // The watch ended (compaction, store error): relist after a pause.
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    /// One list + watch; returns when the watch ends.
    async fn follow(&self, registry: &Registry) {
        let store = registry.store();
        let page = match store
            .list(ListOptions {
                prefix: PREFIX.into(),
                ..ListOptions::default()
            })
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "RBAC cache: list failed");
                return;
            }
        };
        let revision = page.revision;
        let items: BTreeMap<String, Value> = page
            .items
            .into_iter()
            .filter_map(|kv| object::decode(&kv).ok().map(|v| (kv.key, v)))
            .collect();
        self.replace_all(items);
        self.synced.send_replace(true);
        let mut stream = match store.watch(PREFIX, revision, None).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "RBAC cache: watch failed");
                return;
            }
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(WatchItem::Event(ev)) => {
                    let value = match ev.kind {
                        EventKind::Delete => None,
                        _ => object::decode(&ev.kv).ok(),
                    };
                    self.apply(ev.kv.key, value);
                }
                Ok(WatchItem::Progress(_)) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "RBAC cache: watch ended");
                    return;
                }
            }
        }
    }
}

/// `(plural, namespace, name)` of an RBAC key.
fn parse_key(key: &str) -> Option<(&str, &str, &str)> {
    let rest = key.strip_prefix(PREFIX)?;
    let mut parts = rest.splitn(3, '/');
    let plural = parts.next()?;
    match plural {
        "roles" | "rolebindings" => Some((plural, parts.next()?, parts.next()?)),
        _ => Some((plural, "", parts.next()?)),
    }
}

fn build(raw: &BTreeMap<String, Value>) -> Index {
    let mut index = Index::default();
    for (key, obj) in raw {
        let Some((plural, ns, name)) = parse_key(key) else {
            continue;
        };
        match plural {
            "clusterroles" => {
                index
                    .cluster_roles
                    .insert(name.to_string(), Arc::new(Rule::of(obj)));
            }
            "roles" => {
                index
                    .roles
                    .insert((ns.to_string(), name.to_string()), Arc::new(Rule::of(obj)));
            }
            "clusterrolebindings" | "rolebindings" => {
                let role_ref = &obj["roleRef"];
                let cluster_role = match role_ref["kind"].as_str() {
                    Some("ClusterRole") => true,
                    Some("Role") if plural == "rolebindings" => false,
                    _ => continue,
                };
                let Some(role) = role_ref["name"].as_str() else {
                    continue;
                };
                let grant = Grant {
                    cluster_role,
                    role: role.to_string(),
                    binding: name.to_string(),
                };
                for subject in binding_subjects(obj, ns) {
                    let target = if plural == "clusterrolebindings" {
                        &mut index.cluster_grants
                    } else {
                        index.namespace_grants.entry(ns.to_string()).or_default()
                    };
                    target.entry(subject).or_default().push(grant.clone());
                }
            }
            _ => {}
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::rbac::{Attributes, Authorizer};
    use serde_json::json;

    #[test]
    fn bindings_grant_their_roles_to_users_groups_and_service_accounts() {
        let cache = Arc::new(RbacCache::default());
        let mut raw = BTreeMap::new();
        raw.insert(
            format!("{PREFIX}clusterroles/view"),
            json!({"rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
        );
        raw.insert(
            format!("{PREFIX}roles/team/cm-editor"),
            json!({"rules": [{"verbs": ["*"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        );
        raw.insert(
            format!("{PREFIX}clusterrolebindings/ml-view"),
            json!({"roleRef": {"kind": "ClusterRole", "name": "view"},
                   "subjects": [{"kind": "Group", "name": "ml"}]}),
        );
        raw.insert(
            format!("{PREFIX}rolebindings/team/edit-cm"),
            json!({"roleRef": {"kind": "Role", "name": "cm-editor"},
                   "subjects": [{"kind": "User", "name": "bob"},
                                {"kind": "ServiceAccount", "name": "robot"}]}),
        );
        cache.replace_all(raw);
        let authz = Authorizer::new(cache.clone());
        let alice = UserInfo::new("alice", &["ml"]);
        let bob = UserInfo::new("bob", &[]);
        let robot = UserInfo::new("system:serviceaccount:team:robot", &[]);
        let list_pods = Attributes::resource("list", "", "pods", "", "any", "");
        let edit_cm = Attributes::resource("update", "", "configmaps", "", "team", "x");
        assert!(authz.authorize(&alice, &list_pods).allowed());
        assert!(!authz.authorize(&bob, &list_pods).allowed());
        assert!(authz.authorize(&bob, &edit_cm).allowed());
        assert!(authz.authorize(&robot, &edit_cm).allowed());
        let mut other_ns = edit_cm.clone();
        other_ns.namespace = "other".into();
        assert!(!authz.authorize(&bob, &other_ns).allowed());

        // Removing the binding takes effect on the next decision.
        cache.apply(format!("{PREFIX}rolebindings/team/edit-cm"), None);
        assert!(!authz.authorize(&bob, &edit_cm).allowed());
        assert!(authz
            .authorize(&UserInfo::new("root", &["system:masters"]), &edit_cm)
            .allowed());
    }
}
