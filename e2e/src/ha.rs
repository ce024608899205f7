//! Helpers for high-availability tests and benchmarks: `fabrik serve` replicas on one etcd
//! store, and a TCP balancer in front of them that plays the Kubernetes Service (tenant
//! kubeconfigs name the balancer, as they name the Service in a real installation).

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::fabrik_bin;

/// A TCP balancer: each connection goes to the next backend that accepts it.
pub struct Balancer {
    /// Where clients connect.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Balancer {
    /// Listens on a free loopback port in front of `backends`.
    pub fn start(backends: Vec<SocketAddr>) -> Result<Balancer> {
        let listener = TcpListener::bind("127.0.0.1:0").context("balancer listen")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let start = next.fetch_add(1, Ordering::Relaxed);
                let upstream = (0..backends.len()).find_map(|i| {
                    let b = backends[(start + i) % backends.len()];
                    TcpStream::connect_timeout(&b, Duration::from_millis(500)).ok()
                });
                let Some(upstream) = upstream else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                pipe(client, upstream);
            }
        });
        Ok(Balancer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

/// Copies both ways between two sockets until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let pairs = [
        (a.try_clone(), b.try_clone()),
        (b.try_clone(), a.try_clone()),
    ];
    for (from, to) in pairs {
        let (Ok(mut from), Ok(mut to)) = (from, to) else {
            continue;
        };
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
            let _ = from.shutdown(Shutdown::Read);
        });
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One `fabrik serve --store etcd://…` replica.
pub struct Replica {
    /// Its id (`--replica-id`).
    pub id: String,
    /// Its own listen address.
    pub addr: SocketAddr,
    child: Option<Child>,
    log: PathBuf,
}

/// How replicas are started.
pub struct ReplicaConfig<'a> {
    /// The host cluster's admin kubeconfig.
    pub host_kubeconfig: &'a Path,
    /// `etcd://…`.
    pub store: &'a str,
    /// The URL tenant kubeconfigs name (the balancer's).
    pub public_url: &'a str,
    /// Where replica data directories and logs go.
    pub work: &'a Path,
    /// More `fabrik serve` arguments.
    pub extra: &'a [&'a str],
}

impl Replica {
    /// Starts replica `id` on `addr` and waits until it serves.
    pub fn start(config: &ReplicaConfig<'_>, id: &str, addr: SocketAddr) -> Result<Replica> {
        let log = config.work.join(format!("{id}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(fabrik_bin())
            .arg("serve")
            .arg("--host-kubeconfig")
            .arg(config.host_kubeconfig)
            .arg("--data-dir")
            .arg(config.work.join(id))
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--public-url", config.public_url])
            .args(["--store", config.store])
            .args(["--replica-id", id])
            .args(["--serving-ca-secret", "default/fabrik-serving-ca"])
            .args(config.extra)
            .env_remove("KUBECONFIG")
            .env("FABRIK_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting fabrik serve")?;
        let mut r = Replica {
            id: id.to_string(),
            addr,
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + crate::STARTUP;
        while !r.log().contains("serving tenants at ") {
            if let Some(c) = r.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("replica {id} exited with {status}: {}", r.log());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "replica {id} did not serve within {} s: {}",
                    crate::STARTUP.as_secs(),
                    r.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(r)
    }

    /// What it printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL (a crash) and reap.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            match c.kill() {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::InvalidInput => {}
                Err(e) => return Err(e.into()),
            }
            c.wait()?;
        }
        Ok(())
    }

    /// The shard of `tenant` as this replica announced it ("tenant T (shard N) runs on …").
    pub fn announced_shard(&self, tenant: &str) -> Option<u32> {
        let needle = format!("fabrik: tenant {tenant} (shard ");
        let log = self.log();
        let line = log.lines().find(|l| l.contains(&needle))?;
        let rest = line.split(&needle).nth(1)?;
        rest.split(')').next()?.parse().ok()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
