//! [`SimNetwork`]: the segment backend of simulated nodes (`fabrik up`, `fabrik nodes`,
//! `fabrik-node-agent --network simulated`) and of tests. It builds no devices: it records
//! which segments exist, with their flood lists, in memory, so the reconciliation above it runs
//! unchanged where there is no root and no fabric. What it holds is visible through the agent's
//! Node annotation `fabrik.dev/tenant-segments` like a real node's, and to tests through
//! [`SimNetwork::segments`] (clones share one record).
//!
//! Failures on demand: [`SimNetwork::refuse`] makes building (or removing) one VNI fail with a
//! given reason until [`SimNetwork::allow`], as a kernel refusing a device would.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use thiserror::Error;

use super::backend::{self, SegmentBackend};
use super::segment::Vni;

/// Errors of the simulated backend.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure asked for with [`SimNetwork::refuse`].
    #[error("segment {vni} refused: {reason}")]
    Refused {
        /// The VNI.
        vni: Vni,
        /// The reason given.
        reason: String,
    },
}

#[derive(Debug, Default)]
struct Record {
    /// Segment → its flood list.
    segments: BTreeMap<Vni, Vec<Ipv4Addr>>,
    /// VNIs whose operations fail, with the reason.
    refused: BTreeMap<Vni, String>,
    /// Calls that changed something.
    changes: u64,
}

/// Segments recorded in memory. Cloning shares the record.
#[derive(Debug, Clone, Default)]
pub struct SimNetwork {
    record: Arc<Mutex<Record>>,
    vtep: Option<Ipv4Addr>,
}

impl SimNetwork {
    /// An empty node, announcing `vtep` (if any) as its VTEP address.
    pub fn new(vtep: Option<Ipv4Addr>) -> SimNetwork {
        SimNetwork {
            record: Arc::default(),
            vtep,
        }
    }

    fn record(&self) -> MutexGuard<'_, Record> {
        // A panic while holding the lock cannot leave a record half written (every change is
        // one insert or remove), so a poisoned lock is still good.
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The segments present, each with its flood list.
    pub fn segments(&self) -> BTreeMap<Vni, Vec<Ipv4Addr>> {
        self.record().segments.clone()
    }

    /// How many calls changed something so far (a pass with nothing to do adds none).
    pub fn changes(&self) -> u64 {
        self.record().changes
    }

    /// Makes every operation on `vni` fail with `reason`.
    pub fn refuse(&self, vni: Vni, reason: &str) {
        self.record().refused.insert(vni, reason.to_string());
    }

    /// Ends [`SimNetwork::refuse`] for `vni`.
    pub fn allow(&self, vni: Vni) {
        self.record().refused.remove(&vni);
    }

    fn check(record: &Record, vni: Vni) -> Result<(), Error> {
        match record.refused.get(&vni) {
            Some(reason) => Err(Error::Refused {
                vni,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl SegmentBackend for SimNetwork {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn vtep(&self) -> Option<Ipv4Addr> {
        self.vtep
    }

    fn present(&self) -> BoxFuture<'_, backend::Result<BTreeSet<Vni>>> {
        let present = self.record().segments.keys().copied().collect();
        Box::pin(async move { Ok(present) })
    }

    fn ensure<'a>(
        &'a self,
        vni: Vni,
        remotes: &'a [Ipv4Addr],
    ) -> BoxFuture<'a, backend::Result<bool>> {
        let result = self.ensure_now(vni, remotes);
        Box::pin(async move { Ok(result?) })
    }

    fn delete(&self, vni: Vni) -> BoxFuture<'_, backend::Result<bool>> {
        let result = self.delete_now(vni);
        Box::pin(async move { Ok(result?) })
    }
}

impl SimNetwork {
    fn ensure_now(&self, vni: Vni, remotes: &[Ipv4Addr]) -> Result<bool, Error> {
        let mut record = self.record();
        SimNetwork::check(&record, vni)?;
        let mut want = remotes.to_vec();
        want.sort();
        want.dedup();
        if record.segments.get(&vni) == Some(&want) {
            return Ok(false);
        }
        record.segments.insert(vni, want);
        record.changes += 1;
        Ok(true)
    }

    fn delete_now(&self, vni: Vni) -> Result<bool, Error> {
        let mut record = self.record();
        SimNetwork::check(&record, vni)?;
        let removed = record.segments.remove(&vni).is_some();
        if removed {
            record.changes += 1;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vni(n: u64) -> Vni {
        Vni::new(n).expect("vni")
    }

    #[tokio::test]
    async fn records_segments_idempotently_and_refuses_on_demand() {
        let net = SimNetwork::new(None);
        let peer = Ipv4Addr::new(10, 0, 0, 11);
        assert!(net.ensure(vni(100), &[peer]).await.expect("ensure"));
        assert!(!net.ensure(vni(100), &[peer]).await.expect("again"));
        assert_eq!(net.changes(), 1);
        assert_eq!(net.segments()[&vni(100)], vec![peer]);
        assert!(net.ensure(vni(100), &[]).await.expect("remotes changed"));
        assert_eq!(
            net.present().await.expect("present"),
            BTreeSet::from([vni(100)])
        );

        net.refuse(vni(200), "VNI in use");
        let e = net.ensure(vni(200), &[]).await.expect_err("refused");
        assert_eq!(
            e.to_string(),
            "simulated network: segment 200 refused: VNI in use"
        );
        assert!(!net.segments().contains_key(&vni(200)));
        net.allow(vni(200));
        assert!(net.ensure(vni(200), &[]).await.expect("allowed"));

        let clone = net.clone();
        assert!(clone.delete(vni(100)).await.expect("delete"));
        assert!(!net.delete(vni(100)).await.expect("gone"));
        assert_eq!(
            net.segments().keys().copied().collect::<Vec<_>>(),
            [vni(200)]
        );
    }
}
