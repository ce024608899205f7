//! The built-in definitions, with their extensions, and lookups on them.
//!
//! [`Definitions::builtin`] generates the map once per process; later calls share it.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::{builtin, extensions};

/// All built-in definitions with their extensions. Built once, cheap to share.
#[derive(Clone, Debug)]
pub struct Definitions {
    schemas: BTreeMap<String, Value>,
    /// Patch metadata already read, by (definition, field): strategic merge patch and
    /// managedFields bookkeeping ask for the same few hundred fields on every write.
    pub(crate) field_cache: FieldCache,
}

/// A memo of `patch_field` answers; cloning a `Definitions` starts an empty one.
#[derive(Default)]
pub(crate) struct FieldCache(
    pub(crate)  std::sync::RwLock<
        std::collections::HashMap<
            (String, String),
            Option<fabrik_machinery::patch::FieldPatchInfo>,
        >,
    >,
);

impl Clone for FieldCache {
    fn clone(&self) -> Self {
        FieldCache::default()
    }
}

impl std::fmt::Debug for FieldCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FieldCache")
    }
}

impl Definitions {
    /// The built-in definitions, generated on first use.
    pub fn builtin() -> &'static Definitions {
        static BUILTIN: OnceLock<Definitions> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            let mut schemas = builtin::generate();
            extensions::merge_into(&mut schemas);
            Definitions {
                schemas,
                field_cache: FieldCache::default(),
            }
        })
    }

    /// Definitions from an explicit map (schemas using `#/components/schemas/` references).
    pub fn from_map(schemas: BTreeMap<String, Value>) -> Definitions {
        Definitions {
            schemas,
            field_cache: FieldCache::default(),
        }
    }

    /// The schema of definition `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.schemas.get(name)
    }

    /// All definition names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.schemas.keys().map(String::as_str)
    }

    /// The whole map, sorted by name.
    pub fn schemas(&self) -> &BTreeMap<String, Value> {
        &self.schemas
    }

    /// The definition carrying `x-kubernetes-group-version-kind` for exactly this group,
    /// version and kind.
    pub fn find_by_gvk(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.schemas
            .iter()
            .find(|(_, schema)| crate::gvk::gvks(schema).any(|g| g == (group, version, kind)))
            .map(|(name, _)| name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::collect_refs;
    use std::collections::BTreeSet;

    #[test]
    fn builtin_is_shared_and_complete() {
        let a = Definitions::builtin();
        let b = Definitions::builtin();
        assert!(std::ptr::eq(a, b));
        assert!(a.get("io.k8s.api.core.v1.Pod").is_some());
        assert!(a.names().count() > 300);
    }

    #[test]
    fn builtin_has_no_dangling_references() {
        let defs = Definitions::builtin();
        let mut refs = BTreeSet::new();
        for schema in defs.schemas().values() {
            collect_refs(schema, &mut refs);
        }
        let missing: Vec<_> = refs.iter().filter(|r| defs.get(r).is_none()).collect();
        assert!(missing.is_empty(), "dangling: {missing:?}");
    }

    #[test]
    fn kinds_carry_their_gvk() {
        let defs = Definitions::builtin();
        assert_eq!(
            defs.find_by_gvk("apps", "v1", "Deployment"),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        assert_eq!(
            defs.find_by_gvk("", "v1", "PodList"),
            Some("io.k8s.api.core.v1.PodList")
        );
        assert_eq!(defs.find_by_gvk("apps", "v2", "Deployment"), None);
    }
}
