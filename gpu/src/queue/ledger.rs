//! Fair shares over time: how far each tenant has lately been ahead of (or behind) its fair
//! share, in device-seconds, with older standings counting less (a half-life).
//!
//! A decision keeps every tenant within its fair share at each instant but one: a tenant below
//! its share may take one workload past it, since a workload larger than the rest of its share
//! would otherwise never run under contention. On a small factory that one workload is much:
//! one 8-GPU job on 16 GPUs puts its tenant 20–30 points above its share for the job's whole
//! run, and if it may start the next one as soon as it is back below its share, it stays above
//! its share over time. The ledger integrates each tenant's standing between decisions; a
//! decision lets a tenant go past its share only while it is not ahead over time
//! ([`super::Input::lead`]), so it first gives back, by waiting, what its last large workload
//! took beyond its share; and where starving workloads compete for reservations, those of the
//! tenants furthest behind go first.
//!
//! What counts: holding more than the fair share, but not as backfill (GPUs nobody else could
//! use then are not taken from anyone), puts a tenant ahead; holding less than its fair share
//! (waiting for room, or for others' runs to end) puts it behind. The half-life makes it a
//! moving window: a tenant's distant past neither excuses nor condemns it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{Gpus, Standing};

/// Nanoseconds per second.
const SECOND: f64 = 1e9;

/// The default half-life, nanoseconds: long enough to cover a long run (an hour of history
/// counts for a quarter), short enough that a tenant's morning does not decide its evening.
pub const HALF_LIFE: i128 = 30 * 60 * 1_000_000_000;

