//! The availability controller: for every APIService that names a Service, asks the backend
//! for its discovery document (`GET /apis/<group>/<version>`, as `system:kube-aggregator` in
//! `system:masters`, through the front proxy) on every change to an APIService and every
//! [`RECHECK`] (sooner, [`RETRY`], while one is unavailable; every [`IDLE_RECHECK`] while
//! there is none); sets
//! the `Available` condition
//! (written only when it changes) and keeps the document for aggregated discovery.
//!
//! The same loop keeps the Local APIServices ([`super::local`]) on the replica that runs the
//! cluster: each pass lists APIServices once for both, and it also wakes when the catalog
//! changes (a CRD's group version served or no longer served). A Local APIService (no
//! `service`) is never probed here.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::local::LocalApiServices;
use super::{Aggregator, Backend, Registration, GROUP};
use crate::controllers::Wakeups;
use crate::error::ApiError;
use crate::object;
use crate::registry::{Part, Registry, WriteOptions};

/// How often available backends are checked again.
pub const RECHECK: Duration = Duration::from_secs(30);
/// How often a cluster without APIServices looks again (besides every change).
pub const IDLE_RECHECK: Duration = Duration::from_secs(60);
/// How often an unavailable backend is tried again.
pub const RETRY: Duration = Duration::from_secs(5);
/// How long one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest OpenAPI document kept from a backend.
const MAX_OPENAPI_BYTES: usize = 8 * 1024 * 1024;

/// What one successful check found.
pub struct Checked {
    /// The discovery document (`APIResourceList`).
    pub discovery: Value,
    /// The backend's OpenAPI v3 document of the group version, when it serves one.
    pub openapi: Option<Value>,
    /// The part of the backend's OpenAPI v2 document for the group version: its paths under
    /// `/apis/<group>/<version>` and the definitions they use, when it serves one.
    pub openapi_v2: Option<Value>,
}

/// The outcome of one check: what the backend serves, or why not (reason, message).
async fn check(
    aggregator: &Aggregator,
    registry: &Registry,
    reg: &Registration,
) -> Result<Checked, (&'static str, String)> {
    let backend = aggregator.target(registry, reg).await.map_err(|e| {
        let reason = match &e {
            ApiError::Unavailable(m) if m.contains("not found") => "ServiceNotFound",
            ApiError::Unavailable(m) if m.contains("no endpoints") => "MissingEndpoints",
            _ => "FailedDiscoveryCheck",
        };
        (reason, e.to_string())
    })?;
    let (base, client) = match backend {
        Backend::Http { base, client } => (base, client),
        Backend::Simulated => {
            return Ok(Checked {
                discovery: aggregator.simulated_discovery(reg),
                openapi: None,
                openapi_v2: None,
            })
        }
    };
    let mut url = base.clone();
    url.set_path(&format!("/apis/{}/{}", reg.group, reg.version));
    let failed = |m: String| {
        (
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: {m}"),
        )
    };
    let (status, bytes) = get(&client, &url, crate::webhook::call::MAX_ANSWER_BYTES)
        .await
        .map_err(failed)?;
    if !status.is_success() {
        return Err(failed(format!(
            "bad status from {url}: {}",
            status.as_u16()
        )));
    }
    let discovery: Value = serde_json::from_slice(&bytes)
        .map_err(|e| failed(format!("not a discovery document: {e}")))?;
    if discovery["resources"].as_array().is_none() {
        return Err(failed("not an APIResourceList".into()));
    }
    // The backend's OpenAPI (optional: a backend without one is still available).
    let mut spec = base.clone();
    spec.set_path(&format!("/openapi/v3/apis/{}/{}", reg.group, reg.version));
    let openapi = match get(&client, &spec, MAX_OPENAPI_BYTES).await {
        Ok((status, bytes)) if status.is_success() => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(|d| d["openapi"].is_string() && d["paths"].is_object()),
        _ => None,
    };
    let mut spec = base;
    spec.set_path("/openapi/v2");
    let openapi_v2 = match get(&client, &spec, MAX_OPENAPI_BYTES).await {
        Ok((status, bytes)) if status.is_success() => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|d| v2_part(&d, &reg.group, &reg.version)),
        _ => None,
    };
    Ok(Checked {
        discovery,
        openapi,
        openapi_v2,
    })
}

