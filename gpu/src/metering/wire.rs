//! The wire format of GPU-second counters: per node, a [`NodeGpuUsage`] document (the
//! `usage.json` of the ConfigMap `fabrik-gpu-usage-<node>` the node agent publishes), per tenant
//! totals and per pod series. Nodes write it ([`document`]); the control plane reads it
//! ([`parse`], [`counters`]) and sums it into `Tenant.status.usage`. Pure.
//!
//! Values are the meter's device-seconds, to the millisecond (`allocated`, `utilized`: a whole
//! GPU, a MIG device or a shared slice counts 1 per second, a time-sliced pod its share of its
//! GPU; see [`super`]); whole-GPU equivalents follow from each series' `partition`
//! ([`super::gpu_fraction`]).

use std::collections::BTreeMap;

use fabrik_api::tenant::{GpuSeconds, GpuSeries, NodeGpuUsage, USAGE_DATA_KEY};
use k8s_openapi::api::core::v1::ConfigMap;

use super::{Key, Snapshot};

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The document of `node` for its counters (values rounded to milliseconds).
pub fn document(node: &str, counters: &Snapshot) -> NodeGpuUsage {
    let mut tenants: BTreeMap<String, GpuSeconds> = BTreeMap::new();
    let mut series = Vec::with_capacity(counters.totals.len());
    for (k, (allocated, utilized)) in &counters.totals {
        let t = tenants.entry(k.tenant.clone()).or_default();
        t.allocated += allocated;
        t.utilized += utilized;
        series.push(GpuSeries {
            tenant: k.tenant.clone(),
            namespace: k.namespace.clone(),
            pod: k.pod.clone(),
            gpu_model: k.gpu_model.clone(),
            partition: k.partition.clone(),
            seconds: GpuSeconds {
                allocated: round(*allocated),
                utilized: round(*utilized),
            },
        });
    }
    for t in tenants.values_mut() {
        t.allocated = round(t.allocated);
        t.utilized = round(t.utilized);
    }
    NodeGpuUsage {
        node: node.to_string(),
        tenants,
        series,
    }
}

/// The counters a document holds (its series; the tenant totals are derived from them).
pub fn counters(doc: &NodeGpuUsage) -> Snapshot {
    let mut totals: BTreeMap<Key, (f64, f64)> = BTreeMap::new();
    for s in &doc.series {
        let key = Key {
            tenant: s.tenant.clone(),
            namespace: s.namespace.clone(),
            pod: s.pod.clone(),
            gpu_model: s.gpu_model.clone(),
            partition: s.partition.clone(),
        };
        let t = totals.entry(key).or_insert((0.0, 0.0));
        // Negative or non-finite values (a hand-edited ConfigMap) count as nothing.
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        t.0 += clean(s.seconds.allocated);
        t.1 += clean(s.seconds.utilized);
    }
    Snapshot { totals }
}

/// The document a usage ConfigMap holds (None when it holds none, or a malformed one).
pub fn parse(cm: &ConfigMap) -> Option<NodeGpuUsage> {
    let text = cm.data.as_ref()?.get(USAGE_DATA_KEY)?;
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::metering::Meter;

    fn key(tenant: &str, pod: &str, partition: &str) -> Key {
        Key {
            tenant: tenant.into(),
            namespace: "ml".into(),
            pod: pod.into(),
            gpu_model: "H200-141GB".into(),
            partition: partition.into(),
        }
    }

    #[test]
    fn documents_sum_tenants_and_round_trip() {
        let snap = Snapshot {
            totals: [
                (key("a", "p1", "whole"), (10.0004, 5.0)),
                (key("a", "p2", "mig-1g.18gb"), (2.5, 2.5)),
                (key("b", "p3", "whole"), (1.0, 0.25)),
            ]
            .into_iter()
            .collect(),
        };
        let doc = document("n0", &snap);
        assert_eq!(doc.node, "n0");
        assert_eq!(
            doc.tenants["a"],
            GpuSeconds {
                allocated: 12.5,
                utilized: 7.5
            }
        );
        assert_eq!(doc.tenants["b"].utilized, 0.25);
        assert_eq!(doc.series.len(), 3);
        let text = serde_json::to_string(&doc).expect("json");
        assert!(text.contains("\"gpuModel\":\"H200-141GB\""), "{text}");
        assert!(text.contains("\"allocated\":10.0,"), "{text}");
        let back: NodeGpuUsage = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, doc);
        let c = counters(&back);
        assert_eq!(c.totals[&key("a", "p1", "whole")], (10.0, 5.0));
        assert_eq!(c.totals.len(), 3);
    }

    #[test]
    fn bad_values_count_as_nothing_and_bad_configmaps_parse_to_none() {
        let mut doc = document(
            "n0",
            &Snapshot {
                totals: [(key("a", "p", "whole"), (3.0, 1.0))].into_iter().collect(),
            },
        );
        doc.series[0].seconds.allocated = -5.0;
        doc.series[0].seconds.utilized = f64::NAN;
        assert_eq!(counters(&doc).totals[&key("a", "p", "whole")], (0.0, 0.0));
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "x"}, "data": {USAGE_DATA_KEY: "not json"}
        }))
        .expect("cm");
        assert!(parse(&cm).is_none());
        assert!(parse(&ConfigMap::default()).is_none());
    }

    #[test]
    fn restored_counters_continue_and_are_split_by_node() {
        let meter = Meter::default();
        let earlier = Snapshot {
            totals: [(key("a", "p", "whole"), (100.0, 50.0))]
                .into_iter()
                .collect(),
        };
        meter.restore("n0", &earlier);
        meter.restore("n0", &Snapshot::default());
        assert_eq!(meter.get(&key("a", "p", "whole")), Some((100.0, 50.0)));
        assert_eq!(meter.snapshot_of("n0"), earlier);
        assert!(meter.snapshot_of("n1").totals.is_empty());
        assert_eq!(
            document("n0", &meter.snapshot_of("n0")).tenants["a"].allocated,
            100.0
        );
    }
}
