//! The owner → dependents graph the garbage collector keeps from its metadata watches, and the
//! pure decisions taken on it.
//!
//! Nodes are keyed by uid. An edge is an ownerReference; the graph keeps the reverse index
//! (owner uid → dependent uids) so a deleted owner finds its dependents without a list.
//! Owners that are referenced but not (yet) seen have no node: the collector confirms their
//! absence with a live read before acting.

use std::collections::{HashMap, HashSet};

/// Finalizer the API server adds for `propagationPolicy=Foreground`.
pub const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer the API server adds for `propagationPolicy=Orphan`.
pub const ORPHAN: &str = "orphan";

/// One ownerReference of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLink {
    /// The owner's uid.
    pub uid: String,
    /// The owner's apiVersion, as written in the reference.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// `blockOwnerDeletion`.
    pub block: bool,
}

/// One object known to the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Index of the object's resource in the collector's resource table.
    pub resource: usize,
    /// Namespace (None for cluster-scoped objects).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// uid.
    pub uid: String,
    /// Its ownerReferences.
    pub owners: Vec<OwnerLink>,
    /// Whether deletionTimestamp is set.
    pub deleting: bool,
    /// Its finalizers.
    pub finalizers: Vec<String>,
}

impl Node {
    /// Deleting with the `foregroundDeletion` finalizer: waiting for its dependents.
    pub fn waiting_for_dependents(&self) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == FOREGROUND)
    }

    /// Deleting with the `orphan` finalizer.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.finalizers.iter().any(|f| f == ORPHAN)
    }
}

/// The graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// The node with this uid.
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// The dependents of `uid` that the graph knows.
    pub fn dependents(&self, uid: &str) -> Vec<&Node> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| self.nodes.get(d))
            .collect()
    }

    /// Number of known objects.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no object is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds or replaces a node; returns the uids that need attention.
    pub fn upsert(&mut self, node: Node) -> Vec<String> {
        let mut work = Vec::new();
        let old = self.nodes.remove(&node.uid);
        if let Some(old) = &old {
            for o in &old.owners {
                self.unlink(&o.uid, &old.uid);
                if !node.owners.iter().any(|n| n.uid == o.uid) {
                    work.push(o.uid.clone());
                }
            }
        }
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(node.uid.clone());
            if self.nodes.get(&o.uid).is_some_and(|n| n.deleting) {
                work.push(o.uid.clone());
            }
        }
        if !node.owners.is_empty() || node.waiting_for_dependents() || node.orphaning() {
            work.push(node.uid.clone());
        }
        // An object that reappears (or appears late) may be the owner someone waits on.
        if old.is_none() && self.dependents.contains_key(&node.uid) {
            work.extend(self.dependents[&node.uid].iter().cloned());
        }
        self.nodes.insert(node.uid.clone(), node);
        work
    }

    /// Removes a node; returns the uids that need attention (its dependents and owners).
    pub fn remove(&mut self, uid: &str) -> Vec<String> {
        let mut work = Vec::new();
        if let Some(old) = self.nodes.remove(uid) {
            for o in &old.owners {
                self.unlink(&o.uid, uid);
                work.push(o.uid.clone());
            }
        }
        if let Some(deps) = self.dependents.get(uid) {
            work.extend(deps.iter().cloned());
        }
        work
    }

    /// After a relist of `resource`: removes its nodes not in `seen`.
    pub fn retain_resource(&mut self, resource: usize, seen: &HashSet<String>) -> Vec<String> {
        let gone: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.resource == resource && !seen.contains(&n.uid))
            .map(|n| n.uid.clone())
            .collect();
        gone.iter().flat_map(|uid| self.remove(uid)).collect()
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }
}

/// What the collector knows of one owner of a dependent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Exists and is not waiting for its dependents.
    Solid,
    /// Gone, or replaced by an object with another uid.
    Dangling,
    /// Exists, deleting in the foreground.
    Waiting,
}

/// How to delete a dependent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Delete now, its own dependents collected afterwards.
    Background,
    /// Delete after its own dependents.
    Foreground,
}

/// What to do with a dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it.
    Keep,
    /// Remove these owner references (some owner remains).
    RemoveRefs(Vec<String>),
    /// Delete it.
    Delete(Propagation),
}

