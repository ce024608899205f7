//! A tenant Service's cluster IP, taken from the host: its host copy is made while the tenant
//! Service is being created, and the address the host gave it is the tenant's.
//!
//! Why host first: the tenant's pods run on the host, where only the host copy's address
//! works. A tenant cluster that chose its own addresses would show one in `kubectl get svc`
//! that no pod can use, and its DNS answers and service environment would have to lie about
//! it. (vCluster allocates in the virtual cluster and then recreates the virtual Service with
//! the host's address; here the tenant's API server is ours, so the address is right from the
//! first answer.)
//!
//! Races: the copy exists for a moment before the tenant stores the Service. The syncer leaves
//! a young copy without a tenant object alone for [`ORPHAN_GRACE`]; a copy it removed anyway is
//! made again asking for the same address ([`crate::services::host_service`]). A Service whose
//! create then fails leaves a copy that the syncer removes after the grace.

use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::Client;
use serde_json::Value;

use crate::naming;
use crate::policy::Policy;
use crate::services::{self, is_api_service};

/// How long a host Service copy without a tenant Service is left alone after its creation.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// Why no address was taken from the host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host refused the copy's spec (an address that is not free or not in its range).
    #[error("{0}")]
    Refused(String),
    /// The host forbade the copy (its quota or policy in the tenant's host namespace).
    #[error("the host refused the Service's copy: {0}")]
    Forbidden(String),
    /// The host name of the copy belongs to another object.
    #[error("the host name {0} of the Service's copy belongs to another object")]
    Taken(String),
    /// An earlier copy of the Service is still being deleted on the host.
    #[error("the Service's previous copy on the host is still being deleted; try again")]
    Deleting,
    /// The host could not be asked.
    #[error("failed to create the Service's copy on the host: {0}")]
    Host(#[source] kube::Error),
}

/// The cluster IP of tenant Service `svc` of `tenant` (whose host namespace is
/// `host_namespace`): the address of its host copy, which is created now (or, when a copy of
/// this Service is already there, kept). `Ok(None)`: the Service takes no address from the
/// host — headless, `ExternalName`, or the tenant's own `kubernetes` Service, whose address
/// (the control plane's Service on the host) is taken as given.
pub async fn reserve(
    host: &Client,
    tenant: &str,
    host_namespace: &str,
    svc: &Value,
) -> Result<Option<String>, Error> {
    let meta = &svc["metadata"];
    let (ns, name) = (
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
    );
    let spec = &svc["spec"];
    if is_api_service(ns, name) {
        return Ok(spec["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .map(str::to_string));
    }
    if spec["type"].as_str() == Some("ExternalName") || spec["clusterIP"].as_str() == Some("None") {
        return Ok(None);
    }
    // The address is all that is wanted now; the syncer writes the full copy (with the
    // tenant's policy) when the Service is stored.
    let mut copy = services::host_service(svc, tenant, None, &Policy::default());
    // A plain ClusterIP Service: node ports and load balancers are the host's to give when the
    // syncer writes the full copy (the tenant's own quota has refused what it must by then).
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.insert("type".into(), serde_json::json!("ClusterIP"));
        spec.remove("externalTrafficPolicy");
    }
    let hname = copy["metadata"]["name"].as_str().unwrap_or("").to_string();
    let api: Api<DynamicObject> = Api::namespaced_with(
        host.clone(),
        host_namespace,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    );
    let data: DynamicObject =
        serde_json::from_value(copy).map_err(|e| Error::Refused(e.to_string()))?;
    // Twice: a copy found taken and then gone was deleted in between (by the syncer, for an
    // earlier Service of the name).
    let mut attempts = 0;
    let made = loop {
        attempts += 1;
        match create_or_adopt(&api, &data, &hname, tenant, ns, name).await {
            Err(Error::Deleting) if attempts < 2 => continue,
            other => break other?,
        }
    };
    Ok(made.data["spec"]["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(str::to_string))
}

/// Creates the copy, or takes the one of this Service that is there.
async fn create_or_adopt(
    api: &Api<DynamicObject>,
    data: &DynamicObject,
    hname: &str,
    tenant: &str,
    ns: &str,
    name: &str,
) -> Result<DynamicObject, Error> {
    Ok(match api.create(&PostParams::default(), data).await {
        Ok(made) => made,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let found = api.get_opt(hname).await.map_err(Error::Host)?;
            let Some(found) = found else {
                return Err(Error::Deleting);
            };
            let value = serde_json::to_value(&found).unwrap_or_default();
            if !naming::is_copy_of(&value, tenant, ns, name) {
                return Err(Error::Taken(hname.to_string()));
            }
            if found.metadata.deletion_timestamp.is_some() {
                return Err(Error::Deleting);
            }
            found
        }
        Err(kube::Error::Api(s)) if s.code == 422 => {
            // The host's causes say why (`failed to allocate IP ...`); its message names the
            // copy.
            let causes: Vec<&str> = s
                .details
                .iter()
                .flat_map(|d| d.causes.iter().map(|c| c.message.as_str()))
                .collect();
            let why = if causes.is_empty() {
                host_message(&s.message, hname, name)
            } else {
                causes.join("; ")
            };
            return Err(Error::Refused(why));
        }
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Err(Error::Forbidden(host_message(&s.message, hname, name)))
        }
        Err(e) => return Err(Error::Host(e)),
    })
}

/// The host's message with the tenant's name in place of the copy's.
fn host_message(message: &str, host_name: &str, name: &str) -> String {
    message.replace(host_name, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_message_names_the_tenant_service() {
        assert_eq!(
            host_message(
                "Service \"web-x-default-x-t\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated",
                "web-x-default-x-t",
                "web"
            ),
            "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated"
        );
    }
}
