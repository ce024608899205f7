//! What an aggregated API server needs to trust this cluster, as upstream publishes it: the
//! ConfigMap `kube-system/extension-apiserver-authentication` (the client CA, and the
//! request-header settings of the front proxy), the Role that lets backends read it and the
//! ClusterRole `system:auth-delegator` (token and access reviews) that charts bind to.

use serde_json::{json, Value};

use super::FRONT_PROXY_NAME;
use crate::error::{ApiError, Result};
use crate::registry::{Registry, WriteOptions};

/// The ConfigMap's name (in `kube-system`).
pub const CONFIG_MAP: &str = "extension-apiserver-authentication";

fn config_map(client_ca_pem: &str) -> Value {
    let list = |v: &str| json!([v]).to_string();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": "kube-system"},
        "data": {
            "client-ca-file": client_ca_pem,
            // The front proxy's certificate is issued by the cluster's client CA; only the
            // name below may assert identities in headers.
            "requestheader-client-ca-file": client_ca_pem,
            "requestheader-allowed-names": list(FRONT_PROXY_NAME),
            "requestheader-username-headers": list("X-Remote-User"),
            "requestheader-uid-headers": list("X-Remote-Uid"),
            "requestheader-group-headers": list("X-Remote-Group"),
            "requestheader-extra-headers-prefix": list("X-Remote-Extra-"),
        },
    })
}

/// Writes the ConfigMap (created, or replaced when the CA changed) and the Role that reads it.
pub async fn publish(registry: &Registry, client_ca_pem: &str) -> Result<()> {
    let Some(cms) = registry.resource("", "v1", "configmaps") else {
        return Ok(());
    };
    let want = config_map(client_ca_pem);
    match registry.get(&cms, Some("kube-system"), CONFIG_MAP).await {
        Ok(have) if have["data"] == want["data"] => {}
        Ok(_) => {
            registry
                .update_with(
                    &cms,
                    Some("kube-system"),
                    CONFIG_MAP,
                    None,
                    crate::registry::Part::Main,
                    &WriteOptions::default(),
                    |old| {
                        let mut new = old.clone();
                        new["data"] = want["data"].clone();
                        Ok(new)
                    },
                )
                .await?;
        }
        Err(ApiError::NotFound { .. }) => {
            match registry
                .create(
                    &cms,
                    Some("kube-system"),
                    want.clone(),
                    &WriteOptions::default(),
                )
                .await
            {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    if let Some(roles) = registry.resource("rbac.authorization.k8s.io", "v1", "roles") {
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {
                "name": "extension-apiserver-authentication-reader",
                "namespace": "kube-system",
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            },
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": [CONFIG_MAP], "verbs": ["get", "list", "watch"]}],
        });
        match registry
            .create(&roles, Some("kube-system"), role, &WriteOptions::default())
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
