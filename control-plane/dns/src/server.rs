//! The DNS server: UDP and TCP on one address; a query's source IP selects the tenant's view.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::timeout;

use crate::directory::Directory;
use crate::view::Answer;

/// How long a forwarded query waits for the upstream by default.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest UDP reply sent, and the EDNS size advertised (the 2020 DNS flag day's value,
/// which avoids IP fragmentation).
const MAX_UDP_PAYLOAD: u16 = 1232;
/// Forwarded queries in flight at once; past that, SERVFAIL.
const MAX_FORWARDS: usize = 1024;
/// TCP connections open at once; past that, new ones are closed.
const MAX_TCP_CONNECTIONS: usize = 512;
/// How long a TCP connection may wait for its next message (or take to send one).
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Tries to find a port free for both TCP and UDP when port 0 is asked for.
const BIND_ATTEMPTS: usize = 16;
/// The fixed DNS header.
const HEADER_LEN: usize = 12;
/// The largest DNS message (UDP datagram or TCP frame).
const MAX_MESSAGE: usize = 65_535;
/// The DNS port of a `nameserver` line.
const DNS_PORT: u16 = 53;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The TCP listener could not be bound.
    #[error("failed to bind TCP {addr}: {source}")]
    BindTcp {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The UDP socket could not be bound (at the TCP listener's address).
    #[error("failed to bind UDP {addr}: {source}")]
    BindUdp {
        /// The address tried.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A resolv.conf could not be read.
    #[error("failed to read {path}: {source}")]
    ReadResolvConf {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The first `nameserver` line of a resolv.conf does not hold an IP address.
    #[error("invalid nameserver {value:?} in {path}")]
    InvalidNameserver {
        /// The file.
        path: PathBuf,
        /// What stood after `nameserver`.
        value: String,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A bound DNS server; [`Server::run`] serves until shutdown.
///
/// Per query, in this order:
///
/// 1. Fewer than 12 bytes (no header) or a response (QR set): dropped.
/// 2. Not a parseable message: FORMERR, built from the header's id alone.
/// 3. Not a QUERY: NOTIMP. Not exactly one question: FORMERR.
/// 4. A source IP with no view: REFUSED, whatever the name (never an open resolver, never a
///    tenant's names to a stranger).
/// 5. A name under the cluster domain: answered from the view, authoritative. Zone transfers
///    and classes other than IN: REFUSED.
/// 6. Any other name: the query's bytes go to the upstream (with an id of ours) and its reply
///    comes back with the client's id. No upstream configured: REFUSED; none that answers in
///    time: SERVFAIL.
///
/// A UDP reply larger than the client's EDNS size (512 without EDNS, at most 1232) is replaced
/// by the question alone with TC set, so that the client asks again over TCP.
#[derive(Debug)]
pub struct Server {
    udp: UdpSocket,
    tcp: TcpListener,
    local: SocketAddr,
    directory: Directory,
    upstream: Option<SocketAddr>,
    upstream_timeout: Duration,
}

impl Server {
    /// Binds UDP and TCP on `addr` (with port 0, on one free port for both). Names outside the
    /// cluster domain are forwarded to `upstream`; without one they are answered REFUSED.
    pub async fn bind(
        addr: SocketAddr,
        directory: Directory,
        upstream: Option<SocketAddr>,
    ) -> Result<Self> {
        let mut attempt = 0;
        let (tcp, udp, local) = loop {
            attempt += 1;
            let tcp = TcpListener::bind(addr)
                .await
                .map_err(|source| Error::BindTcp { addr, source })?;
            let local = tcp
                .local_addr()
                .map_err(|source| Error::BindTcp { addr, source })?;
            match UdpSocket::bind(local).await {
                Ok(udp) => break (tcp, udp, local),
                // The port TCP got may be taken for UDP: try another.
                Err(_) if addr.port() == 0 && attempt < BIND_ATTEMPTS => continue,
                Err(source) => {
                    return Err(Error::BindUdp {
                        addr: local,
                        source,
                    })
                }
            }
        };
        Ok(Self {
            udp,
            tcp,
            local,
            directory,
            upstream,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
        })
    }

    /// How long a forwarded query waits for the upstream ([`DEFAULT_UPSTREAM_TIMEOUT`] unless
    /// set).
    pub fn with_upstream_timeout(mut self, upstream_timeout: Duration) -> Self {
        self.upstream_timeout = upstream_timeout;
        self
    }

    /// The bound address (UDP and TCP alike).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until `shutdown` resolves; then stops every connection and forwarded query.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self {
            udp,
            tcp,
            local,
            directory,
            upstream,
            upstream_timeout,
        } = self;
        let shared = Arc::new(Shared {
            directory,
            upstream,
            upstream_timeout,
        });
        let udp = Arc::new(udp);
        let forwards = Arc::new(Semaphore::new(MAX_FORWARDS));
        let connections = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
        let mut tasks = JoinSet::new();
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut shutdown = std::pin::pin!(shutdown);
        tracing::info!(%local, ?upstream, "cluster DNS serving");
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                received = udp.recv_from(&mut buf) => {
                    let (len, peer) = match received {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::debug!(error = %e, "failed to receive a UDP query");
                            continue;
                        }
                    };
                    let Some(packet) = buf.get(..len) else { continue };
                    match shared.handle(peer.ip(), packet, Transport::Udp) {
                        Outcome::Reply(reply) => send(&udp, &reply, peer).await,
                        Outcome::Drop => {}
                        Outcome::Forward(pending) => {
                            let Ok(permit) = forwards.clone().try_acquire_owned() else {
                                send(&udp, &pending.failure(), peer).await;
                                continue;
                            };
                            let (shared, udp) = (shared.clone(), udp.clone());
                            tasks.spawn(async move {
                                let reply = shared.forward(pending, Transport::Udp).await;
                                send(&udp, &reply, peer).await;
                                drop(permit);
                            });
                        }
                    }
                }
                accepted = tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let Ok(permit) = connections.clone().try_acquire_owned() else {
                            tracing::debug!(%peer, "too many DNS TCP connections; closing one");
                            continue;
                        };
                        tasks.spawn(serve_tcp(shared.clone(), stream, peer, permit));
                    }
                    Err(e) => {
                        // Out of file descriptors, mostly: give connections time to close.
                        tracing::warn!(error = %e, "failed to accept a DNS TCP connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next() => {}
            }
        }
        tasks.shutdown().await;
        tracing::info!(%local, "cluster DNS stopped");
    }
}

/// The first `nameserver` of a resolv.conf, at port 53; `None` when it has none.
pub fn upstream_from_resolv_conf(path: &Path) -> Result<Option<SocketAddr>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadResolvConf {
        path: path.to_path_buf(),
        source,
    })?;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let value = words.next().unwrap_or_default();
        let ip: IpAddr = value.parse().map_err(|_| Error::InvalidNameserver {
            path: path.to_path_buf(),
            value: value.to_string(),
        })?;
        return Ok(Some(SocketAddr::new(ip, DNS_PORT)));
    }
    Ok(None)
}

