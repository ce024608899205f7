//! The `kubernetes` Service in `default`: by default ClusterIP 10.96.0.1, port 443 (`https`) →
//! the API server's address, with its Endpoints and EndpointSlice (named `kubernetes`), as
//! kube-apiserver keeps them; a tenant cluster's names the address its pods reach it at.
//! Recreated when deleted, corrected when changed.
//!
//! Runs only when the caller knows that address ([`crate::Config::api_service`]).
//! Woken by changes to the `default` namespace and to the three objects.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Namespace, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::shared::{shutdown, Context};

/// The namespace and name of the Service.
pub const NAMESPACE: &str = "default";
/// Its name.
pub const NAME: &str = "kubernetes";
/// Its cluster IP by default (the first of 10.96.0.0/12).
pub const CLUSTER_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 96, 0, 1));

/// What the Service says: its cluster IP and port, and the endpoint behind them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiService {
    /// The Service's cluster IP.
    pub cluster_ip: IpAddr,
    /// The Service's port (`https`).
    pub port: u16,
    /// The API server's address (the Endpoints and EndpointSlice).
    pub endpoint: SocketAddr,
}

impl ApiService {
    /// As kube-apiserver: 10.96.0.1:443 → the API server at `endpoint`.
    pub fn default_for(endpoint: SocketAddr) -> ApiService {
        ApiService {
            cluster_ip: CLUSTER_IP,
            port: 443,
            endpoint,
        }
    }

    /// A Service that is itself the endpoint: pods reach the API at `addr` (a Service of the
    /// host in front of the control plane, for a tenant cluster).
    pub fn at(addr: SocketAddr) -> ApiService {
        ApiService {
            cluster_ip: addr.ip(),
            port: addr.port(),
            endpoint: addr,
        }
    }
}

/// Errors of this controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading one of the objects failed.
    #[error("failed to read {0}: {why}", why = crate::shared::brief(.1))]
    Get(&'static str, #[source] kube::Error),
    /// Writing one of the objects failed.
    #[error("failed to write {0}: {why}", why = crate::shared::brief(.1))]
    Write(&'static str, #[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    api: ApiService,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
) {
    let ctx = Context::new(client.clone(), "kubernetes-service-controller");
    let by_name = || watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    Controller::new(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={NAMESPACE}")),
    )
    .watches(
        Api::<Service>::namespaced(client.clone(), NAMESPACE),
        by_name(),
        |_: Service| Some(ObjectRef::<Namespace>::new(NAMESPACE)),
    )
    .watches(
        Api::<Endpoints>::namespaced(client.clone(), NAMESPACE),
        by_name(),
        |_: Endpoints| Some(ObjectRef::<Namespace>::new(NAMESPACE)),
    )
    .watches(
        Api::<EndpointSlice>::namespaced(client, NAMESPACE),
        by_name(),
        |_: EndpointSlice| Some(ObjectRef::<Namespace>::new(NAMESPACE)),
    )
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        move |ns, ctx| reconcile(ns, ctx, api),
        |ns, e, ctx: Arc<Context>| ctx.failed(ns.as_ref(), e),
        ctx,
    )
    .for_each(|_| async {})
    .await;
}

fn meta() -> ObjectMeta {
    ObjectMeta {
        name: Some(NAME.into()),
        namespace: Some(NAMESPACE.into()),
        ..ObjectMeta::default()
    }
}

