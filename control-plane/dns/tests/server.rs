//! The server over real UDP and TCP sockets on 127.0.0.0/8: Linux lets a test send from any
//! 127.x.y.z, so each tenant's "pod" is a source address the directory maps to it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabrik_dns::{Directory, Domain, Objects, Server};
use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::timeout;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Tenant "a"'s pod.
const POD_A: &str = "127.5.0.7";
/// Tenant "b"'s pod.
const POD_B: &str = "127.5.0.8";
/// Nobody's.
const STRANGER: &str = "127.5.0.9";
/// How long a test waits for a reply it expects.
const WAIT: Duration = Duration::from_secs(5);
/// How long a test waits to be sure no reply comes.
const SILENCE: Duration = Duration::from_millis(300);

fn objects(cluster_ip: &str, pod_ip: &str, endpoints: usize) -> TestResult<Objects> {
    let web: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "web"},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 80}]},
    }))?;
    let big: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "big"},
        "spec": {"clusterIP": "None"},
    }))?;
    let addresses: Vec<_> = (0..endpoints)
        .map(|i| json!({"addresses": [format!("10.2.{}.{}", i / 200, i % 200 + 1)]}))
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {
            "namespace": "shop",
            "name": "big-1",
            "labels": {"kubernetes.io/service-name": "big"},
        },
        "addressType": "IPv4",
        "endpoints": addresses,
    }))?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"namespace": "shop", "name": "client"},
        "spec": {"containers": []},
        "status": {"phase": "Running", "podIP": pod_ip},
    }))?;
    Ok(Objects {
        services: vec![Arc::new(web), Arc::new(big)],
        endpoint_slices: vec![Arc::new(slice)],
        pods: vec![Arc::new(pod)],
    })
}

/// Tenant "a" (web = 10.96.0.10, 100 endpoints behind `big`) and tenant "b" (web = 10.96.0.20).
fn directory() -> TestResult<Directory> {
    let directory = Directory::new(Domain::default());
    directory.set_objects("a", &objects("10.96.0.10", POD_A, 100)?);
    directory.set_objects("b", &objects("10.96.0.20", POD_B, 1)?);
    Ok(directory)
}

/// A running server; dropping `stop` (or sending on it) shuts it down.
struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start(upstream: Option<SocketAddr>, upstream_timeout: Duration) -> TestResult<Running> {
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let server = Server::bind(any, directory()?, upstream)
        .await?
        .with_upstream_timeout(upstream_timeout);
    let addr = server.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Ok(Running { addr, stop, task })
}

fn query(id: u16, name: &str, qtype: RecordType) -> TestResult<Vec<u8>> {
    let mut message = Message::new();
    message
        .set_id(id)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name)?, qtype));
    Ok(message.to_vec()?)
}

fn source(ip: &str) -> TestResult<SocketAddr> {
    Ok(SocketAddr::new(ip.parse()?, 0))
}

/// Sends `bytes` from `from` over UDP; the reply, or `None` when none comes within `wait`.
async fn udp(
    from: &str,
    server: SocketAddr,
    bytes: &[u8],
    wait: Duration,
) -> TestResult<Option<Message>> {
    let socket = UdpSocket::bind(source(from)?).await?;
    socket.send_to(bytes, server).await?;
    let mut buf = vec![0u8; 65_535];
    match timeout(wait, socket.recv_from(&mut buf)).await {
        Ok(received) => {
            let (len, _) = received?;
            Ok(Some(Message::from_vec(buf.get(..len).ok_or("length")?)?))
        }
        Err(_) => Ok(None),
    }
}

async fn connect(from: &str, server: SocketAddr) -> TestResult<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(source(from)?)?;
    Ok(socket.connect(server).await?)
}

/// Sends one length-prefixed message on `stream` and reads one back.
async fn tcp_exchange(stream: &mut TcpStream, bytes: &[u8]) -> TestResult<Message> {
    let len = u16::try_from(bytes.len())?;
    stream.write_all(&len.to_be_bytes()).await?;
    stream.write_all(bytes).await?;
    let len = timeout(WAIT, stream.read_u16()).await??;
    let mut reply = vec![0u8; usize::from(len)];
    timeout(WAIT, stream.read_exact(&mut reply)).await??;
    Ok(Message::from_vec(&reply)?)
}

async fn tcp(from: &str, server: SocketAddr, bytes: &[u8]) -> TestResult<Message> {
    let mut stream = connect(from, server).await?;
    tcp_exchange(&mut stream, bytes).await
}

