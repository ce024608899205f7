//! DNS queries as a tenant pod sends them: from the pod's own IP. The simulated pods' network
//! can be put in 127.0.0.0/8 (`--pod-network 127.244`), where this machine can send from any
//! address.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

pub use hickory_proto::op::ResponseCode;
pub use hickory_proto::rr::RecordType as Type;

/// The address `fabrik up` / `fabrik serve` printed for its tenant DNS
/// (`tenant DNS on ADDR`), if it did.
pub fn address_in_log(log: &str) -> Option<SocketAddr> {
    log.lines().find_map(|line| {
        let rest = line.split("tenant DNS on ").nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// An answer: its response code and the data of its answer records, as text (`10.96.0.7`,
/// `0 100 80 web.default.svc.cluster.local.`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The response code.
    pub code: ResponseCode,
    /// Each answer record's data.
    pub answers: Vec<String>,
}

/// Asks `server` for `name`'s records of type `qtype`, sending from `source` (over UDP).
pub fn query(server: SocketAddr, source: IpAddr, name: &str, qtype: RecordType) -> Result<Reply> {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0))
        .with_context(|| format!("cannot send from {source}"))?;
    socket.set_read_timeout(Some(Duration::from_secs(3)))?;
    let mut message = Message::new();
    let id: u16 = rand_id();
    message
        .set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name)?, qtype));
    let bytes = message.to_vec()?;
    let mut buf = [0u8; 4096];
    // Two tries: UDP may drop a datagram.
    for _ in 0..2 {
        socket.send_to(&bytes, server)?;
        match socket.recv_from(&mut buf) {
            Ok((n, _)) => {
                let reply = Message::from_vec(&buf[..n])?;
                if reply.id() != id {
                    bail!("the reply has id {}, the query {id}", reply.id());
                }
                return Ok(Reply {
                    code: reply.response_code(),
                    answers: reply
                        .answers()
                        .iter()
                        .map(|r| r.data().to_string())
                        .collect(),
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no answer from {server} to {name} {qtype} from {source}")
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7);
    (nanos % u32::from(u16::MAX)) as u16
}
