//! A throwaway one-member etcd for end-to-end tests: the `etcd` binary on the PATH, on free
//! loopback ports, its data in a temporary directory; killed and removed when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A running etcd member.
pub struct Etcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client_port: u16,
}

/// A free TCP port on 127.0.0.1 (released before returning; good enough for tests).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

impl Etcd {
    /// Starts etcd and waits (up to 30 s) until `/health` answers healthy.
    pub fn start() -> Result<Etcd> {
        let dir = tempfile::tempdir().context("tempdir")?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("m0")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("m0={peer}")])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd (is it installed? scripts/install-test-deps.sh)")?;
        let mut etcd = Etcd {
            child: Some(child),
            dir,
            client_port,
        };
        let deadline = Instant::now() + crate::STARTUP;
        loop {
            if healthy(client_port) {
                return Ok(etcd);
            }
            if let Some(c) = etcd.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("etcd exited with {status}: {}", etcd.log());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd did not become healthy in {} s: {}",
                    crate::STARTUP.as_secs(),
                    etcd.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:PORT` of its client URL.
    pub fn member(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `etcd://127.0.0.1:PORT`, for `fabrik serve --store`.
    pub fn store_flag(&self) -> String {
        format!("etcd://{}", self.member())
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

/// Whether `GET /health` on the client port says healthy (plain HTTP/1.0 over std, so that it
/// works inside and outside an async runtime).
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
