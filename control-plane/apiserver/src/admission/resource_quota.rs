//! ResourceQuota: a create that would take a namespace past any of its quotas' `hard` limits
//! is refused with upstream's message (`exceeded quota: NAME, requested: …, used: …,
//! limited: …`). Counted: object counts (`pods`, `services`, `configmaps`, `secrets`,
//! `persistentvolumeclaims`, `count/<resource>.<group>`), compute (`requests.cpu`, `cpu`,
//! `limits.memory`, …), extended resources (`requests.nvidia.com/gpu`), storage, and the pod
//! scopes `Terminating`, `NotTerminating`, `BestEffort`, `NotBestEffort`.
//!
//! Exact under concurrency: decisions are made under a per-namespace lock that is kept (as the
//! admission hold) until the new object is committed — two creators at the limit cannot both
//! pass. Usage is kept per quota as an **upper bound**: computed from the namespace's objects
//! once, then raised by every admitted create (deletions only lower real usage, so the bound
//! stays safe). Only when a create would not fit under the bound is usage recomputed exactly
//! from the objects — so creates far from the limit cost O(1), and a refusal is always based on
//! exact usage.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use fabrik_machinery::quantity::{Format, Quantity};
use serde_json::Value;

use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;
use crate::registry::{object, ListParams, Registry};
use crate::resources::ResourceDef;

/// Usage by resource name.
pub type Usage = BTreeMap<String, Quantity>;

/// The plugin.
#[derive(Default)]
pub struct ResourceQuota {
    locks: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
    /// Upper bounds of usage per quota.
    bounds: Mutex<HashMap<QuotaKey, Usage>>,
}

/// A quota as of its spec: namespace, UID, generation.
type QuotaKey = (String, String, i64);

/// A resource over its limit: name, requested, used, limit.
pub(crate) type Excess = (String, Quantity, Quantity, Quantity);

/// Upstream's `requested: k=v, used: k=v, limited: k=v` for the resources over their limit.
pub(crate) fn describe(exceeded: &[Excess]) -> String {
    let list = |f: &dyn Fn(&Excess) -> String| exceeded.iter().map(f).collect::<Vec<_>>().join(",");
    format!(
        "requested: {}, used: {}, limited: {}",
        list(&|(k, w, _, _)| format!("{k}={w}")),
        list(&|(k, _, u, _)| format!("{k}={u}")),
        list(&|(k, _, _, l)| format!("{k}={l}")),
    )
}

pub(crate) fn over(
    used: &Usage,
    requested: &Usage,
    hard: &Usage,
) -> Vec<(String, Quantity, Quantity, Quantity)> {
    let mut out = Vec::new();
    for (k, limit) in hard {
        let Some(want) = requested.get(k) else {
            continue;
        };
        let now = used.get(k).cloned().unwrap_or_else(zero);
        let after = now.checked_add(want).unwrap_or(now);
        if after > *limit {
            out.push((k.clone(), *want, now, *limit));
        }
    }
    out
}

pub(crate) fn add(usage: &mut Usage, key: &str, q: &Quantity) {
    let next = match usage.get(key) {
        Some(cur) => cur.checked_add(q).unwrap_or(*cur),
        None => *q,
    };
    usage.insert(key.to_string(), next);
}

fn units(n: i128) -> Quantity {
    Quantity::from_nanos(n * 1_000_000_000, Format::DecimalSI)
        .expect("small constants are in range")
}

pub(crate) fn zero() -> Quantity {
    units(0)
}

fn one() -> Quantity {
    units(1)
}

/// Requests or limits of a pod: the sum over containers, or the largest init container's
/// when larger, plus the pod overhead (upstream's effective pod resources).
pub fn pod_resources(pod: &Value, field: &str) -> Usage {
    let spec = &pod["spec"];
    let mut sum = Usage::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for (k, v) in c["resources"][field].as_object().into_iter().flatten() {
            if let Ok(q) = Quantity::from_json(v) {
                add(&mut sum, k, &q);
            }
        }
    }
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        for (k, v) in c["resources"][field].as_object().into_iter().flatten() {
            if let Ok(q) = Quantity::from_json(v) {
                if sum.get(k).is_none_or(|cur| q > *cur) {
                    sum.insert(k.clone(), q);
                }
            }
        }
    }
    for (k, v) in spec["overhead"].as_object().into_iter().flatten() {
        if let Ok(q) = Quantity::from_json(v) {
            add(&mut sum, k, &q);
        }
    }
    sum
}

fn is_terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

fn best_effort(pod: &Value) -> bool {
    pod_resources(pod, "requests").is_empty() && pod_resources(pod, "limits").is_empty()
}

/// Whether a pod is in all of a quota's scopes.
fn in_scopes(quota: &Value, pod: &Value) -> bool {
    let terminating = pod["spec"]["activeDeadlineSeconds"].is_i64();
    let mut scopes: Vec<String> = quota["spec"]["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    for expr in quota["spec"]["scopeSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let scope = expr["scopeName"].as_str().unwrap_or("");
        if scope == "PriorityClass" {
            let class = pod["spec"]["priorityClassName"].as_str().unwrap_or("");
            let values: Vec<&str> = expr["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let ok = match expr["operator"].as_str() {
                Some("In") => values.contains(&class),
                Some("NotIn") => !values.contains(&class),
                Some("Exists") => !class.is_empty(),
                Some("DoesNotExist") => class.is_empty(),
                _ => false,
            };
            if !ok {
                return false;
            }
        } else if expr["operator"].as_str() == Some("Exists") {
            scopes.push(scope.to_string());
        }
    }
    scopes.iter().all(|s| match s.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort(pod),
        "NotBestEffort" => !best_effort(pod),
        _ => true,
    })
}

