//! SR-IOV virtual functions on the high-speed NIC: how many VFs a physical function (PF)
//! has, and each VF's VLAN, trust and spoof checking.
//!
//! [`SriovBackend`] is the device access; [`SysfsSriov`] implements it over a sysfs tree
//! whose root is configurable (`/sys` on a node, a temp dir in tests):
//!
//! ```text
//! <root>/class/net/<pf>/device/sriov_totalvfs     how many VFs the PF supports (read)
//! <root>/class/net/<pf>/device/sriov_numvfs       how many exist (read, written)
//! <root>/class/net/<pf>/device/sriov/<vf>/vlan       VLAN id, 0 = none
//! <root>/class/net/<pf>/device/sriov/<vf>/trust      1 / 0 (`on` / `off` read too)
//! <root>/class/net/<pf>/device/sriov/<vf>/spoofcheck 1 / 0
//! ```
//!
//! The per-VF files are the layout some drivers (mlx5's legacy SR-IOV mode) expose; other
//! NICs set VF attributes through the PF's netlink `IFLA_VFINFO_LIST` instead
//! ([`super::netlink::NetlinkBackend::set_vf`]). Files are opened for writing without
//! creating them: a missing attribute is an error, as on a real sysfs.
//!
//! [`apply`] sets a PF to a list of VFs. Guarantees: nothing is written when the request is
//! impossible (unknown PF, more VFs than `sriov_totalvfs`, bad VLAN); a non-zero VF count is
//! reset to 0 before it is changed (the kernel refuses a change from non-zero to another
//! non-zero count); when a step fails, the error names the VFs already configured and what
//! the rollback restored — or, if the rollback failed too, what remains.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The settings of one VF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VfConfig {
    /// VLAN id (0 = untagged; 1..=4094).
    pub vlan: u16,
    /// Trusted (may change its MAC, enter promiscuous mode).
    pub trust: bool,
    /// Source MAC/VLAN spoof checking.
    pub spoof_check: bool,
}

/// Errors of SR-IOV device access.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// No such network device.
    #[error("physical function {pf:?} not found (no {path})")]
    MissingPf {
        /// The PF.
        pf: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The device has no SR-IOV capability.
    #[error("{pf:?} does not support SR-IOV (no {path})")]
    NotSriov {
        /// The PF.
        pf: String,
        /// The missing file.
        path: PathBuf,
    },
    /// More VFs than the PF supports.
    #[error("{pf:?} supports at most {total} VFs, {wanted} requested")]
    TooManyVfs {
        /// The PF.
        pf: String,
        /// `sriov_totalvfs`.
        total: u32,
        /// What was asked.
        wanted: u32,
    },
    /// A VLAN id outside 0..=4094.
    #[error("VF {vf}: invalid VLAN {vlan} (0 = none, 1..=4094)")]
    Vlan {
        /// The VF.
        vf: u32,
        /// The id.
        vlan: u16,
    },
    /// A sysfs file could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// `read` or `write`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A sysfs file holds something unexpected.
    #[error("{path}: unexpected content {content:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it holds.
        content: String,
    },
}

/// Device access for SR-IOV.
pub trait SriovBackend: Send + Sync {
    /// `sriov_totalvfs` of `pf`.
    fn total_vfs(&self, pf: &str) -> Result<u32, Error>;
    /// `sriov_numvfs` of `pf`.
    fn num_vfs(&self, pf: &str) -> Result<u32, Error>;
    /// Writes `sriov_numvfs` (the caller resets to 0 first when needed).
    fn set_num_vfs(&self, pf: &str, n: u32) -> Result<(), Error>;
    /// The settings of VF `vf`.
    fn vf(&self, pf: &str, vf: u32) -> Result<VfConfig, Error>;
    /// Sets VF `vf`.
    fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error>;
}

/// [`SriovBackend`] over sysfs (see the module documentation for the files).
#[derive(Debug, Clone)]
pub struct SysfsSriov {
    root: PathBuf,
}

