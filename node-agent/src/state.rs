//! The agent's small state file (`<state-dir>/agent-state.json`): the layout being applied and
//! what is in force per GPU, the GPU health verdicts, written atomically (temp file + rename)
//! before and after every hardware change, so that a restart in the middle of a change resumes
//! it and reports it instead of leaving it half-applied and unreported.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use fabrik_gpu::layout::{GpuTarget, Target};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Errors of this module.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read or written.
    #[error("state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a state document.
    #[error("state file {path} is corrupt: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a layout stands.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Not (fully) applied yet: in progress or waiting.
    #[default]
    Pending,
    /// Applied and verified.
    Applied,
    /// Refused or failed.
    Failed,
}

impl Phase {
    /// The lower-case name used in the status annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Applied => "applied",
            Phase::Failed => "failed",
        }
    }
}

/// Everything persisted.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AgentState {
    /// The desired layout text last seen (to notice a change).
    pub desired: Option<String>,
    /// Its resolution, when valid.
    pub target: Option<Target>,
    /// What is in force per GPU (verified).
    pub applied: BTreeMap<u32, GpuTarget>,
    /// Phase of `desired`.
    pub phase: Phase,
    /// Why (human readable).
    pub reason: String,
    /// Failed attempts at applying `desired`.
    pub attempts: u32,
    /// Unhealthy GPUs and why.
    pub unhealthy: BTreeMap<u32, String>,
}

/// The state file of a state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("agent-state.json")
}

/// Loads the state; a missing file is the empty state.
pub fn load(path: &Path) -> Result<AgentState> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|source| Error::Corrupt {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AgentState::default()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Saves the state atomically.
pub fn save(path: &Path, state: &AgentState) -> Result<()> {
    let text = serde_json::to_vec_pretty(state).map_err(|source| Error::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    write_atomically(path, &text).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path` through a temporary file, fsync and rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = path(dir.path());
        assert_eq!(load(&p).expect("missing is empty"), AgentState::default());
        let mut s = AgentState::default();
        s.unhealthy.insert(3, "XID 79".into());
        s.phase = Phase::Failed;
        save(&p, &s).expect("save");
        assert_eq!(load(&p).expect("load"), s);
        std::fs::write(&p, "{not json").expect("write");
        assert!(load(&p)
            .expect_err("corrupt")
            .to_string()
            .contains("corrupt"));
    }
}
