//! Prometheus metrics of the API server: requests by verb, resource and code, and latency
//! histograms by verb, rendered in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket upper bounds, seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// Request counters and latency histograms.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
}

impl Metrics {
    /// Records one finished request.
    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        if let Ok(mut r) = self.requests.lock() {
            *r.entry((verb.to_string(), resource.to_string(), code))
                .or_default() += 1;
        }
        if let Ok(mut l) = self.latency.lock() {
            let h = l.entry(verb.to_string()).or_default();
            let secs = elapsed.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Counter of API requests by verb, resource and HTTP code.\n");
        out.push_str("# TYPE apiserver_request_total counter\n");
        if let Ok(r) = self.requests.lock() {
            for ((verb, resource, code), n) in r.iter() {
                let _ = writeln!(out, "apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}");
            }
        }
        out.push_str(
            "# HELP apiserver_request_duration_seconds Latency of API requests by verb.\n",
        );
        out.push_str("# TYPE apiserver_request_duration_seconds histogram\n");
        if let Ok(l) = self.latency.lock() {
            for (verb, h) in l.iter() {
                for (i, b) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(out, "apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"{b}\"}} {}", h.counts[i]);
                }
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_sum{{verb=\"{verb}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_count{{verb=\"{verb}\"}} {}",
                    h.count
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.observe("get", "pods", 200, Duration::from_millis(2));
        m.observe("get", "pods", 200, Duration::from_millis(200));
        m.observe("create", "pods", 409, Duration::from_millis(1));
        let text = m.render();
        assert!(
            text.contains("apiserver_request_total{verb=\"get\",resource=\"pods\",code=\"200\"} 2")
        );
        assert!(text
            .contains("apiserver_request_duration_seconds_bucket{verb=\"get\",le=\"0.0025\"} 1"));
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{verb=\"get\",le=\"0.25\"} 2")
        );
        assert!(text.contains("apiserver_request_duration_seconds_count{verb=\"create\"} 1"));
    }
}