/// The paths of `doc` (a Swagger 2.0 document) under `/apis/<group>/<version>/` and the
/// definitions they reach (transitively), as `{"paths": …, "definitions": …}`; None when the
/// document has no such path.
pub fn v2_part(doc: &Value, group: &str, version: &str) -> Option<Value> {
    let prefix = format!("/apis/{group}/{version}");
    let paths: serde_json::Map<String, Value> = doc["paths"]
        .as_object()?
        .iter()
        .filter(|(p, _)| *p == &prefix || p.starts_with(&format!("{prefix}/")))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    if paths.is_empty() {
        return None;
    }
    let all = doc["definitions"].as_object();
    let mut wanted: Vec<String> = Vec::new();
    let mut queue: Vec<Value> = paths.values().cloned().collect();
    while let Some(v) = queue.pop() {
        match v {
            Value::Object(m) => {
                if let Some(name) = m
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/definitions/"))
                {
                    if !wanted.iter().any(|w| w == name) {
                        wanted.push(name.to_string());
                        if let Some(d) = all.and_then(|a| a.get(name)) {
                            queue.push(d.clone());
                        }
                    }
                }
                queue.extend(m.into_iter().map(|(_, v)| v));
            }
            Value::Array(a) => queue.extend(a),
            _ => {}
        }
    }
    let definitions: serde_json::Map<String, Value> = wanted
        .into_iter()
        .filter_map(|n| Some((n.clone(), all?.get(&n)?.clone())))
        .collect();
    Some(json!({"paths": paths, "definitions": definitions}))
}

/// GETs `url` as the aggregator (`system:kube-aggregator` in `system:masters`).
async fn get(
    client: &reqwest::Client,
    url: &reqwest::Url,
    limit: usize,
) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
    let call = async {
        let mut resp = client
            .get(url.clone())
            .header("Accept", "application/json")
            .header("X-Remote-User", "system:kube-aggregator")
            .header("X-Remote-Group", "system:masters")
            .send()
            .await
            .map_err(crate::webhook::call::describe)?;
        let status = resp.status();
        let bytes = crate::webhook::call::read_bounded(&mut resp, limit).await?;
        Ok((status, bytes))
    };
    tokio::time::timeout(CHECK_TIMEOUT, call)
        .await
        .map_err(|_| format!("no answer within {}s", CHECK_TIMEOUT.as_secs()))?
}

