//! LimitRanger: a namespace's LimitRanges give containers default requests and limits, and
//! bound them (`min`, `max`, `maxLimitRequestRatio`) per container and per pod. A pod outside
//! the bounds is refused with upstream's messages.
//!
//! [`LimitRanger::fixed`] is the same plugin over ranges given once for every namespace rather
//! than read from the namespace: a tenant cluster gets the ranges of its host namespace this
//! way, so that a pod the host would default and then refuse is defaulted and refused in the
//! tenant already. It runs after the namespace's own ranges (which the tenant's pods carry to
//! the host), so that it fills only what they leave open, as the host's ranges do.

use fabrik_machinery::quantity::Quantity;
use fabrik_machinery::resources::{pod_limits, pod_requests, ResourceList};
use serde_json::{json, Map, Value};

use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;

/// The plugin.
#[derive(Default)]
pub struct LimitRanger {
    /// Ranges given once (LimitRange objects) instead of the namespace's, with the plugin's
    /// name in messages.
    fixed: Option<(&'static str, Vec<Value>)>,
}

impl LimitRanger {
    /// The plugin over every namespace's own LimitRanges (upstream's).
    pub fn namespaced() -> LimitRanger {
        LimitRanger::default()
    }

    /// The plugin over `ranges` (LimitRange objects, or just their `spec`s), the same in every
    /// namespace; `name` names it in the chain.
    pub fn fixed(name: &'static str, ranges: Vec<Value>) -> LimitRanger {
        let ranges = ranges
            .into_iter()
            .map(|r| {
                if r.get("spec").is_some() {
                    r
                } else {
                    json!({ "spec": r })
                }
            })
            .collect();
        LimitRanger {
            fixed: Some((name, ranges)),
        }
    }

    async fn ranges(&self, req: &Request<'_>) -> Result<Vec<Value>, ApiError> {
        match &self.fixed {
            Some((_, ranges)) => Ok(ranges.clone()),
            None => limit_ranges(req).await,
        }
    }
}

fn quantities(v: &Value) -> Vec<(String, Quantity)> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Quantity::from_json(v).ok().map(|q| (k.clone(), q)))
        .collect()
}

async fn limit_ranges(req: &Request<'_>) -> Result<Vec<Value>, ApiError> {
    let (Some(ns), Some(def)) = (req.namespace, req.objects.resource("", "v1", "limitranges"))
    else {
        return Ok(Vec::new());
    };
    req.objects.list(&def, Some(ns)).await
}

fn items<'a>(ranges: &'a [Value], ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    ranges
        .iter()
        .flat_map(|r| r["spec"]["limits"].as_array().into_iter().flatten())
        .filter(move |i| i["type"].as_str() == Some(ty))
}

fn set_missing(c: &mut Value, field: &str, defaults: &[(String, Quantity)]) {
    if defaults.is_empty() {
        return;
    }
    let Some(obj) = c.as_object_mut() else {
        return;
    };
    let resources = obj.entry("resources").or_insert_with(|| json!({}));
    let Some(resources) = resources.as_object_mut() else {
        return;
    };
    let target = resources.entry(field).or_insert_with(|| json!({}));
    let Some(target) = target.as_object_mut() else {
        return;
    };
    for (k, q) in defaults {
        if !target.contains_key(k) {
            target.insert(k.clone(), json!(q.to_string()));
        }
    }
}

fn check_bounds(
    what: &str,
    item: &Value,
    requests: &Map<String, Value>,
    limits: &Map<String, Value>,
    errors: &mut Vec<String>,
) {
    let get = |m: &Map<String, Value>, k: &str| m.get(k).and_then(|v| Quantity::from_json(v).ok());
    for (k, min) in quantities(&item["min"]) {
        match get(requests, &k) {
            Some(r) if r < min => errors.push(format!(
                "minimum {k} usage per {what} is {min}, but request is {r}"
            )),
            None => errors.push(format!(
                "minimum {k} usage per {what} is {min}.  No request is specified"
            )),
            _ => {}
        }
    }
    for (k, max) in quantities(&item["max"]) {
        match get(limits, &k) {
            Some(l) if l > max => errors.push(format!(
                "maximum {k} usage per {what} is {max}, but limit is {l}"
            )),
            None => errors.push(format!(
                "maximum {k} usage per {what} is {max}.  No limit is specified"
            )),
            _ => {}
        }
    }
    for (k, ratio) in quantities(&item["maxLimitRequestRatio"]) {
        if let (Some(l), Some(r)) = (get(limits, &k), get(requests, &k)) {
            if r.nanos() > 0
                && (l.nanos() as f64) > (ratio.nanos() as f64 / 1e9) * (r.nanos() as f64)
            {
                errors.push(format!(
                    "{k} max limit to request ratio per {what} is {ratio}, but provided ratio is {:.6}",
                    l.nanos() as f64 / r.nanos() as f64
                ));
            }
        }
    }
}

#[async_trait::async_trait]
impl Admission for LimitRanger {
    fn name(&self) -> &'static str {
        match &self.fixed {
            Some((name, _)) => name,
            None => "LimitRanger",
        }
    }

    async fn mutate(
        &self,
        req: &Request<'_>,
        pod: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if req.op != Operation::Create || !req.is_core("pods") || req.subresource.is_some() {
            return Ok(());
        }
        let ranges = self.ranges(req).await?;
        for item in items(&ranges, "Container") {
            // Upstream defaulting: default limit ← max; default request ← default limit.
            let mut default_limit = quantities(&item["default"]);
            if default_limit.is_empty() {
                default_limit = quantities(&item["max"]);
            }
            let mut default_request = quantities(&item["defaultRequest"]);
            for (k, q) in &default_limit {
                if !default_request.iter().any(|(dk, _)| dk == k) {
                    default_request.push((k.clone(), *q));
                }
            }
            for key in ["containers", "initContainers"] {
                let Some(cs) = pod["spec"].get_mut(key).and_then(Value::as_array_mut) else {
                    continue;
                };
                for c in cs {
                    // A container with only a limit requests that limit (upstream).
                    let limits = quantities(&c["resources"]["limits"]);
                    set_missing(c, "requests", &limits);
                    set_missing(c, "limits", &default_limit);
                    set_missing(c, "requests", &default_request);
                }
            }
        }
        Ok(())
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        pod: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.op != Operation::Create || !req.is_core("pods") || req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let ranges = self.ranges(req).await?;
        if ranges.is_empty() {
            return Ok(Verdict::ok());
        }
        let mut errors = Vec::new();
        let empty = Map::new();
        for item in items(&ranges, "Container") {
            for key in ["containers", "initContainers"] {
                for c in pod["spec"][key].as_array().into_iter().flatten() {
                    let requests = c["resources"]["requests"].as_object().unwrap_or(&empty);
                    let limits = c["resources"]["limits"].as_object().unwrap_or(&empty);
                    check_bounds("Container", item, requests, limits, &mut errors);
                }
            }
        }
        let to_map = |u: ResourceList| -> Map<String, Value> {
            u.into_iter()
                .map(|(k, q)| (k, json!(q.to_string())))
                .collect()
        };
        let (requests, limits) = (to_map(pod_requests(pod)), to_map(pod_limits(pod)));
        for item in items(&ranges, "Pod") {
            check_bounds("Pod", item, &requests, &limits, &mut errors);
        }
        if errors.is_empty() {
            return Ok(Verdict::ok());
        }
        Err(ApiError::Forbidden(format!(
            "pods \"{}\" is forbidden: [{}]",
            pod["metadata"]["name"].as_str().unwrap_or(""),
            errors.join(", ")
        )))
    }
}