/// The Service as kube-apiserver writes it.
pub fn service(api: &ApiService) -> Service {
    Service {
        metadata: ObjectMeta {
            labels: Some(
                [
                    ("component".to_string(), "apiserver".to_string()),
                    ("provider".to_string(), "kubernetes".to_string()),
                ]
                .into(),
            ),
            ..meta()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(api.cluster_ip.to_string()),
            session_affinity: Some("None".into()),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: i32::from(api.port),
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(i32::from(api.endpoint.port()))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Its Endpoints.
pub fn endpoints(ip: IpAddr, port: u16) -> Endpoints {
    Endpoints {
        metadata: ObjectMeta {
            labels: Some(
                [(
                    "endpointslice.kubernetes.io/skip-mirror".to_string(),
                    "true".to_string(),
                )]
                .into(),
            ),
            ..meta()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: ip.to_string(),
                ..EndpointAddress::default()
            }]),
            not_ready_addresses: None,
            ports: Some(vec![EndpointPort {
                name: Some("https".into()),
                port: i32::from(port),
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }]),
    }
}

/// Its EndpointSlice.
pub fn slice(ip: IpAddr, port: u16) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            labels: Some([("kubernetes.io/service-name".to_string(), NAME.to_string())].into()),
            ..meta()
        },
        address_type: if ip.is_ipv6() { "IPv6" } else { "IPv4" }.into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Endpoint::default()
        }]),
        ports: Some(vec![SlicePort {
            name: Some("https".into()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>, api: ApiService) -> Result<Action> {
    if ns.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = ctx.client.clone();
    let pp = PostParams::default();

    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let want = service(&api);
    let (ip, port) = (api.endpoint.ip(), api.endpoint.port());
    match services
        .get_opt(NAME)
        .await
        .map_err(|e| Error::Get("service", e))?
    {
        None => create(&services, &want, "service").await?,
        // The cluster IP cannot change: a Service with another one is replaced.
        Some(have)
            if have.spec.as_ref().and_then(|s| s.cluster_ip.as_deref())
                != want.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) =>
        {
            match services.delete(NAME, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::Write("service", e)),
            }
            create(&services, &want, "service").await?;
        }
        Some(have) => {
            let (h, w) = (
                have.spec.clone().unwrap_or_default(),
                want.spec.clone().unwrap_or_default(),
            );
            if h.ports != w.ports {
                let mut next = have.clone();
                if let Some(s) = next.spec.as_mut() {
                    s.ports = w.ports;
                }
                services
                    .replace(NAME, &pp, &next)
                    .await
                    .map_err(|e| Error::Write("service", e))?;
            }
        }
    }

    let eps: Api<Endpoints> = Api::namespaced(client.clone(), NAMESPACE);
    let want = endpoints(ip, port);
    match eps
        .get_opt(NAME)
        .await
        .map_err(|e| Error::Get("endpoints", e))?
    {
        None => create(&eps, &want, "endpoints").await?,
        Some(have) if have.subsets != want.subsets => {
            let mut next = want.clone();
            next.metadata.resource_version = have.metadata.resource_version;
            eps.replace(NAME, &pp, &next)
                .await
                .map_err(|e| Error::Write("endpoints", e))?;
        }
        Some(_) => {}
    }

    let slices: Api<EndpointSlice> = Api::namespaced(client, NAMESPACE);
    let want = slice(ip, port);
    match slices
        .get_opt(NAME)
        .await
        .map_err(|e| Error::Get("endpointslice", e))?
    {
        None => create(&slices, &want, "endpointslice").await?,
        Some(have) if have.endpoints != want.endpoints || have.ports != want.ports => {
            let mut next = want.clone();
            next.metadata.resource_version = have.metadata.resource_version;
            slices
                .replace(NAME, &pp, &next)
                .await
                .map_err(|e| Error::Write("endpointslice", e))?;
        }
        Some(_) => {}
    }
    ctx.succeeded(ns.as_ref());
    Ok(Action::await_change())
}

async fn create<K>(api: &Api<K>, obj: &K, what: &'static str) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::Write(what, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_point_at_the_api_server() {
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let s = service(&ApiService::default_for(SocketAddr::new(ip, 6443)));
        let spec = s.spec.expect("spec");
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
        let ports = spec.ports.expect("ports");
        assert_eq!(ports[0].port, 443);
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(6443)));
        let e = endpoints(ip, 6443);
        let subset = &e.subsets.expect("subsets")[0];
        assert_eq!(
            subset.addresses.as_ref().map(|a| a[0].ip.as_str()),
            Some("127.0.0.1")
        );
        assert_eq!(subset.ports.as_ref().map(|p| p[0].port), Some(6443));
        let sl = slice("::1".parse().expect("ip"), 6443);
        assert_eq!(sl.address_type, "IPv6");
    }

    #[test]
    fn a_tenant_service_is_its_own_endpoint() {
        let addr: SocketAddr = "10.100.4.7:443".parse().expect("addr");
        let spec = service(&ApiService::at(addr)).spec.expect("spec");
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.100.4.7"));
        let ports = spec.ports.expect("ports");
        assert_eq!(ports[0].port, 443);
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(443)));
    }
}