/// Writes the `Available` condition when its status, reason or message changed.
async fn set_condition(
    registry: &Registry,
    reg: &Registration,
    available: bool,
    reason: &str,
    message: &str,
) -> Result<(), ApiError> {
    let status = if available { "True" } else { "False" };
    let current = reg.object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .cloned();
    if current
        .as_ref()
        .is_some_and(|c| c["status"] == status && c["reason"] == reason && c["message"] == message)
    {
        return Ok(());
    }
    let Some(def) = registry.resource(GROUP, "v1", "apiservices") else {
        return Ok(());
    };
    let transition = match &current {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(object::now()),
    };
    let condition = json!({"type": "Available", "status": status, "reason": reason,
                           "message": message, "lastTransitionTime": transition});
    let result = registry
        .update_with(
            &def,
            None,
            reg.name(),
            None,
            Part::Status,
            &WriteOptions::default(),
            |old| {
                let mut new = old.clone();
                let mut conds: Vec<Value> = old["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| c["type"] != "Available")
                    .collect();
                conds.push(condition.clone());
                new["status"]["conditions"] = json!(conds);
                Ok(new)
            },
        )
        .await;
    match result {
        Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What one pass found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// No APIService names a Service: nothing to check until one changes.
    Nothing,
    /// Every backend answered.
    Available,
    /// Some backend did not.
    Unavailable,
}

/// Whether a pass writes the `Available` condition (the replica that runs the cluster) or only
/// fills the discovery cache (a follower: two writers whose checks disagreed for a moment
/// would flap the condition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Checks, caches and writes the condition.
    Owner,
    /// Caches the discovery of backends the owner reports available; writes nothing.
    Follower,
}

/// One pass over every APIService that names a Service.
pub async fn reconcile(aggregator: &Aggregator, registry: &Registry, role: Role) -> Found {
    let items = super::list_all(registry).await.unwrap_or_default();
    check_all(aggregator, registry, role, items).await
}

/// One pass over the APIServices of `items` that name a Service.
async fn check_all(
    aggregator: &Aggregator,
    registry: &Registry,
    role: Role,
    items: Vec<Value>,
) -> Found {
    let mut unavailable = false;
    let regs = super::registrations_in(items);
    aggregator.forget_all_but(&regs);
    if regs.is_empty() {
        return Found::Nothing;
    }
    for reg in &regs {
        if role == Role::Follower {
            // The owner's verdict, and the discovery it found, from the backend directly.
            if !reg.available() {
                unavailable = true;
                aggregator.remember(&reg.group_version(), None);
            } else if let Ok(checked) = check(aggregator, registry, reg).await {
                aggregator.remember(&reg.group_version(), Some(checked));
            }
            continue;
        }
        let outcome = check(aggregator, registry, reg).await;
        let written = match outcome {
            Ok(checked) => {
                aggregator.remember(&reg.group_version(), Some(checked));
                set_condition(registry, reg, true, "Passed", "all checks passed").await
            }
            Err((reason, message)) => {
                unavailable = true;
                aggregator.remember(&reg.group_version(), None);
                set_condition(registry, reg, false, reason, &message).await
            }
        };
        if let Err(e) = written {
            tracing::debug!(apiservice = reg.name(), error = %e, "cannot write the APIService's status");
        }
    }
    if unavailable {
        Found::Unavailable
    } else {
        Found::Available
    }
}

/// Runs until `shutdown` resolves: as [`Role::Owner`], also keeps the Local APIServices.
pub async fn run(
    aggregator: Arc<Aggregator>,
    registry: Arc<Registry>,
    role: Role,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let Some(def) = registry.resource(GROUP, "v1", "apiservices") else {
        return;
    };
    let mut wakeups = Wakeups::new(registry.clone(), def.key_prefix(None), shutdown);
    let mut local = (role == Role::Owner).then(LocalApiServices::default);
    // Told when a CRD's group version comes or goes (only the owner keeps Local ones).
    let mut catalog = local.as_ref().map(|_| registry.catalog().subscribe());
    loop {
        wakeups.arm().await;
        if let Some(rx) = catalog.as_mut() {
            rx.borrow_and_update();
        }
        let listed = super::list_all(&registry).await;
        let local_pending = match (&mut local, &listed) {
            (Some(local), Ok(items)) => {
                let errors = local.reconcile(&registry, items).await;
                for e in &errors {
                    tracing::debug!(error = %e, "cannot keep the Local APIServices");
                }
                !errors.is_empty()
            }
            (Some(_), Err(e)) => {
                tracing::debug!(error = %e, "cannot list APIServices");
                true
            }
            (None, _) => false,
        };
        let found = check_all(&aggregator, &registry, role, listed.unwrap_or_default()).await;
        let next = match found {
            Found::Unavailable => RETRY,
            _ if local_pending => RETRY,
            Found::Available => RECHECK,
            // Without APIServices a pass is one empty list; it still runs now and then, so a
            // missed wakeup would delay a new APIService's condition by at most this.
            Found::Nothing => IDLE_RECHECK,
        };
        let go_on = match catalog.as_mut() {
            Some(rx) => tokio::select! {
                go_on = wakeups.wait_at_most(Some(next)) => go_on,
                changed = rx.changed() => {
                    if changed.is_err() {
                        catalog = None;
                    }
                    true
                }
            },
            None => wakeups.wait_at_most(Some(next)).await,
        };
        if !go_on {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_part_is_the_group_version_s_paths_and_what_they_use() {
        let doc = json!({"swagger": "2.0",
            "paths": {
                "/apis/g.example/v1/things": {"get": {"responses": {"200": {"schema":
                    {"$ref": "#/definitions/g.v1.ThingList"}}}}},
                "/apis/g.example/v2/things": {"get": {}},
                "/api/v1/pods": {"get": {}}},
            "definitions": {
                "g.v1.ThingList": {"properties": {"items": {"type": "array",
                    "items": {"$ref": "#/definitions/g.v1.Thing"}}}},
                "g.v1.Thing": {"properties": {"metadata": {"$ref": "#/definitions/meta.ObjectMeta"}}},
                "meta.ObjectMeta": {"type": "object"},
                "unused": {"type": "object"}}});
        let part = v2_part(&doc, "g.example", "v1").expect("part");
        let paths: Vec<&String> = part["paths"].as_object().expect("paths").keys().collect();
        assert_eq!(paths, ["/apis/g.example/v1/things"]);
        let mut defs: Vec<&String> = part["definitions"]
            .as_object()
            .expect("definitions")
            .keys()
            .collect();
        defs.sort();
        assert_eq!(defs, ["g.v1.Thing", "g.v1.ThingList", "meta.ObjectMeta"]);
        assert!(v2_part(&doc, "other.example", "v1").is_none());
    }
}
