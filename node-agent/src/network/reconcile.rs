//! The agent's tenant-segment reconciliation: a tenant's segment (its Tenant's
//! `spec.network.segment`, a VXLAN VNI) exists on a node exactly while at least one of the
//! tenant's pods is bound there.
//!
//! * [`tenants_on_node`] (pure): the tenants with pods on the node. A pod is tenant `t`'s when
//!   its namespace is `fabrik-<t>` (and its `fabrik.dev/tenant` label, when set, says `t`);
//!   finished pods (`Succeeded`, `Failed`) do not count, terminating ones do until they are gone
//!   (their containers may still run).
//! * [`desired`] (pure): segment → tenant for those tenants. Tenants without a segment get
//!   nothing; a segment that is not a VNI is a [`Problem`] and nothing is built for it; a VNI
//!   claimed by two Tenants goes to the one created first, the other gets a [`Problem`].
//! * [`remotes`] (pure): each segment's flood list — the VTEPs (Node annotation
//!   [`ANNOTATION_VTEP`]) of the other nodes whose [`ANNOTATION_TENANT_SEGMENTS`] lists it.
//! * [`Reconciler::pass`]: observes the segments present through a [`SegmentBackend`], ensures
//!   the desired ones, deletes the others. Level-triggered and idempotent; a failed operation is
//!   retried with exponential backoff (sooner when what is wanted changes) and each problem is
//!   reported once per change ([`Outcome::new_errors`]).
//! * [`report`] (pure): what the agent publishes on its Node — the annotation
//!   [`ANNOTATION_TENANT_SEGMENTS`] (`{"<tenant>": <vni>, …}`, the segments built here) and
//!   the condition [`CONDITION_TENANT_NETWORKS`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use fabrik_api::tenant::Tenant;
use k8s_openapi::api::core::v1::{Node, Pod};
use thiserror::Error;

use super::backend::SegmentBackend;
use super::segment::{InputError, Vni};

/// Node annotation: the tenant segments built on the node, as a JSON object tenant → VNI
/// (`{"team-a":100}`; `{}` for none).
pub const ANNOTATION_TENANT_SEGMENTS: &str = "fabrik.dev/tenant-segments";
/// Node annotation: the node's VTEP address on the underlay (set when its backend has one).
pub const ANNOTATION_VTEP: &str = "fabrik.dev/vtep";
/// Node condition: `True` when every segment the node's tenants need is built.
pub const CONDITION_TENANT_NETWORKS: &str = "TenantNetworks";

/// The first retry after a failure; doubled per consecutive failure up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait between retries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A tenant whose segment is not built, found before anything is touched.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Problem {
    /// `spec.network.segment` is not a VNI.
    #[error("tenant {tenant}: spec.network.segment: {source}; no segment built")]
    BadSegment {
        /// The tenant.
        tenant: String,
        /// What is wrong.
        #[source]
        source: InputError,
    },
    /// Another Tenant, created earlier, has the same segment.
    #[error("tenant {tenant}: segment {vni} is already tenant {owner}'s; not built for {tenant}")]
    Taken {
        /// The tenant.
        tenant: String,
        /// The VNI.
        vni: Vni,
        /// The tenant that keeps it.
        owner: String,
    },
}

impl Problem {
    fn tenant(&self) -> &str {
        match self {
            Problem::BadSegment { tenant, .. } | Problem::Taken { tenant, .. } => tenant,
        }
    }
}

/// Tenants with pods bound to `node`, with how many each (see the module documentation).
pub fn tenants_on_node(pods: &[Pod], node: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if !bound || matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let namespace = p.metadata.namespace.as_deref().unwrap_or("");
        let Some(tenant) = fabrik_api::naming::tenant_of_namespace(namespace) else {
            continue;
        };
        let label = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(fabrik_api::LABEL_TENANT));
        if label.is_some_and(|l| l != tenant) {
            continue;
        }
        *out.entry(tenant.to_string()).or_insert(0) += 1;
    }
    out
}

/// The segments a node should have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// Segment → the tenant it is built for.
    pub segments: BTreeMap<Vni, String>,
    /// Tenants with pods here whose segment cannot be built.
    pub problems: Vec<Problem>,
}