fn a_records(reply: &Message) -> Vec<Ipv4Addr> {
    reply
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(A(ip)) => Some(*ip),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn each_tenant_gets_its_own_answer_over_udp_and_tcp() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    let name = "web.shop.svc.cluster.local.";
    for (from, want) in [(POD_A, [10, 96, 0, 10]), (POD_B, [10, 96, 0, 20])] {
        let bytes = query(0x4242, name, RecordType::A)?;
        let over_udp = udp(from, server.addr, &bytes, WAIT)
            .await?
            .ok_or("no UDP reply")?;
        let over_tcp = tcp(from, server.addr, &bytes).await?;
        for reply in [over_udp, over_tcp] {
            assert_eq!(reply.id(), 0x4242);
            assert_eq!(reply.message_type(), MessageType::Response);
            assert_eq!(reply.response_code(), ResponseCode::NoError);
            assert!(reply.authoritative());
            assert!(reply.recursion_available());
            assert!(reply.recursion_desired());
            assert_eq!(reply.queries().len(), 1);
            assert_eq!(a_records(&reply), [Ipv4Addr::from(want)], "from {from}");
        }
    }
    // The SRV record of the named port.
    let bytes = query(7, "_http._tcp.web.shop.svc.cluster.local.", RecordType::SRV)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.answers().len(), 1);
    Ok(())
}

#[tokio::test]
async fn missing_names_are_nxdomain_and_missing_types_nodata() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    let bytes = query(1, "nope.shop.svc.cluster.local.", RecordType::A)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.response_code(), ResponseCode::NXDomain);
    assert!(reply.authoritative());
    assert!(reply.answers().is_empty());
    let bytes = query(2, "web.shop.svc.cluster.local.", RecordType::AAAA)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.response_code(), ResponseCode::NoError);
    assert!(reply.answers().is_empty());
    Ok(())
}

#[tokio::test]
async fn strangers_are_refused_and_nothing_is_forwarded_for_them() -> TestResult {
    let upstream = FakeUpstream::start(true).await?;
    let server = start(Some(upstream.addr), Duration::from_secs(2)).await?;
    for name in ["web.shop.svc.cluster.local.", "example.com."] {
        let bytes = query(3, name, RecordType::A)?;
        let reply = udp(STRANGER, server.addr, &bytes, WAIT)
            .await?
            .ok_or("no UDP reply")?;
        assert_eq!(reply.response_code(), ResponseCode::Refused, "{name}");
        assert!(reply.answers().is_empty());
        assert!(!reply.recursion_available());
        let reply = tcp(STRANGER, server.addr, &bytes).await?;
        assert_eq!(
            reply.response_code(),
            ResponseCode::Refused,
            "{name} over TCP"
        );
        assert!(reply.answers().is_empty());
    }
    assert_eq!(
        upstream.seen(),
        0,
        "nothing of a stranger reaches the upstream"
    );
    Ok(())
}

#[tokio::test]
async fn garbage_gets_formerr_or_nothing_and_the_server_keeps_serving() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    // Too short for a header: nothing.
    assert!(udp(POD_A, server.addr, &[1, 2, 3], SILENCE)
        .await?
        .is_none());
    // A header claiming a question that is not there: FORMERR with the id.
    let mut broken = vec![0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0];
    broken.extend_from_slice(&[0x3f, b'x', b'y']);
    let reply = udp(POD_A, server.addr, &broken, WAIT)
        .await?
        .ok_or("no FORMERR")?;
    assert_eq!(reply.id(), 0xbeef);
    assert_eq!(reply.response_code(), ResponseCode::FormErr);
    // A response is never answered (no reflection loops).
    let mut response = query(9, "web.shop.svc.cluster.local.", RecordType::A)?;
    if let Some(flags) = response.get_mut(2) {
        *flags |= 0x80;
    }
    assert!(udp(POD_A, server.addr, &response, SILENCE).await?.is_none());
    // Two questions: FORMERR.
    let mut two = Message::new();
    two.set_id(11);
    two.add_query(Query::query(
        Name::from_ascii("a.cluster.local.")?,
        RecordType::A,
    ));
    two.add_query(Query::query(
        Name::from_ascii("b.cluster.local.")?,
        RecordType::A,
    ));
    let reply = udp(POD_A, server.addr, &two.to_vec()?, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.response_code(), ResponseCode::FormErr);
    // Random bytes of every length up to 64, none of which may stop the server.
    let mut seed = 0x2545_f491_u32;
    for len in 0..64 {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed.to_be_bytes()[0]
            })
            .collect();
        let socket = UdpSocket::bind(source(POD_A)?).await?;
        socket.send_to(&junk, server.addr).await?;
    }
    // Garbage over TCP: FORMERR, and the connection still answers.
    let mut stream = connect(POD_A, server.addr).await?;
    let reply = tcp_exchange(&mut stream, &broken).await?;
    assert_eq!(reply.response_code(), ResponseCode::FormErr);
    let bytes = query(12, "web.shop.svc.cluster.local.", RecordType::A)?;
    let reply = tcp_exchange(&mut stream, &bytes).await?;
    assert_eq!(a_records(&reply), [Ipv4Addr::new(10, 96, 0, 10)]);
    // And UDP still answers.
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("server stopped")?;
    assert_eq!(a_records(&reply), [Ipv4Addr::new(10, 96, 0, 10)]);
    Ok(())
}

