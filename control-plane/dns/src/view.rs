//! One tenant's cluster DNS records, indexed from its Services, EndpointSlices and Pods; no I/O.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use hickory_proto::rr::rdata::{A, CNAME, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The TTL of every answer, in seconds (the CoreDNS `kubernetes` plugin's default).
pub const TTL: u32 = 5;

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cluster domain is empty or has a label that is not a DNS label.
    #[error("invalid cluster domain {0:?}: want dot-separated labels of a-z, 0-9 and '-'")]
    InvalidDomain(String),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The cluster domain (`cluster.local` by default): lower case, no trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain(String);

impl Domain {
    /// Parses a cluster domain; case and one trailing dot are ignored.
    pub fn new(domain: &str) -> Result<Self> {
        let lower = domain
            .strip_suffix('.')
            .unwrap_or(domain)
            .to_ascii_lowercase();
        if lower.is_empty() || !lower.split('.').all(is_label) {
            return Err(Error::InvalidDomain(domain.to_string()));
        }
        Ok(Self(lower))
    }

    /// The domain, e.g. `cluster.local`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Domain {
    fn default() -> Self {
        Self("cluster.local".to_string())
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The objects a [`View`] is built from: one tenant's Services, EndpointSlices and Pods, all
/// namespaces. The watches and the tests hand them over alike.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// core/v1 Services.
    pub services: Vec<Arc<Service>>,
    /// discovery.k8s.io/v1 EndpointSlices.
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    /// core/v1 Pods.
    pub pods: Vec<Arc<Pod>>,
}

/// What a [`View`] says about one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The name has records of the asked type (or a CNAME, whatever the type).
    Records(Vec<Record>),
    /// The name exists, but has no records of the asked type (NOERROR, no answers).
    NoData,
    /// The name is under the cluster domain and does not exist (NXDOMAIN).
    NxDomain,
    /// The name is not under the cluster domain: someone else's to answer (forwarded).
    NotOurs,
}

/// The records at one name. A name that only has names below it (`svc.cluster.local`,
/// `<ns>.svc.cluster.local`) is a node with nothing in it: it exists, so it answers NODATA.
#[derive(Debug, Default)]
struct Node {
    a: Vec<Ipv4Addr>,
    cname: Option<Name>,
    /// Port and target, sorted.
    srv: Vec<(u16, Name)>,
}

/// One tenant's cluster DNS: every name it answers, looked up by its lower-case text.
///
/// Built whole from [`Objects`] ([`View::build`]) whenever they change; a query is one hash
/// lookup.
#[derive(Debug)]
pub struct View {
    domain: Domain,
    names: HashMap<String, Node>,
    pod_ips: HashSet<IpAddr>,
}

impl View {
    /// A view with no objects: only the cluster domain and its `svc` and `pod` subdomains exist.
    pub fn empty(domain: Domain) -> Self {
        Self::build(&domain, &Objects::default())
    }

    /// Indexes a tenant's objects. Objects whose names are not DNS labels, and addresses that
    /// do not parse, are left out.
    pub fn build(domain: &Domain, objects: &Objects) -> Self {
        let mut b = Builder {
            domain: domain.as_str(),
            names: HashMap::new(),
            pod_ips: HashSet::new(),
        };
        b.node(domain.as_str().to_string());
        b.node(format!("svc.{domain}"));
        b.node(format!("pod.{domain}"));
        // Headless Services by (namespace, name), with `publishNotReadyAddresses`.
        let mut headless: HashMap<(String, String), bool> = HashMap::new();
        for svc in &objects.services {
            if let Some(key) = b.service(svc) {
                headless.insert(key.0, key.1);
            }
        }
        for slice in &objects.endpoint_slices {
            b.endpoint_slice(slice, &headless);
        }
        for pod in &objects.pods {
            b.pod(pod, &headless);
        }
        b.finish(domain.clone())
    }

    /// The cluster domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The IPs of this tenant's running pods (both families), which select this view as the
    /// source of a query. Pods on the host network and finished pods are not in it.
    pub fn pod_ips(&self) -> &HashSet<IpAddr> {
        &self.pod_ips
    }