/// Each tenant's lead over its fair share, as of the last recorded decision.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// When the last decision was recorded (nanoseconds since the epoch).
    at: Option<i128>,
    /// tenant → resource → device-seconds ahead (negative: behind) at `at`.
    lead: BTreeMap<String, BTreeMap<String, f64>>,
    /// tenant → resource → devices ahead since `at` (what the last decision's standings say).
    rate: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The largest lead a saved ledger may hold, device-seconds (a million GPUs for thirty years is
/// less): anything past it is not a ledger this queue wrote.
const MAX_LEAD: f64 = 1e15;

/// The version of [`Ledger::save`]'s text this Fabrik writes and reads.
pub const SAVED_VERSION: u32 = 1;

/// Why a saved ledger could not be read.
#[derive(Debug, Error)]
pub enum Error {
    /// Not the JSON of a saved ledger.
    #[error("not a saved GPU queue ledger: {0}")]
    Parse(#[from] serde_json::Error),
    /// Written by another version of Fabrik.
    #[error("a saved GPU queue ledger of version {0}; this Fabrik reads version {SAVED_VERSION}")]
    Version(u32),
    /// A figure no queue writes.
    #[error("a saved GPU queue ledger's lead for tenant {tenant:?}, {resource:?} is {value:e} device-seconds, out of range (at most {MAX_LEAD:e} either way)")]
    OutOfRange {
        /// The tenant it was for.
        tenant: String,
        /// The resource it was for.
        resource: String,
        /// The figure.
        value: f64,
    },
    /// A time before the epoch.
    #[error("a saved GPU queue ledger's time {0} is before 1970")]
    Time(i64),
}

/// A ledger as saved between leaders: its leads carried forward to the moment of saving.
/// Not the standings of its last decision: what they became after the saving is unknown (the
/// saving replica stopped deciding), so the time until the next decision counts for nobody.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Saved {
    version: u32,
    /// Nanoseconds since the epoch.
    at: i64,
    /// tenant → resource → device-seconds ahead (negative: behind) at `at`.
    lead: BTreeMap<String, BTreeMap<String, f64>>,
}

/// Devices a standing counts ahead of its fair share (negative: behind).
fn ahead(s: &Standing) -> f64 {
    let own = s.admitted - s.backfill;
    let devices = if own > s.fair_share {
        own - s.fair_share
    } else {
        (s.admitted - s.fair_share).min(0)
    };
    devices as f64
}

impl Ledger {
    /// The leads at `now`, device-seconds rounded toward zero, for [`super::Input::lead`]:
    /// what was recorded, decayed with `half_life` (nanoseconds; 0 or less: no ledger, nothing
    /// returned), plus the last standings held until `now`.
    pub fn lead(&self, now: i128, half_life: i128) -> BTreeMap<String, Gpus> {
        if half_life <= 0 {
            return BTreeMap::new();
        }
        self.advanced(now, half_life)
            .into_iter()
            .map(|(tenant, per)| {
                let per = per
                    .into_iter()
                    .map(|(r, v)| (r, v.clamp(i64::MIN as f64, i64::MAX as f64) as i64))
                    .filter(|(_, v)| *v != 0)
                    .collect::<Gpus>();
                (tenant, per)
            })
            .filter(|(_, per)| !per.is_empty())
            .collect()
    }

    /// Records a decision made at `now` (its standings hold until the next one).
    pub fn record(
        &mut self,
        now: i128,
        half_life: i128,
        standings: &BTreeMap<String, BTreeMap<String, Standing>>,
    ) {
        if half_life <= 0 {
            *self = Ledger::default();
            return;
        }
        let mut lead = self.advanced(now, half_life);
        // Tenants gone from the standings (deleted) are forgotten.
        lead.retain(|tenant, _| standings.contains_key(tenant));
        self.lead = lead;
        self.rate = standings
            .iter()
            .map(|(tenant, per)| {
                let per = per.iter().map(|(r, s)| (r.clone(), ahead(s))).collect();
                (tenant.clone(), per)
            })
            .collect();
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
    }

    /// The ledger as text for [`Ledger::restore`] (JSON), its leads carried forward to `now`:
    /// a new leader picks it up where this one left it.
    pub fn save(&self, now: i128, half_life: i128) -> String {
        let saved = Saved {
            version: SAVED_VERSION,
            at: now.clamp(0, i128::from(i64::MAX)) as i64,
            lead: self.advanced(now, half_life),
        };
        // Maps of strings to finite numbers always serialize.
        serde_json::to_string(&saved).unwrap_or_default()
    }

    /// A ledger [`Ledger::save`] wrote, read at `now`: its leads decay from the time of saving
    /// (a time after `now`, from a clock that went back, counts as `now`); until the next
    /// recorded decision nobody gains or loses.
    pub fn restore(text: &str, now: i128) -> Result<Ledger, Error> {
        let saved: Saved = serde_json::from_str(text)?;
        if saved.version != SAVED_VERSION {
            return Err(Error::Version(saved.version));
        }
        if saved.at < 0 {
            return Err(Error::Time(saved.at));
        }
        for (tenant, per) in &saved.lead {
            for (resource, value) in per {
                if !value.is_finite() || value.abs() > MAX_LEAD {
                    return Err(Error::OutOfRange {
                        tenant: tenant.clone(),
                        resource: resource.clone(),
                        value: *value,
                    });
                }
            }
        }
        Ok(Ledger {
            at: Some(i128::from(saved.at).min(now)),
            lead: saved.lead,
            rate: BTreeMap::new(),
        })
    }

    /// The leads carried forward from the last decision to `now`: decayed, plus its standings'
    /// rates integrated under the same decay (exact for rates constant between decisions).
    fn advanced(&self, now: i128, half_life: i128) -> BTreeMap<String, BTreeMap<String, f64>> {
        let Some(at) = self.at else {
            return BTreeMap::new();
        };
        let dt = (now - at).max(0) as f64;
        let h = half_life as f64;
        let keep = (-dt / h * std::f64::consts::LN_2).exp();
        // ∫₀^dt 2^(−(dt−s)/h) ds, in seconds.
        let gained = (1.0 - keep) * h / std::f64::consts::LN_2 / SECOND;
        let mut out = self.lead.clone();
        for per in out.values_mut() {
            for v in per.values_mut() {
                *v *= keep;
            }
        }
        for (tenant, per) in &self.rate {
            let into = out.entry(tenant.clone()).or_default();
            for (r, rate) in per {
                *into.entry(r.clone()).or_insert(0.0) += rate * gained;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i128 = 600 * 1_000_000_000;
    const S: i128 = 1_000_000_000;

    fn standings(rows: &[(&str, i64, i64, i64)]) -> BTreeMap<String, BTreeMap<String, Standing>> {
        rows.iter()
            .map(|(t, admitted, backfill, fair_share)| {
                let s = Standing {
                    admitted: *admitted,
                    backfill: *backfill,
                    fair_share: *fair_share,
                    ..Standing::default()
                };
                (t.to_string(), BTreeMap::from([("gpu".to_string(), s)]))
            })
            .collect()
    }

    fn lead_of(l: &Ledger, now: i128, tenant: &str) -> i64 {
        l.lead(now, H)
            .get(tenant)
            .map(|m| m.get("gpu").copied().unwrap_or(0))
            .unwrap_or(0)
    }

    #[test]
    fn a_tenant_past_its_share_gets_ahead_and_gives_it_back_while_below() {
        let mut l = Ledger::default();
        // 8 held against a share of 4 for 100 s: 400 device-seconds ahead, less what a 600 s
        // half-life has taken off meanwhile (378).
        l.record(0, H, &standings(&[("train", 8, 0, 4), ("infer", 0, 0, 4)]));
        let ahead = lead_of(&l, 100 * S, "train");
        assert!((370..400).contains(&ahead), "{ahead}");
        assert_eq!(lead_of(&l, 100 * S, "infer"), -ahead);
        // Then none held against the same share: behind again after about as long.
        l.record(
            100 * S,
            H,
            &standings(&[("train", 0, 0, 4), ("infer", 4, 0, 4)]),
        );
        assert!(lead_of(&l, 150 * S, "train") > 0);
        assert!(lead_of(&l, 210 * S, "train") < 0);
    }

    #[test]
    fn backfill_puts_nobody_ahead_and_the_past_fades() {
        let mut l = Ledger::default();
        l.record(0, H, &standings(&[("notebooks", 8, 4, 4)]));
        assert_eq!(lead_of(&l, 100 * S, "notebooks"), 0);
        l.record(0, H, &standings(&[("mixed", 6, 0, 4)]));
        l.record(100 * S, H, &standings(&[("mixed", 4, 0, 4)]));
        let then = lead_of(&l, 100 * S, "mixed");
        // One half-life later, half of it is left.
        let later = lead_of(&l, 100 * S + H, "mixed");
        assert!(
            (then / 2 - 1..=then / 2 + 1).contains(&later),
            "{then} → {later}"
        );
        // No half-life: no ledger.
        assert!(l.lead(200 * S, 0).is_empty());
        l.record(200 * S, 0, &standings(&[("mixed", 8, 0, 4)]));
        assert!(l.lead(300 * S, H).is_empty());
    }

    #[test]
    fn a_saved_ledger_goes_on_where_it_was_left() {
        let mut l = Ledger::default();
        l.record(0, H, &standings(&[("train", 8, 0, 4), ("infer", 0, 0, 4)]));
        let text = l.save(100 * S, H);
        let at_save = lead_of(&l, 100 * S, "train");
        assert!(at_save > 300, "{at_save}");
        // Read at once: what was saved.
        let back = Ledger::restore(&text, 100 * S).expect("restore");
        assert_eq!(lead_of(&back, 100 * S, "train"), at_save);
        assert_eq!(lead_of(&back, 100 * S, "infer"), -at_save);
        // One half-life after the saving, half of it, with nothing gained meanwhile (the
        // original, still deciding, went on counting train's 4 beyond its share).
        let back = Ledger::restore(&text, 100 * S + H).expect("restore");
        let half = lead_of(&back, 100 * S + H, "train");
        assert!(
            (at_save / 2 - 1..=at_save / 2 + 1).contains(&half),
            "{half}"
        );
        assert!(lead_of(&l, 100 * S + H, "train") > at_save);
        // It records on: train holding nothing against its share of 4 falls behind.
        let mut back = back;
        back.record(
            100 * S + H,
            H,
            &standings(&[("train", 0, 0, 4), ("infer", 8, 0, 4)]),
        );
        assert!(lead_of(&back, 100 * S + H + 100 * S, "train") < 0);
        // A clock gone back: the saved time counts as now, nothing is taken off.
        let early = Ledger::restore(&text, 40 * S).expect("restore");
        assert_eq!(lead_of(&early, 40 * S, "train"), at_save);
        // An empty ledger saves and reads back as empty.
        let empty = Ledger::restore(&Ledger::default().save(5 * S, H), 6 * S).expect("empty");
        assert!(empty.lead(7 * S, H).is_empty());
    }

    #[test]
    fn a_saved_ledger_no_queue_wrote_is_refused_by_what_is_wrong() {
        let good = r#"{"version":1,"at":0,"lead":{"a":{"gpu":5.0}}}"#;
        assert!(Ledger::restore(good, S).is_ok());
        for (text, says) in [
            ("{", "not a saved GPU queue ledger"),
            (
                r#"{"version":1,"at":0,"lead":{},"rate":{}}"#,
                "unknown field",
            ),
            (r#"{"version":2,"at":0,"lead":{}}"#, "version 2"),
            (r#"{"version":1,"at":-5,"lead":{}}"#, "before 1970"),
            (
                r#"{"version":1,"at":0,"lead":{"a":{"gpu":1e300}}}"#,
                "lead for tenant \"a\", \"gpu\" is 1e300",
            ),
            (
                r#"{"version":1,"at":0,"lead":{"b":{"gpu":-2e15}}}"#,
                "tenant \"b\"",
            ),
            (
                r#"{"version":1,"at":0,"lead":{"a":{"gpu":"x"}}}"#,
                "invalid type",
            ),
        ] {
            match Ledger::restore(text, S) {
                Ok(l) => panic!("{text} was read: {l:?}"),
                Err(e) => assert!(e.to_string().contains(says), "{text}: {e}"),
            }
        }
    }

    #[test]
    fn a_deleted_tenant_is_forgotten() {
        let mut l = Ledger::default();
        l.record(0, H, &standings(&[("a", 8, 0, 4), ("b", 0, 0, 4)]));
        l.record(10 * S, H, &standings(&[("b", 0, 0, 4)]));
        assert_eq!(lead_of(&l, 20 * S, "a"), 0);
        assert!(lead_of(&l, 20 * S, "b") < 0);
    }
}
