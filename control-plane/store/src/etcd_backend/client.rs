//! The connection to etcd: building the client from [`EtcdConfig`] (endpoints, TLS, auth) and
//! retrying requests through transient failures.
//!
//! The client balances requests over every configured endpoint. When a member dies, requests
//! routed to it fail with a transport error or `Unavailable`; during a leader election etcd
//! answers `leader changed` / `no leader`. Those are retried (exponential backoff from 20 ms
//! to 500 ms) until [`EtcdConfig::retry_timeout`] has passed; every other error is returned
//! at once. A retried write may already have been applied by the failed attempt: the write
//! path (see [`write`](super::write)) recognises its own earlier success.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::time::Instant;

use super::config::{EtcdConfig, EtcdTls};
use crate::error::{Result, StoreError};

/// First backoff after a transient failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// Longest backoff between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Connect a client to every endpoint of `config`, retrying until the cluster answers or
/// `retry_timeout` has passed.
pub(crate) async fn connect(config: &EtcdConfig) -> Result<Client> {
    if config.endpoints.is_empty() {
        return Err(StoreError::EtcdConfig("no endpoints".to_owned()));
    }
    let mut options = ConnectOptions::new()
        .with_connect_timeout(config.connect_timeout)
        .with_timeout(config.request_timeout)
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        // A member cut off from the leader fails requests instead of hanging watches.
        .with_require_leader(true);
    if let Some(tls) = &config.tls {
        options = options.with_tls(tls_options(tls).await?);
    }
    if let Some((user, password)) = &config.user {
        options = options.with_user(user.clone(), password.clone());
    }
    let endpoints = config.endpoints.clone();
    retry(config.retry_timeout, "connect", |_| {
        let options = options.clone();
        let endpoints = endpoints.clone();
        async move {
            let mut client = Client::connect(&endpoints, Some(options)).await?;
            // Connecting is lazy: one request proves the cluster answers.
            client.status().await?;
            Ok(client)
        }
    })
    .await
}

/// The client TLS settings for `tls`, reading its PEM files.
async fn tls_options(tls: &EtcdTls) -> Result<TlsOptions> {
    let mut options = TlsOptions::new();
    if let Some(ca) = &tls.ca_file {
        options = options.ca_certificate(Certificate::from_pem(read(ca).await?));
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            options = options.identity(Identity::from_pem(read(cert).await?, read(key).await?));
        }
        (None, None) => {}
        _ => {
            return Err(StoreError::EtcdConfig(
                "a client certificate needs its key and a key its certificate".to_owned(),
            ))
        }
    }
    if let Some(name) = &tls.server_name {
        options = options.domain_name(name.clone());
    }
    Ok(options)
}

async fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    tokio::fs::read(path)
        .await
        .map_err(|source| StoreError::EtcdTlsFile {
            path: path.to_owned(),
            source,
        })
}