    /// Answers one question (class IN). The records carry `name` as asked (case kept) and
    /// [`TTL`].
    pub fn answer(&self, name: &Name, qtype: RecordType) -> Answer {
        let node = match self.key(name) {
            Key::NotOurs => return Answer::NotOurs,
            Key::Impossible => None,
            Key::Name(key) => self.names.get(&key),
        };
        let Some(node) = node else {
            return Answer::NxDomain;
        };
        let owner = name.clone();
        let record = |data: RData| Record::from_rdata(owner.clone(), TTL, data);
        if let Some(target) = &node.cname {
            return Answer::Records(vec![record(RData::CNAME(CNAME(target.clone())))]);
        }
        let a = || node.a.iter().map(|ip| record(RData::A(A(*ip))));
        let srv = || {
            // CoreDNS's weighting: the targets of one priority share 100.
            let weight = u16::try_from(100 / node.srv.len().max(1))
                .unwrap_or(1)
                .max(1);
            node.srv.iter().map(move |(port, target)| {
                record(RData::SRV(SRV::new(0, weight, *port, target.clone())))
            })
        };
        let records: Vec<Record> = match qtype {
            RecordType::A => a().collect(),
            RecordType::SRV => srv().collect(),
            RecordType::ANY => a().chain(srv()).collect(),
            _ => Vec::new(),
        };
        if records.is_empty() {
            Answer::NoData
        } else {
            Answer::Records(records)
        }
    }

    /// The lookup key of `name`.
    fn key(&self, name: &Name) -> Key {
        let labels: Vec<&[u8]> = name.iter().collect();
        let domain: Vec<&str> = self.domain.as_str().split('.').collect();
        let Some(inner) = labels.len().checked_sub(domain.len()) else {
            return Key::NotOurs;
        };
        let (head, tail) = labels.split_at(inner);
        let ours = tail
            .iter()
            .zip(&domain)
            .all(|(l, d)| l.eq_ignore_ascii_case(d.as_bytes()));
        if !ours {
            return Key::NotOurs;
        }
        let mut key = String::with_capacity(name.len());
        for label in head {
            if label.is_empty()
                || !label
                    .iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
            {
                return Key::Impossible;
            }
            // Only ASCII is left, so bytes and chars are the same.
            key.extend(label.iter().map(|c| char::from(c.to_ascii_lowercase())));
            key.push('.');
        }
        key.push_str(self.domain.as_str());
        Key::Name(key)
    }
}

/// A question's name as [`View::answer`] looks it up.
enum Key {
    /// Not under the cluster domain.
    NotOurs,
    /// Under the cluster domain, with a label no name of ours has (a byte other than
    /// `a-z0-9-_`, or an empty label).
    Impossible,
    /// Lower case, dot-separated, no trailing dot.
    Name(String),
}

/// Collects records while a [`View`] is built; sets keep them sorted and free of duplicates.
struct Builder<'d> {
    domain: &'d str,
    names: HashMap<String, Pending>,
    pod_ips: HashSet<IpAddr>,
}

#[derive(Default)]
struct Pending {
    a: BTreeSet<Ipv4Addr>,
    cname: Option<String>,
    srv: BTreeSet<(u16, String)>,
}

