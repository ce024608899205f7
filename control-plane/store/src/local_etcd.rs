//! Throwaway etcd clusters on loopback, for tests and benchmarks of the etcd backend.
//!
//! [`LocalEtcd::start`] runs `n` etcd members (the `etcd` binary on the PATH, installed by
//! `scripts/install-test-deps.sh`) on free `127.0.0.1` ports with data directories in a fresh
//! temporary directory, waits until the cluster serves linearizable reads, and removes
//! everything when dropped (members are killed, the directory deleted). Members can be killed
//! and restarted (same ports, same data) to test failures.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long a cluster may take to serve its first linearizable read.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a local etcd cluster could not be run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalEtcdError {
    /// No `etcd` binary on the PATH.
    #[error(
        "etcd is not installed (no `etcd` on the PATH): run scripts/install-test-deps.sh, which \
         installs the Debian packages etcd-server and etcd-client"
    )]
    NotInstalled,
    /// Starting a member or preparing its directory failed.
    #[error("cannot run etcd member {member}: {source}")]
    Io {
        /// Index of the member.
        member: usize,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A member exited or the cluster did not answer in time.
    #[error("etcd cluster did not start: {reason}; last log lines of member {member}:\n{log}")]
    NotReady {
        /// Index of the member whose log is shown.
        member: usize,
        /// What went wrong.
        reason: String,
        /// The tail of its log.
        log: String,
    },
    /// No such member index.
    #[error("no etcd member {0}")]
    NoSuchMember(usize),
}

/// One member: its ports, directory and process.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    process: Option<Child>,
}

impl Member {
    fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }
}

/// A running local etcd cluster; see the module docs.
#[derive(Debug)]
pub struct LocalEtcd {
    root: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
}

impl LocalEtcd {
    /// Start an `n`-member cluster and wait until it serves reads.
    pub async fn start(n: usize) -> Result<Self, LocalEtcdError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "fabrik-etcd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root)
            .map_err(|source| LocalEtcdError::Io { member: 0, source })?;
        let ports = free_ports(2 * n).map_err(|source| LocalEtcdError::Io { member: 0, source })?;
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                dir: root.join(format!("m{i}")),
                process: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            root,
            members,
            initial_cluster,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Client URLs of every member (give them all to the backend).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::client_url).collect()
    }

    /// Client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> Result<String, LocalEtcdError> {
        self.members
            .get(i)
            .map(Member::client_url)
            .ok_or(LocalEtcdError::NoSuchMember(i))
    }

    /// Kill member `i` with SIGKILL (no clean shutdown) and wait for it to exit.
    pub fn kill(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        let member = self
            .members
            .get_mut(i)
            .ok_or(LocalEtcdError::NoSuchMember(i))?;
        if let Some(mut process) = member.process.take() {
            let io = |source| LocalEtcdError::Io { member: i, source };
            process.kill().map_err(io)?;
            process.wait().map_err(io)?;
        }
        Ok(())
    }

    /// Start member `i` again on its ports and data directory, and wait until the cluster
    /// serves reads.
    pub async fn restart(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_ready().await
    }

    /// Index of the current leader (asks every running member).
    pub async fn leader(&self) -> Option<usize> {
        for member in &self.members {
            if member.process.is_none() {
                continue;
            }
            let Ok(mut client) = etcd_client::Client::connect([member.client_url()], None).await
            else {
                continue;
            };
            let Ok(status) = client.status().await else {
                continue;
            };
            let Some(header) = status.header() else {
                continue;
            };
            if status.leader() == header.member_id() {
                return self.members.iter().position(|m| m.name == member.name);
            }
        }
        None
    }

    fn spawn(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        let initial_cluster = self.initial_cluster.clone();
        let member = self
            .members
            .get_mut(i)
            .ok_or(LocalEtcdError::NoSuchMember(i))?;
        let io = |source| LocalEtcdError::Io { member: i, source };
        std::fs::create_dir_all(&member.dir).map_err(io)?;
        let log = File::options()
            .create(true)
            .append(true)
            .open(member.log_path())
            .map_err(io)?;
        let log_err = log.try_clone().map_err(io)?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .arg("--listen-client-urls")
            .arg(member.client_url())
            .arg("--advertise-client-urls")
            .arg(member.client_url())
            .arg("--listen-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-advertise-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-cluster")
            .arg(&initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(format!("fabrik-{}", self.root.display()))
            // Fast failure detection for tests: 50 ms heartbeats, 500 ms elections.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => LocalEtcdError::NotInstalled,
                _ => LocalEtcdError::Io { member: i, source },
            })?;
        member.process = Some(child);
        Ok(())
    }

    /// Wait until a linearizable read through every running member succeeds.
    async fn wait_ready(&mut self) -> Result<(), LocalEtcdError> {
        let deadline = Instant::now() + START_TIMEOUT;
        for i in 0..self.members.len() {
            loop {
                let member = &mut self.members[i];
                let Some(process) = member.process.as_mut() else {
                    break;
                };
                if let Ok(Some(status)) = process.try_wait() {
                    return Err(self.not_ready(i, format!("member {i} exited with {status}")));
                }
                if read_through(&member.client_url()).await {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(self.not_ready(i, "no answer within 30 s".to_owned()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    fn not_ready(&self, i: usize, reason: String) -> LocalEtcdError {
        let log = self
            .members
            .get(i)
            .map(|m| tail(&m.log_path(), 20))
            .unwrap_or_default();
        LocalEtcdError::NotReady {
            member: i,
            reason,
            log,
        }
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut process) = member.process.take() {
                let _ = process.kill();
                let _ = process.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether a linearizable read through `endpoint` succeeds within a second.
async fn read_through(endpoint: &str) -> bool {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(1));
    let attempt = async {
        let mut client = etcd_client::Client::connect([endpoint], Some(options)).await?;
        client.get("/", None).await
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(_))
    )
}

/// `n` distinct free TCP ports on 127.0.0.1 (held together while picking, then released).
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The last `lines` lines of a file (empty if unreadable).
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