/// What one object counts against quotas.
pub fn usage_of(def: &ResourceDef, obj: &Value) -> Usage {
    let mut usage = Usage::new();
    let count_key = if def.group.is_empty() {
        format!("count/{}", def.plural)
    } else {
        format!("count/{}.{}", def.plural, def.group)
    };
    usage.insert(count_key, one());
    if def.group.is_empty() {
        match def.plural.as_str() {
            "pods" => {
                if is_terminal(obj) {
                    return Usage::new();
                }
                usage.insert("pods".into(), one());
                for (k, q) in pod_resources(obj, "requests") {
                    if k == "cpu" || k == "memory" || k == "ephemeral-storage" {
                        usage.insert(k.clone(), q);
                    }
                    usage.insert(format!("requests.{k}"), q);
                }
                for (k, q) in pod_resources(obj, "limits") {
                    usage.insert(format!("limits.{k}"), q);
                    // Extended resources: the request is the limit when only a limit is set.
                    if k.contains('/') && !usage.contains_key(&format!("requests.{k}")) {
                        usage.insert(format!("requests.{k}"), q);
                    }
                }
            }
            "services" => {
                usage.insert("services".into(), one());
                match obj["spec"]["type"].as_str() {
                    Some("NodePort") => {
                        usage.insert("services.nodeports".into(), one());
                    }
                    Some("LoadBalancer") => {
                        usage.insert("services.loadbalancers".into(), one());
                        usage.insert("services.nodeports".into(), one());
                    }
                    _ => {}
                }
            }
            "persistentvolumeclaims" => {
                usage.insert("persistentvolumeclaims".into(), one());
                if let Ok(q) = Quantity::from_json(&obj["spec"]["resources"]["requests"]["storage"])
                {
                    if let Some(class) = obj["spec"]["storageClassName"].as_str() {
                        usage.insert(
                            format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                            q,
                        );
                    }
                    usage.insert("requests.storage".into(), q);
                }
            }
            "configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas" => {
                usage.insert(def.plural.clone(), one());
            }
            _ => {}
        }
    }
    usage
}

fn hard_of(quota: &Value) -> Usage {
    quota["spec"]["hard"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Quantity::from_json(v).ok().map(|q| (k.clone(), q)))
        .collect()
}

/// The namespace's current usage of `keys` by objects of `def`'s kind.
async fn current_usage(
    registry: &Registry,
    def: &ResourceDef,
    ns: &str,
    quota: &Value,
) -> Result<Usage, ApiError> {
    let mut total = Usage::new();
    let page = registry.list(def, Some(ns), &ListParams::default()).await?;
    for obj in &page.items {
        if def.group.is_empty() && def.plural == "pods" && !in_scopes(quota, obj) {
            continue;
        }
        for (k, q) in usage_of(def, obj) {
            add(&mut total, &k, &q);
        }
    }
    Ok(total)
}

impl ResourceQuota {
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
                for (k, q) in requested {
                    add(b, k, q);
                }
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

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let (Operation::Create, Some(ns), None) = (req.op, req.namespace, req.subresource) else {
            return Ok(Verdict::ok());
        };
        let requested = usage_of(req.def, obj);
        if requested.is_empty() {
            return Ok(Verdict::ok());
        }
        let Some(quota_def) = req.registry.resource("", "v1", "resourcequotas") else {
            return Ok(Verdict::ok());
        };
        let is_pod = req.is_core("pods");
        let quotas: Vec<Value> = req
            .registry
            .list(&quota_def, Some(ns), &ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|q| !object::is_deleting(q))
            .filter(|q| !is_pod || in_scopes(q, obj))
            .filter(|q| hard_of(q).keys().any(|k| requested.contains_key(k)))
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
                    ),
                    hard_of(q),
                )
            })
            .collect();
        let lock = self.lock_for(ns);
        // Fast path: the create fits under every bound. Creates in flight hold the lock for
        // reading until they are committed.
        let read = lock.clone().read_owned().await;
        if self.try_charge(&keys, &requested, req.dry_run) {
            return Ok(Verdict {
                warnings: Vec::new(),
                hold: Some(Box::new(read)),
            });
        }
        drop(read);
        // Slow path: wait until no create is in flight, then count exactly.
        let write = lock.clone().write_owned().await;
        for (quota, (key, hard)) in quotas.iter().zip(&keys) {
            let used = current_usage(req.registry, req.def, ns, quota).await?;
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
            hold: Some(Box::new(write.downgrade())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_usage_counts_requests_limits_and_init_containers() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        }});
        let r = pod_resources(&pod, "requests");
        assert_eq!(r["cpu"], "2".parse::<Quantity>().expect("q"));
        assert_eq!(r["memory"], "1Gi".parse::<Quantity>().expect("q"));
        let quota = json!({"spec": {"scopes": ["NotBestEffort"]}});
        assert!(in_scopes(&quota, &pod));
        assert!(!in_scopes(&quota, &json!({"spec": {"containers": [{}]}})));
    }
}