#[tokio::test]
async fn other_names_are_forwarded_and_relayed_with_the_clients_id() -> TestResult {
    let upstream = FakeUpstream::start(true).await?;
    let server = start(Some(upstream.addr), Duration::from_secs(2)).await?;
    let bytes = query(0x1234, "Example.COM.", RecordType::A)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.id(), 0x1234);
    assert_eq!(reply.response_code(), ResponseCode::NoError);
    assert_eq!(a_records(&reply), [FakeUpstream::ANSWER]);
    assert_eq!(
        reply
            .queries()
            .first()
            .map(|q| q.name().to_ascii())
            .as_deref(),
        Some("Example.COM.")
    );
    let reply = tcp(
        POD_B,
        server.addr,
        &query(0x5678, "example.org.", RecordType::A)?,
    )
    .await?;
    assert_eq!(reply.id(), 0x5678);
    assert_eq!(a_records(&reply), [FakeUpstream::ANSWER]);
    assert_eq!(upstream.seen(), 2);
    Ok(())
}

#[tokio::test]
async fn a_silent_upstream_gives_servfail_after_the_timeout() -> TestResult {
    let upstream = FakeUpstream::start(false).await?;
    let wait = Duration::from_millis(300);
    let server = start(Some(upstream.addr), wait).await?;
    let asked = Instant::now();
    let bytes = query(0x0bad, "example.com.", RecordType::A)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no SERVFAIL")?;
    assert!(asked.elapsed() >= wait, "SERVFAIL before the timeout");
    assert_eq!(reply.id(), 0x0bad);
    assert_eq!(reply.response_code(), ResponseCode::ServFail);
    assert_eq!(upstream.seen(), 1);
    Ok(())
}

#[tokio::test]
async fn without_an_upstream_other_names_are_refused() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    let bytes = query(5, "example.com.", RecordType::A)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert_eq!(reply.response_code(), ResponseCode::Refused);
    Ok(())
}

#[tokio::test]
async fn large_udp_answers_are_truncated_and_complete_over_tcp() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    let name = "big.shop.svc.cluster.local.";
    let bytes = query(21, name, RecordType::A)?;
    let reply = udp(POD_A, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert!(reply.truncated());
    assert!(reply.answers().is_empty());
    assert_eq!(reply.queries().len(), 1);
    // A larger EDNS size is honoured only up to 1232 bytes; 100 A records do not fit.
    let mut with_edns = Message::from_vec(&bytes)?;
    let mut edns = Edns::new();
    edns.set_max_payload(4096);
    with_edns.set_edns(edns);
    let reply = udp(POD_A, server.addr, &with_edns.to_vec()?, WAIT)
        .await?
        .ok_or("no reply")?;
    assert!(reply.truncated());
    assert_eq!(
        reply.extensions().as_ref().map(Edns::max_payload),
        Some(1232)
    );
    let reply = tcp(POD_A, server.addr, &bytes).await?;
    assert!(!reply.truncated());
    assert_eq!(a_records(&reply).len(), 100);
    // Tenant "b"'s `big` has one endpoint: it fits.
    let reply = udp(POD_B, server.addr, &bytes, WAIT)
        .await?
        .ok_or("no reply")?;
    assert!(!reply.truncated());
    assert_eq!(a_records(&reply).len(), 1);
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_the_server() -> TestResult {
    let server = start(None, Duration::from_secs(2)).await?;
    let idle = connect(POD_A, server.addr).await?;
    let _ = server.stop.send(());
    timeout(WAIT, server.task).await??;
    drop(idle);
    let bytes = query(1, "web.shop.svc.cluster.local.", RecordType::A)?;
    assert!(udp(POD_A, server.addr, &bytes, SILENCE).await?.is_none());
    Ok(())
}

/// A UDP "upstream" that counts the queries it gets and answers each with one A record
/// (or never, when silent).
struct FakeUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<usize>>,
    task: JoinHandle<()>,
}

impl FakeUpstream {
    const ANSWER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    async fn start(answers: bool) -> TestResult<Self> {
        let socket = UdpSocket::bind((IpAddr::from([127, 0, 0, 1]), 0)).await?;
        let addr = socket.local_addr()?;
        let seen = Arc::new(Mutex::new(0));
        let counter = seen.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_535];
            while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
                *counter.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                let Some(Ok(request)) = buf.get(..len).map(Message::from_vec) else {
                    continue;
                };
                if !answers {
                    continue;
                }
                let mut reply = Message::new();
                reply
                    .set_id(request.id())
                    .set_message_type(MessageType::Response)
                    .set_recursion_available(true)
                    .add_queries(request.queries().to_vec());
                if let Some(q) = request.queries().first() {
                    let record =
                        Record::from_rdata(q.name().clone(), 60, RData::A(A(Self::ANSWER)));
                    reply.add_answer(record);
                }
                if let Ok(bytes) = reply.to_vec() {
                    let _ = socket.send_to(&bytes, peer).await;
                }
            }
        });
        Ok(Self { addr, seen, task })
    }

    fn seen(&self) -> usize {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
