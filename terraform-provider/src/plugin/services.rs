//! go-plugin's companion services: `plugin.GRPCController` (Terraform asks the plugin to exit
//! when it is done with it) and `plugin.GRPCStdio` (the plugin's output over gRPC; this
//! provider logs to stderr, which go-plugin reads directly, so the stream carries nothing and
//! ends at shutdown).

use std::pin::Pin;

use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::proto::plugin::grpc_controller_server::GrpcController;
use crate::proto::plugin::grpc_stdio_server::GrpcStdio;
use crate::proto::plugin::{Empty, StdioData};

/// `plugin.GRPCController`: turns `Shutdown` into the server's shutdown signal.
pub struct Controller {
    /// Set to true on shutdown.
    pub shutdown: watch::Sender<bool>,
}

#[tonic::async_trait]
impl GrpcController for Controller {
    async fn shutdown(&self, _request: Request<Empty>) -> Result<Response<Empty>, Status> {
        tracing::debug!("shutdown requested by Terraform");
        self.shutdown.send_replace(true);
        Ok(Response::new(Empty {}))
    }
}

/// `plugin.GRPCStdio`: an empty stream that ends when the server shuts down.
pub struct Stdio {
    /// Turns true on shutdown.
    pub shutdown: watch::Receiver<bool>,
}

/// The stdio stream type.
pub type StdioStream = Pin<Box<dyn Stream<Item = Result<StdioData, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl GrpcStdio for Stdio {
    type StreamStdioStream = StdioStream;

    async fn stream_stdio(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        let until_shutdown = WatchStream::new(self.shutdown.clone())
            .take_while(|stopped| !*stopped)
            .filter_map(|_| None::<Result<StdioData, Status>>);
        Ok(Response::new(Box::pin(until_shutdown)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stdio_stream_ends_on_shutdown() {
        let (tx, rx) = watch::channel(false);
        let controller = Controller { shutdown: tx };
        let stdio = Stdio { shutdown: rx };
        let mut stream = stdio
            .stream_stdio(Request::new(Empty {}))
            .await
            .expect("stream")
            .into_inner();
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(waiting.is_err(), "nothing is sent before shutdown");
        controller
            .shutdown(Request::new(Empty {}))
            .await
            .expect("shutdown");
        let end = tokio::time::timeout(std::time::Duration::from_secs(1), stream.next())
            .await
            .expect("stream ends");
        assert!(end.is_none());
    }
}