/// Upstream's decision for a dependent that is not itself being deleted: with a solid owner
/// left, only the dangling and waiting references go; with none, the object is deleted —
/// in the foreground when an owner waits for it and it has dependents of its own.
pub fn verdict(owners: &[(String, OwnerState)], has_dependents: bool) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let solid = owners.iter().any(|(_, s)| *s == OwnerState::Solid);
    if solid {
        let remove: Vec<String> = owners
            .iter()
            .filter(|(_, s)| *s != OwnerState::Solid)
            .map(|(u, _)| u.clone())
            .collect();
        return if remove.is_empty() {
            Verdict::Keep
        } else {
            Verdict::RemoveRefs(remove)
        };
    }
    let waiting = owners.iter().any(|(_, s)| *s == OwnerState::Waiting);
    if waiting && has_dependents {
        Verdict::Delete(Propagation::Foreground)
    } else {
        Verdict::Delete(Propagation::Background)
    }
}

/// Whether a foreground-deleting owner may lose its finalizer: no known dependent still
/// references it with `blockOwnerDeletion: true`.
pub fn foreground_done(owner_uid: &str, dependents: &[&Node]) -> bool {
    !dependents
        .iter()
        .any(|d| d.owners.iter().any(|o| o.uid == owner_uid && o.block))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(uid: &str, owners: &[(&str, bool)]) -> Node {
        Node {
            resource: 0,
            namespace: Some("ns".into()),
            name: uid.into(),
            uid: uid.into(),
            owners: owners
                .iter()
                .map(|(o, block)| OwnerLink {
                    uid: o.to_string(),
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: o.to_string(),
                    block: *block,
                })
                .collect(),
            deleting: false,
            finalizers: vec![],
        }
    }

    #[test]
    fn reverse_index_follows_updates_and_removals() {
        let mut g = Graph::default();
        g.upsert(node("owner", &[]));
        let work = g.upsert(node("dep", &[("owner", true)]));
        assert_eq!(work, vec!["dep".to_string()]);
        assert_eq!(g.dependents("owner").len(), 1);
        // The dependent drops its reference: the owner is looked at again.
        let work = g.upsert(node("dep", &[]));
        assert_eq!(work, vec!["owner".to_string()]);
        assert!(g.dependents("owner").is_empty());
        g.upsert(node("dep", &[("owner", true)]));
        let work = g.remove("owner");
        assert_eq!(work, vec!["dep".to_string()]);
        let work = g.remove("dep");
        assert_eq!(work, vec!["owner".to_string()]);
        assert!(g.is_empty());
    }

    #[test]
    fn relist_removes_unseen() {
        let mut g = Graph::default();
        g.upsert(node("a", &[]));
        g.upsert(node("b", &[("a", false)]));
        let seen: HashSet<String> = ["b".to_string()].into();
        let work = g.retain_resource(0, &seen);
        assert_eq!(work, vec!["b".to_string()]);
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn deleting_owner_is_woken_by_dependent_changes() {
        let mut g = Graph::default();
        let mut owner = node("o", &[]);
        owner.deleting = true;
        owner.finalizers = vec![FOREGROUND.into()];
        assert_eq!(g.upsert(owner), vec!["o".to_string()]);
        let work = g.upsert(node("d", &[("o", true)]));
        assert!(work.contains(&"o".to_string()) && work.contains(&"d".to_string()));
    }

    #[test]
    fn verdicts() {
        use OwnerState::*;
        let o = |s: &[(&str, OwnerState)]| -> Vec<(String, OwnerState)> {
            s.iter().map(|(u, s)| (u.to_string(), *s)).collect()
        };
        let cases = [
            (o(&[]), false, Verdict::Keep),
            (o(&[("a", Solid)]), false, Verdict::Keep),
            (
                o(&[("a", Solid), ("b", Dangling)]),
                false,
                Verdict::RemoveRefs(vec!["b".into()]),
            ),
            (
                o(&[("a", Solid), ("b", Waiting)]),
                true,
                Verdict::RemoveRefs(vec!["b".into()]),
            ),
            (
                o(&[("a", Dangling)]),
                true,
                Verdict::Delete(Propagation::Background),
            ),
            (
                o(&[("a", Waiting)]),
                false,
                Verdict::Delete(Propagation::Background),
            ),
            (
                o(&[("a", Waiting)]),
                true,
                Verdict::Delete(Propagation::Foreground),
            ),
            (
                o(&[("a", Waiting), ("b", Dangling)]),
                true,
                Verdict::Delete(Propagation::Foreground),
            ),
        ];
        for (i, (owners, deps, want)) in cases.into_iter().enumerate() {
            assert_eq!(verdict(&owners, deps), want, "case {i}");
        }
    }

    #[test]
    fn foreground_waits_only_for_blocking_dependents() {
        let a = node("a", &[("o", false)]);
        let b = node("b", &[("o", true)]);
        assert!(foreground_done("o", &[&a]));
        assert!(!foreground_done("o", &[&a, &b]));
        assert!(foreground_done("o", &[]));
    }
}
