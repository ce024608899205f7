//! `/metrics` over plain HTTP/1.1 for the standalone agent (`--metrics-addr`): one small
//! request/response per connection, `GET /metrics` answered with [`Meter::render`], anything
//! else with 404. Requests are read up to 8 KiB and 5 s; no keep-alive.

use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Meter;

/// Errors of the metrics listener.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The address could not be bound.
    #[error("cannot listen for /metrics on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Binds `addr`; the returned listener is served by [`serve`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Serves `/metrics` from `meter` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    meter: Meter,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let meter = meter.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, &meter)).await;
                    });
                }
                Err(e) => tracing::warn!(error = %e, "accepting a /metrics connection failed"),
            }
        }
    }
}

/// The response to a request whose head is `head`.
pub fn respond(head: &str, meter: &Meter) -> Vec<u8> {
    let mut words = head.split_whitespace();
    let (method, path) = (words.next(), words.next());
    let path = path.map(|p| p.split('?').next().unwrap_or(p));
    let (status, body) = match (method, path) {
        (Some("GET"), Some("/metrics")) => ("200 OK", meter.render()),
        _ => ("404 Not Found", "not found: try GET /metrics\n".to_string()),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn answer(mut stream: TcpStream, meter: &Meter) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    stream.write_all(&respond(&head, meter)).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_metrics_and_404s_the_rest() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Meter::default(), async {
            let _ = rx.await;
        }));
        for (path, want) in [("/metrics", "200 OK"), ("/other", "404")] {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .expect("write");
            let mut out = String::new();
            s.read_to_string(&mut out).await.expect("read");
            assert!(out.contains(want), "{out}");
            if want == "200 OK" {
                assert!(out.contains("# TYPE fabrik_gpu_allocated_seconds_total counter"));
            }
        }
        let _ = tx.send(());
        server.await.expect("server");
    }
}
