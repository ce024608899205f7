//! `coordination.k8s.io/v1` Leases on the host: one per replica (membership) and one per
//! shard (leadership), and the local clock that decides when another replica's Lease expired.
//!
//! Expiry is judged the way client-go's leader election does it: not from the `renewTime`
//! written by another machine (clocks differ), but from how long this replica has seen the
//! Lease's `resourceVersion` unchanged ([`Observer`]). A Lease is expired once it has not
//! changed for its `leaseDurationSeconds` as measured here; a replica that just started has
//! seen nothing change yet, so it waits one full duration before taking over anything.
//!
//! Writes to shard Leases are compare-and-swap on `resourceVersion` (a replace carrying the
//! version read): of two replicas racing for a shard, one wins and the other gets a conflict.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;

/// The label every Lease of this module carries: `replica` or `shard`.
pub const KIND_LABEL: &str = "fabrik.dev/lease";
/// The field manager of membership Leases.
const MANAGER: &str = "fabrik-shards";

/// Errors talking to the host about Leases.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host API call failed.
    #[error("lease {op} on the host failed: {source}")]
    Kube {
        /// What was being done.
        op: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name of a replica's membership Lease.
pub fn member_lease(replica: &str) -> String {
    format!("fabrik-replica-{replica}")
}

/// The name of shard `i`'s Lease.
pub fn shard_lease(shard: u32) -> String {
    format!("fabrik-shard-{shard}")
}

/// The shard a Lease name belongs to.
pub fn shard_of_lease(name: &str) -> Option<u32> {
    name.strip_prefix("fabrik-shard-")?.parse().ok()
}

/// The holder of a Lease; None when it is released (empty or absent).
pub fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// When this replica last saw each Lease change (see the module docs).
#[derive(Debug, Default)]
pub struct Observer {
    seen: HashMap<String, (String, Instant)>,
}

impl Observer {
    /// Records that `name` is at `version` at `now`; returns how long it has been unchanged.
    pub fn observe(&mut self, name: &str, version: &str, now: Instant) -> Duration {
        match self.seen.get(name) {
            Some((v, since)) if v == version => now.saturating_duration_since(*since),
            _ => {
                self.seen
                    .insert(name.to_string(), (version.to_string(), now));
                Duration::ZERO
            }
        }
    }

    /// Whether a Lease unchanged for `unchanged` is expired.
    pub fn expired(lease: &Lease, unchanged: Duration, default: Duration) -> bool {
        let duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(default, Duration::from_secs);
        unchanged >= duration
    }

    /// Forgets Leases that no longer exist.
    pub fn retain(&mut self, names: &std::collections::HashSet<String>) {
        self.seen.retain(|n, _| names.contains(n));
    }
}

/// The Leases of one replica in one host namespace.
#[derive(Clone)]
pub struct Leases {
    api: Api<Lease>,
    me: String,
    duration: Duration,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn kube_err(op: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { op, source }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 404)
}

impl Leases {
    /// Leases of replica `me` in `namespace`, each lasting `duration`.
    pub fn new(host: kube::Client, namespace: &str, me: &str, duration: Duration) -> Leases {
        Leases {
            api: Api::namespaced(host, namespace),
            me: me.to_string(),
            duration,
        }
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Writes this replica's membership Lease (created when missing).
    pub async fn renew_member(&self) -> Result<()> {
        let name = member_lease(&self.me);
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {KIND_LABEL: "replica"}},
            "spec": {
                "holderIdentity": self.me,
                "leaseDurationSeconds": self.seconds(),
                "renewTime": now(),
            },
        });
        self.api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await
            .map_err(kube_err("renewal of the membership"))?;
        Ok(())
    }

    /// Deletes this replica's membership Lease (a clean stop).
    pub async fn leave(&self) -> Result<()> {
        match self
            .api
            .delete(&member_lease(&self.me), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(kube_err("deletion of the membership")(e)),
        }
    }

    /// Every Lease of this module in the namespace.
    pub async fn list(&self) -> Result<Vec<Lease>> {
        Ok(self
            .api
            .list(&ListParams::default().labels(KIND_LABEL))
            .await
            .map_err(kube_err("list"))?
            .items)
    }

    /// Takes shard `shard`: creates its Lease, or replaces `current` (compare-and-swap).
    /// Returns false when another replica won the race.
    pub async fn acquire(&self, shard: u32, current: Option<&Lease>) -> Result<bool> {
        let stamp = now();
        match current {
            None => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(shard_lease(shard)),
                        labels: Some([(KIND_LABEL.to_string(), "shard".to_string())].into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.me.clone()),
                        lease_duration_seconds: Some(self.seconds()),
                        acquire_time: Some(stamp.clone()),
                        renew_time: Some(stamp),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_conflict(&e) => Ok(false),
                    Err(e) => Err(kube_err("creation of a shard")(e)),
                }
            }
            Some(old) => {
                let mut lease = old.clone();
                let spec = lease.spec.get_or_insert_with(Default::default);
                spec.holder_identity = Some(self.me.clone());
                spec.lease_duration_seconds = Some(self.seconds());
                spec.acquire_time = Some(stamp.clone());
                spec.renew_time = Some(stamp);
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                self.replace(lease, "acquisition of a shard").await
            }
        }
    }

    /// Renews a shard Lease this replica holds; false when it was lost meanwhile.
    pub async fn renew(&self, current: &Lease) -> Result<bool> {
        if holder(current) != Some(self.me.as_str()) {
            return Ok(false);
        }
        let mut lease = current.clone();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(self.seconds());
        self.replace(lease, "renewal of a shard").await
    }

    /// Gives a shard Lease up (empty holder) so that its next owner need not wait for expiry.
    pub async fn release(&self, current: &Lease) -> Result<bool> {
        if holder(current) != Some(self.me.as_str()) {
            return Ok(false);
        }
        let mut lease = current.clone();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.renew_time = Some(now());
        self.replace(lease, "release of a shard").await
    }

    async fn replace(&self, lease: Lease, op: &'static str) -> Result<bool> {
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(kube_err(op)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, seconds: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: seconds,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(shard_of_lease(&shard_lease(7)), Some(7));
        assert_eq!(shard_of_lease(&member_lease("r0")), None);
        assert_eq!(shard_of_lease("fabrik-shard-x"), None);
    }

    #[test]
    fn empty_holders_are_released() {
        assert_eq!(holder(&lease(Some("r0"), None)), Some("r0"));
        assert_eq!(holder(&lease(Some(""), None)), None);
        assert_eq!(holder(&lease(None, None)), None);
    }

    #[test]
    fn expiry_is_measured_from_the_last_change_seen_here() {
        let mut o = Observer::default();
        let t0 = Instant::now();
        let l = lease(Some("r1"), Some(5));
        assert_eq!(o.observe("a", "1", t0), Duration::ZERO);
        let later = t0 + Duration::from_secs(4);
        let unchanged = o.observe("a", "1", later);
        assert_eq!(unchanged, Duration::from_secs(4));
        assert!(!Observer::expired(&l, unchanged, Duration::from_secs(1)));
        let unchanged = o.observe("a", "1", t0 + Duration::from_secs(5));
        assert!(Observer::expired(&l, unchanged, Duration::from_secs(1)));
        // A renewal (new version) starts the clock again.
        assert_eq!(
            o.observe("a", "2", t0 + Duration::from_secs(6)),
            Duration::ZERO
        );
        // Without a duration in the Lease, the default applies.
        assert!(Observer::expired(
            &lease(Some("r1"), None),
            Duration::from_secs(2),
            Duration::from_secs(1)
        ));
    }
}
