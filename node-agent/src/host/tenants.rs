//! What the segment reconciliation reads from the host besides the node's pods: every Tenant
//! (`tenants.fabrik.dev`, for `spec.network.segment`) and every Node (for the other nodes'
//! VTEPs and segments).

use fabrik_api::tenant::Tenant;
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::{Api, Client};

use super::{api, Result};

/// Every Tenant on the host.
pub async fn list(client: &Client) -> Result<Vec<Tenant>> {
    let tenants: Api<Tenant> = Api::all(client.clone());
    Ok(tenants
        .list(&ListParams::default())
        .await
        .map_err(api("listing Tenants"))?
        .items)
}

/// Every Node on the host.
pub async fn nodes(client: &Client) -> Result<Vec<Node>> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await
        .map_err(api("listing nodes"))?
        .items)
}
