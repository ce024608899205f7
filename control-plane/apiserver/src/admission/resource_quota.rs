//! ResourceQuota: a write that would take a namespace past any of its quotas' `hard` limits
//! is refused with upstream's message (`exceeded quota: NAME, requested: …, used: …,
//! limited: …`). What an object counts, and which quotas (scopes, `scopeSelector`) count it,
//! is [`fabrik_machinery::quota`]'s — the same function the quota controller reports
//! `status.used` with. Creates are charged their usage; updates of Services and claims their
//! increase (a `ClusterIP` Service turned `NodePort` takes node ports).
//!
//! Exact under concurrency: decisions are made under a per-namespace lock that is kept (as the
//! admission hold) until the object is committed — two creators at the limit cannot both
//! pass. Usage is kept per quota and kind as an **upper bound**: computed from the namespace's
//! objects once, then raised by every admitted write (deletions only lower real usage, so the
//! bound stays safe). Only when a write would not fit under the bound is usage recomputed
//! exactly from the objects — so writes far from the limit cost O(1), and a refusal is always
//! based on exact usage. A replica sharing its store with others keeps no bound
//! ([`ResourceQuota::exact`]): the others' creates would not raise it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use fabrik_machinery::quota::Usage;
use fabrik_machinery::quota::{self, describe, over};
use serde_json::Value;

use super::Objects;
use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;
use crate::object;
use crate::resources::ResourceDef;

/// The plugin.
#[derive(Default)]
pub struct ResourceQuota {
    locks: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
    /// Upper bounds of usage per quota.
    bounds: Mutex<HashMap<QuotaKey, Usage>>,
    /// Count exactly on every write (no upper bound kept): for a store that other replicas
    /// write too, whose creates would not raise this replica's bounds.
    exact: bool,
}

/// A quota as of its spec, and the kind counted: namespace, UID, generation, `plural.group`.
/// Bounds are kept per kind (each kind's resources are its own), so that an exact count of
/// one kind never drops another kind's charges.
type QuotaKey = (String, String, i64, String);

/// What one object counts against quotas (see [`fabrik_machinery::quota::usage`]).
pub fn usage_of(def: &ResourceDef, obj: &Value) -> Usage {
    quota::usage(&def.group, &def.plural, obj)
}

/// What a write charges: all of a create's usage; an update's increase (services and claims
/// only, as upstream). Zeros left out.
pub(crate) fn charge(req: &Request<'_>, obj: &Value, old: Option<&Value>) -> Usage {
    match (req.op, old) {
        (Operation::Create, _) => usage_of(req.def, obj)
            .into_iter()
            .filter(|(_, q)| !q.is_zero())
            .collect(),
        (Operation::Update, Some(old))
            if quota::counts_updates(&req.def.group, &req.def.plural) =>
        {
            quota::increase(&usage_of(req.def, obj), &usage_of(req.def, old))
        }
        _ => Usage::new(),
    }
}

/// The namespace's current usage of a quota by objects of `def`'s kind (an updated object
/// as stored: the update charges its increase on top).
async fn current_usage(
    objects: &dyn Objects,
    def: &ResourceDef,
    ns: &str,
    quota: &Value,
) -> Result<Usage, ApiError> {
    let items = objects.list(def, Some(ns)).await?;
    let hard = quota::hard_of(&quota["spec"]);
    let items = items
        .iter()
        .map(|o| (def.group.as_str(), def.plural.as_str(), o));
    Ok(quota::used(&quota["spec"], &hard, items))
}

impl ResourceQuota {
    /// A plugin that counts exactly on every write, for a store other replicas write too.
    pub fn exact() -> ResourceQuota {
        ResourceQuota {
            exact: true,
            ..ResourceQuota::default()
        }
    }

    fn lock_for(&self, ns: &str) -> Arc<tokio::sync::RwLock<()>> {
        match self.locks.lock() {
            Ok(mut m) => m.entry(ns.to_string()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::RwLock::new(())),
        }
    }

    /// Charges `requested` to every quota's bound if it fits under all of them (atomically);
    /// false if any bound is missing or too tight.
    fn try_charge(&self, keys: &[(QuotaKey, Usage)], requested: &Usage, dry_run: bool) -> bool {
        let Ok(mut bounds) = self.bounds.lock() else {
            return false;
        };
        let fits = keys.iter().all(|(key, hard)| {
            bounds
                .get(key)
                .is_some_and(|b| over(b, requested, hard).is_empty())
        });
        if fits && !dry_run {
            for (key, _) in keys {
                let b = bounds.entry(key.clone()).or_default();
                quota::add_all(b, requested);
            }
        }
        fits
    }
}

