//! `exec` into a simulated container: the kubelet's side of the stream protocol that
//! `kubectl exec` speaks over a WebSocket (`v5.channel.k8s.io`, and `v4.channel.k8s.io`),
//! with a handful of commands answered by the simulation.
//!
//! A simulated container runs no process, so nothing the tenant sends is executed. What it
//! answers: `echo ARGS…`, `cat` (stdin back on stdout; `cat /etc/hostname`), `env` (the
//! container's literal environment), `hostname`, `true`, `false`. Anything else ends with exit
//! code 127 and a message that says so — the stream, the exit code and stdin all travel
//! exactly as they would from a real kubelet, which is what proxies in front of it need.
//!
//! Framing: every binary message starts with its channel — 0 stdin, 1 stdout, 2 stderr, 3 the
//! final `Status`, 4 terminal resize; v5 adds 255, a client's "close this channel" (stdin
//! done).

use std::collections::VecDeque;

use futures::{SinkExt, StreamExt};
use serde_json::json;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The stream protocols served, preferred first.
pub const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// The commands a simulated container answers.
pub const COMMANDS: &str = "echo, cat, env, hostname, true, false";

/// A malformed exec request.
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum ExecError {
    /// No `command` parameter.
    #[error("you must specify at least one command for the container")]
    NoCommand,
    /// A boolean parameter that is not a boolean.
    #[error("{name}={value} is not a boolean (true or false)")]
    NotBoolean {
        /// The parameter.
        name: String,
        /// Its value.
        value: String,
    },
}

/// What an exec request asks for (its query parameters).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ExecOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The container (the pod's only one when absent).
    pub container: Option<String>,
    /// Whether the client sends stdin.
    pub stdin: bool,
    /// Whether stdout is wanted.
    pub stdout: bool,
    /// Whether stderr is wanted.
    pub stderr: bool,
    /// Whether a terminal is asked for (stderr then goes to stdout).
    pub tty: bool,
}

impl ExecOptions {
    /// Parses the query string of a `pods/exec` request.
    pub fn from_query(query: &str) -> Result<ExecOptions, ExecError> {
        let mut opts = ExecOptions::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let flag = || match value.as_ref() {
                "true" | "1" => Ok(true),
                "false" | "0" | "" => Ok(false),
                other => Err(ExecError::NotBoolean {
                    name: key.to_string(),
                    value: other.to_string(),
                }),
            };
            match key.as_ref() {
                "command" => opts.command.push(value.to_string()),
                "container" => opts.container = Some(value.to_string()),
                "stdin" => opts.stdin = flag()?,
                "stdout" => opts.stdout = flag()?,
                "stderr" => opts.stderr = flag()?,
                "tty" => opts.tty = flag()?,
                _ => {}
            }
        }
        if opts.command.is_empty() {
            return Err(ExecError::NoCommand);
        }
        Ok(opts)
    }
}

/// The protocol to answer with, from the client's `Sec-WebSocket-Protocol` offer.
pub fn choose_protocol(offered: &str) -> Option<&'static str> {
    let offered: Vec<&str> = offered.split(',').map(str::trim).collect();
    PROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// The `Sec-WebSocket-Accept` answer to a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes())
}

/// The simulated container being exec'd into.
#[derive(Debug, Clone, Default)]
pub struct SimContainer {
    /// The node it runs on.
    pub node: String,
    /// The pod's hostname.
    pub hostname: String,
    /// Its environment (literal values).
    pub env: Vec<(String, String)>,
}

/// What a command does once stdin (if any) is known.
enum Program {
    /// Writes this to stdout and stderr, exits with the code.
    Fixed {
        stdout: String,
        stderr: String,
        code: i32,
    },
    /// Copies stdin to stdout.
    Cat,
}

fn program(command: &[String], c: &SimContainer) -> Program {
    let fixed = |stdout: String, code| Program::Fixed {
        stdout,
        stderr: String::new(),
        code,
    };
    let name = command.first().map(String::as_str).unwrap_or("");
    let args = command.get(1..).unwrap_or(&[]);
    match name {
        "echo" => fixed(format!("{}\n", args.join(" ")), 0),
        "cat" if args.is_empty() => Program::Cat,
        "cat" => {
            let mut out = String::new();
            let mut err = String::new();
            for a in args {
                match a.as_str() {
                    "/etc/hostname" => out.push_str(&format!("{}\n", c.hostname)),
                    other => err.push_str(&format!("cat: {other}: No such file or directory\n")),
                }
            }
            let code = i32::from(!err.is_empty());
            Program::Fixed {
                stdout: out,
                stderr: err,
                code,
            }
        }
        "env" => {
            let mut out = String::new();
            for (k, v) in &c.env {
                out.push_str(&format!("{k}={v}\n"));
            }
            fixed(out, 0)
        }
        "hostname" => fixed(format!("{}\n", c.hostname), 0),
        "true" => fixed(String::new(), 0),
        "false" => fixed(String::new(), 1),
        other => Program::Fixed {
            stdout: String::new(),
            stderr: format!(
                "{other}: not found: {} is a simulated node and its containers run no \
                 processes (they answer {COMMANDS})\n",
                c.node
            ),
            code: 127,
        },
    }
}