impl Builder<'_> {
    /// The node at `key` (a name under the domain), creating it and every name between it and
    /// the domain.
    fn node(&mut self, key: String) -> &mut Pending {
        let mut rest = key.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if parent.len() < self.domain.len() {
                break;
            }
            self.names.entry(parent.to_string()).or_default();
            if parent == self.domain {
                break;
            }
            rest = parent;
        }
        self.names.entry(key).or_default()
    }

    /// Adds a Service's own records. Returns its (namespace, name) and
    /// `publishNotReadyAddresses` when it is headless.
    fn service(&mut self, svc: &Service) -> Option<((String, String), bool)> {
        let (ns, name) = namespaced(&svc.metadata)?;
        let spec = svc.spec.as_ref()?;
        let fqdn = format!("{name}.{ns}.svc.{}", self.domain);
        self.node(fqdn.clone());
        if spec.type_.as_deref() == Some("ExternalName") {
            let target = spec.external_name.as_deref().unwrap_or_default();
            if !target.is_empty() {
                self.node(fqdn).cname = Some(target.to_string());
            }
            return None;
        }
        if spec.cluster_ip.as_deref() == Some("None") {
            let publish = spec.publish_not_ready_addresses.unwrap_or(false);
            return Some(((ns, name), publish));
        }
        let ips = spec.cluster_ips.iter().flatten().chain(&spec.cluster_ip);
        let v4: Vec<Ipv4Addr> = ips.filter_map(|ip| ip.parse().ok()).collect();
        self.node(fqdn.clone()).a.extend(v4);
        for port in spec.ports.iter().flatten() {
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let Some(srv) = srv_name(port.name.as_deref(), port.protocol.as_deref(), &fqdn) else {
                continue;
            };
            self.node(srv).srv.insert((number, fqdn.clone()));
        }
        None
    }

    /// Adds a headless Service's endpoint records from one of its slices.
    fn endpoint_slice(
        &mut self,
        slice: &EndpointSlice,
        headless: &HashMap<(String, String), bool>,
    ) {
        if slice.address_type != "IPv4" {
            return;
        }
        let Some(ns) = slice
            .metadata
            .namespace
            .as_deref()
            .map(str::to_ascii_lowercase)
        else {
            return;
        };
        let labels = slice.metadata.labels.as_ref();
        let Some(svc) = labels.and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
            return;
        };
        let svc = svc.to_ascii_lowercase();
        let Some(&publish_not_ready) = headless.get(&(ns.clone(), svc.clone())) else {
            return;
        };
        let fqdn = format!("{svc}.{ns}.svc.{}", self.domain);
        let ports: Vec<(String, u16)> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let number = u16::try_from(p.port?).ok()?;
                Some((
                    srv_name(p.name.as_deref(), p.protocol.as_deref(), &fqdn)?,
                    number,
                ))
            })
            .collect();
        for endpoint in slice.endpoints.iter().flatten() {
            let conditions = endpoint.conditions.as_ref();
            // An unknown readiness counts as ready (the EndpointSlice API's advice).
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            if !ready && !publish_not_ready {
                continue;
            }
            let hostname = endpoint.hostname.as_deref().map(str::to_ascii_lowercase);
            let hostname = hostname.filter(|h| is_label(h));
            for ip in endpoint
                .addresses
                .iter()
                .filter_map(|a| a.parse::<Ipv4Addr>().ok())
            {
                self.node(fqdn.clone()).a.insert(ip);
                let host = hostname.clone().unwrap_or_else(|| dashed(ip));
                let target = format!("{host}.{fqdn}");
                self.node(target.clone()).a.insert(ip);
                for (srv, number) in &ports {
                    self.node(srv.clone()).srv.insert((*number, target.clone()));
                }
            }
        }
    }

    /// Adds a pod's source IPs and its `<a-b-c-d>.<ns>.pod` and `<hostname>.<subdomain>` names.
    fn pod(&mut self, pod: &Pod, headless: &HashMap<(String, String), bool>) {
        let Some((ns, _)) = namespaced(&pod.metadata) else {
            return;
        };
        let spec = pod.spec.as_ref();
        // A host-network pod has its node's IP, which is not the tenant's to claim.
        if spec.and_then(|s| s.host_network).unwrap_or(false) {
            return;
        }
        let Some(status) = pod.status.as_ref() else {
            return;
        };
        // A finished pod's IP may already be another pod's.
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return;
        }
        let listed = status.pod_ips.iter().flatten().map(|p| &p.ip);
        let ips: BTreeSet<IpAddr> = listed
            .chain(&status.pod_ip)
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let hostname = spec.and_then(|s| {
            let host = s.hostname.as_deref()?.to_ascii_lowercase();
            let sub = s.subdomain.as_deref()?.to_ascii_lowercase();
            let ok = is_label(&host) && headless.contains_key(&(ns.clone(), sub.clone()));
            ok.then(|| format!("{host}.{sub}.{ns}.svc.{}", self.domain))
        });
        for ip in ips {
            self.pod_ips.insert(ip);
            let IpAddr::V4(v4) = ip else {
                continue;
            };
            let pod_name = format!("{}.{ns}.pod.{}", dashed(v4), self.domain);
            self.node(pod_name).a.insert(v4);
            if let Some(h) = &hostname {
                self.node(h.clone()).a.insert(v4);
            }
        }
    }

    fn finish(self, domain: Domain) -> View {
        let names = self
            .names
            .into_iter()
            .map(|(key, p)| {
                let node = Node {
                    a: p.a.into_iter().collect(),
                    cname: p.cname.as_deref().and_then(absolute),
                    srv: p
                        .srv
                        .into_iter()
                        .filter_map(|(port, target)| Some((port, absolute(&target)?)))
                        .collect(),
                };
                (key, node)
            })
            .collect();
        View {
            domain,
            names,
            pod_ips: self.pod_ips,
        }
    }
}

