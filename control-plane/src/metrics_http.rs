//! `fabrik serve --metrics-listen ADDR`: the control plane's own figures (the GPU queue's
//! standings and counters) for Prometheus, in its text format at `GET /metrics` on plain HTTP —
//! a scrape port, as exporters have. The tenants' API servers keep their own `/metrics` behind
//! authentication; `fabrik up` puts these figures on its host's `/metrics` instead.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What `/metrics` answers: the text of every source, in order.
pub type Source = Arc<dyn Fn() -> String + Send + Sync>;

fn answer(path: &str, sources: &[Source]) -> Response<Full<Bytes>> {
    let (status, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            sources.iter().map(|s| s()).collect::<String>(),
        ),
        _ => (StatusCode::NOT_FOUND, "404 page not found\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = "text/plain; version=0.0.4; charset=utf-8".parse() {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

/// Serves `sources` on `listener` until `stop` turns true.
pub async fn serve(listener: TcpListener, sources: Vec<Source>, mut stop: watch::Receiver<bool>) {
    let sources = Arc::new(sources);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin on the error.
                tracing::debug!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let sources = sources.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let resp = answer(req.uri().path(), &sources);
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics listener: connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn metrics_are_served_and_nothing_else() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stop_rx) = watch::channel(false);
        let source: Source = Arc::new(|| "fabrik_queue_admitted_gpus{tenant=\"a\"} 3\n".into());
        let task = tokio::spawn(serve(listener, vec![source], stop_rx));
        let ok = get(addr, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(
            ok.ends_with("fabrik_queue_admitted_gpus{tenant=\"a\"} 3\n"),
            "{ok}"
        );
        let other = get(addr, "/api").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let _ = stop.send(true);
        task.await.expect("stops");
    }
}
