//! OpenAPI documents served by the cluster, generated from the catalog and cached until the
//! catalog changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fabrik_openapi::{Definitions, ResourceDoc, SubresourceDoc};
use serde_json::Value;

use crate::error::{ApiError, Result};
use crate::resources::{Catalog, ResourceDef, Subresource};

/// Cached documents, keyed by group-version path (`api/v1`, `apis/apps/v1`) and `v2`, valid for
/// one catalog generation (a CRD change rebuilds them).
#[derive(Default)]
pub struct OpenApi {
    cache: Mutex<(u64, BTreeMap<String, Value>)>,
    proto: Mutex<Option<(u64, Vec<u8>)>>,
}

/// Documents of catalogs without custom resources are the same in every cluster: one copy per
/// process, instead of a few MiB per tenant.
fn shared() -> &'static OpenApi {
    static SHARED: std::sync::OnceLock<OpenApi> = std::sync::OnceLock::new();
    SHARED.get_or_init(OpenApi::default)
}

/// The cache to use for `catalog`: the process-wide one while it serves only built-in kinds.
fn cache_for<'a>(own: &'a OpenApi, catalog: &Catalog) -> &'a OpenApi {
    if catalog.all().iter().any(|d| d.custom) {
        own
    } else {
        shared()
    }
}

impl OpenApi {
    /// The cache key of a catalog's documents: the shared cache holds the built-in documents,
    /// which do not change; a cluster's own cache follows its catalog.
    fn generation_of(&self, catalog: &Catalog) -> u64 {
        if std::ptr::eq(self, shared()) {
            0
        } else {
            catalog.generation()
        }
    }
}

/// The schemas of custom resources, by definition name, for the documents' `extra`.
fn custom_schemas<'a>(defs: impl Iterator<Item = &'a Arc<ResourceDef>>) -> BTreeMap<String, Value> {
    defs.filter(|d| d.custom)
        .filter_map(|d| {
            d.schemas
                .get()
                .get(&d.definition)
                .map(|s| (d.definition.clone(), s.clone()))
        })
        .collect()
}

fn sub_doc(def: &ResourceDef, sub: Subresource) -> SubresourceDoc {
    let (definition, verbs): (String, Vec<String>) = match sub {
        Subresource::Scale => (
            "io.k8s.api.autoscaling.v1.Scale".into(),
            vec!["get".into(), "patch".into(), "update".into()],
        ),
        Subresource::Binding => ("io.k8s.api.core.v1.Binding".into(), vec!["create".into()]),
        Subresource::Eviction => (
            "io.k8s.api.policy.v1.Eviction".into(),
            vec!["create".into()],
        ),
        Subresource::Status => (
            def.definition.clone(),
            vec!["get".into(), "patch".into(), "update".into()],
        ),
        Subresource::Finalize => (def.definition.clone(), vec!["update".into()]),
        Subresource::Log => (def.definition.clone(), vec!["get".into()]),
        Subresource::Exec | Subresource::Attach | Subresource::PortForward => {
            (def.definition.clone(), vec!["create".into(), "get".into()])
        }
        Subresource::Token => (
            "io.k8s.api.authentication.v1.TokenRequest".into(),
            vec!["create".into()],
        ),
    };
    SubresourceDoc {
        name: sub.name().into(),
        definition,
        verbs,
    }
}

fn doc(def: &ResourceDef) -> ResourceDoc {
    ResourceDoc {
        group: def.group.clone(),
        version: def.version.clone(),
        kind: def.kind.clone(),
        plural: def.plural.clone(),
        namespaced: def.namespaced,
        verbs: def.verbs().into_iter().map(str::to_string).collect(),
        subresources: def.subresources.iter().map(|s| sub_doc(def, *s)).collect(),
        definition: def.definition.clone(),
        list_definition: format!("{}List", def.definition),
    }
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

pub(crate) fn hash(v: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

impl OpenApi {
    fn cached(&self, generation: u64, key: &str, build: impl FnOnce() -> Value) -> Value {
        if let Ok(c) = self.cache.lock() {
            if c.0 == generation {
                if let Some(v) = c.1.get(key) {
                    return v.clone();
                }
            }
        }
        let v = build();
        if let Ok(mut c) = self.cache.lock() {
            if c.0 != generation {
                *c = (generation, BTreeMap::new());
            }
            c.1.insert(key.to_string(), v.clone());
        }
        v
    }

    /// The v3 document of one group-version.
    pub fn v3(&self, catalog: &Catalog, group: &str, version: &str) -> Result<Value> {
        cache_for(self, catalog).v3_in(catalog, group, version)
    }

    fn v3_in(&self, catalog: &Catalog, group: &str, version: &str) -> Result<Value> {
        let generation = self.generation_of(catalog);
        let defs: Vec<Arc<ResourceDef>> = catalog
            .all()
            .into_iter()
            .filter(|d| d.group == group && d.version == version)
            .collect();
        if defs.is_empty() {
            return Err(ApiError::NoRoute);
        }
        let docs: Vec<ResourceDoc> = defs.iter().map(|d| doc(d)).collect();
        Ok(self.cached(generation, &gv_path(group, version), || {
            fabrik_openapi::v3_document(
                Definitions::builtin(),
                &custom_schemas(defs.iter()),
                group,
                version,
                &docs,
            )
        }))
    }

    /// The v3 index.
    pub fn v3_index(&self, catalog: &Catalog) -> Result<Value> {
        cache_for(self, catalog).v3_index_in(catalog)
    }

    /// The index is cached like the documents: hashing every document is the costly part.
    fn v3_index_in(&self, catalog: &Catalog) -> Result<Value> {
        let generation = self.generation_of(catalog);
        let mut entries = Vec::new();
        if let Ok(c) = self.cache.lock() {
            if c.0 == generation {
                if let Some(v) = c.1.get("v3-index") {
                    return Ok(v.clone());
                }
            }
        }
        for (g, v) in catalog.group_versions() {
            let d = self.v3_in(catalog, &g, &v)?;
            entries.push((gv_path(&g, &v), hash(&d)));
        }
        let index = fabrik_openapi::v3_index(&entries);
        Ok(self.cached(generation, "v3-index", || index))
    }

    /// The v2 document.
    pub fn v2(&self, catalog: &Catalog) -> Result<Value> {
        cache_for(self, catalog).v2_in(catalog)
    }

    fn v2_in(&self, catalog: &Catalog) -> Result<Value> {
        let generation = self.generation_of(catalog);
        let defs = catalog.all();
        let docs: Vec<ResourceDoc> = defs.iter().map(|d| doc(d)).collect();
        Ok(self.cached(generation, "v2", || {
            fabrik_openapi::v2_document(Definitions::builtin(), &custom_schemas(defs.iter()), &docs)
        }))
    }

    /// The v2 document as protobuf.
    pub fn v2_protobuf(&self, catalog: &Catalog) -> Result<Vec<u8>> {
        cache_for(self, catalog).v2_protobuf_in(catalog)
    }

    fn v2_protobuf_in(&self, catalog: &Catalog) -> Result<Vec<u8>> {
        let generation = self.generation_of(catalog);
        if let Ok(p) = self.proto.lock() {
            if let Some((g, bytes)) = p.as_ref() {
                if *g == generation {
                    return Ok(bytes.clone());
                }
            }
        }
        let v2 = self.v2(catalog)?;
        let bytes =
            fabrik_openapi::v2_protobuf(&v2).map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Ok(mut p) = self.proto.lock() {
            *p = Some((generation, bytes.clone()));
        }
        Ok(bytes)
    }
}