/// What the serving tasks share.
struct Shared {
    directory: Directory,
    upstream: Option<SocketAddr>,
    upstream_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    /// The largest reply for a request over this transport.
    fn limit(self, request: &Message) -> usize {
        match self {
            Self::Udp => usize::from(request.max_payload().min(MAX_UDP_PAYLOAD)),
            Self::Tcp => MAX_MESSAGE,
        }
    }
}

/// What becomes of one query.
enum Outcome {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// Ask the upstream.
    Forward(Pending),
    /// Send nothing.
    Drop,
}

/// A query on its way to the upstream.
struct Pending {
    request: Message,
    /// The query as received.
    bytes: Vec<u8>,
    /// The largest reply the client takes.
    limit: usize,
}

impl Pending {
    /// The SERVFAIL for when the upstream does not answer.
    fn failure(&self) -> Vec<u8> {
        let reply = response(
            &self.request,
            ResponseCode::ServFail,
            Vec::new(),
            false,
            true,
        );
        encode(&reply, self.limit).unwrap_or_else(|| bare_reply(&self.bytes, SERVFAIL))
    }
}

/// The RCODE values written into a header by hand.
const FORMERR: u8 = 1;
const SERVFAIL: u8 = 2;

impl Shared {
    /// Steps 1 to 6 of [`Server`]'s docs, but the forwarding itself.
    fn handle(&self, source: IpAddr, packet: &[u8], transport: Transport) -> Outcome {
        let Some(flags) = packet.get(2).filter(|_| packet.len() >= HEADER_LEN) else {
            return Outcome::Drop;
        };
        if flags & 0x80 != 0 {
            return Outcome::Drop;
        }
        let Ok(request) = Message::from_vec(packet) else {
            return Outcome::Reply(bare_reply(packet, FORMERR));
        };
        let limit = transport.limit(&request);
        let reply = |code: ResponseCode, answers: Vec<Record>, aa: bool, ra: bool| {
            let message = response(&request, code, answers, aa, ra);
            let bytes = encode(&message, limit).unwrap_or_else(|| bare_reply(packet, SERVFAIL));
            Outcome::Reply(bytes)
        };
        if request.message_type() != MessageType::Query {
            return Outcome::Drop;
        }
        if request.op_code() != OpCode::Query {
            return reply(ResponseCode::NotImp, Vec::new(), false, false);
        }
        let [query] = request.queries() else {
            return reply(ResponseCode::FormErr, Vec::new(), false, false);
        };
        let Some(view) = self.directory.view_for(source) else {
            return reply(ResponseCode::Refused, Vec::new(), false, false);
        };
        let answer = view.answer(query.name(), query.query_type());
        let transfer = matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR);
        if answer != Answer::NotOurs && (transfer || query.query_class() != DNSClass::IN) {
            return reply(ResponseCode::Refused, Vec::new(), false, true);
        }
        match answer {
            Answer::Records(records) => reply(ResponseCode::NoError, records, true, true),
            Answer::NoData => reply(ResponseCode::NoError, Vec::new(), true, true),
            Answer::NxDomain => reply(ResponseCode::NXDomain, Vec::new(), true, true),
            Answer::NotOurs if self.upstream.is_none() => {
                reply(ResponseCode::Refused, Vec::new(), false, true)
            }
            Answer::NotOurs => Outcome::Forward(Pending {
                bytes: packet.to_vec(),
                request,
                limit,
            }),
        }
    }

    /// Asks the upstream and returns the reply for the client (SERVFAIL when there is none).
    async fn forward(&self, pending: Pending, transport: Transport) -> Vec<u8> {
        let Some(upstream) = self.upstream else {
            return pending.failure();
        };
        let tcp = transport == Transport::Tcp;
        let exchanged = exchange(upstream, self.upstream_timeout, &pending.bytes, tcp).await;
        let Some(mut reply) = exchanged else {
            tracing::debug!(%upstream, "upstream DNS gave no answer");
            return pending.failure();
        };
        if reply.len() > pending.limit {
            let message = response(
                &pending.request,
                ResponseCode::NoError,
                Vec::new(),
                false,
                true,
            );
            return encode(&message.truncate(), pending.limit).unwrap_or_else(|| pending.failure());
        }
        match reply.get_mut(..2) {
            Some(id) => id.copy_from_slice(&pending.request.id().to_be_bytes()),
            None => return pending.failure(),
        }
        reply
    }
}

