//! GPU cost allocation shaped like OpenCost's `/allocation` API response
//! (`aggregate=namespace`, one step): `{"code": 200, "status": "success", "data": [{<namespace>:
//! <allocation>}]}`, one allocation per tenant host namespace (`fabrik-<tenant>`; pods without
//! a tenant label under their own namespace), with `gpuHours`, `gpuCost` (and `totalCost`)
//! for the use between two [`Snapshot`]s of a [`Meter`](super::Meter) ([`allocation`]), or over
//! a window of counters recorded over time ([`allocation_over`]).
//!
//! Units: GPU-hours are **whole-GPU equivalents** — the meter's device-seconds × [`gpu_fraction`]
//! of the partition, / 3600: a whole GPU counts 1, a MIG device its compute slices out of 7
//! (`1g.18gb` = 1/7, `3g.71gb` = 3/7), a shared slice its compute percentage, a time-sliced pod
//! its share of its physical GPU (the GPU's hours split across the pods on it). This differs from
//! `Tenant.status.usage.gpuSeconds`, which counts device-seconds (a `1g.18gb` device = 1).
//! Price: [`Prices`], per GPU-hour per model. CPU, memory, storage and network are not metered
//! here: their fields are 0.
//!
//! Windows ([`allocation_over`]): the counters at the window's start and end are interpolated
//! linearly between the records around each edge ([`counters_at`]); a record from before the
//! start is never taken for the start. The window is cut to the recorded span: `start` / `end`
//! say what it covers (`window` what was asked), and `gpuCount` is the average over the covered
//! span.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use thiserror::Error;

pub use super::gpu_fraction;
use super::Snapshot;

/// Errors of the export.
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The window ends before it starts.
    #[error("the window ends ({end}) before it starts ({start})")]
    Window {
        /// Start.
        start: DateTime<Utc>,
        /// End.
        end: DateTime<Utc>,
    },
    /// A negative or non-finite price.
    #[error("invalid price {price} per GPU-hour for {model:?}")]
    Price {
        /// The model (`*` for the default).
        model: String,
        /// The price.
        price: f64,
    },
}

/// Prices per GPU-hour, per GPU model (the meter's `gpu_model`: `H200-141GB`, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    /// Per model.
    pub per_gpu_hour: BTreeMap<String, f64>,
    /// For models not listed.
    pub default_per_gpu_hour: f64,
}

impl Prices {
    fn check(&self) -> Result<(), Error> {
        let all = self
            .per_gpu_hour
            .iter()
            .map(|(m, p)| (m.as_str(), *p))
            .chain([("*", self.default_per_gpu_hour)]);
        for (model, price) in all {
            if !price.is_finite() || price < 0.0 {
                return Err(Error::Price {
                    model: model.to_string(),
                    price,
                });
            }
        }
        Ok(())
    }

