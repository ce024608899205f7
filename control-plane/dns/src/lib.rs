//! Fabrik's cluster DNS: one server answers the cluster names of every tenant cluster.
//!
//! Tenant pods run on the host cluster under translated names, so the host's DNS cannot answer
//! `web.shop.svc.cluster.local` for them. The syncer gives each synced pod `dnsPolicy: None`
//! with this server as its nameserver (searches `<ns>.svc.cluster.local svc.cluster.local
//! cluster.local`, `ndots:5`); the server tells tenants apart by the query's source IP, which is
//! the pod's IP.
//!
//! ```text
//!  tenant pod 10.4.2.7 ──query──▶ server ──source IP──▶ directory ──▶ tenant "a"'s View
//!                                   │                    ▲ pod IPs      ▲ built from
//!                                   │                    │              │
//!                                   │          tenant API "a": watches of Services,
//!                                   │          EndpointSlices, Pods (one set per tenant)
//!                                   ├─ name under the cluster domain: answered from the View
//!                                   └─ any other name: forwarded to the upstream, reply relayed
//! ```
//!
//! * [`view`]: one tenant's records, built from its objects; no I/O.
//! * [`directory`]: the tenants, their views, and which tenant a source IP belongs to; the
//!   watches that keep them current.
//! * [`server`]: UDP and TCP on one address; the order in which a query is judged.
//!
//! # What it answers
//!
//! Under the cluster domain (`cluster.local` unless configured), for the querying tenant only,
//! TTL 5 s, authoritative:
//!
//! * `<svc>.<ns>.svc` A: the ClusterIP; for a headless Service, the addresses of its ready
//!   endpoints (all of them with `publishNotReadyAddresses`). ExternalName: a CNAME.
//! * `<hostname>.<svc>.<ns>.svc` A for an endpoint with a hostname (StatefulSets), else
//!   `<a-b-c-d>.<svc>.<ns>.svc`; and `<hostname>.<subdomain>.<ns>.svc` for a pod whose
//!   `subdomain` is a headless Service.
//! * `_<port>._<proto>.<svc>.<ns>.svc` SRV for named ports (for headless Services, one per
//!   endpoint).
//! * `<a-b-c-d>.<ns>.pod` A when a pod of that namespace has that IP.
//! * A name that exists but has no record of the asked type (AAAA: IPv4 only) is NOERROR with
//!   no answers; a name that does not exist is NXDOMAIN.
//!
//! # What it does not
//!
//! * Answer anyone but a tenant's pod: a source IP with no tenant, or with two, gets REFUSED.
//! * Recurse: names outside the cluster domain go to one upstream; none configured, REFUSED.
//! * PTR records (reverse lookups are forwarded), SOA or NS records, negative-caching SOAs in
//!   NXDOMAIN answers, wildcards, zone transfers, DNSSEC, DNS over TLS or HTTPS, IPv6 records.
//! * Answer from a partial listing: a tenant's view is first built when all three kinds are
//!   listed.

#![forbid(unsafe_code)]

pub mod directory;
pub mod server;
pub mod view;

pub use directory::{Directory, TenantHandle};
pub use server::{upstream_from_resolv_conf, Server, DEFAULT_UPSTREAM_TIMEOUT};
pub use view::{Answer, Domain, Objects, View, TTL};