/// A response to `request` echoing its question, RD and CD, with an OPT record when the
/// request had one.
fn response(
    request: &Message,
    code: ResponseCode,
    answers: Vec<Record>,
    authoritative: bool,
    recursion_available: bool,
) -> Message {
    let mut message = Message::new();
    message
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_checking_disabled(request.checking_disabled())
        .set_authoritative(authoritative)
        .set_recursion_available(recursion_available)
        .set_response_code(code);
    if let [query] = request.queries() {
        message.add_query(query.clone());
    }
    if request.extensions().is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(MAX_UDP_PAYLOAD);
        message.set_edns(edns);
    }
    message.add_answers(answers);
    message
}

/// The wire form of `message`, or of its truncated form (TC set) when larger than `limit`;
/// `None` when it cannot be encoded.
fn encode(message: &Message, limit: usize) -> Option<Vec<u8>> {
    let bytes = message.to_vec().ok()?;
    if bytes.len() <= limit {
        return Some(bytes);
    }
    message.truncate().to_vec().ok()
}

/// A reply of a header alone, built from a query's first bytes: its id, opcode and RD, QR set
/// and `rcode`. For a query that does not parse, or a reply that does not encode.
fn bare_reply(query: &[u8], rcode: u8) -> Vec<u8> {
    let byte = |i: usize| query.get(i).copied().unwrap_or(0);
    let mut reply = vec![0u8; HEADER_LEN];
    reply[0] = byte(0);
    reply[1] = byte(1);
    // QR, the opcode's 4 bits and RD.
    reply[2] = 0x80 | (byte(2) & 0x79);
    reply[3] = rcode & 0x0f;
    reply
}

async fn send(udp: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = udp.send_to(reply, peer).await {
        tracing::debug!(%peer, error = %e, "failed to send a DNS reply");
    }
}