    fn of(&self, model: &str) -> f64 {
        self.per_gpu_hour
            .get(model)
            .copied()
            .unwrap_or(self.default_per_gpu_hour)
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[derive(Default)]
struct Sum {
    gpu_hours: f64,
    utilized_hours: f64,
    cost: f64,
}

/// The allocation of the use between `start` and `end` (snapshots taken at `window_start`
/// and `window_end`) in cluster `cluster`.
pub fn allocation(
    start: &Snapshot,
    end: &Snapshot,
    window_start: DateTime<Utc>,
    window_end: DateTime<Utc>,
    prices: &Prices,
    cluster: &str,
) -> Result<Value, Error> {
    let window = (window_start, window_end);
    render(start, end, window, window, prices, cluster)
}

/// Seconds of a time difference (nanoseconds kept).
fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_nanoseconds()
        .map(|n| n as f64 / 1e9)
        .unwrap_or_else(|| d.num_milliseconds() as f64 / 1e3)
}

/// The counters at `t`, from `records` (counters in time order): interpolated linearly
/// between the last record before `t` and the first at or after it (a series missing from the
/// later one has not grown; none goes back). None when `t` is outside the records' span.
pub fn counters_at(records: &[(DateTime<Utc>, Snapshot)], t: DateTime<Utc>) -> Option<Snapshot> {
    let next = records.partition_point(|(at, _)| *at < t);
    let (t1, s1) = records.get(next)?;
    if *t1 == t {
        return Some(s1.clone());
    }
    let (t0, s0) = records.get(next.checked_sub(1)?)?;
    let span = seconds(*t1 - *t0);
    let w = if span > 0.0 {
        (seconds(t - *t0) / span).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let mut totals = s0.totals.clone();
    for (key, (a1, u1)) in &s1.totals {
        let (a0, u0) = s0.totals.get(key).copied().unwrap_or((0.0, 0.0));
        totals.insert(
            key.clone(),
            (a0 + (a1 - a0).max(0.0) * w, u0 + (u1 - u0).max(0.0) * w),
        );
    }
    Some(Snapshot { totals })
}

/// The allocation of the use in the window from `window_start` to `window_end`, from
/// `records` (the counters at increasing times, e.g. a control plane's history): the counters
/// at each edge interpolated between the records around it ([`counters_at`]), the window cut to
/// the recorded span (a window with no record inside it and none after it used nothing).
pub fn allocation_over(
    records: &[(DateTime<Utc>, Snapshot)],
    window_start: DateTime<Utc>,
    window_end: DateTime<Utc>,
    prices: &Prices,
    cluster: &str,
) -> Result<Value, Error> {
    let window = (window_start, window_end);
    let empty = Snapshot::default();
    let (Some((first, _)), Some((last, _))) = (records.first(), records.last()) else {
        return render(&empty, &empty, window, window, prices, cluster);
    };
    let from = window_start.max(*first);
    let to = window_end.min(*last);
    if window_end >= window_start && to > from {
        if let (Some(s0), Some(s1)) = (counters_at(records, from), counters_at(records, to)) {
            return render(&s0, &s1, window, (from, to), prices, cluster);
        }
    }
    render(&empty, &empty, window, window, prices, cluster)
}

/// The allocation of the use between `start` and `end`, the counters at the edges of the
/// span `covered` of the asked `window`.
fn render(
    start: &Snapshot,
    end: &Snapshot,
    window: (DateTime<Utc>, DateTime<Utc>),
    covered: (DateTime<Utc>, DateTime<Utc>),
    prices: &Prices,
    cluster: &str,
) -> Result<Value, Error> {
    let (window_start, window_end) = window;
    if window_end < window_start {
        return Err(Error::Window {
            start: window_start,
            end: window_end,
        });
    }
    prices.check()?;
    let mut per: BTreeMap<String, (String, Sum)> = BTreeMap::new();
    for (key, (allocated, utilized)) in &end.totals {
        let (a0, u0) = start.totals.get(key).copied().unwrap_or((0.0, 0.0));
        let allocated = (allocated - a0).max(0.0);
        let utilized = (utilized - u0).max(0.0);
        let fraction = gpu_fraction(&key.partition);
        let hours = allocated / 3600.0 * fraction;
        let namespace = if key.tenant.is_empty() {
            key.namespace.clone()
        } else {
            format!("{}{}", fabrik_api::HOST_NAMESPACE_PREFIX, key.tenant)
        };
        let (_, sum) = per
            .entry(namespace)
            .or_insert_with(|| (key.tenant.clone(), Sum::default()));
        sum.gpu_hours += hours;
        sum.utilized_hours += utilized / 3600.0 * fraction;
        sum.cost += hours * prices.of(&key.gpu_model);
    }
    let minutes = seconds(covered.1 - covered.0).max(0.0) / 60.0;
    let covered_hours = minutes / 60.0;
    let mut set = Map::new();
    for (namespace, (tenant, sum)) in per {
        let mut labels = Map::new();
        if !tenant.is_empty() {
            labels.insert(fabrik_api::LABEL_TENANT.into(), tenant.into());
        }
        let efficiency = if sum.gpu_hours > 0.0 {
            sum.utilized_hours / sum.gpu_hours
        } else {
            0.0
        };
        set.insert(
            namespace.clone(),
            json!({
                "name": namespace,
                "properties": {"cluster": cluster, "namespace": namespace, "labels": labels},
                "window": {"start": time(window_start), "end": time(window_end)},
                "start": time(covered.0),
                "end": time(covered.1),
                "minutes": minutes,
                "cpuCores": 0.0, "cpuCoreHours": 0.0, "cpuCost": 0.0, "cpuCostAdjustment": 0.0,
                "cpuEfficiency": 0.0,
                "gpuCount": if covered_hours > 0.0 { sum.gpu_hours / covered_hours } else { 0.0 },
                "gpuHours": sum.gpu_hours,
                "gpuCost": sum.cost,
                "gpuCostAdjustment": 0.0,
                "networkCost": 0.0, "loadBalancerCost": 0.0, "pvCost": 0.0,
                "ramBytes": 0.0, "ramByteHours": 0.0, "ramCost": 0.0, "ramCostAdjustment": 0.0,
                "ramEfficiency": 0.0,
                "sharedCost": 0.0, "externalCost": 0.0,
                "totalCost": sum.cost,
                // OpenCost's cost-weighted efficiency; with the GPU the only cost metered,
                // utilized GPU-hours over allocated ones.
                "totalEfficiency": efficiency,
            }),
        );
    }
    Ok(json!({"code": 200, "status": "success", "data": [set]}))
}

impl super::Meter {
    /// [`allocation`] from `since` (a [`super::Meter::snapshot`] taken at `window_start`) to
    /// now (`window_end`).
    pub fn opencost_allocation(
        &self,
        since: &Snapshot,
        window_start: DateTime<Utc>,
        window_end: DateTime<Utc>,
        prices: &Prices,
        cluster: &str,
    ) -> Result<Value, Error> {
        allocation(
            since,
            &self.snapshot(),
            window_start,
            window_end,
            prices,
            cluster,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::Key;
    use super::*;

    fn key(tenant: &str, ns: &str, pod: &str, model: &str, partition: &str) -> Key {
        Key {
            tenant: tenant.into(),
            namespace: ns.into(),
            pod: pod.into(),
            gpu_model: model.into(),
            partition: partition.into(),
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn allocation_prices_gpu_hours_per_tenant_namespace_over_the_window() {
        let a = key("team-a", "ml", "a", "H200-141GB", "whole");
        let a2 = key("team-a", "infer", "b", "H100-80GB", "mig-1g.10gb");
        let b = key("team-b", "ml", "c", "A100-80GB", "whole");
        let host = key("", "kube-system", "d", "H200-141GB", "whole");
        let start = Snapshot {
            totals: [(a.clone(), (3600.0, 1800.0))].into_iter().collect(),
        };
        let end = Snapshot {
            totals: [
                // 2 more GPU-hours, half utilized.
                (a.clone(), (3600.0 + 7200.0, 1800.0 + 3600.0)),
                // 7 MIG-device-hours of 1/7 GPU = 1 GPU-hour.
                (a2.clone(), (7.0 * 3600.0, 0.0)),
                (b.clone(), (1800.0, 1800.0)),
                (host.clone(), (3600.0, 0.0)),
            ]
            .into_iter()
            .collect(),
        };
        let prices = Prices {
            per_gpu_hour: [
                ("H200-141GB".to_string(), 4.0),
                ("H100-80GB".to_string(), 3.0),
            ]
            .into_iter()
            .collect(),
            default_per_gpu_hour: 2.0,
        };
        let out = allocation(
            &start,
            &end,
            at("2025-01-01T00:00:00Z"),
            at("2025-01-01T02:00:00Z"),
            &prices,
            "fabrik",
        )
        .expect("allocation");
        assert_eq!(out["code"], 200);
        let set = &out["data"][0];
        let ta = &set["fabrik-team-a"];
        assert_eq!(ta["name"], "fabrik-team-a");
        assert_eq!(ta["properties"]["namespace"], "fabrik-team-a");
        assert_eq!(ta["properties"]["cluster"], "fabrik");
        assert_eq!(ta["properties"]["labels"]["fabrik.dev/tenant"], "team-a");
        assert_eq!(ta["window"]["start"], "2025-01-01T00:00:00Z");
        assert_eq!(ta["end"], "2025-01-01T02:00:00Z");
        assert_eq!(ta["minutes"], 120.0);
        let hours = ta["gpuHours"].as_f64().expect("hours");
        assert!((hours - 3.0).abs() < 1e-9, "{hours}");
        // 2 h × 4 (H200) + 1 h × 3 (H100).
        let cost = ta["gpuCost"].as_f64().expect("cost");
        assert!((cost - 11.0).abs() < 1e-9, "{cost}");
        assert_eq!(ta["totalCost"], ta["gpuCost"]);
        assert!((ta["gpuCount"].as_f64().expect("count") - 1.5).abs() < 1e-9);
        let tb = &set["fabrik-team-b"];
        assert_eq!(tb["gpuHours"], 0.5);
        assert_eq!(tb["gpuCost"], 1.0); // default price
        assert_eq!(tb["totalEfficiency"], 1.0);
        assert_eq!(set["kube-system"]["gpuHours"], 1.0);
        assert!(set.get("fabrik-").is_none());
    }

    #[test]
    fn bad_windows_and_prices_are_refused() {
        let s = Snapshot::default();
        let e = allocation(
            &s,
            &s,
            at("2025-01-01T02:00:00Z"),
            at("2025-01-01T00:00:00Z"),
            &Prices::default(),
            "c",
        )
        .expect_err("window");
        assert!(e.to_string().contains("before it starts"), "{e}");
        let prices = Prices {
            per_gpu_hour: [("H200-141GB".to_string(), -1.0)].into_iter().collect(),
            default_per_gpu_hour: 1.0,
        };
        let t = at("2025-01-01T00:00:00Z");
        let e = allocation(&s, &s, t, t, &prices, "c").expect_err("price");
        assert!(e.to_string().contains("invalid price -1"), "{e}");
        let empty = allocation(&s, &s, t, t, &Prices::default(), "c").expect("empty");
        assert_eq!(empty["data"], json!([{}]));
    }

    /// 2025-01-01T00:00:00Z plus `secs`.
    fn sec(secs: f64) -> DateTime<Utc> {
        at("2025-01-01T00:00:00Z") + chrono::TimeDelta::nanoseconds((secs * 1e9).round() as i64)
    }

    /// Eight one-GPU pods' counters when each has run `secs` seconds.
    fn eight(secs: f64) -> Snapshot {
        Snapshot {
            totals: (0..8)
                .map(|i| {
                    let k = key("a", "ml", &format!("p{i}"), "H200-141GB", "whole");
                    (k, (secs.max(0.0), secs.max(0.0) / 2.0))
                })
                .collect(),
        }
    }

    fn gpu_count(out: &Value) -> f64 {
        out["data"][0]["fabrik-a"]["gpuCount"]
            .as_f64()
            .unwrap_or(0.0)
    }

    #[test]
    fn window_edges_are_interpolated_never_taken_from_an_earlier_record() {
        let records = vec![
            (sec(0.0), eight(0.0)),
            (sec(60.0), eight(60.0)),
            (sec(120.0), eight(120.0)),
        ];
        let p = Prices::default();
        let out = allocation_over(&records, sec(30.0), sec(90.0), &p, "c").expect("allocation");
        let a = &out["data"][0]["fabrik-a"];
        assert!((a["gpuHours"].as_f64().expect("hours") - 8.0 * 60.0 / 3600.0).abs() < 1e-12);
        assert!((gpu_count(&out) - 8.0).abs() < 1e-9);
        assert_eq!(a["start"], "2025-01-01T00:00:30Z");
        assert_eq!(a["end"], "2025-01-01T00:01:30Z");
        assert_eq!(a["totalEfficiency"], 0.5);
        // Cut to what is recorded: the covered span says so, the window what was asked.
        let out = allocation_over(&records, sec(-100.0), sec(200.0), &p, "c").expect("cut");
        let a = &out["data"][0]["fabrik-a"];
        assert_eq!(a["start"], "2025-01-01T00:00:00Z");
        assert_eq!(a["end"], "2025-01-01T00:02:00Z");
        assert_eq!(a["window"]["end"], "2025-01-01T00:03:20Z");
        assert_eq!(a["minutes"], 2.0);
        assert!((gpu_count(&out) - 8.0).abs() < 1e-9);
        // Nothing recorded in or after the window: nothing used.
        let out = allocation_over(&records, sec(300.0), sec(400.0), &p, "c").expect("after");
        assert_eq!(out["data"], json!([{}]));
        let out = allocation_over(&[], sec(0.0), sec(1.0), &p, "c").expect("empty");
        assert_eq!(out["data"], json!([{}]));
        assert!(allocation_over(&records, sec(2.0), sec(1.0), &p, "c").is_err());
        // A series that appears between two records starts from 0.
        let mut later = eight(120.0);
        let new = key("b", "ml", "q", "H200-141GB", "mig-1g.18gb");
        later.totals.insert(new.clone(), (70.0, 0.0));
        let records = vec![(sec(0.0), eight(0.0)), (sec(120.0), later)];
        let mid = counters_at(&records, sec(60.0)).expect("mid");
        assert_eq!(mid.totals[&new], (35.0, 0.0));
        assert!(counters_at(&records, sec(121.0)).is_none());
        assert!(counters_at(&records, sec(-1.0)).is_none());
    }

    /// Records as the control plane's history keeps them (`History::record` in
    /// `control-plane/src/tenants/usage.rs`): unchanged counters are not recorded again, and an
    /// entry less than `spacing` after the one before the last replaces the last.
    fn record(e: &mut Vec<(DateTime<Utc>, Snapshot)>, at: DateTime<Utc>, counters: Snapshot) {
        if e.last().is_some_and(|(_, s)| *s == counters) {
            return;
        }
        let len = e.len();
        if len >= 2 && at - e[len - 2].0 < chrono::TimeDelta::minutes(1) {
            e.pop();
        }
        e.push((at, counters));
    }

    /// The window lookup before interpolation: the latest record at or before each edge.
    fn latest_at_or_before(
        e: &[(DateTime<Utc>, Snapshot)],
        t: DateTime<Utc>,
    ) -> (DateTime<Utc>, Snapshot) {
        e.iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .or_else(|| e.first())
            .cloned()
            .unwrap_or((t, Snapshot::default()))
    }

    #[test]
    fn windows_inside_a_steady_run_report_the_steady_gpu_count() {
        // 8 GPUs held steadily from 0 s; the node publishes every 15 s; the control plane
        // records the sums 0.3 s after each publication, thinned to one a minute.
        let p = Prices::default();
        let mut records = Vec::new();
        let mut published = 0.0;
        let mut worst: f64 = 0.0;
        let mut old_worst: f64 = 0.0;
        let mut query = 150.0;
        while query <= 900.0 {
            while published + 0.3 <= query {
                record(&mut records, sec(published + 0.3), eight(published));
                published += 15.0;
            }
            for length in [30.0, 60.0, 120.0] {
                let (start, end) = (sec(query - length), sec(query));
                let out = allocation_over(&records, start, end, &p, "c").expect("allocation");
                worst = worst.max((gpu_count(&out) / 8.0 - 1.0).abs());
                let (t0, s0) = latest_at_or_before(&records, start);
                let (_, s1) = latest_at_or_before(&records, end);
                let old = allocation(&s0, &s1, t0.max(start).min(end), end, &p, "c").expect("old");
                old_worst = old_worst.max((gpu_count(&old) / 8.0 - 1.0).abs());
            }
            query += 7.0;
        }
        eprintln!(
            "30 s, 1 m and 2 m windows over 8 steady GPUs: gpuCount off by at most {:.4} % \
             (latest record at or before each edge: {:.1} %)",
            worst * 100.0,
            old_worst * 100.0
        );
        assert!(worst < 0.01, "{worst}");
        assert!(old_worst > 0.5, "{old_worst}");
        // A window given by its edges, in the past.
        let out = allocation_over(&records, sec(100.0), sec(160.0), &p, "c").expect("past");
        assert!((gpu_count(&out) - 8.0).abs() < 0.08, "{out}");
    }
}