/// Run `attempt` until it succeeds, fails with a non-transient error, or `timeout` has passed
/// since the first try. `attempt` gets `true` when an earlier try failed (and so may or may
/// not have been applied).
pub(crate) async fn retry<T, F, Fut>(
    timeout: Duration,
    op: &'static str,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    let mut failed_before = false;
    loop {
        match attempt(failed_before).await {
            Ok(value) => return Ok(value),
            Err(error) if is_transient(&error) && Instant::now() + backoff < deadline => {
                tracing::debug!(op, %error, ?backoff, "transient etcd failure, retrying");
                failed_before = true;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => return Err(etcd_error(op, error)),
        }
    }
}

/// Wrap a client error.
pub(crate) fn etcd_error(op: &'static str, error: etcd_client::Error) -> StoreError {
    StoreError::Etcd {
        op,
        source: Box::new(error),
    }
}

/// gRPC status codes (the numbers are fixed by the gRPC protocol).
mod code {
    pub(super) const CANCELLED: i32 = 1;
    pub(super) const UNKNOWN: i32 = 2;
    pub(super) const DEADLINE_EXCEEDED: i32 = 4;
    pub(super) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(super) const ABORTED: i32 = 10;
    pub(super) const INTERNAL: i32 = 13;
    pub(super) const UNAVAILABLE: i32 = 14;
}

/// Whether `error` is worth retrying: the connection, the member or the leader went away, or
/// a request timed out; not a refused or invalid request.
pub(crate) fn is_transient(error: &etcd_client::Error) -> bool {
    use etcd_client::Error;
    match error {
        Error::TransportError(_) | Error::IoError(_) | Error::WatchError(_) => true,
        // A status made from a failed connection (tonic's `Cancelled` with the transport error
        // as its source: "operation was canceled" / "connection closed" when the member died
        // under the request).
        Error::GRpcStatus(status)
            if i32::from(status.code()) == code::CANCELLED
                && std::error::Error::source(status).is_some() =>
        {
            true
        }
        Error::GRpcStatus(status) => transient_status(status.code().into(), status.message()),
        _ => false,
    }
}

/// Whether a gRPC status with `code` and `message` reports a transient failure.
fn transient_status(code: i32, message: &str) -> bool {
    let transient_message = [
        "leader changed",
        "no leader",
        "request timed out",
        "too many requests",
        "transport",
        "connection",
        "broken pipe",
        "h2 protocol",
        "reset",
    ]
    .iter()
    .any(|needle| message.contains(needle));
    match code {
        code::UNAVAILABLE | code::DEADLINE_EXCEEDED | code::RESOURCE_EXHAUSTED => true,
        code::UNKNOWN | code::CANCELLED | code::INTERNAL | code::ABORTED => transient_message,
        _ => false,
    }
}

/// etcd's message for a read or watch below the compacted revision.
const COMPACTED_MESSAGE: &str = "required revision has been compacted";
/// etcd's message for a read above the current revision.
const FUTURE_MESSAGE: &str = "required revision is a future revision";

/// Whether `error` is etcd's "required revision has been compacted".
pub(crate) fn is_compacted(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().contains(COMPACTED_MESSAGE))
}

/// Whether `error` is the client refusing a response over its message size limit (4 MiB).
pub(crate) fn is_too_large(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("message length too large"))
}

/// Whether `error` is etcd's "required revision is a future revision".
pub(crate) fn is_future_revision(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().contains(FUTURE_MESSAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errors() {
        assert!(transient_status(
            code::UNAVAILABLE,
            "etcdserver: leader changed"
        ));
        assert!(transient_status(code::UNKNOWN, "transport error"));
        assert!(!transient_status(code::UNKNOWN, "something else"));
        // OutOfRange (11): compacted / future revision are answers, not failures.
        assert!(!transient_status(
            11,
            "etcdserver: mvcc: required revision has been compacted"
        ));
        assert!(is_transient(&etcd_client::Error::IoError(
            std::io::Error::other("reset")
        )));
        assert!(!is_transient(&etcd_client::Error::InvalidArgs(
            "x".to_owned()
        )));
        // The member died under the request: tonic reports `Cancelled` with the transport
        // error as its source. A bare `Cancelled` without one is not retried.
        let mut died = tonic::Status::cancelled("operation was canceled");
        died.set_source(std::sync::Arc::new(std::io::Error::other(
            "connection closed",
        )));
        assert!(is_transient(&etcd_client::Error::GRpcStatus(died)));
        assert!(!is_transient(&etcd_client::Error::GRpcStatus(
            tonic::Status::cancelled("canceled by the server")
        )));
    }

    #[tokio::test]
    async fn retry_gives_up_on_permanent_errors_and_retries_transient_ones() {
        let mut calls = 0;
        let outcome: Result<()> = retry(Duration::from_secs(5), "test", |_| {
            calls += 1;
            async { Err(etcd_client::Error::InvalidArgs("bad".to_owned())) }
        })
        .await;
        assert!(matches!(outcome, Err(StoreError::Etcd { op: "test", .. })));
        assert_eq!(calls, 1);

        let mut calls = 0;
        let mut saw_retry_flag = false;
        let outcome = retry(Duration::from_secs(5), "test", |failed_before| {
            calls += 1;
            saw_retry_flag |= failed_before;
            let result = if calls < 3 {
                Err(etcd_client::Error::IoError(std::io::Error::other("reset")))
            } else {
                Ok(calls)
            };
            async move { result }
        })
        .await;
        assert!(matches!(outcome, Ok(3)));
        assert!(saw_retry_flag);
    }
}
