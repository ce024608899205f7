//! GPU health: folds health signals into a per-GPU verdict and derives the node condition.
//! Pure; the verdicts are kept in the state file so that a sticky fault (an XID that needs a
//! GPU reset) survives an agent restart.
//!
//! Unhealthy: any uncorrectable ECC error; a thermal event at or above the slowdown threshold;
//! an XID from [`FATAL_XIDS`]. Other XIDs (13, 31, 43, 45: application faults) are reported as
//! Events only. A GPU returns to healthy only on an explicit `Recovered` signal.

use std::collections::BTreeMap;

use crate::backend::{HealthEvent, HealthSignal};

/// XIDs that mean the GPU itself is in trouble (NVIDIA's XID catalog: 48 double-bit ECC,
/// 62/119/120 internal/GSP errors, 63/64 row remapping, 74 NVLink, 79 fallen off the bus,
/// 92 high single-bit rate, 94/95 contained/uncontained ECC).
pub const FATAL_XIDS: &[u32] = &[48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120];

/// A change of one GPU's verdict, or a notable signal that changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The GPU became unhealthy.
    Unhealthy {
        /// GPU index.
        gpu: u32,
        /// Why.
        reason: String,
    },
    /// The GPU is healthy again.
    Recovered {
        /// GPU index.
        gpu: u32,
    },
    /// A signal worth an Event that does not change the verdict.
    Noted {
        /// GPU index.
        gpu: u32,
        /// What.
        message: String,
    },
}

/// Folds `events` into `unhealthy` (GPU index → reason); returns what changed.
pub fn apply(unhealthy: &mut BTreeMap<u32, String>, events: &[HealthEvent]) -> Vec<Transition> {
    let mut out = Vec::new();
    for e in events {
        let bad = match &e.signal {
            HealthSignal::Ecc { uncorrectable } => {
                Some(format!("{uncorrectable} uncorrectable ECC errors"))
            }
            HealthSignal::Xid { code } if FATAL_XIDS.contains(code) => Some(format!("XID {code}")),
            HealthSignal::Xid { code } => {
                out.push(Transition::Noted {
                    gpu: e.gpu,
                    message: format!("XID {code} (application error, GPU kept in service)"),
                });
                None
            }
            HealthSignal::Thermal { celsius } => Some(format!("temperature {celsius} °C")),
            HealthSignal::Recovered => {
                if unhealthy.remove(&e.gpu).is_some() {
                    out.push(Transition::Recovered { gpu: e.gpu });
                }
                None
            }
        };
        if let Some(reason) = bad {
            if !unhealthy.contains_key(&e.gpu) {
                out.push(Transition::Unhealthy {
                    gpu: e.gpu,
                    reason: reason.clone(),
                });
            }
            unhealthy.entry(e.gpu).or_insert(reason);
        }
    }
    out
}

/// The `GPUHealthy` condition: (status, reason, message).
pub fn condition(unhealthy: &BTreeMap<u32, String>) -> (&'static str, &'static str, String) {
    if unhealthy.is_empty() {
        ("True", "AllGPUsHealthy", "all GPUs healthy".into())
    } else {
        let list = unhealthy
            .iter()
            .map(|(g, r)| format!("GPU {g}: {r}"))
            .collect::<Vec<_>>()
            .join("; ");
        ("False", "GPUUnhealthy", list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(gpu: u32, signal: HealthSignal) -> HealthEvent {
        HealthEvent { gpu, signal }
    }

    #[test]
    fn fatal_signals_mark_gpus_until_recovered() {
        let mut bad = BTreeMap::new();
        let t = apply(
            &mut bad,
            &[
                ev(1, HealthSignal::Xid { code: 79 }),
                ev(1, HealthSignal::Ecc { uncorrectable: 2 }),
                ev(2, HealthSignal::Xid { code: 13 }),
                ev(3, HealthSignal::Thermal { celsius: 96 }),
            ],
        );
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[&1], "XID 79", "the first reason is kept");
        let (status, _, message) = condition(&bad);
        assert_eq!(status, "False");
        assert!(message.contains("GPU 3: temperature 96 °C"), "{message}");
        let t = apply(
            &mut bad,
            &[
                ev(1, HealthSignal::Recovered),
                ev(5, HealthSignal::Recovered),
            ],
        );
        assert_eq!(t, vec![Transition::Recovered { gpu: 1 }]);
        apply(&mut bad, &[ev(3, HealthSignal::Recovered)]);
        assert_eq!(condition(&bad).0, "True");
    }
}