impl SysfsSriov {
    /// Over the sysfs tree at `root` (`/sys` on a node).
    pub fn new(root: impl Into<PathBuf>) -> SysfsSriov {
        SysfsSriov { root: root.into() }
    }

    fn device(&self, pf: &str) -> Result<PathBuf, Error> {
        let dev = self.root.join("class/net").join(pf);
        if pf.is_empty() || pf.contains('/') || pf == "." || pf == ".." || !dev.exists() {
            return Err(Error::MissingPf {
                pf: pf.to_string(),
                path: dev,
            });
        }
        Ok(dev.join("device"))
    }

    fn sriov_file(&self, pf: &str, name: &str) -> Result<PathBuf, Error> {
        let path = self.device(pf)?.join(name);
        if !path.exists() {
            return Err(Error::NotSriov {
                pf: pf.to_string(),
                path,
            });
        }
        Ok(path)
    }

    fn vf_file(&self, pf: &str, vf: u32, name: &str) -> Result<PathBuf, Error> {
        Ok(self
            .device(pf)?
            .join("sriov")
            .join(vf.to_string())
            .join(name))
    }
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| Error::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        })
}

/// Writes `value` to an existing file, as sysfs attributes are written (no create, no
/// temp-and-rename).
fn write(path: &Path, value: &str) -> Result<(), Error> {
    use std::io::Write as _;
    let io = |source| Error::Io {
        op: "write",
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(io)?;
    f.write_all(format!("{value}\n").as_bytes()).map_err(io)
}

fn number(path: &Path) -> Result<u32, Error> {
    let s = read(path)?;
    s.parse().map_err(|_| Error::Parse {
        path: path.to_path_buf(),
        content: s,
    })
}

fn flag(path: &Path) -> Result<bool, Error> {
    let s = read(path)?;
    match s.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        _ => Err(Error::Parse {
            path: path.to_path_buf(),
            content: s,
        }),
    }
}

impl SriovBackend for SysfsSriov {
    fn total_vfs(&self, pf: &str) -> Result<u32, Error> {
        number(&self.sriov_file(pf, "sriov_totalvfs")?)
    }

    fn num_vfs(&self, pf: &str) -> Result<u32, Error> {
        number(&self.sriov_file(pf, "sriov_numvfs")?)
    }

    fn set_num_vfs(&self, pf: &str, n: u32) -> Result<(), Error> {
        write(&self.sriov_file(pf, "sriov_numvfs")?, &n.to_string())
    }

    fn vf(&self, pf: &str, vf: u32) -> Result<VfConfig, Error> {
        let vlan_path = self.vf_file(pf, vf, "vlan")?;
        let vlan = number(&vlan_path)?;
        Ok(VfConfig {
            vlan: u16::try_from(vlan).map_err(|_| Error::Parse {
                path: vlan_path,
                content: vlan.to_string(),
            })?,
            trust: flag(&self.vf_file(pf, vf, "trust")?)?,
            spoof_check: flag(&self.vf_file(pf, vf, "spoofcheck")?)?,
        })
    }

    fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error> {
        let bit = |b: bool| if b { "1" } else { "0" };
        write(&self.vf_file(pf, vf, "vlan")?, &config.vlan.to_string())?;
        write(&self.vf_file(pf, vf, "trust")?, bit(config.trust))?;
        write(
            &self.vf_file(pf, vf, "spoofcheck")?,
            bit(config.spoof_check),
        )
    }
}

/// What a rollback after a failed [`apply`] achieved.
#[derive(Debug)]
pub enum Rollback {
    /// The PF is as it was before.
    Restored,
    /// The rollback failed; `remaining` says what is left on the device.
    Failed {
        /// What is left.
        remaining: String,
        /// Why the rollback failed.
        source: Box<Error>,
    },
}

impl fmt::Display for Rollback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rollback::Restored => write!(f, "rolled back: the PF is as it was"),
            Rollback::Failed { remaining, source } => {
                write!(f, "rollback failed ({source}): {remaining}")
            }
        }
    }
}

