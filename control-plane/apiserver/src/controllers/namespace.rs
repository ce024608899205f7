//! Namespace finalization: when a namespace is `Terminating`, delete everything in it, then
//! remove the `kubernetes` finalizer, which lets the registry remove the namespace.
//!
//! Woken by changes to namespaces and re-checked every second while some namespace still holds
//! content (objects with finalizers, pods waiting for their node).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::{ApiError, Result};
use crate::object;
use crate::registry::{DeleteOptions, ListParams, Part, Registry, WriteOptions};

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

/// Deletes one namespace's content; returns whether it is empty now.
async fn empty_namespace(registry: &Registry, ns: &str) -> Result<bool> {
    let mut empty = true;
    for def in registry
        .catalog()
        .all()
        .into_iter()
        .filter(|d| d.namespaced)
    {
        let left = registry
            .delete_collection(
                &def,
                Some(ns),
                &ListParams::default(),
                &DeleteOptions::default(),
            )
            .await?;
        if !left.is_empty() {
            // Objects that are still there after delete (finalizers, graceful pods).
            let page = registry
                .list(&def, Some(ns), &ListParams::default())
                .await?;
            if !page.items.is_empty() {
                empty = false;
            }
        }
    }
    Ok(empty)
}

/// Finishes one terminating namespace when it is empty.
async fn finalize(registry: &Registry, ns: &Value) -> Result<bool> {
    let name = ns["metadata"]["name"].as_str().unwrap_or("").to_string();
    if !empty_namespace(registry, &name).await? {
        return Ok(false);
    }
    let Some(def) = registry.catalog().get("", "v1", "namespaces") else {
        return Ok(true);
    };
    let result = registry
        .update_with(
            &def,
            None,
            &name,
            None,
            Part::Finalize,
            &WriteOptions::default(),
            |old| {
                let mut new = old.clone();
                let rest: Vec<Value> = old["spec"]["finalizers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|f| f.as_str() != Some(FINALIZER))
                    .cloned()
                    .collect();
                new["spec"]["finalizers"] = json!(rest);
                Ok(new)
            },
        )
        .await;
    match result {
        Ok(_) | Err(ApiError::NotFound { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// One pass over all namespaces; returns whether any terminating one is still waiting.
pub async fn reconcile_all(registry: &Registry) -> Result<bool> {
    let Some(def) = registry.catalog().get("", "v1", "namespaces") else {
        return Ok(false);
    };
    let page = registry.list(&def, None, &ListParams::default()).await?;
    let mut waiting = false;
    for ns in page.items.iter().filter(|n| object::is_deleting(n)) {
        if !finalize(registry, ns).await? {
            waiting = true;
        }
    }
    Ok(waiting)
}

/// Runs until `shutdown` resolves.
pub async fn run(
    registry: Arc<Registry>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut wakeups = super::Wakeups::new(registry.clone(), "/core/namespaces/".into(), shutdown);
    loop {
        wakeups.arm().await;
        let pending = match reconcile_all(&registry).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "namespace finalization failed; retrying");
                true
            }
        };
        if !wakeups.wait(pending).await {
            return;
        }
    }
}
