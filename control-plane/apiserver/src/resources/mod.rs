//! The catalog of served resources: for each, its names, scope, subresources, schema and
//! strategy. One generic registry serves every entry; adding a kind means adding a row to
//! `fabrik-openapi`'s kind table (built-in, see [`fabrik_openapi::builtin_kinds`]) or a CRD,
//! never a handler.

mod builtin;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use fabrik_openapi::{Definitions, Verbs};

use crate::error::GroupResource;
use crate::strategy::Strategy;

pub use fabrik_openapi::{Subresource, TypeCheck};

/// Where a resource's schema lives.
#[derive(Clone)]
pub enum SchemaRef {
    /// The built-in definitions (k8s-openapi schemas with the upstream extensions).
    Builtin,
    /// A custom resource's own definitions (from its CRD version's `openAPIV3Schema`).
    Custom(Arc<Definitions>),
}

impl SchemaRef {
    /// The definitions.
    pub fn get(&self) -> &Definitions {
        match self {
            SchemaRef::Builtin => Definitions::builtin(),
            SchemaRef::Custom(d) => d,
        }
    }
}

/// JSON paths of the scale subresource's fields (`.spec.replicas`, ... for built-in kinds; from
/// `subresources.scale` for custom resources).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// Desired replicas, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// Observed replicas, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// Label selector (string form) for the scale status, if any.
    pub label_selector: Option<String>,
}

impl Default for ScalePaths {
    fn default() -> Self {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        }
    }
}

/// One served resource.
pub struct ResourceDef {
    /// API group; empty for core.
    pub group: String,
    /// Served (and stored) version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular name (lower-case kind).
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Subresources served.
    pub subresources: Vec<Subresource>,
    /// OpenAPI definition name of the kind (`io.k8s.api.core.v1.Pod`).
    pub definition: String,
    /// Per-kind behaviour.
    pub strategy: Arc<dyn Strategy>,
    /// Decodes into the typed struct to check field types; None for custom resources.
    pub type_check: Option<TypeCheck>,
    /// The schema used for pruning, patch metadata and OpenAPI.
    pub schemas: SchemaRef,
    /// Scale subresource paths, when the resource serves `/scale`.
    pub scale: Option<ScalePaths>,
    /// The version objects are stored as (custom resources with several versions); None = this
    /// resource's own version.
    pub storage_version: Option<String>,
    /// Served through a CustomResourceDefinition (JSON merge patch only, no protobuf).
    pub custom: bool,
    /// How objects move between versions; None: versions differ only in `apiVersion`.
    pub conversion: Option<Conversion>,
    /// A review (access reviews, token reviews): only `create`, answered without storing.
    pub create_only: bool,
}

/// How the objects of a kind served at several versions are converted between them.
#[derive(Clone, Debug)]
pub enum Conversion {
    /// A CRD's conversion webhook (`spec.conversion.webhook`: `clientConfig`,
    /// `conversionReviewVersions`).
    Webhook(serde_json::Value),
    /// A built-in kind: converted in process, `(object, desired apiVersion)` to the object at
    /// that version (an error says why it cannot be).
    Builtin(BuiltinConversion),
}

/// A built-in kind's converter: `(object, desired apiVersion)` to the object at that version.
pub type BuiltinConversion =
    fn(&serde_json::Value, &str) -> std::result::Result<serde_json::Value, String>;

impl std::fmt::Debug for ResourceDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ResourceDef({}/{} {})",
            self.group, self.version, self.plural
        )
    }
}

impl ResourceDef {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// For error messages.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    /// Whether it serves `sub`.
    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }

    /// Storage prefix of every object of this resource, or of one namespace's objects.
    pub fn key_prefix(&self, namespace: Option<&str>) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        match namespace {
            Some(ns) if self.namespaced => format!("/{group}/{}/{ns}/", self.plural),
            _ => format!("/{group}/{}/", self.plural),
        }
    }

    /// Storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.key_prefix(namespace))
    }

    /// Verbs of the main resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        let verbs = if self.create_only {
            Verbs::CreateOnly
        } else {
            Verbs::All
        };
        verbs.names().to_vec()
    }
}

