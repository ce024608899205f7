//! ClusterRole aggregation: a ClusterRole with an `aggregationRule` gets the union of the rules
//! of every ClusterRole its selectors match (`admin`, `edit`, `view` are built this way, and
//! operators extend them by labelling their own roles). Woken by ClusterRole changes.

use std::sync::Arc;

use fabrik_machinery::labels::Selector;
use serde_json::{json, Value};

use crate::error::Result;
use crate::registry::{ListParams, Part, Registry, WriteOptions};

/// The rules `role` should have, if it aggregates.
pub fn aggregate(role: &Value, all: &[Value]) -> Option<Vec<Value>> {
    let selectors = role["aggregationRule"]["clusterRoleSelectors"].as_array()?;
    let selectors: Vec<Selector> = selectors
        .iter()
        .filter_map(|s| Selector::from_label_selector(s).ok())
        .collect();
    let own = role["metadata"]["name"].as_str().unwrap_or("");
    let mut rules: Vec<Value> = Vec::new();
    let mut sources: Vec<&Value> = all
        .iter()
        .filter(|r| r["metadata"]["name"].as_str() != Some(own))
        .filter(|r| {
            let labels = r["metadata"]["labels"].as_object();
            selectors.iter().any(|s| !s.is_empty() && s.matches(labels))
        })
        .collect();
    sources.sort_by_key(|r| r["metadata"]["name"].as_str().unwrap_or("").to_string());
    for src in sources {
        for rule in src["rules"].as_array().into_iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

async fn reconcile_all(registry: &Registry) -> Result<()> {
    let Some(def) = registry.resource("rbac.authorization.k8s.io", "v1", "clusterroles") else {
        return Ok(());
    };
    let all = registry
        .list(&def, None, &ListParams::default())
        .await?
        .items;
    for role in &all {
        let Some(rules) = aggregate(role, &all) else {
            continue;
        };
        if role["rules"].as_array() == Some(&rules) {
            continue;
        }
        let name = role["metadata"]["name"].as_str().unwrap_or("").to_string();
        let rules = json!(rules);
        registry
            .update_with(
                &def,
                None,
                &name,
                None,
                Part::Main,
                &WriteOptions::default(),
                |cur| {
                    let mut next = cur.clone();
                    next["rules"] = rules.clone();
                    Ok(next)
                },
            )
            .await?;
    }
    Ok(())
}

/// Runs until `shutdown`.
pub async fn run(
    registry: Arc<Registry>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let mut wakeups = crate::controllers::Wakeups::new(
        registry.clone(),
        "/rbac.authorization.k8s.io/clusterroles/".into(),
        shutdown,
    );
    loop {
        wakeups.arm().await;
        let pending = match reconcile_all(&registry).await {
            Ok(()) => false,
            Err(e) => {
                tracing::warn!(error = %e, "ClusterRole aggregation failed; retrying");
                true
            }
        };
        if !wakeups.wait(pending).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_roles_collect_matching_rules() {
        let roles = super::super::bootstrap::cluster_roles();
        let view = roles
            .iter()
            .find(|r| r["metadata"]["name"] == "view")
            .expect("view");
        let admin = roles
            .iter()
            .find(|r| r["metadata"]["name"] == "admin")
            .expect("admin");
        let view_rules = aggregate(view, &roles).expect("aggregates");
        let admin_rules = aggregate(admin, &roles).expect("aggregates");
        assert!(!view_rules.is_empty());
        // admin includes everything view has, and more.
        assert!(view_rules.iter().all(|r| admin_rules.contains(r)));
        assert!(admin_rules.len() > view_rules.len());
        let cluster_admin = roles
            .iter()
            .find(|r| r["metadata"]["name"] == "cluster-admin")
            .expect("cluster-admin");
        assert!(aggregate(cluster_admin, &roles).is_none());
    }
}
