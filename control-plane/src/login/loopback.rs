//! The loopback redirect listener (RFC 8252 section 7.3): a tiny HTTP server on 127.0.0.1 that
//! waits for the browser to come back to `/callback?code=…&state=…`.
//!
//! Guarantees: only a request whose `state` matches is taken; other requests (a favicon, a
//! stale tab, a forged redirect) get an error page and the listener keeps waiting. Each
//! connection is read in its own task, so a browser's idle pre-connection cannot stall it.
//! The browser's connection is held open until the caller knows whether the login worked, so
//! the page it shows tells the truth.

use std::net::SocketAddr;
use std::time::Duration;

use openidconnect::url::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The redirect path.
pub const CALLBACK_PATH: &str = "/callback";
/// The most a request head may take.
const MAX_HEAD: usize = 16 * 1024;
/// How long a connection may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the redirect listener.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// None of the addresses could be bound.
    #[error("cannot listen for the login redirect on {addrs}: {source} (pass a free address with --listen)")]
    Bind {
        /// The addresses tried.
        addrs: String,
        /// The last error.
        #[source]
        source: std::io::Error,
    },
    /// The listener failed.
    #[error("the login redirect listener failed: {0}")]
    Accept(#[source] std::io::Error),
    /// The issuer redirected back with an error.
    #[error("the issuer refused the login: {error}{}", describe(.description))]
    Provider {
        /// The OAuth error code, e.g. `access_denied`.
        error: String,
        /// Its description, if any.
        description: Option<String>,
    },
    /// The redirect came from another issuer (RFC 9207 `iss` mismatch).
    #[error("the login redirect names issuer {got:?}, not {want:?}: refusing it (mix-up attack?)")]
    IssuerMismatch {
        /// What the redirect said.
        got: String,
        /// The issuer logged in to.
        want: String,
    },
}

fn describe(d: &Option<String>) -> String {
    d.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What one request to the listener was.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The redirect with a code and the right state.
    Code(String),
    /// The redirect with an OAuth error and the right state.
    Denied {
        /// `error`.
        error: String,
        /// `error_description`.
        description: Option<String>,
    },
    /// The redirect names another issuer.
    WrongIssuer(String),
    /// The redirect, but with a missing or wrong state.
    BadState,
    /// Something else (a favicon, a probe).
    NotFound,
}

/// Classifies a request target (`/callback?…`) against the expected state and issuer.
pub fn classify(target: &str, state: &str, issuer: &str) -> Outcome {
    let Ok(url) = Url::parse(&format!("http://127.0.0.1{target}")) else {
        return Outcome::NotFound;
    };
    if url.path() != CALLBACK_PATH {
        return Outcome::NotFound;
    }
    let get = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    if get("state").as_deref() != Some(state) {
        return Outcome::BadState;
    }
    if let Some(iss) = get("iss") {
        if iss.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Outcome::WrongIssuer(iss);
        }
    }
    if let Some(error) = get("error") {
        return Outcome::Denied {
            error,
            description: get("error_description"),
        };
    }
    match get("code") {
        Some(code) if !code.is_empty() => Outcome::Code(code),
        _ => Outcome::Denied {
            error: "invalid_request".into(),
            description: Some("the redirect carries no code".into()),
        },
    }
}

/// A bound listener waiting for the redirect.
pub struct Listener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    /// Binds the first free address of `addrs`; if none is free, any port on the first
    /// address's IP (the issuer must then accept any loopback port, as RFC 8252 asks).
    pub async fn bind(addrs: &[SocketAddr]) -> Result<Listener> {
        let mut last = None;
        for addr in addrs {
            match TcpListener::bind(addr).await {
                Ok(listener) => return Listener::from_tokio(listener),
                Err(e) => last = Some(e),
            }
        }
        let ip = addrs
            .first()
            .map(|a| a.ip())
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
        let any = SocketAddr::new(ip, 0);
        match TcpListener::bind(any).await {
            Ok(listener) => {
                if !addrs.is_empty() && addrs.iter().all(|a| a.port() != 0) {
                    eprintln!(
                        "fabrik login: {} busy; listening on a free port instead (the issuer \
                         must allow any loopback port in the redirect URI)",
                        list(addrs)
                    );
                }
                Listener::from_tokio(listener)
            }
            Err(source) => Err(Error::Bind {
                addrs: list(addrs),
                source: last.unwrap_or(source),
            }),
        }
    }

    fn from_tokio(listener: TcpListener) -> Result<Listener> {
        let addr = listener.local_addr().map_err(Error::Accept)?;
        Ok(Listener { listener, addr })
    }

    /// The redirect URI to register with the authorization request.
    pub fn redirect_uri(&self) -> String {
        format!("http://{}{CALLBACK_PATH}", self.addr)
    }

    /// Waits for the redirect carrying `state`; answers every other request and keeps waiting.
    pub async fn wait(self, state: &str, issuer: &str) -> Result<Callback> {
        let (tx, mut rx) = mpsc::channel::<(TcpStream, String)>(8);
        let listener = self.listener;
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Ok(Some(target)) =
                        tokio::time::timeout(HEAD_TIMEOUT, read_target(&mut stream)).await
                    {
                        let _ = tx.send((stream, target)).await;
                    }
                });
            }
        });
        let _abort = AbortOnDrop(acceptor);
        while let Some((mut stream, target)) = rx.recv().await {
            match classify(&target, state, issuer) {
                Outcome::Code(code) => return Ok(Callback { stream, code }),
                Outcome::Denied { error, description } => {
                    let msg = format!("{error}{}", describe(&description));
                    respond(&mut stream, 403, &failure_page(&msg)).await;
                    return Err(Error::Provider { error, description });
                }
                Outcome::WrongIssuer(got) => {
                    respond(&mut stream, 400, &failure_page("wrong issuer")).await;
                    return Err(Error::IssuerMismatch {
                        got,
                        want: issuer.to_string(),
                    });
                }
                Outcome::BadState => {
                    eprintln!(
                        "fabrik login: ignored a redirect with a wrong state (an old browser \
                         tab?); still waiting"
                    );
                    respond(&mut stream, 400, &failure_page("this login link is stale")).await;
                }
                Outcome::NotFound => respond(&mut stream, 404, "not found").await,
            }
        }
        // The acceptor ended: the listener failed.
        Err(Error::Accept(std::io::Error::other("listener closed")))
    }
}