/// Serves one TCP connection: length-prefixed messages, answered in order, until the client
/// closes it, idles for [`TCP_IDLE`], or sends what cannot be answered.
async fn serve_tcp(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    loop {
        let Ok(Ok(len)) = timeout(TCP_IDLE, stream.read_u16()).await else {
            return;
        };
        let mut packet = vec![0u8; usize::from(len)];
        let Ok(Ok(_)) = timeout(TCP_IDLE, stream.read_exact(&mut packet)).await else {
            return;
        };
        let reply = match shared.handle(peer.ip(), &packet, Transport::Tcp) {
            Outcome::Reply(reply) => reply,
            Outcome::Forward(pending) => shared.forward(pending, Transport::Tcp).await,
            Outcome::Drop => return,
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&reply);
        if !matches!(
            timeout(TCP_IDLE, stream.write_all(&framed)).await,
            Ok(Ok(()))
        ) {
            return;
        }
    }
}

/// Sends `query` to `upstream` with a random id and returns the reply (id not restored). Over
/// UDP; again over TCP when the reply is truncated and the client asked over TCP.
async fn exchange(
    upstream: SocketAddr,
    wait: Duration,
    query: &[u8],
    tcp_client: bool,
) -> Option<Vec<u8>> {
    let id: u16 = rand::random();
    let mut ours = query.to_vec();
    ours.get_mut(..2)?.copy_from_slice(&id.to_be_bytes());
    let reply = timeout(wait, exchange_udp(upstream, &ours, id))
        .await
        .ok()??;
    let truncated = reply.get(2).is_some_and(|flags| flags & 0x02 != 0);
    if truncated && tcp_client {
        if let Ok(Some(full)) = timeout(wait, exchange_tcp(upstream, &ours, id)).await {
            return Some(full);
        }
    }
    Some(reply)
}

async fn exchange_udp(upstream: SocketAddr, query: &[u8], id: u16) -> Option<Vec<u8>> {
    let local: SocketAddr = match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await.ok()?;
    // Connected: replies from anyone else are not even delivered, and a refused port fails fast.
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let len = socket.recv(&mut buf).await.ok()?;
        let reply = buf.get(..len)?;
        if is_reply_to(reply, id) {
            return Some(reply.to_vec());
        }
    }
}

async fn exchange_tcp(upstream: SocketAddr, query: &[u8], id: u16) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(upstream).await.ok()?;
    let len = u16::try_from(query.len()).ok()?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await.ok()?;
    let len = stream.read_u16().await.ok()?;
    let mut reply = vec![0u8; usize::from(len)];
    stream.read_exact(&mut reply).await.ok()?;
    is_reply_to(&reply, id).then_some(reply)
}

/// Whether `bytes` is a response (QR set) with id `id`.
fn is_reply_to(bytes: &[u8], id: u16) -> bool {
    bytes.len() >= HEADER_LEN
        && bytes.get(..2) == Some(&id.to_be_bytes()[..])
        && bytes.get(2).is_some_and(|flags| flags & 0x80 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_replies_keep_id_opcode_and_rd() {
        // id 0xabcd, opcode STATUS (2), RD, AA (dropped).
        let query = [0xab, 0xcd, 0x15, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        let reply = bare_reply(&query, FORMERR);
        assert_eq!(reply, [0xab, 0xcd, 0x91, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn replies_are_told_apart_by_id_and_qr() {
        let mut reply = [0u8; HEADER_LEN];
        reply[..2].copy_from_slice(&7u16.to_be_bytes());
        assert!(!is_reply_to(&reply, 7), "a query, not a reply");
        reply[2] = 0x80;
        assert!(is_reply_to(&reply, 7));
        assert!(!is_reply_to(&reply, 8));
        assert!(!is_reply_to(&reply[..11], 7));
    }

    #[test]
    fn resolv_conf_gives_its_first_nameserver() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("resolv.conf");
        let text = "# generated\nsearch example.com\nnameserver 10.0.0.10\nnameserver 10.0.0.11\n";
        std::fs::write(&path, text)?;
        let want: SocketAddr = "10.0.0.10:53".parse()?;
        assert_eq!(upstream_from_resolv_conf(&path)?, Some(want));
        std::fs::write(&path, "nameserver fd00::a\n")?;
        let want: SocketAddr = "[fd00::a]:53".parse()?;
        assert_eq!(upstream_from_resolv_conf(&path)?, Some(want));
        std::fs::write(&path, "search x\n")?;
        assert_eq!(upstream_from_resolv_conf(&path)?, None);
        std::fs::write(&path, "nameserver not-an-ip\n")?;
        let invalid = upstream_from_resolv_conf(&path);
        assert!(
            matches!(invalid, Err(Error::InvalidNameserver { .. })),
            "{invalid:?}"
        );
        let missing = upstream_from_resolv_conf(&dir.path().join("nope"));
        assert!(
            matches!(missing, Err(Error::ReadResolvConf { .. })),
            "{missing:?}"
        );
        Ok(())
    }
}
