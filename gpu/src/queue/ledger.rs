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
    fn a_deleted_tenant_is_forgotten() {
        let mut l = Ledger::default();
        l.record(0, H, &standings(&[("a", 8, 0, 4), ("b", 0, 0, 4)]));
        l.record(10 * S, H, &standings(&[("b", 0, 0, 4)]));
        assert_eq!(lead_of(&l, 20 * S, "a"), 0);
        assert!(lead_of(&l, 20 * S, "b") < 0);
    }
}