/// A failed [`apply`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// Refused before anything was written.
    #[error("SR-IOV on {pf}: {source} (nothing changed)")]
    Refused {
        /// The PF.
        pf: String,
        /// Why.
        #[source]
        source: Error,
    },
    /// A step failed after others had been applied.
    #[error("SR-IOV on {pf}: {step} failed: {source}; VFs configured before the failure: {configured:?}; {rollback}")]
    Partial {
        /// The PF.
        pf: String,
        /// The failed step (`set sriov_numvfs to 4`, `configure VF 2`).
        step: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
        /// VFs fully configured before the failure.
        configured: Vec<u32>,
        /// What the rollback did.
        rollback: Box<Rollback>,
    },
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The VF count was changed (from this value).
    pub count_changed_from: Option<u32>,
    /// VFs whose settings were written.
    pub configured: Vec<u32>,
}

/// Makes `pf` have exactly `vfs.len()` VFs, VF `i` set to `vfs[i]` (see the module
/// documentation for the guarantees).
pub fn apply(
    backend: &dyn SriovBackend,
    pf: &str,
    vfs: &[VfConfig],
) -> Result<Applied, ApplyError> {
    let refused = |source| ApplyError::Refused {
        pf: pf.to_string(),
        source,
    };
    let wanted = u32::try_from(vfs.len()).unwrap_or(u32::MAX);
    for (i, c) in (0u32..).zip(vfs) {
        if c.vlan > 4094 {
            return Err(refused(Error::Vlan {
                vf: i,
                vlan: c.vlan,
            }));
        }
    }
    let total = backend.total_vfs(pf).map_err(refused)?;
    if wanted > total {
        return Err(refused(Error::TooManyVfs {
            pf: pf.to_string(),
            total,
            wanted,
        }));
    }
    let before = backend.num_vfs(pf).map_err(refused)?;
    let count_changed_from = (before != wanted).then_some(before);

    // What to restore if a step fails: the old count, or (same count) the old VF settings.
    let mut previous = Vec::new();
    if count_changed_from.is_none() {
        for vf in 0..wanted {
            previous.push(backend.vf(pf, vf).map_err(refused)?);
        }
    }

    let partial = |step: String, source: Error, configured: Vec<u32>| {
        let rollback = roll_back(
            backend,
            pf,
            before,
            count_changed_from,
            &previous,
            &configured,
        );
        ApplyError::Partial {
            pf: pf.to_string(),
            step,
            source: Box::new(source),
            configured,
            rollback: Box::new(rollback),
        }
    };

    if count_changed_from.is_some() {
        if before != 0 {
            backend
                .set_num_vfs(pf, 0)
                .map_err(|e| partial("reset sriov_numvfs to 0".into(), e, vec![]))?;
        }
        if wanted != 0 {
            backend
                .set_num_vfs(pf, wanted)
                .map_err(|e| partial(format!("set sriov_numvfs to {wanted}"), e, vec![]))?;
        }
    }
    let mut configured = Vec::new();
    for (vf, config) in (0u32..).zip(vfs) {
        if let Err(e) = backend.set_vf(pf, vf, config) {
            return Err(partial(format!("configure VF {vf}"), e, configured));
        }
        configured.push(vf);
    }
    Ok(Applied {
        count_changed_from,
        configured,
    })
}