/// The segments for the tenants in `here` (from [`tenants_on_node`]), per `tenants` (all
/// Tenants on the host). Tenants with pods here but no Tenant object or no segment get none.
pub fn desired(here: &BTreeMap<String, usize>, tenants: &[Tenant]) -> Desired {
    // Who owns each VNI: the Tenant created first (then by name), over all Tenants, so every
    // node decides the same.
    let mut claims: Vec<(&Tenant, Vni)> = tenants
        .iter()
        .filter_map(|t| {
            let segment = t.spec.network.as_ref()?.segment?;
            Some((t, Vni::from_segment(segment).ok()?))
        })
        .collect();
    claims.sort_by_key(|(t, _)| {
        (
            t.metadata.creation_timestamp.as_ref().map(|c| c.0),
            t.metadata.name.clone(),
        )
    });
    let mut owners: BTreeMap<Vni, String> = BTreeMap::new();
    for (t, vni) in claims {
        owners
            .entry(vni)
            .or_insert_with(|| t.metadata.name.clone().unwrap_or_default());
    }

    let mut out = Desired::default();
    for t in tenants {
        let name = t.metadata.name.clone().unwrap_or_default();
        if !here.contains_key(&name) {
            continue;
        }
        let Some(segment) = t.spec.network.as_ref().and_then(|n| n.segment) else {
            continue;
        };
        match Vni::from_segment(segment) {
            Err(source) => out.problems.push(Problem::BadSegment {
                tenant: name,
                source,
            }),
            Ok(vni) => match owners.get(&vni) {
                Some(owner) if *owner != name => out.problems.push(Problem::Taken {
                    tenant: name,
                    vni,
                    owner: owner.clone(),
                }),
                _ => {
                    out.segments.insert(vni, name);
                }
            },
        }
    }
    out
}

/// The segments a node reports in its [`ANNOTATION_TENANT_SEGMENTS`] (a bad annotation counts
/// as none).
pub fn segments_of(node: &Node) -> BTreeMap<String, Vni> {
    let Some(text) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TENANT_SEGMENTS))
    else {
        return BTreeMap::new();
    };
    let parsed: BTreeMap<String, u64> = serde_json::from_str(text).unwrap_or_default();
    parsed
        .into_iter()
        .filter_map(|(t, v)| Some((t, Vni::new(v).ok()?)))
        .collect()
}

/// Per segment, the VTEPs of the nodes other than `me` that report it built.
pub fn remotes(nodes: &[Node], me: &str) -> BTreeMap<Vni, Vec<Ipv4Addr>> {
    let mut out: BTreeMap<Vni, BTreeSet<Ipv4Addr>> = BTreeMap::new();
    for n in nodes {
        if n.metadata.name.as_deref() == Some(me) {
            continue;
        }
        let vtep = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_VTEP))
            .and_then(|v| v.parse::<Ipv4Addr>().ok());
        let Some(vtep) = vtep else { continue };
        for vni in segments_of(n).into_values() {
            out.entry(vni).or_default().insert(vtep);
        }
    }
    out.into_iter()
        .map(|(v, s)| (v, s.into_iter().collect()))
        .collect()
}

/// What one operation was for, so a change of mind retries at once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Ensure(Vec<Ipv4Addr>),
    Delete,
}

#[derive(Debug, Clone)]
struct Failure {
    want: Want,
    attempts: u32,
    retry_at: Instant,
    message: String,
}

/// The outcome of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Tenant → VNI of the segments built on the node now.
    pub built: BTreeMap<String, Vni>,
    /// Segments created or repaired this pass (tenant, VNI).
    pub changed: Vec<(String, Vni)>,
    /// Segments removed this pass.
    pub removed: Vec<Vni>,
    /// Every current problem, by subject (`tenant <t>`, `segment <vni>`, `host`).
    pub errors: BTreeMap<String, String>,
    /// The problems not reported before (new, or changed since): log these.
    pub new_errors: Vec<String>,
    /// Subjects whose problem is gone since the previous pass.
    pub resolved: Vec<String>,
}

/// The reconciler's memory between passes: failures (for backoff) and what was reported.
#[derive(Debug, Default)]
pub struct Reconciler {
    failures: BTreeMap<Vni, Failure>,
    reported: BTreeMap<String, String>,
    built: BTreeMap<String, Vni>,
}