/// The redirect that carried the code; answer it with [`Callback::finish`].
pub struct Callback {
    stream: TcpStream,
    /// The authorization code.
    pub code: String,
}

impl Callback {
    /// Shows the browser whether the login worked.
    pub async fn finish(mut self, outcome: std::result::Result<(), String>) {
        match outcome {
            Ok(()) => respond(&mut self.stream, 200, SUCCESS_PAGE).await,
            Err(msg) => respond(&mut self.stream, 500, &failure_page(&msg)).await,
        }
    }
}

/// The page shown when the login worked.
pub const SUCCESS_PAGE: &str = "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
<title>Fabrik login</title></head><body><h1>Logged in to Fabrik</h1>\
<p>You can close this window and return to the terminal.</p></body></html>";

fn failure_page(msg: &str) -> String {
    let escaped = msg
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Fabrik login failed</title>\
         </head><body><h1>Login failed</h1><p>{escaped}</p><p>See the terminal for details.</p>\
         </body></html>"
    )
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads a request head and returns its target if it is a `GET`.
async fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    parse_request_line(&buf)
}

/// The target of a `GET` request line.
fn parse_request_line(head: &[u8]) -> Option<String> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    (method == "GET" && target.starts_with('/')).then(|| target.to_string())
}

async fn respond(stream: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISS: &str = "https://idp.example";

    #[test]
    fn takes_the_code_with_the_right_state() {
        assert_eq!(
            classify("/callback?code=abc&state=s1", "s1", ISS),
            Outcome::Code("abc".into())
        );
        assert_eq!(
            classify(
                "/callback?code=abc&state=s1&iss=https%3A%2F%2Fidp.example",
                "s1",
                ISS
            ),
            Outcome::Code("abc".into())
        );
    }

    #[test]
    fn refuses_wrong_state_issuer_and_paths() {
        assert_eq!(
            classify("/callback?code=abc&state=s2", "s1", ISS),
            Outcome::BadState
        );
        assert_eq!(classify("/callback?code=abc", "s1", ISS), Outcome::BadState);
        assert_eq!(
            classify(
                "/callback?code=abc&state=s1&iss=https%3A%2F%2Fevil",
                "s1",
                ISS
            ),
            Outcome::WrongIssuer("https://evil".into())
        );
        assert_eq!(classify("/favicon.ico", "s1", ISS), Outcome::NotFound);
    }

    #[test]
    fn reports_provider_errors() {
        assert_eq!(
            classify(
                "/callback?error=access_denied&error_description=no&state=s1",
                "s1",
                ISS
            ),
            Outcome::Denied {
                error: "access_denied".into(),
                description: Some("no".into())
            }
        );
    }

    #[test]
    fn parses_get_request_lines_only() {
        assert_eq!(
            parse_request_line(b"GET /callback?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some("/callback?x=1".into())
        );
        assert_eq!(parse_request_line(b"POST /callback HTTP/1.1\r\n\r\n"), None);
        assert_eq!(parse_request_line(b"garbage"), None);
    }

    #[tokio::test]
    async fn serves_the_redirect_end_to_end() -> std::result::Result<(), Box<dyn std::error::Error>>
    {
        let listener = Listener::bind(&["127.0.0.1:0".parse()?]).await?;
        let uri = listener.redirect_uri();
        let addr = uri
            .trim_start_matches("http://")
            .trim_end_matches(CALLBACK_PATH)
            .to_string();
        let waiter = tokio::spawn(async move { listener.wait("st", ISS).await });
        // A stray request first, then an idle connection, then the real redirect.
        let get = |path: &'static str, addr: String| async move {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        assert!(get("/favicon.ico", addr.clone())
            .await?
            .starts_with("HTTP/1.1 404"));
        let _idle = TcpStream::connect(addr.clone()).await?;
        let browser = tokio::spawn(get("/callback?code=c1&state=st", addr));
        let callback = waiter.await??;
        assert_eq!(callback.code, "c1");
        callback.finish(Ok(())).await;
        let page = browser.await??;
        assert!(page.starts_with("HTTP/1.1 200"));
        assert!(page.contains("You can close this window"));
        Ok(())
    }
}
