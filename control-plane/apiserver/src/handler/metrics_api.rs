//! The built-in `metrics.k8s.io/v1beta1` ([`crate::resource_metrics`]): `nodes` and `pods`,
//! get and list (label selectors on lists), answered from the cluster's source; nodes only as
//! far as the cluster has them (a tenant sees its own pool).

use super::*;
use crate::resource_metrics::{self as rm, GROUP, VERSION};

impl ApiServer {
    /// Whether the built-in metrics API answers `route`: served here and no APIService
    /// registered for it.
    pub(super) fn serves_metrics(&self, route: &Route) -> bool {
        let ours = match route {
            Route::Resource(r) => r.group == GROUP && r.version == VERSION,
            Route::GroupVersion(g, v) => g == GROUP && v == VERSION,
            _ => false,
        };
        ours && self.settings.resource_metrics.is_some()
    }

    /// Answers a request for the built-in metrics API.
    pub(super) async fn metrics_api(&self, route: Route, query: &Query) -> Result<Reply> {
        let source = self
            .settings
            .resource_metrics
            .clone()
            .ok_or(ApiError::NoRoute)?;
        let r = match route {
            Route::GroupVersion(..) => {
                return Ok(Reply::json(StatusCode::OK, &rm::resource_list()));
            }
            Route::Resource(r) => r,
            _ => return Err(ApiError::NoRoute),
        };
        if !matches!(r.verb, Verb::Get | Verb::List) || r.subresource.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        let (selector, _) = query.selectors()?;
        let now = crate::object::now();
        let unavailable =
            |e: String| ApiError::Unavailable(format!("resource metrics are not available: {e}"));
        let (items, kind): (Vec<Value>, &str) = match r.resource.as_str() {
            "nodes" => {
                let nodes_def = self
                    .registry
                    .resource("", "v1", "nodes")
                    .ok_or(ApiError::NoRoute)?;
                let known: Vec<String> = self
                    .registry
                    .list(&nodes_def, None, &ListParams::default())
                    .await?
                    .items
                    .iter()
                    .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
                    .collect();
                let nodes = source.nodes().await.map_err(unavailable)?;
                let items = nodes
                    .iter()
                    .filter(|n| known.contains(&n.name))
                    .filter(|n| selector.matches(Some(&n.labels)))
                    .filter(|n| r.name.as_deref().is_none_or(|name| name == n.name))
                    .map(|n| rm::node_metrics(n, &now))
                    .collect();
                (items, "NodeMetrics")
            }
            "pods" => {
                let pods = source
                    .pods(r.namespace.as_deref())
                    .await
                    .map_err(unavailable)?;
                let items = pods
                    .iter()
                    .filter(|p| selector.matches(Some(&p.labels)))
                    .filter(|p| r.name.as_deref().is_none_or(|name| name == p.name))
                    .map(|p| rm::pod_metrics(p, &now))
                    .collect();
                (items, "PodMetrics")
            }
            _ => return Err(ApiError::NoRoute),
        };
        if let Some(name) = &r.name {
            let item = items.into_iter().next().ok_or_else(|| ApiError::NotFound {
                resource: crate::error::GroupResource {
                    group: GROUP.into(),
                    resource: r.resource.clone(),
                },
                name: name.clone(),
            })?;
            return Ok(Reply::json(StatusCode::OK, &item));
        }
        Ok(Reply::json(
            StatusCode::OK,
            &json!({"kind": format!("{kind}List"), "apiVersion": format!("{GROUP}/{VERSION}"),
                    "metadata": {}, "items": items}),
        ))
    }
}