fn backoff(attempts: u32) -> Duration {
    let factor = 1u32 << attempts.saturating_sub(1).min(16);
    BASE_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

impl Reconciler {
    /// A reconciler with no history.
    pub fn new() -> Reconciler {
        Reconciler::default()
    }

    /// One pass at time `now`: make the node's segments `desired`, with `remotes` as their
    /// flood lists.
    pub async fn pass(
        &mut self,
        backend: &dyn SegmentBackend,
        desired: &Desired,
        remotes: &BTreeMap<Vni, Vec<Ipv4Addr>>,
        now: Instant,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        for p in &desired.problems {
            outcome
                .errors
                .insert(format!("tenant {}", p.tenant()), p.to_string());
        }
        let present = match backend.present().await {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("cannot list the node's segments: {e}");
                return self.blocked(msg);
            }
        };

        for (vni, tenant) in &desired.segments {
            let want = Want::Ensure(remotes.get(vni).cloned().unwrap_or_default());
            if let Some(message) = self.waiting(*vni, &want, now) {
                outcome.errors.insert(format!("segment {vni}"), message);
                continue;
            }
            let Want::Ensure(peers) = &want else { continue };
            match backend.ensure(*vni, peers).await {
                Ok(changed) => {
                    self.failures.remove(vni);
                    outcome.built.insert(tenant.clone(), *vni);
                    if changed {
                        outcome.changed.push((tenant.clone(), *vni));
                    }
                }
                Err(e) => {
                    let message = format!("tenant {tenant}: building segment {vni}: {e}");
                    self.failed(*vni, want, message.clone(), now);
                    outcome.errors.insert(format!("segment {vni}"), message);
                }
            }
        }

        for vni in present.iter().filter(|v| !desired.segments.contains_key(v)) {
            if let Some(message) = self.waiting(*vni, &Want::Delete, now) {
                outcome.errors.insert(format!("segment {vni}"), message);
                continue;
            }
            match backend.delete(*vni).await {
                Ok(removed) => {
                    self.failures.remove(vni);
                    if removed {
                        outcome.removed.push(*vni);
                    }
                }
                Err(e) => {
                    let message = format!("removing segment {vni} (no tenant here needs it): {e}");
                    self.failed(*vni, Want::Delete, message.clone(), now);
                    outcome.errors.insert(format!("segment {vni}"), message);
                }
            }
        }
        // Failures of segments nobody wants or has any more are history.
        self.failures
            .retain(|v, _| desired.segments.contains_key(v) || present.contains(v));

        self.built = outcome.built.clone();
        self.note_reported(&mut outcome);
        outcome
    }

    /// A pass that could not look (the host or the backend could not be read): nothing is
    /// changed, the segments built stay reported as they were, and `message` is the problem.
    pub fn blocked(&mut self, message: String) -> Outcome {
        let mut outcome = Outcome {
            built: self.built.clone(),
            ..Outcome::default()
        };
        // Problems that could still be current are kept, not re-reported as new.
        for (k, v) in &self.reported {
            if k != "host" {
                outcome.errors.insert(k.clone(), v.clone());
            }
        }
        outcome.errors.insert("host".into(), message);
        self.note_reported(&mut outcome);
        outcome
    }

    /// The message of a failure of `vni` still in backoff for the same `want`.
    fn waiting(&self, vni: Vni, want: &Want, now: Instant) -> Option<String> {
        let f = self.failures.get(&vni)?;
        (f.want == *want && now < f.retry_at).then(|| f.message.clone())
    }

    fn failed(&mut self, vni: Vni, want: Want, message: String, now: Instant) {
        let attempts = match self.failures.get(&vni) {
            Some(f) if f.want == want => f.attempts.saturating_add(1),
            _ => 1,
        };
        self.failures.insert(
            vni,
            Failure {
                want,
                attempts,
                retry_at: now + backoff(attempts),
                message,
            },
        );
    }

    fn note_reported(&mut self, outcome: &mut Outcome) {
        outcome.new_errors = outcome
            .errors
            .iter()
            .filter(|(k, v)| self.reported.get(*k) != Some(*v))
            .map(|(_, v)| v.clone())
            .collect();
        outcome.resolved = self
            .reported
            .keys()
            .filter(|k| !outcome.errors.contains_key(*k))
            .cloned()
            .collect();
        self.reported = outcome.errors.clone();
    }
}