/// Every resource the cluster serves, by group, version and plural.
pub struct Catalog {
    entries: RwLock<BTreeMap<(String, String, String), Arc<ResourceDef>>>,
    /// Bumped on every change, so caches of derived documents (OpenAPI) know to rebuild.
    generation: AtomicU64,
    /// Told of every change, for controllers that follow what is served
    /// ([`Catalog::subscribe`]).
    changes: tokio::sync::watch::Sender<()>,
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog {
            entries: RwLock::default(),
            generation: AtomicU64::new(0),
            changes: tokio::sync::watch::Sender::new(()),
        }
    }
}

impl Catalog {
    /// The built-in Kubernetes resources.
    pub fn builtin() -> Catalog {
        let catalog = Catalog::default();
        for def in builtin::all() {
            catalog.insert(def);
        }
        catalog
    }

    /// Adds or replaces one resource.
    pub fn insert(&self, def: ResourceDef) {
        let key = (def.group.clone(), def.version.clone(), def.plural.clone());
        if let Ok(mut entries) = self.entries.write() {
            entries.insert(key, Arc::new(def));
        }
        self.changed();
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changes.send_modify(|_| {});
    }

    /// A receiver told of every change made after this call (`changed().await`).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<()> {
        self.changes.subscribe()
    }

    /// Removes one resource; returns whether it was served.
    pub fn remove(&self, group: &str, version: &str, plural: &str) -> bool {
        let removed = self
            .entries
            .write()
            .map(|mut e| {
                e.remove(&(group.to_string(), version.to_string(), plural.to_string()))
                    .is_some()
            })
            .unwrap_or(false);
        if removed {
            self.changed();
        }
        removed
    }

    /// Changes with every insert or removal.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Looks up one resource.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let entries = self.entries.read().ok()?;
        entries
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Looks up the resource of a kind.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let entries = self.entries.read().ok()?;
        entries
            .values()
            .find(|d| d.group == group && d.kind == kind)
            .cloned()
    }

    /// Every resource, ordered by group, version, plural.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.entries
            .read()
            .map(|e| e.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Groups with their versions, core first, in a stable order; within a group the
    /// versions by upstream's version priority (GA before beta before alpha, higher numbers
    /// first: `v2`, `v1`, `v2beta1`, `v1alpha1`), so the first is the preferred one.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for def in self.all() {
            let gv = (def.group.clone(), def.version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        let first_seen: Vec<String> = out.iter().fold(Vec::new(), |mut groups, (g, _)| {
            if !groups.contains(g) {
                groups.push(g.clone());
            }
            groups
        });
        out.sort_by(|(ga, va), (gb, vb)| {
            let pos = |g: &String| first_seen.iter().position(|x| x == g);
            pos(ga)
                .cmp(&pos(gb))
                .then_with(|| version_priority(vb).cmp(&version_priority(va)))
                .then_with(|| va.cmp(vb))
        });
        out
    }
}

/// Upstream's version priority: `v<major>` (GA) above `v<major>beta<minor>` above
/// `v<major>alpha<minor>`, higher numbers first within each; anything else lowest.
pub fn version_priority(v: &str) -> (u8, u64, u64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let Ok(major) = rest[..digits].parse::<u64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits..];
    let stage = |prefix: &str, rank: u8| {
        tail.strip_prefix(prefix)
            .and_then(|m| m.parse::<u64>().ok())
            .map(|minor| (rank, major, minor))
    };
    if tail.is_empty() {
        (3, major, 0)
    } else {
        stage("beta", 2)
            .or_else(|| stage("alpha", 1))
            .unwrap_or((0, 0, 0))
    }
}

#[cfg(test)]
mod version_tests {
    use super::version_priority;

    #[test]
    fn versions_sort_as_upstream_sorts_them() {
        let mut vs = vec![
            "v1alpha1",
            "v1",
            "foo",
            "v2beta2",
            "v2",
            "v1beta1",
            "v11alpha2",
            "v10",
        ];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(
            vs,
            [
                "v10",
                "v2",
                "v1",
                "v2beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "foo"
            ]
        );
    }
}
