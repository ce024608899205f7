//! A quota over a whole cluster rather than one namespace: a tenant's quota (pods, CPU and
//! memory requests, GPUs) counts every namespace of the tenant's cluster, so that
//! `kubectl apply` fails at once with a message naming the quota instead of leaving a host pod
//! pending. Same bookkeeping as [`super::resource_quota`]: an upper bound of usage raised by
//! every admitted pod, exact recount (with no create in flight) only when a pod would not fit.

use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use super::resource_quota::{add, describe, over, usage_of, Usage};
use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;
use crate::registry::ListParams;

/// The plugin.
pub struct ClusterQuota {
    /// What the quota is called in messages (e.g. `tenant "team-a"`).
    name: String,
    hard: RwLock<Usage>,
    bound: Mutex<Option<Usage>>,
    lock: Arc<tokio::sync::RwLock<()>>,
}

impl ClusterQuota {
    /// A quota called `name` with `hard` limits (keys as in ResourceQuota: `pods`,
    /// `requests.cpu`, `requests.nvidia.com/gpu`, ...).
    pub fn new(name: &str, hard: Usage) -> ClusterQuota {
        ClusterQuota {
            name: name.to_string(),
            hard: RwLock::new(hard),
            bound: Mutex::new(None),
            lock: Arc::new(tokio::sync::RwLock::new(())),
        }
    }

    /// Changes the limits (the Tenant's spec changed).
    pub fn set_hard(&self, hard: Usage) {
        if let Ok(mut h) = self.hard.write() {
            *h = hard;
        }
    }

    fn hard(&self) -> Usage {
        self.hard.read().map(|h| h.clone()).unwrap_or_default()
    }

    fn try_charge(&self, requested: &Usage, hard: &Usage, dry_run: bool) -> bool {
        let Ok(mut bound) = self.bound.lock() else {
            return false;
        };
        let Some(b) = bound.as_mut() else {
            return false;
        };
        if !over(b, requested, hard).is_empty() {
            return false;
        }
        if !dry_run {
            for (k, q) in requested {
                add(b, k, q);
            }
        }
        true
    }
}

#[async_trait::async_trait]
impl Admission for ClusterQuota {
    fn name(&self) -> &'static str {
        "ClusterQuota"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.op != Operation::Create || !req.is_core("pods") || req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let hard = self.hard();
        let requested: Usage = usage_of(req.def, obj)
            .into_iter()
            .filter(|(k, _)| hard.contains_key(k))
            .collect();
        if requested.is_empty() {
            return Ok(Verdict::ok());
        }
        let read = self.lock.clone().read_owned().await;
        if self.try_charge(&requested, &hard, req.dry_run) {
            return Ok(Verdict {
                warnings: Vec::new(),
                hold: Some(Box::new(read)),
            });
        }
        drop(read);
        let write = self.lock.clone().write_owned().await;
        let mut used = Usage::new();
        for pod in req
            .registry
            .list(req.def, None, &ListParams::default())
            .await?
            .items
        {
            for (k, q) in usage_of(req.def, &pod) {
                if hard.contains_key(&k) {
                    add(&mut used, &k, &q);
                }
            }
        }
        let exceeded = over(&used, &requested, &hard);
        if let Ok(mut b) = self.bound.lock() {
            *b = Some(used);
        }
        if !exceeded.is_empty() {
            return Err(ApiError::Forbidden(format!(
                "pods \"{}\" is forbidden: exceeded the quota of {}: {}",
                obj["metadata"]["name"].as_str().unwrap_or(""),
                self.name,
                describe(&exceeded),
            )));
        }
        if !self.try_charge(&requested, &hard, req.dry_run) {
            return Err(ApiError::Internal("quota bookkeeping failed".into()));
        }
        Ok(Verdict {
            warnings: Vec::new(),
            hold: Some(Box::new(write.downgrade())),
        })
    }
}
