//! The plugin process as go-plugin expects it: handshake on stdout, a gRPC server over mutual
//! TLS on loopback, the provider service plus go-plugin's controller and stdio services, and a
//! clean exit when Terraform says it is done.

pub mod handshake;
pub mod services;
pub mod tls;

use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::proto::plugin::grpc_controller_server::GrpcControllerServer;
use crate::proto::plugin::grpc_stdio_server::GrpcStdioServer;
use crate::server::Provider;

/// Errors running the plugin.
#[derive(Debug, Error)]
pub enum Error {
    /// The handshake failed.
    #[error(transparent)]
    Handshake(#[from] handshake::Error),
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// A socket or stdout failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// How long the server may take to finish after Terraform asked it to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A connection from Terraform: TLS (always, from Terraform) or plain (when no client
/// certificate was given, for debugging).
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connected for Conn {
    type ConnectInfo = Option<SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        match self {
            Conn::Plain(s) => s.peer_addr().ok(),
            Conn::Tls(s) => s.get_ref().0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepts connections, completing TLS handshakes concurrently, until the receiver is gone.
fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) -> ReceiverStream<std::io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let _ = tcp.set_nodelay(true);
            let tx = tx.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let conn = match acceptor {
                    None => Conn::Plain(tcp),
                    Some(a) => match a.accept(tcp).await {
                        Ok(s) => Conn::Tls(Box::new(s)),
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                    },
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Settings read from the environment Terraform starts the plugin with.
pub struct Env {
    /// `PLUGIN_CLIENT_CERT`.
    pub client_cert: Option<String>,
    /// `PLUGIN_MIN_PORT`.
    pub min_port: Option<String>,
    /// `PLUGIN_MAX_PORT`.
    pub max_port: Option<String>,
}

impl Env {
    /// Reads the environment.
    pub fn from_process() -> Env {
        Env {
            client_cert: std::env::var(tls::CLIENT_CERT_ENV)
                .ok()
                .filter(|s| !s.is_empty()),
            min_port: std::env::var("PLUGIN_MIN_PORT").ok(),
            max_port: std::env::var("PLUGIN_MAX_PORT").ok(),
        }
    }
}

/// Serves the provider until Terraform shuts it down.
pub async fn serve(provider: Arc<Provider>, env: Env) -> Result<(), Error> {
    let listener = handshake::listen(env.min_port, env.max_port)?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let addr = listener.local_addr()?;
    let (acceptor, cert) = match &env.client_cert {
        Some(pem) => {
            let identity = tls::generate_identity()?;
            let config = tls::server_config(&identity, pem)?;
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                identity.cert.to_vec(),
            )
        }
        None => {
            tracing::warn!("{} is not set: serving without TLS", tls::CLIENT_CERT_ENV);
            (None, Vec::new())
        }
    };
    let incoming = accept_loop(listener, acceptor);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let router = tonic::transport::Server::builder()
        .add_service(provider.into_service())
        .add_service(GrpcControllerServer::new(services::Controller {
            shutdown: shutdown_tx,
        }))
        .add_service(GrpcStdioServer::new(services::Stdio {
            shutdown: shutdown_rx.clone(),
        }));

    let line = if cert.is_empty() {
        format!(
            "{}|{}|tcp|{addr}|grpc",
            handshake::CORE_PROTOCOL_VERSION,
            handshake::APP_PROTOCOL_VERSION
        )
    } else {
        handshake::line(addr, &cert)
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }

    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let serving = router.serve_with_incoming_shutdown(incoming, stopped(shutdown_rx.clone()));
    tokio::select! {
        result = serving => result?,
        _ = async {
            stopped(shutdown_rx).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::debug!("connections still open after the grace period; exiting"),
    }
    Ok(())
}
