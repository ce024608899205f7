//! GPU cost allocation shaped like OpenCost's `/allocation` API response
//! (`aggregate=namespace`, one step): `{"code": 200, "status": "success", "data": [{<namespace>:
//! <allocation>}]}`, one allocation per tenant host namespace (`fabrik-<tenant>`; pods without
//! a tenant label under their own namespace), with `gpuHours`, `gpuCost` (and `totalCost`)
//! for the window between two [`Snapshot`]s of a [`Meter`](super::Meter).
//!
//! GPU-hours are whole-GPU equivalents: a whole GPU counts 1, a MIG device its compute slices
//! out of 7 (`1g.18gb` = 1/7, `3g.71gb` = 3/7), a shared slice its compute percentage. A
//! time-sliced replica is requested as `nvidia.com/gpu` and so counts as a whole GPU (a
//! known over-count when replicas > 1). Price: [`Prices`], per GPU-hour per model. CPU, memory,
//! storage and network are not metered here: their fields are 0.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};
use thiserror::Error;

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

/// Whole-GPU equivalents of one device of `partition` (see the module documentation).
pub fn gpu_fraction(partition: &str) -> f64 {
    if let Some(profile) = partition.strip_prefix("mig-") {
        let slices: String = profile.chars().take_while(char::is_ascii_digit).collect();
        return slices.parse::<f64>().map(|n| n / 7.0).unwrap_or(1.0);
    }
    if let Some(shared) = partition.strip_prefix("shared-") {
        let pct = shared
            .rsplit('-')
            .next()
            .and_then(|p| p.strip_suffix("pct"))
            .and_then(|p| p.parse::<f64>().ok());
        return pct.map(|p| p / 100.0).unwrap_or(1.0);
    }
    1.0
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
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
    let minutes = (window_end - window_start).num_milliseconds() as f64 / 60_000.0;
    let window_hours = minutes / 60.0;
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
                "start": time(window_start),
                "end": time(window_end),
                "minutes": minutes,
                "cpuCores": 0.0, "cpuCoreHours": 0.0, "cpuCost": 0.0, "cpuCostAdjustment": 0.0,
                "cpuEfficiency": 0.0,
                "gpuCount": if window_hours > 0.0 { sum.gpu_hours / window_hours } else { 0.0 },
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
    fn fractions_of_partitions() {
        assert_eq!(gpu_fraction("whole"), 1.0);
        assert_eq!(gpu_fraction("mig-1g.18gb"), 1.0 / 7.0);
        assert_eq!(gpu_fraction("mig-3g.71gb"), 3.0 / 7.0);
        assert_eq!(gpu_fraction("shared-20480mib-25pct"), 0.25);
        assert_eq!(gpu_fraction("strange"), 1.0);
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
}