#[async_trait::async_trait]
impl Admission for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    fn order(&self) -> super::Order {
        super::Order::Quota
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let (Some(ns), None) = (req.namespace, req.subresource) else {
            return Ok(Verdict::ok());
        };
        let requested = charge(req, obj, old);
        if requested.is_empty() {
            return Ok(Verdict::ok());
        }
        let Some(quota_def) = req.objects.resource("", "v1", "resourcequotas") else {
            return Ok(Verdict::ok());
        };
        let quotas: Vec<Value> = req
            .objects
            .list(&quota_def, Some(ns))
            .await?
            .into_iter()
            .filter(|q| !object::is_deleting(q))
            .filter(|q| quota::in_scopes(&q["spec"], &req.def.group, &req.def.plural, obj))
            .filter(|q| {
                quota::hard_of(&q["spec"])
                    .keys()
                    .any(|k| requested.contains_key(k))
            })
            .collect();
        if quotas.is_empty() {
            return Ok(Verdict::ok());
        }
        let keys: Vec<(QuotaKey, Usage)> = quotas
            .iter()
            .map(|q| {
                (
                    (
                        ns.to_string(),
                        q["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                        q["metadata"]["generation"].as_i64().unwrap_or(0),
                        format!("{}.{}", req.def.plural, req.def.group),
                    ),
                    quota::hard_of(&q["spec"]),
                )
            })
            .collect();
        let lock = self.lock_for(ns);
        // Fast path: the write fits under every bound. Writes in flight hold the lock for
        // reading until they are committed.
        if !self.exact {
            let read = lock.clone().read_owned().await;
            if self.try_charge(&keys, &requested, req.dry_run) {
                return Ok(Verdict {
                    warnings: Vec::new(),
                    hold: Some(Box::new(read)),
                });
            }
        }
        // Slow path: wait until no write is in flight, then count exactly.
        let write = lock.clone().write_owned().await;
        // Exact: other replicas admit too; count and commit one at a time among them all.
        let shared = match self.exact {
            true => Some(
                req.objects
                    .exclusive(&format!("resourcequota/{ns}"))
                    .await?,
            ),
            false => None,
        };
        for (quota, (key, hard)) in quotas.iter().zip(&keys) {
            let used = current_usage(req.objects, req.def, ns, quota).await?;
            let exceeded = over(&used, &requested, hard);
            if let Ok(mut b) = self.bounds.lock() {
                b.insert(key.clone(), used);
            }
            if !exceeded.is_empty() {
                return Err(ApiError::Forbidden(format!(
                    "{} \"{}\" is forbidden: exceeded quota: {}, {}",
                    req.def.group_resource(),
                    obj["metadata"]["name"].as_str().unwrap_or(""),
                    quota["metadata"]["name"].as_str().unwrap_or(""),
                    describe(&exceeded),
                )));
            }
        }
        if !self.try_charge(&keys, &requested, req.dry_run) {
            return Err(ApiError::Internal("quota bookkeeping failed".into()));
        }
        Ok(Verdict {
            warnings: Vec::new(),
            hold: Some(Box::new((write.downgrade(), shared))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Part, Registry, WriteOptions};
    use crate::resources::Catalog;
    use fabrik_store::{SledBackend, SledConfig, Store};
    use serde_json::json;

    async fn create(reg: &Registry, plural: &str, obj: Value) -> Result<Value, ApiError> {
        let def = reg.catalog().get("", "v1", plural).expect("served");
        reg.create(&def, Some("default"), obj, &WriteOptions::default())
            .await
            .map(|w| w.object)
    }

    /// Counting one kind exactly never drops what another kind was charged, and an update
    /// that takes node ports is charged.
    #[tokio::test]
    async fn kinds_keep_their_own_bounds_and_updates_are_charged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let reg = Registry::new(store, Arc::new(Catalog::builtin()));
        crate::cluster::bootstrap(&reg).await.expect("bootstrap");
        create(
            &reg,
            "resourcequotas",
            json!({"metadata": {"name": "q"},
            "spec": {"hard": {"pods": "1", "services": "1", "services.nodeports": "0"}}}),
        )
        .await
        .expect("quota");
        let svc =
            |name: &str| json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
        let pod = |name: &str| json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let first = create(&reg, "services", svc("s1")).await.expect("s1");
        create(&reg, "pods", pod("p1")).await.expect("p1");
        // Over: the pod's exact count (p2) must not have reset the services' charge.
        create(&reg, "pods", pod("p2"))
            .await
            .expect_err("p2 over pods=1");
        let err = create(&reg, "services", svc("s2"))
            .await
            .expect_err("s2 over services=1");
        assert!(err.to_string().contains("exceeded quota: q"), "{err}");
        let mut turned = first.clone();
        turned["spec"]["type"] = json!("NodePort");
        let def = reg.catalog().get("", "v1", "services").expect("served");
        let err = reg
            .update(
                &def,
                Some("default"),
                "s1",
                turned,
                Part::Main,
                &WriteOptions::default(),
            )
            .await
            .expect_err("NodePort over services.nodeports=0");
        assert!(err.to_string().contains("services.nodeports"), "{err}");
    }

    #[test]
    fn updates_charge_their_increase() {
        let catalog = Catalog::builtin();
        let services = catalog
            .get("", "v1", "services")
            .expect("services are built in");
        let old = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        let new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        let u = quota::increase(&usage_of(&services, &new), &usage_of(&services, &old));
        assert_eq!(u.keys().collect::<Vec<_>>(), vec!["services.nodeports"]);
    }
}