/// What the agent publishes for `outcome`: the [`ANNOTATION_TENANT_SEGMENTS`] value, and the
/// [`CONDITION_TENANT_NETWORKS`] status (`True`/`False`), reason (`Ready`/`Failed`) and message.
pub fn report(outcome: &Outcome) -> (String, &'static str, &'static str, String) {
    let built: BTreeMap<&str, u32> = outcome
        .built
        .iter()
        .map(|(t, v)| (t.as_str(), v.get()))
        .collect();
    let annotation = serde_json::to_string(&built).unwrap_or_else(|_| "{}".into());
    if outcome.errors.is_empty() {
        let message = if built.is_empty() {
            "no tenant segments on this node".to_string()
        } else {
            let list: Vec<String> = built.iter().map(|(t, v)| format!("{t}={v}")).collect();
            format!("tenant segments built: {}", list.join(", "))
        };
        (annotation, "True", "Ready", message)
    } else {
        let list: Vec<&str> = outcome.errors.values().map(String::as_str).collect();
        (annotation, "False", "Failed", list.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::simulated::SimNetwork;
    use fabrik_api::tenant::{TenantNetwork, TenantSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const NODE: &str = "gpu-0";

    fn vni(n: u64) -> Vni {
        Vni::new(n).expect("vni")
    }

    fn tenant(name: &str, segment: Option<i64>, created_s: i64) -> Tenant {
        let mut t = Tenant::new(
            name,
            TenantSpec {
                network: segment.map(|s| TenantNetwork { segment: Some(s) }),
                ..TenantSpec::default()
            },
        );
        t.metadata.creation_timestamp = k8s_openapi::jiff::Timestamp::from_second(created_s)
            .ok()
            .map(Time);
        t
    }

    fn pod(namespace: &str, name: &str, node: &str, label: Option<&str>, phase: &str) -> Pod {
        let labels = label.map(|l| json!({ fabrik_api::LABEL_TENANT: l }));
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    fn node(name: &str, vtep: Option<&str>, segments: Option<&str>) -> Node {
        let mut a = serde_json::Map::new();
        if let Some(v) = vtep {
            a.insert(ANNOTATION_VTEP.into(), json!(v));
        }
        if let Some(s) = segments {
            a.insert(ANNOTATION_TENANT_SEGMENTS.into(), json!(s));
        }
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": a}})).expect("node")
    }

    /// Pods → desired → one pass over `net`, as the agent does it.
    async fn pass(
        r: &mut Reconciler,
        net: &SimNetwork,
        pods: &[Pod],
        tenants: &[Tenant],
        now: Instant,
    ) -> Outcome {
        let d = desired(&tenants_on_node(pods, NODE), tenants);
        r.pass(net, &d, &BTreeMap::new(), now).await
    }

    #[test]
    fn pods_are_grouped_by_tenant_namespace() {
        let pods = [
            pod("fabrik-a", "p1", NODE, Some("a"), "Running"),
            pod("fabrik-a", "p2", NODE, None, "Pending"),
            pod("fabrik-a", "done", NODE, Some("a"), "Succeeded"),
            pod("fabrik-b", "failed", NODE, Some("b"), "Failed"),
            pod("fabrik-c", "elsewhere", "gpu-1", Some("c"), "Running"),
            pod("fabrik-d", "mislabelled", NODE, Some("a"), "Running"),
            pod("default", "plain", NODE, Some("a"), "Running"),
            pod("fabrik-", "empty", NODE, None, "Running"),
        ];
        assert_eq!(
            tenants_on_node(&pods, NODE),
            BTreeMap::from([("a".to_string(), 2)])
        );
    }

    #[test]
    fn desired_skips_tenants_without_segments_and_reports_bad_ones() {
        let here = BTreeMap::from([
            ("a".to_string(), 1),
            ("none".to_string(), 1),
            ("zero".to_string(), 1),
            ("big".to_string(), 1),
            ("late".to_string(), 1),
            ("ghost".to_string(), 1),
        ]);
        let tenants = [
            tenant("a", Some(100), 10),
            tenant("none", None, 10),
            tenant("zero", Some(0), 10),
            tenant("big", Some(1 << 24), 10),
            // Created after `a`, same VNI: `a` keeps it.
            tenant("late", Some(100), 20),
            // Not here: no segment, but it claims one.
            tenant("away", Some(300), 5),
        ];
        let d = desired(&here, &tenants);
        assert_eq!(d.segments, BTreeMap::from([(vni(100), "a".to_string())]));
        let problems: Vec<String> = d.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "tenant zero: spec.network.segment: invalid VNI 0: a VXLAN network identifier \
                 is 1..=16777215; no segment built",
                "tenant big: spec.network.segment: invalid VNI 16777216: a VXLAN network \
                 identifier is 1..=16777215; no segment built",
                "tenant late: segment 100 is already tenant a's; not built for late",
            ]
        );
        // The older tenant wins whichever order the list comes in.
        let swapped = [tenant("late", Some(100), 20), tenant("a", Some(100), 10)];
        let d = desired(&here, &swapped);
        assert_eq!(d.segments[&vni(100)], "a");
    }

    #[tokio::test]
    async fn segment_follows_the_tenants_pods() {
        let net = SimNetwork::new(None);
        let mut r = Reconciler::new();
        let now = Instant::now();
        let tenants = [tenant("a", Some(100), 1)];
        let p1 = pod("fabrik-a", "p1", NODE, Some("a"), "Running");
        let p2 = pod("fabrik-a", "p2", NODE, Some("a"), "Running");

        // Nothing here: nothing built.
        let o = pass(&mut r, &net, &[], &tenants, now).await;
        assert!(o.built.is_empty() && o.errors.is_empty());
        assert!(net.segments().is_empty());

        // Pods of `a` land: segment 100.
        let o = pass(&mut r, &net, &[p1.clone(), p2.clone()], &tenants, now).await;
        assert_eq!(o.built, BTreeMap::from([("a".to_string(), vni(100))]));
        assert_eq!(o.changed, [("a".to_string(), vni(100))]);
        assert_eq!(
            net.segments().keys().copied().collect::<Vec<_>>(),
            [vni(100)]
        );
        let (annotation, status, reason, message) = report(&o);
        assert_eq!(annotation, r#"{"a":100}"#);
        assert_eq!((status, reason), ("True", "Ready"));
        assert_eq!(message, "tenant segments built: a=100");

        // Again: nothing changes.
        let o = pass(&mut r, &net, &[p1.clone(), p2], &tenants, now).await;
        assert!(o.changed.is_empty() && o.removed.is_empty());
        assert_eq!(net.changes(), 1);

        // One pod left: kept. None left: removed.
        let o = pass(&mut r, &net, &[p1], &tenants, now).await;
        assert_eq!(o.built.len(), 1);
        let o = pass(&mut r, &net, &[], &tenants, now).await;
        assert_eq!(o.removed, [vni(100)]);
        assert!(o.built.is_empty());
        assert!(net.segments().is_empty());
        assert_eq!(report(&o).0, "{}");
    }

    #[tokio::test]
    async fn tenants_without_or_with_bad_segments_get_nothing() {
        let net = SimNetwork::new(None);
        let mut r = Reconciler::new();
        let now = Instant::now();
        let pods = [
            pod("fabrik-plain", "p", NODE, None, "Running"),
            pod("fabrik-bad", "p", NODE, None, "Running"),
            pod("fabrik-good", "p", NODE, None, "Running"),
        ];
        let tenants = [
            tenant("plain", None, 1),
            tenant("bad", Some(-7), 1),
            tenant("good", Some(200), 1),
        ];
        let o = pass(&mut r, &net, &pods, &tenants, now).await;
        // Only the good one is built; the bad one is a clear error and nothing of it exists.
        assert_eq!(
            net.segments().keys().copied().collect::<Vec<_>>(),
            [vni(200)]
        );
        assert_eq!(o.built, BTreeMap::from([("good".to_string(), vni(200))]));
        assert_eq!(
            o.new_errors,
            [
                "tenant bad: spec.network.segment: invalid VNI -7: a VXLAN network identifier is \
              1..=16777215; no segment built"
            ]
        );
        let (_, status, reason, message) = report(&o);
        assert_eq!((status, reason), ("False", "Failed"));
        assert!(message.contains("invalid VNI -7"), "{message}");
        // Reported once: the next pass has the same error, not a new one.
        let o = pass(&mut r, &net, &pods, &tenants, now).await;
        assert_eq!(o.errors.len(), 1);
        assert!(o.new_errors.is_empty());
        // Fixed: resolved.
        let fixed = [
            tenant("plain", None, 1),
            tenant("bad", Some(7), 1),
            tenant("good", Some(200), 1),
        ];
        let o = pass(&mut r, &net, &pods, &fixed, now).await;
        assert!(o.errors.is_empty());
        assert_eq!(o.resolved, ["tenant bad"]);
        assert_eq!(net.segments().len(), 2);
    }

    #[tokio::test]
    async fn failures_back_off_and_are_reported_once() {
        let net = SimNetwork::new(None);
        let mut r = Reconciler::new();
        let t0 = Instant::now();
        let tenants = [tenant("a", Some(100), 1)];
        let pods = [pod("fabrik-a", "p", NODE, None, "Running")];
        net.refuse(vni(100), "VNI in use");

        let o = pass(&mut r, &net, &pods, &tenants, t0).await;
        assert!(o.built.is_empty());
        assert_eq!(
            o.new_errors,
            ["tenant a: building segment 100: simulated network: segment 100 refused: VNI in use"]
        );
        net.allow(vni(100));
        // Within the backoff: not retried, not reported again.
        let o = pass(&mut r, &net, &pods, &tenants, t0 + Duration::from_secs(1)).await;
        assert!(net.segments().is_empty());
        assert_eq!(o.errors.len(), 1);
        assert!(o.new_errors.is_empty());
        // After it: retried and built.
        let o = pass(&mut r, &net, &pods, &tenants, t0 + BASE_BACKOFF).await;
        assert_eq!(o.built.len(), 1);
        assert_eq!(o.resolved, ["segment 100"]);

        // Backoff grows per consecutive failure.
        assert_eq!(backoff(1), BASE_BACKOFF);
        assert_eq!(backoff(2), BASE_BACKOFF * 2);
        assert_eq!(backoff(30), MAX_BACKOFF);

        // A failed removal is retried too, and the segment stays reported until it goes.
        net.refuse(vni(100), "busy");
        let t1 = t0 + Duration::from_secs(10);
        let o = pass(&mut r, &net, &[], &tenants, t1).await;
        assert_eq!(o.removed, []);
        assert!(o.new_errors[0].starts_with("removing segment 100"), "{o:?}");
        net.allow(vni(100));
        let o = pass(&mut r, &net, &[], &tenants, t1 + BASE_BACKOFF).await;
        assert_eq!(o.removed, [vni(100)]);
        assert!(o.errors.is_empty());
    }

    #[tokio::test]
    async fn leftovers_are_removed_and_remotes_come_from_other_nodes() {
        let net = SimNetwork::new(None);
        // A segment from before a restart, no longer wanted.
        net.ensure(vni(300), &[]).await.expect("leftover");
        let mut r = Reconciler::new();
        let nodes = [
            node(NODE, Some("10.0.0.10"), Some(r#"{"a":100}"#)),
            node("gpu-1", Some("10.0.0.11"), Some(r#"{"a":100,"b":200}"#)),
            node("gpu-2", Some("10.0.0.12"), Some(r#"{"a":100}"#)),
            node("gpu-3", None, Some(r#"{"a":100}"#)),
            node("gpu-4", Some("bogus"), Some(r#"{"a":100}"#)),
            node("gpu-5", Some("10.0.0.15"), Some("not json")),
        ];
        let peers = remotes(&nodes, NODE);
        let ip = |d| Ipv4Addr::new(10, 0, 0, d);
        assert_eq!(peers[&vni(100)], [ip(11), ip(12)]);
        assert_eq!(peers[&vni(200)], [ip(11)]);
        assert_eq!(peers.len(), 2);

        let d = Desired {
            segments: BTreeMap::from([(vni(100), "a".to_string())]),
            problems: Vec::new(),
        };
        let o = r.pass(&net, &d, &peers, Instant::now()).await;
        assert_eq!(o.removed, [vni(300)]);
        assert_eq!(net.segments()[&vni(100)], [ip(11), ip(12)]);

        // A host that cannot be read: nothing changes, what was built stays reported.
        let o = r.blocked("cannot list Tenants: forbidden".into());
        assert_eq!(o.built, BTreeMap::from([("a".to_string(), vni(100))]));
        assert_eq!(o.new_errors, ["cannot list Tenants: forbidden"]);
        assert_eq!(report(&o).1, "False");
    }
}