/// The `Status` sent on the error channel when the command ends with `code`.
pub fn exit_status(command: &[String], code: i32) -> serde_json::Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::binary(bytes)
}

/// Serves one exec session on an upgraded connection `io`: runs `opts.command` in the
/// simulated container `c`, streams its output, sends its exit status and closes.
pub async fn serve<S>(io: S, protocol: &'static str, opts: ExecOptions, c: SimContainer)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (mut sink, mut incoming) = ws.split();
    // stdin: Some(bytes) while it flows, None once the client closed it (or went away).
    let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let reader = tokio::spawn(async move {
        while let Some(Ok(msg)) = incoming.next().await {
            match msg {
                Message::Binary(b) => match b.split_first() {
                    Some((&STDIN, data)) => {
                        let _ = stdin_tx.send(Some(data.to_vec()));
                    }
                    Some((&CLOSE, [STDIN])) if protocol == PROTOCOLS[0] => {
                        let _ = stdin_tx.send(None);
                    }
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = stdin_tx.send(None);
    });
    let out_channel = STDOUT;
    let err_channel = if opts.tty { STDOUT } else { STDERR };
    let code = match program(&opts.command, &c) {
        Program::Fixed {
            stdout,
            stderr,
            code,
        } => {
            let mut frames = VecDeque::new();
            if opts.stdout && !stdout.is_empty() {
                frames.push_back(frame(out_channel, stdout.as_bytes()));
            }
            if (opts.stderr || opts.tty) && !stderr.is_empty() {
                frames.push_back(frame(err_channel, stderr.as_bytes()));
            }
            for f in frames {
                if sink.send(f).await.is_err() {
                    reader.abort();
                    return;
                }
            }
            code
        }
        Program::Cat => {
            if opts.stdin {
                while let Some(Some(data)) = stdin_rx.recv().await {
                    if opts.stdout && sink.send(frame(out_channel, &data)).await.is_err() {
                        reader.abort();
                        return;
                    }
                }
            }
            0
        }
    };
    let status = serde_json::to_vec(&exit_status(&opts.command, code)).unwrap_or_default();
    let _ = sink.send(frame(ERROR, &status)).await;
    // A normal closure: clients read the status, then see the stream end (a close without a
    // code reads as an error).
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
    reader.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> SimContainer {
        SimContainer {
            node: "sim-0".into(),
            hostname: "web".into(),
            env: vec![("A".into(), "1".into())],
        }
    }

    #[test]
    fn queries_parse_like_kubectl_sends_them() {
        let o = ExecOptions::from_query(
            "command=sh&command=-c&command=echo+a%26b&container=app&stdin=true&stdout=true&stderr=true&tty=false",
        )
        .expect("valid");
        assert_eq!(o.command, ["sh", "-c", "echo a&b"]);
        assert_eq!(o.container.as_deref(), Some("app"));
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        assert_eq!(
            ExecOptions::from_query("stdout=true"),
            Err(ExecError::NoCommand)
        );
        assert!(matches!(
            ExecOptions::from_query("command=ls&tty=maybe"),
            Err(ExecError::NotBoolean { .. })
        ));
    }

    #[test]
    fn protocols_prefer_v5() {
        assert_eq!(
            choose_protocol("v4.channel.k8s.io, v5.channel.k8s.io"),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol("v4.channel.k8s.io"),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(
            choose_protocol("channel.k8s.io, base64.channel.k8s.io"),
            None
        );
        // RFC 6455's example.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn commands_answer_and_the_rest_is_refused() {
        let c = container();
        let run = |cmd: &[&str]| match program(
            &cmd.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &c,
        ) {
            Program::Fixed {
                stdout,
                stderr,
                code,
            } => (stdout, stderr, code),
            Program::Cat => ("<stdin>".into(), String::new(), 0),
        };
        assert_eq!(run(&["echo", "a", "b"]).0, "a b\n");
        assert_eq!(run(&["env"]).0, "A=1\n");
        assert_eq!(run(&["hostname"]).0, "web\n");
        assert_eq!(run(&["cat"]).0, "<stdin>");
        assert_eq!(run(&["cat", "/etc/hostname"]).0, "web\n");
        assert_eq!(run(&["cat", "/etc/shadow"]).2, 1);
        assert_eq!(run(&["false"]).2, 1);
        let (_, err, code) = run(&["rm", "-rf", "/"]);
        assert_eq!(code, 127);
        assert!(
            err.contains("simulated node") && err.contains("sim-0"),
            "{err}"
        );
        let st = exit_status(&["false".into()], 1);
        assert_eq!(st["reason"], "NonZeroExitCode");
        assert_eq!(st["details"]["causes"][0]["message"], "1");
        assert_eq!(exit_status(&[], 0)["status"], "Success");
    }
}