/// The lower-case namespace and name of an object, when both are DNS labels.
fn namespaced(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<(String, String)> {
    let ns = meta.namespace.as_deref()?.to_ascii_lowercase();
    let name = meta.name.as_deref()?.to_ascii_lowercase();
    (is_label(&ns) && is_label(&name)).then_some((ns, name))
}

/// `_<port>._<proto>.<fqdn>` for a named port; `None` for an unnamed one.
fn srv_name(port: Option<&str>, protocol: Option<&str>, fqdn: &str) -> Option<String> {
    let port = port
        .filter(|p| is_label(&p.to_ascii_lowercase()))?
        .to_ascii_lowercase();
    let protocol = protocol.unwrap_or("TCP").to_ascii_lowercase();
    is_label(&protocol).then(|| format!("_{port}._{protocol}.{fqdn}"))
}

/// `10.1.2.3` → `10-1-2-3`.
fn dashed(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("{a}-{b}-{c}-{d}")
}

/// A DNS label as Kubernetes names are: 1 to 63 of lower-case `a-z`, `0-9` and `-`.
fn is_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// An absolute [`Name`] from text (an ExternalName or one of our names); `None` when it is no
/// valid name.
fn absolute(name: &str) -> Option<Name> {
    let mut name = Name::from_ascii(name).ok()?;
    name.set_fqdn(true);
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn object<T: k8s_openapi::serde::de::DeserializeOwned>(value: Value) -> Arc<T> {
        match serde_json::from_value(value) {
            Ok(o) => Arc::new(o),
            Err(e) => panic!("test object does not parse: {e}"),
        }
    }

    fn service(ns: &str, name: &str, spec: Value) -> Arc<Service> {
        object(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}))
    }

    fn slice(ns: &str, svc: &str, endpoints: Value, ports: Value) -> Arc<EndpointSlice> {
        object(json!({
            "metadata": {
                "namespace": ns,
                "name": format!("{svc}-abcde"),
                "labels": {SERVICE_NAME_LABEL: svc},
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": ports,
        }))
    }

    fn pod(ns: &str, name: &str, spec: Value, ips: &[&str]) -> Arc<Pod> {
        let pod_ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        object(json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": spec,
            "status": {"phase": "Running", "podIP": ips.first(), "podIPs": pod_ips},
        }))
    }

    /// The shop namespace: a ClusterIP Service with a named and an unnamed port, a headless
    /// StatefulSet Service with a ready, a not-ready and a hostname-less endpoint, an
    /// ExternalName, and two pods.
    fn shop() -> View {
        let objects = Objects {
            services: vec![
                service(
                    "shop",
                    "web",
                    json!({
                        "clusterIP": "10.96.0.10",
                        "ports": [
                            {"name": "http", "port": 80},
                            {"port": 9090, "protocol": "UDP"},
                            {"name": "dns", "port": 53, "protocol": "UDP"},
                        ],
                    }),
                ),
                service("shop", "db", json!({"clusterIP": "None"})),
                service(
                    "shop",
                    "cache",
                    json!({"clusterIP": "None", "publishNotReadyAddresses": true}),
                ),
                service(
                    "shop",
                    "payments",
                    json!({"type": "ExternalName", "externalName": "pay.example.com"}),
                ),
            ],
            endpoint_slices: vec![
                slice(
                    "shop",
                    "db",
                    json!([
                        {"addresses": ["10.1.0.5"], "hostname": "db-0", "conditions": {"ready": true}},
                        {"addresses": ["10.1.0.6"], "hostname": "db-1", "conditions": {"ready": false}},
                        {"addresses": ["10.1.0.7"]},
                    ]),
                    json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]),
                ),
                slice(
                    "shop",
                    "cache",
                    json!([
                        {"addresses": ["10.1.0.8"], "conditions": {"ready": false}},
                    ]),
                    json!([]),
                ),
                // A slice of a ClusterIP Service adds nothing.
                slice(
                    "shop",
                    "web",
                    json!([{"addresses": ["10.1.0.9"]}]),
                    json!([]),
                ),
            ],
            pods: vec![
                pod(
                    "shop",
                    "web-abc",
                    json!({"containers": []}),
                    &["10.1.0.9", "fd00::9"],
                ),
                pod(
                    "shop",
                    "worker",
                    json!({"containers": [], "hostname": "w1", "subdomain": "db"}),
                    &["10.1.0.20"],
                ),
                pod(
                    "shop",
                    "stray",
                    json!({"containers": [], "hostname": "s1", "subdomain": "web"}),
                    &["10.1.0.21"],
                ),
            ],
        };
        View::build(&Domain::default(), &objects)
    }

    fn name(s: &str) -> Name {
        match Name::from_ascii(s) {
            Ok(n) => n,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    /// The A records of `n`, sorted; panics on any other answer.
    fn a(view: &View, n: &str) -> Vec<Ipv4Addr> {
        let Answer::Records(records) = view.answer(&name(n), RecordType::A) else {
            panic!("{n}: {:?}", view.answer(&name(n), RecordType::A));
        };
        let mut ips: Vec<Ipv4Addr> = records
            .iter()
            .map(|r| match r.data() {
                RData::A(A(ip)) => *ip,
                other => panic!("{n}: not an A record: {other:?}"),
            })
            .collect();
        ips.sort();
        ips
    }

    /// The SRV records of `n` as (port, target); panics on any other answer.
    fn srv(view: &View, n: &str) -> Vec<(u16, String)> {
        let Answer::Records(records) = view.answer(&name(n), RecordType::SRV) else {
            panic!("{n}: {:?}", view.answer(&name(n), RecordType::SRV));
        };
        records
            .iter()
            .map(|r| match r.data() {
                RData::SRV(s) => (s.port(), s.target().to_ascii()),
                other => panic!("{n}: not an SRV record: {other:?}"),
            })
            .collect()
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    #[test]
    fn cluster_ip_service_has_its_cluster_ip() {
        let view = shop();
        assert_eq!(a(&view, "web.shop.svc.cluster.local."), [ip("10.96.0.10")]);
        let Answer::Records(records) =
            view.answer(&name("web.shop.svc.cluster.local."), RecordType::A)
        else {
            panic!("no records");
        };
        assert!(records.iter().all(|r| r.ttl() == TTL));
    }

    #[test]
    fn names_are_case_insensitive_and_keep_the_asked_case() {
        let view = shop();
        let asked = name("WeB.ShOp.SVC.Cluster.Local.");
        let Answer::Records(records) = view.answer(&asked, RecordType::A) else {
            panic!("{:?}", view.answer(&asked, RecordType::A));
        };
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].name().to_ascii(), "WeB.ShOp.SVC.Cluster.Local.");
        assert_eq!(a(&view, "DB-0.DB.SHOP.SVC.CLUSTER.LOCAL"), [ip("10.1.0.5")]);
    }

    #[test]
    fn headless_service_has_its_ready_endpoints() {
        let view = shop();
        // db-1 is not ready; the hostname-less endpoint counts as ready.
        assert_eq!(
            a(&view, "db.shop.svc.cluster.local."),
            [ip("10.1.0.5"), ip("10.1.0.7")]
        );
        assert_eq!(
            a(&view, "db-0.db.shop.svc.cluster.local."),
            [ip("10.1.0.5")]
        );
        assert_eq!(
            a(&view, "10-1-0-7.db.shop.svc.cluster.local."),
            [ip("10.1.0.7")]
        );
        let gone = view.answer(&name("db-1.db.shop.svc.cluster.local."), RecordType::A);
        assert_eq!(gone, Answer::NxDomain);
    }

    #[test]
    fn not_ready_addresses_are_published_when_the_service_asks() {
        let view = shop();
        assert_eq!(a(&view, "cache.shop.svc.cluster.local."), [ip("10.1.0.8")]);
        assert_eq!(
            a(&view, "10-1-0-8.cache.shop.svc.cluster.local."),
            [ip("10.1.0.8")]
        );
    }

    #[test]
    fn external_name_is_a_cname_whatever_the_type() {
        let view = shop();
        for qtype in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::CNAME,
            RecordType::SRV,
        ] {
            let answer = view.answer(&name("payments.shop.svc.cluster.local."), qtype);
            let Answer::Records(records) = answer else {
                panic!("{qtype}: {answer:?}");
            };
            let [record] = records.as_slice() else {
                panic!("{qtype}: {records:?}");
            };
            let RData::CNAME(CNAME(target)) = record.data() else {
                panic!("{qtype}: {record:?}");
            };
            assert_eq!(target.to_ascii(), "pay.example.com.");
        }
    }

    #[test]
    fn named_ports_have_srv_records() {
        let view = shop();
        let target = "web.shop.svc.cluster.local.";
        assert_eq!(
            srv(&view, "_http._tcp.web.shop.svc.cluster.local."),
            [(80, target.to_string())]
        );
        assert_eq!(
            srv(&view, "_dns._udp.web.shop.svc.cluster.local."),
            [(53, target.to_string())]
        );
        // The port is TCP, not UDP.
        let wrong = view.answer(
            &name("_http._udp.web.shop.svc.cluster.local."),
            RecordType::SRV,
        );
        assert_eq!(wrong, Answer::NxDomain);
        // An SRV name has no A record.
        let a = view.answer(
            &name("_http._tcp.web.shop.svc.cluster.local."),
            RecordType::A,
        );
        assert_eq!(a, Answer::NoData);
    }

    #[test]
    fn headless_srv_has_one_record_per_endpoint() {
        let view = shop();
        let records = srv(&view, "_pg._tcp.db.shop.svc.cluster.local.");
        assert_eq!(
            records,
            [
                (5432, "10-1-0-7.db.shop.svc.cluster.local.".to_string()),
                (5432, "db-0.db.shop.svc.cluster.local.".to_string()),
            ]
        );
        let Answer::Records(records) = view.answer(
            &name("_pg._tcp.db.shop.svc.cluster.local."),
            RecordType::SRV,
        ) else {
            panic!("no records");
        };
        let weights: Vec<u16> = records
            .iter()
            .filter_map(|r| match r.data() {
                RData::SRV(s) => Some(s.weight()),
                _ => None,
            })
            .collect();
        assert_eq!(weights, [50, 50]);
    }

    #[test]
    fn pods_have_dashed_ip_names_in_their_namespace() {
        let view = shop();
        assert_eq!(
            a(&view, "10-1-0-9.shop.pod.cluster.local."),
            [ip("10.1.0.9")]
        );
        let elsewhere = view.answer(&name("10-1-0-9.other.pod.cluster.local."), RecordType::A);
        assert_eq!(elsewhere, Answer::NxDomain);
        let no_pod = view.answer(&name("10-1-0-99.shop.pod.cluster.local."), RecordType::A);
        assert_eq!(no_pod, Answer::NxDomain);
    }

    #[test]
    fn pod_hostname_and_subdomain_need_a_headless_service() {
        let view = shop();
        assert_eq!(a(&view, "w1.db.shop.svc.cluster.local."), [ip("10.1.0.20")]);
        // `web` is a ClusterIP Service: no name for the stray pod.
        let stray = view.answer(&name("s1.web.shop.svc.cluster.local."), RecordType::A);
        assert_eq!(stray, Answer::NxDomain);
    }

    #[test]
    fn nodata_for_existing_names_nxdomain_for_missing_ones() {
        let view = shop();
        let aaaa = view.answer(&name("web.shop.svc.cluster.local."), RecordType::AAAA);
        assert_eq!(aaaa, Answer::NoData);
        let mx = view.answer(&name("web.shop.svc.cluster.local."), RecordType::MX);
        assert_eq!(mx, Answer::NoData);
        // Names with only names below them exist.
        for n in [
            "shop.svc.cluster.local.",
            "svc.cluster.local.",
            "cluster.local.",
            "pod.cluster.local.",
        ] {
            assert_eq!(view.answer(&name(n), RecordType::A), Answer::NoData, "{n}");
        }
        for n in [
            "nope.shop.svc.cluster.local.",
            "web.other.svc.cluster.local.",
            "other.svc.cluster.local.",
            "x.cluster.local.",
            "web.shop.svc.cluster.local.cluster.local.",
        ] {
            assert_eq!(
                view.answer(&name(n), RecordType::A),
                Answer::NxDomain,
                "{n}"
            );
            assert_eq!(
                view.answer(&name(n), RecordType::AAAA),
                Answer::NxDomain,
                "{n}"
            );
        }
        // A label with a dot in it is not two labels.
        let Ok(dotted) = Name::from_labels(vec![&b"web.shop"[..], b"svc", b"cluster", b"local"])
        else {
            panic!("name");
        };
        assert_eq!(view.answer(&dotted, RecordType::A), Answer::NxDomain);
    }

    #[test]
    fn other_names_are_not_ours() {
        let view = shop();
        for n in [
            "example.com.",
            "local.",
            ".",
            "cluster.local.example.com.",
            "xcluster.local.",
        ] {
            assert_eq!(view.answer(&name(n), RecordType::A), Answer::NotOurs, "{n}");
        }
    }

    #[test]
    fn the_domain_is_configurable() {
        let Ok(domain) = Domain::new("Tenant.Example.") else {
            panic!("domain");
        };
        assert_eq!(domain.as_str(), "tenant.example");
        let objects = Objects {
            services: vec![service("shop", "web", json!({"clusterIP": "10.96.0.10"}))],
            ..Objects::default()
        };
        let view = View::build(&domain, &objects);
        assert_eq!(a(&view, "web.shop.svc.tenant.example."), [ip("10.96.0.10")]);
        let old = view.answer(&name("web.shop.svc.cluster.local."), RecordType::A);
        assert_eq!(old, Answer::NotOurs);
        assert!(Domain::new("").is_err());
        assert!(Domain::new("a..b").is_err());
        assert!(Domain::new("bad_label.local").is_err());
    }

    #[test]
    fn any_gives_every_record() {
        let view = shop();
        let Answer::Records(records) =
            view.answer(&name("web.shop.svc.cluster.local."), RecordType::ANY)
        else {
            panic!("no records");
        };
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn pod_ips_are_the_running_pods_of_both_families() {
        let view = shop();
        let mut ips: Vec<String> = view.pod_ips().iter().map(ToString::to_string).collect();
        ips.sort();
        assert_eq!(ips, ["10.1.0.20", "10.1.0.21", "10.1.0.9", "fd00::9"]);
    }

    #[test]
    fn objects_with_invalid_names_are_left_out() {
        let objects = Objects {
            services: vec![
                service("shop", "Bad_Name", json!({"clusterIP": "10.96.0.1"})),
                service("shop", "ok", json!({"clusterIP": "not-an-ip"})),
            ],
            ..Objects::default()
        };
        let view = View::build(&Domain::default(), &objects);
        let ok = view.answer(&name("ok.shop.svc.cluster.local."), RecordType::A);
        assert_eq!(ok, Answer::NoData);
        let bad = view.answer(&name("bad_name.shop.svc.cluster.local."), RecordType::A);
        assert_eq!(bad, Answer::NxDomain);
    }
}