fn roll_back(
    backend: &dyn SriovBackend,
    pf: &str,
    before: u32,
    count_changed_from: Option<u32>,
    previous: &[VfConfig],
    configured: &[u32],
) -> Rollback {
    let result = if count_changed_from.is_some() {
        // The VFs made now go; the old count comes back (with driver-default VF settings).
        backend.set_num_vfs(pf, 0).and_then(|()| {
            if before == 0 {
                Ok(())
            } else {
                backend.set_num_vfs(pf, before)
            }
        })
    } else {
        // Every VF touched (the configured ones and the failed one) gets its old settings.
        let touched = configured.len() + 1;
        (0u32..)
            .zip(previous)
            .take(touched)
            .try_for_each(|(vf, old)| backend.set_vf(pf, vf, old))
    };
    match result {
        Ok(()) => Rollback::Restored,
        Err(e) => {
            let now = backend
                .num_vfs(pf)
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "unknown".into());
            Rollback::Failed {
                remaining: format!(
                    "sriov_numvfs is {now} (was {before}); VFs {configured:?} may keep the new settings"
                ),
                source: Box::new(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs with one SR-IOV PF `ens1f0` (`total` VFs, `num` present, files for all).
    fn tree(total: u32, num: u32) -> (tempfile::TempDir, SysfsSriov) {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev = dir.path().join("class/net/ens1f0/device");
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(dev.join("sriov_totalvfs"), format!("{total}\n")).expect("write");
        std::fs::write(dev.join("sriov_numvfs"), format!("{num}\n")).expect("write");
        for vf in 0..total {
            let d = dev.join("sriov").join(vf.to_string());
            std::fs::create_dir_all(&d).expect("mkdir");
            std::fs::write(d.join("vlan"), "0\n").expect("write");
            std::fs::write(d.join("trust"), "off\n").expect("write");
            std::fs::write(d.join("spoofcheck"), "on\n").expect("write");
        }
        let backend = SysfsSriov::new(dir.path());
        (dir, backend)
    }

    fn file(dir: &tempfile::TempDir, rel: &str) -> String {
        std::fs::read_to_string(dir.path().join("class/net/ens1f0/device").join(rel))
            .expect("read")
            .trim()
            .to_string()
    }

    /// Records the writes to `sriov_numvfs` a backend receives.
    struct Recording<'a> {
        inner: &'a SysfsSriov,
        counts: std::sync::Mutex<Vec<u32>>,
    }

    impl SriovBackend for Recording<'_> {
        fn total_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.total_vfs(pf)
        }
        fn num_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.num_vfs(pf)
        }
        fn set_num_vfs(&self, pf: &str, n: u32) -> Result<(), Error> {
            if let Ok(mut c) = self.counts.lock() {
                c.push(n);
            }
            self.inner.set_num_vfs(pf, n)
        }
        fn vf(&self, pf: &str, vf: u32) -> Result<VfConfig, Error> {
            self.inner.vf(pf, vf)
        }
        fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error> {
            self.inner.set_vf(pf, vf, config)
        }
    }

    fn vfs(n: u16) -> Vec<VfConfig> {
        (0..n)
            .map(|i| VfConfig {
                vlan: 100 + i,
                trust: i % 2 == 0,
                spoof_check: i % 2 == 1,
            })
            .collect()
    }

    #[test]
    fn sets_count_and_per_vf_files_resetting_a_nonzero_count_first() {
        let (dir, backend) = tree(8, 2);
        let rec = Recording {
            inner: &backend,
            counts: Default::default(),
        };
        let done = apply(&rec, "ens1f0", &vfs(4)).expect("apply");
        assert_eq!(done.count_changed_from, Some(2));
        assert_eq!(done.configured, vec![0, 1, 2, 3]);
        assert_eq!(*rec.counts.lock().expect("lock"), vec![0, 4]);
        assert_eq!(file(&dir, "sriov_numvfs"), "4");
        assert_eq!(file(&dir, "sriov/2/vlan"), "102");
        assert_eq!(file(&dir, "sriov/2/trust"), "1");
        assert_eq!(file(&dir, "sriov/2/spoofcheck"), "0");
        assert_eq!(file(&dir, "sriov/3/spoofcheck"), "1");
        assert_eq!(
            backend.vf("ens1f0", 3).expect("vf"),
            VfConfig {
                vlan: 103,
                trust: false,
                spoof_check: true
            }
        );
        // Again: the count is kept (no reset), the settings rewritten identically.
        rec.counts.lock().expect("lock").clear();
        let again = apply(&rec, "ens1f0", &vfs(4)).expect("apply");
        assert_eq!(again.count_changed_from, None);
        assert!(rec.counts.lock().expect("lock").is_empty());
    }

    #[test]
    fn from_zero_the_count_is_written_once() {
        let (dir, backend) = tree(4, 0);
        let rec = Recording {
            inner: &backend,
            counts: Default::default(),
        };
        apply(&rec, "ens1f0", &vfs(2)).expect("apply");
        assert_eq!(*rec.counts.lock().expect("lock"), vec![2]);
        assert_eq!(file(&dir, "sriov_numvfs"), "2");
    }

    #[test]
    fn impossible_requests_change_nothing() {
        let (dir, backend) = tree(4, 1);
        let e = apply(&backend, "ens1f0", &vfs(5)).expect_err("too many");
        assert!(
            e.to_string().contains("at most 4 VFs, 5 requested")
                && e.to_string().contains("nothing changed"),
            "{e}"
        );
        let e = apply(&backend, "ens9", &vfs(1)).expect_err("missing pf");
        assert!(e.to_string().contains("\"ens9\" not found"), "{e}");
        let mut bad = vfs(2);
        bad[1].vlan = 4095;
        let e = apply(&backend, "ens1f0", &bad).expect_err("vlan");
        assert!(e.to_string().contains("VF 1: invalid VLAN 4095"), "{e}");
        std::fs::remove_file(dir.path().join("class/net/ens1f0/device/sriov_totalvfs"))
            .expect("rm");
        let e = apply(&backend, "ens1f0", &vfs(1)).expect_err("not sriov");
        assert!(e.to_string().contains("does not support SR-IOV"), "{e}");
        assert_eq!(file(&dir, "sriov_numvfs"), "1");
        assert_eq!(file(&dir, "sriov/0/vlan"), "0");
    }

    #[test]
    fn a_failed_vf_write_reports_configured_vfs_and_rolls_back() {
        let (dir, backend) = tree(4, 3);
        // VF 2's spoofcheck attribute is missing: its write fails.
        std::fs::remove_file(
            dir.path()
                .join("class/net/ens1f0/device/sriov/2/spoofcheck"),
        )
        .expect("rm");
        // Same count: VF 2's old settings cannot be read, so a rollback would be impossible:
        // refused before anything is written.
        let e = apply(&backend, "ens1f0", &vfs(3)).expect_err("unreadable");
        assert!(matches!(e, ApplyError::Refused { .. }), "{e}");
        assert_eq!(file(&dir, "sriov/0/vlan"), "0");

        // A different count: VFs 0 and 1 configured, VF 2 fails, the old count comes back.
        let (dir, backend) = tree(4, 1);
        std::fs::remove_file(
            dir.path()
                .join("class/net/ens1f0/device/sriov/2/spoofcheck"),
        )
        .expect("rm");
        let e = apply(&backend, "ens1f0", &vfs(3)).expect_err("partial");
        let text = e.to_string();
        match &e {
            ApplyError::Partial {
                configured,
                rollback,
                step,
                ..
            } => {
                assert_eq!(configured, &vec![0, 1]);
                assert_eq!(step, "configure VF 2");
                assert!(matches!(**rollback, Rollback::Restored), "{rollback}");
            }
            other => panic!("expected a partial failure, got {other}"),
        }
        assert!(
            text.contains("configured before the failure: [0, 1]"),
            "{text}"
        );
        assert!(text.contains("spoofcheck"), "{text}");
        assert_eq!(file(&dir, "sriov_numvfs"), "1");
    }

    #[test]
    fn a_same_count_failure_restores_old_vf_settings() {
        let (dir, backend) = tree(4, 3);
        // VF 2 holds VLAN 7 and refuses writes (FailOn); VFs 0 and 1 are written, then restored.
        let vlan = dir.path().join("class/net/ens1f0/device/sriov/2/vlan");
        std::fs::write(&vlan, "7\n").expect("write");
        let failing = FailOn {
            inner: &backend,
            vf: 2,
            failed: Default::default(),
        };
        let e = apply(&failing, "ens1f0", &vfs(3)).expect_err("partial");
        match &e {
            ApplyError::Partial {
                configured,
                rollback,
                ..
            } => {
                assert_eq!(configured, &vec![0, 1]);
                assert!(matches!(**rollback, Rollback::Restored), "{rollback}");
            }
            other => panic!("expected a partial failure, got {other}"),
        }
        assert_eq!(file(&dir, "sriov/0/vlan"), "0");
        assert_eq!(file(&dir, "sriov/1/vlan"), "0");
        assert_eq!(file(&dir, "sriov/0/trust"), "0");
        assert_eq!(file(&dir, "sriov/2/vlan"), "7");
    }

    #[test]
    fn a_failed_count_write_reports_and_a_failed_rollback_says_what_remains() {
        let (dir, backend) = tree(4, 2);
        // sriov_numvfs replaced by a directory: reads and writes fail.
        let numvfs = dir.path().join("class/net/ens1f0/device/sriov_numvfs");
        std::fs::remove_file(&numvfs).expect("rm");
        std::fs::create_dir(&numvfs).expect("mkdir");
        let e = apply(&backend, "ens1f0", &vfs(1)).expect_err("io");
        assert!(matches!(e, ApplyError::Refused { .. }), "{e}");
        assert!(e.to_string().contains("read"), "{e}");

        let (_dir, backend) = tree(4, 2);
        let failing = FailCounts {
            inner: &backend,
            fail_from: 1,
            calls: Default::default(),
        };
        let e = apply(&failing, "ens1f0", &vfs(3)).expect_err("partial");
        let text = e.to_string();
        assert!(text.contains("set sriov_numvfs to 3 failed"), "{text}");
        assert!(text.contains("rollback failed"), "{text}");
        assert!(text.contains("sriov_numvfs is 0 (was 2)"), "{text}");
    }

    /// Fails the first write to one VF (reads work; the rollback's write succeeds).
    struct FailOn<'a> {
        inner: &'a SysfsSriov,
        vf: u32,
        failed: std::sync::atomic::AtomicBool,
    }

    impl SriovBackend for FailOn<'_> {
        fn total_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.total_vfs(pf)
        }
        fn num_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.num_vfs(pf)
        }
        fn set_num_vfs(&self, pf: &str, n: u32) -> Result<(), Error> {
            self.inner.set_num_vfs(pf, n)
        }
        fn vf(&self, pf: &str, vf: u32) -> Result<VfConfig, Error> {
            self.inner.vf(pf, vf)
        }
        fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error> {
            if vf == self.vf && !self.failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return Err(Error::Io {
                    op: "write",
                    path: PathBuf::from("vlan"),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                });
            }
            self.inner.set_vf(pf, vf, config)
        }
    }

    /// Fails every `sriov_numvfs` write from the `fail_from`-th (0-based) on.
    struct FailCounts<'a> {
        inner: &'a SysfsSriov,
        fail_from: usize,
        calls: std::sync::Mutex<usize>,
    }

    impl SriovBackend for FailCounts<'_> {
        fn total_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.total_vfs(pf)
        }
        fn num_vfs(&self, pf: &str) -> Result<u32, Error> {
            self.inner.num_vfs(pf)
        }
        fn set_num_vfs(&self, pf: &str, n: u32) -> Result<(), Error> {
            let mut calls = self.calls.lock().map_err(|_| Error::Parse {
                path: PathBuf::new(),
                content: "poisoned".into(),
            })?;
            *calls += 1;
            if *calls > self.fail_from {
                return Err(Error::Io {
                    op: "write",
                    path: PathBuf::from("sriov_numvfs"),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                });
            }
            self.inner.set_num_vfs(pf, n)
        }
        fn vf(&self, pf: &str, vf: u32) -> Result<VfConfig, Error> {
            self.inner.vf(pf, vf)
        }
        fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error> {
            self.inner.set_vf(pf, vf, config)
        }
    }
}
