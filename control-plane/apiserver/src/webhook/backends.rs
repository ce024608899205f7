//! Where a webhook's `service` reference is served: one trait, a backend per kind of cluster.
//!
//! - [`ClusterIp`]: upstream's default — the Service's cluster IP and port, for a control plane
//!   that runs on the host network of the cluster it serves;
//! - the tenant manager's backends (in the control plane) map a tenant's Service to its copy
//!   on the host, and say when the pods behind it run on simulated nodes (nothing listens
//!   there; the simulation answers as a webhook that admits without changes);
//! - [`LocalPorts`]: for `fabrik up` with `--local-backends`, a Service annotated with
//!   [`LOCAL_PORT_ANNOTATION`] is served by a process on this machine at that port, when the
//!   platform allowed the port — so a test or a developer can run a real webhook next to a
//!   simulated cluster. Off unless the flag is given; never set on a real host.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::Arc;

use serde_json::Value;

/// The Service annotation that names the local port serving it (with `--local-backends`).
pub const LOCAL_PORT_ANNOTATION: &str = "sim.fabrik.dev/local-port";

/// Where one call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Connect to this address (TLS verified for the Service's DNS name).
    Address(SocketAddr),
    /// The Service's pods run on simulated nodes: nothing listens, the simulation answers.
    Simulated,
}

/// Resolves a cluster's Service references.
#[async_trait::async_trait]
pub trait Backends: Send + Sync {
    /// Where a call to `port` of `service` (the cluster's own Service object) goes; the error
    /// says why there is nowhere to call.
    async fn locate(&self, service: &Value, port: u16) -> Result<Backend, String>;
}

/// Upstream's default: the Service's cluster IP and port.
pub struct ClusterIp;

#[async_trait::async_trait]
impl Backends for ClusterIp {
    async fn locate(&self, service: &Value, port: u16) -> Result<Backend, String> {
        cluster_ip_backend(service, port)
    }
}

/// The cluster IP of `service` at `port` (the Service must have that port).
pub fn cluster_ip_backend(service: &Value, port: u16) -> Result<Backend, String> {
    let name = service_name(service);
    let has_port = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["port"].as_u64() == Some(u64::from(port)));
    if !has_port {
        return Err(format!("service {name} has no port {port}"));
    }
    let ip = service["spec"]["clusterIP"].as_str().unwrap_or("");
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("service {name} has no cluster IP ({ip:?})"))?;
    Ok(Backend::Address(SocketAddr::new(ip, port)))
}

/// `namespace/name` of a Service, for messages.
pub fn service_name(service: &Value) -> String {
    format!(
        "{}/{}",
        service["metadata"]["namespace"].as_str().unwrap_or(""),
        service["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Local processes the platform allows to serve annotated Services (see the module).
pub struct LocalPorts {
    ports: RangeInclusive<u16>,
    inner: Arc<dyn Backends>,
}

impl LocalPorts {
    /// Serves annotated Services from `ports` on the loopback address, others from `inner`.
    pub fn new(ports: RangeInclusive<u16>, inner: Arc<dyn Backends>) -> LocalPorts {
        LocalPorts { ports, inner }
    }
}

#[async_trait::async_trait]
impl Backends for LocalPorts {
    async fn locate(&self, service: &Value, port: u16) -> Result<Backend, String> {
        let Some(local) = service["metadata"]["annotations"][LOCAL_PORT_ANNOTATION].as_str() else {
            return self.inner.locate(service, port).await;
        };
        match local.parse::<u16>() {
            Ok(p) if self.ports.contains(&p) => Ok(Backend::Address(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                p,
            ))),
            _ => Err(format!(
                "service {} names local port {local:?}, outside the ports this platform allows \
                 ({}-{})",
                service_name(service),
                self.ports.start(),
                self.ports.end()
            )),
        }
    }
}

/// Parses `--local-backends`: `PORT` or `FIRST-LAST`.
pub fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let parse = |p: &str| {
        p.trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{s:?} is not a port or a range of ports (FIRST-LAST)"))
    };
    let (a, b) = (parse(a)?, parse(b)?);
    if a > b {
        return Err(format!("{s:?}: the first port is after the last"));
    }
    Ok(a..=b)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn svc(annotations: Value) -> Value {
        json!({"metadata": {"namespace": "n", "name": "s", "annotations": annotations},
               "spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 443}]}})
    }

    #[tokio::test]
    async fn local_ports_only_within_the_allowed_range() {
        let b = LocalPorts::new(20000..=20010, Arc::new(ClusterIp));
        assert_eq!(
            b.locate(&svc(json!({LOCAL_PORT_ANNOTATION: "20005"})), 443)
                .await,
            Ok(Backend::Address("127.0.0.1:20005".parse().expect("addr")))
        );
        assert!(b
            .locate(&svc(json!({LOCAL_PORT_ANNOTATION: "22"})), 443)
            .await
            .is_err());
        assert_eq!(
            b.locate(&svc(json!({})), 443).await,
            Ok(Backend::Address("10.96.0.20:443".parse().expect("addr")))
        );
        assert!(b.locate(&svc(json!({})), 8443).await.is_err());
    }

    #[test]
    fn port_ranges_parse() {
        assert_eq!(parse_port_range("20000-20099"), Ok(20000..=20099));
        assert_eq!(parse_port_range("9443"), Ok(9443..=9443));
        for bad in ["0", "2-1", "a-b", "70000"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }
}
