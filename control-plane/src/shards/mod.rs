//! Sharding tenants across `fabrik serve` replicas that share one etcd store.
//!
//! Tenants map to [`SHARDS`] shards by a hash of their UID; shards map to the live replicas by
//! a consistent-hash [`ring`]. Two kinds of `coordination.k8s.io/v1` [`lease`]s on the host, in
//! one namespace, make it safe:
//!
//! * **membership** — `fabrik-replica-<id>`, renewed by each replica every tick. A replica is
//!   live while its Lease keeps changing; the ring is built over the live ones.
//! * **leadership** — `fabrik-shard-<i>`, held by the one replica running shard `i`. The
//!   replica the ring names takes a shard's Lease only when it is free (released) or expired
//!   (unchanged for its duration, as seen locally); the holder renews it every tick, and hands
//!   it over when the ring names someone else: it stops running the shard's tenants, waits
//!   [`HANDOVER_GRACE`], then releases the Lease. A holder that cannot renew for most of the
//!   duration stops running the shard before anyone may take it.
//!
//! A replica runs the tenant manager's reconciliation, the tenant's controllers and syncer
//! only for the shards whose Lease it holds ([`Shards::owns`]); every other tenant is served
//! from the shared store without them ([`follower`]), so a tenant's kubeconfig works through
//! any replica. When a replica dies, its shard Leases expire after the lease duration and the
//! ring's next choices take them: failover takes about one lease duration plus one tick.
//!
//! The pure decision of one tick is [`plan`]; [`Shards::run`] does the I/O around it.

pub mod follower;
pub mod lease;
pub mod ring;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabrik_api::tenant::Tenant;
use fabrik_apiserver::admission::Admission;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::Settings;
use futures::Stream;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use tokio::sync::{watch, Mutex};

use crate::keyspaces::Keyspaces;
use lease::{holder, Leases, Observer};
use ring::Ring;

/// Number of shards. Every replica must agree on it, so it is fixed: enough to spread tenants
/// over a few tens of replicas, few enough that renewing the Leases stays cheap.
pub const SHARDS: u32 = 16;
/// How long a holder keeps a shard it is handing over, after it stopped running its tenants,
/// before releasing the Lease (the new owner then starts them).
pub const HANDOVER_GRACE: Duration = Duration::from_secs(2);
/// The host Secret holding a tenant's CA (written by the tenant manager).
const CA_SECRET: &str = "fabrik-tenant-ca";

/// Errors of sharding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Lease call failed.
    #[error(transparent)]
    Lease(#[from] lease::Error),
    /// Following a tenant failed.
    #[error(transparent)]
    Follower(#[from] follower::Error),
    /// Reading the tenant's CA Secret failed.
    #[error("cannot read the CA of tenant {tenant}: {source}")]
    Ca {
        /// The tenant.
        tenant: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The tenant's CA Secret is malformed.
    #[error("the CA Secret of tenant {0} is malformed")]
    BadCa(String),
    /// Opening the tenant's keyspace failed.
    #[error("tenant {tenant}: store: {source}")]
    Store {
        /// The tenant.
        tenant: String,
        /// The cause.
        #[source]
        source: fabrik_store::StoreError,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How this replica takes part.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Host namespace of the Leases.
    pub namespace: String,
    /// This replica's id (unique among replicas; the pod name in a Deployment).
    pub replica: String,
    /// Lease duration: a dead replica's shards move after about this long.
    pub lease_duration: Duration,
}

impl ShardConfig {
    /// How often Leases are renewed: a fifth of their duration, at least every 200 ms.
    pub fn tick(&self) -> Duration {
        (self.lease_duration / 5).max(Duration::from_millis(200))
    }
}

/// The shard of a tenant: a hash of its UID (its name when it has none yet).
pub fn shard_of(tenant: &Tenant) -> u32 {
    let key = tenant
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| tenant.name_any());
    u32::try_from(ring::hash64(&key) % u64::from(SHARDS)).unwrap_or(0)
}

/// What one tick saw of a shard's Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSeen {
    /// Its holder (None: released, or no Lease yet).
    pub holder: Option<String>,
    /// Whether it expired (unchanged for its duration as seen here).
    pub expired: bool,
}

/// What to do about one shard this tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Take the Lease (free or expired, and the ring names this replica).
    Acquire,
    /// Renew the Lease this replica holds.
    Renew,
    /// The ring names another replica: stop running the shard, keep renewing for the grace.
    StartHandover,
    /// The grace is over: release the Lease.
    Release,
}

/// The pure decision of one tick: for each shard, given who the ring wants (`desired`), what
/// the Lease shows (`seen`, absent = no Lease) and since when this replica has been handing
/// it over, what to do.
pub fn plan(
    me: &str,
    desired: &BTreeMap<u32, String>,
    seen: &BTreeMap<u32, ShardSeen>,
    handing_over: &BTreeMap<u32, Instant>,
    now: Instant,
) -> BTreeMap<u32, Step> {
    let mut steps = BTreeMap::new();
    for shard in 0..SHARDS {
        let want = desired.get(&shard).map(String::as_str) == Some(me);
        let lease = seen.get(&shard);
        let held = lease.and_then(|l| l.holder.as_deref()) == Some(me);
        let step = match (held, want) {
            (true, true) => Some(Step::Renew),
            (true, false) => match handing_over.get(&shard) {
                Some(since) if now.saturating_duration_since(*since) >= HANDOVER_GRACE => {
                    Some(Step::Release)
                }
                Some(_) => Some(Step::Renew),
                None => Some(Step::StartHandover),
            },
            (false, true) => match lease {
                None => Some(Step::Acquire),
                Some(l) if l.holder.is_none() || l.expired => Some(Step::Acquire),
                Some(_) => None,
            },
            (false, false) => None,
        };
        if let Some(step) = step {
            steps.insert(shard, step);
        }
    }
    steps
}

/// The state of the lease loop between ticks.
#[derive(Default)]
struct LoopState {
    observer: Observer,
    /// Shards held, with the time of their last successful renewal.
    held: BTreeMap<u32, Instant>,
    handing_over: BTreeMap<u32, Instant>,
}

/// This replica's part in sharding: which shards it runs, and the tenants it follows.
pub struct Shards {
    config: ShardConfig,
    owned: watch::Sender<BTreeSet<u32>>,
    followers: follower::Followers,
    announced: Mutex<HashSet<String>>,
}

impl Shards {
    /// A replica that owns nothing yet; [`Shards::run`] takes its shards.
    pub fn new(config: ShardConfig) -> Arc<Shards> {
        Arc::new(Shards {
            config,
            owned: watch::channel(BTreeSet::new()).0,
            followers: follower::Followers::default(),
            announced: Mutex::new(HashSet::new()),
        })
    }

    /// Whether this replica runs `tenant` (holds the Lease of its shard).
    pub fn owns(&self, tenant: &Tenant) -> bool {
        self.owned.borrow().contains(&shard_of(tenant))
    }

    /// Whether this replica holds the Lease of `shard`.
    pub fn owns_shard(&self, shard: u32) -> bool {
        self.owned.borrow().contains(&shard)
    }

    /// Yields whenever the set of owned shards changes (to reconcile every tenant again).
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let rx = self.owned.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }

    /// Called before this replica runs `tenant` as its owner: says so once per takeover (the
    /// follower keeps serving until the owner's server is routed, see
    /// [`Shards::stop_following`]).
    pub async fn run_here(&self, tenant: &Tenant) {
        let name = tenant.name_any();
        if self.announced.lock().await.insert(name.clone()) {
            eprintln!(
                "fabrik: tenant {name} (shard {}) runs on this replica ({})",
                shard_of(tenant),
                self.config.replica
            );
        }
    }

    /// Stops following `tenant` once this replica runs it: called after the owner's server is
    /// routed, so that requests never find the tenant unserved in between.
    pub async fn stop_following(&self, tenant: &str, router: &Router) {
        self.followers.unfollow(tenant, router).await;
    }

    /// Serves `tenant`, owned by another replica, from the shared store (see [`follower`]).
    /// Deleted tenants stop being served; a tenant whose CA is not written yet is retried.
    #[allow(clippy::too_many_arguments)]
    pub async fn follow(
        &self,
        tenant: &Tenant,
        host: &kube::Client,
        router: &Router,
        keyspaces: &Keyspaces,
        keyspace: &str,
        settings: &Settings,
        public_url: &str,
        admission: Vec<Arc<dyn Admission>>,
    ) -> Result<Action> {
        let name = tenant.name_any();
        self.announced.lock().await.remove(&name);
        if tenant.metadata.deletion_timestamp.is_some() {
            self.followers.unfollow(&name, router).await;
            return Ok(Action::await_change());
        }
        if self.followers.contains(&name).await {
            return Ok(Action::requeue(Duration::from_secs(600)));
        }
        let Some((ca_pem, sa_key, ca)) = tenant_ca(host, &name).await? else {
            // The owner has not set the tenant up yet.
            return Ok(Action::requeue(Duration::from_secs(1)));
        };
        let store = keyspaces
            .open(keyspace)
            .await
            .map_err(|source| Error::Store {
                tenant: name.clone(),
                source,
            })?;
        let endpoint = format!("{public_url}/clusters/{name}");
        let mut settings = settings.clone();
        settings.server_address = endpoint.clone();
        settings.auth.service_account_key = Some(sa_key);
        settings.auth.service_account_issuer = endpoint;
        settings.auth.client_ca_pem = Some(ca_pem);
        self.followers
            .follow(&name, router, store, settings, admission, ca.as_ref())
            .await?;
        Ok(Action::requeue(Duration::from_secs(600)))
    }

    /// Runs the lease loop until `shutdown` resolves (see the module docs). It keeps going
    /// through host errors: a shard whose Lease cannot be renewed stops being run in time.
    pub async fn run(
        self: Arc<Self>,
        host: kube::Client,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let leases = self.leases(host);
        let mut state = LoopState::default();
        let mut tick = tokio::time::interval(self.config.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let mut last_error = String::new();
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            match self.step(&leases, &mut state).await {
                Ok(()) => last_error.clear(),
                Err(e) => {
                    let text = e.to_string();
                    if text != last_error {
                        tracing::warn!(error = %text, "shard leases: tick failed; retrying");
                        last_error = text;
                    }
                }
            }
            // Stop running what could not be renewed for most of the lease duration.
            let limit = self.config.lease_duration.mul_f32(0.8);
            let now = Instant::now();
            state
                .held
                .retain(|_, renewed| now.saturating_duration_since(*renewed) < limit);
            self.publish(&state);
        }
    }

    /// Leaves cleanly after the tenants stopped: stops the followers, releases the shard
    /// Leases and deletes the membership Lease, so that others take over at once.
    pub async fn leave(&self, host: kube::Client) {
        self.followers.shutdown().await;
        self.owned.send_replace(BTreeSet::new());
        let leases = self.leases(host);
        if let Ok(all) = leases.list().await {
            for l in all
                .iter()
                .filter(|l| holder(l) == Some(self.config.replica.as_str()))
            {
                if lease::shard_of_lease(&l.name_any()).is_some() {
                    let _ = leases.release(l).await;
                }
            }
        }
        if let Err(e) = leases.leave().await {
            tracing::warn!(error = %e, "cannot delete the membership Lease");
        }
    }

    fn leases(&self, host: kube::Client) -> Leases {
        Leases::new(
            host,
            &self.config.namespace,
            &self.config.replica,
            self.config.lease_duration,
        )
    }

    fn publish(&self, state: &LoopState) {
        let owned: BTreeSet<u32> = state
            .held
            .keys()
            .filter(|s| !state.handing_over.contains_key(s))
            .copied()
            .collect();
        self.owned.send_if_modified(|current| {
            if *current == owned {
                return false;
            }
            eprintln!(
                "fabrik: replica {} runs shards {:?}",
                self.config.replica, owned
            );
            *current = owned;
            true
        });
    }

    /// One tick: renew membership, read every Lease, act on [`plan`].
    async fn step(&self, leases: &Leases, state: &mut LoopState) -> Result<()> {
        let me = self.config.replica.as_str();
        leases.renew_member().await?;
        let all = leases.list().await?;
        let now = Instant::now();
        let names: HashSet<String> = all.iter().map(ResourceExt::name_any).collect();
        state.observer.retain(&names);
        let mut members: BTreeSet<String> = BTreeSet::from([me.to_string()]);
        let mut seen = BTreeMap::new();
        let mut current = BTreeMap::new();
        for l in &all {
            let name = l.name_any();
            let version = l.resource_version().unwrap_or_default();
            let unchanged = state.observer.observe(&name, &version, now);
            let expired = Observer::expired(l, unchanged, self.config.lease_duration);
            if let Some(shard) = lease::shard_of_lease(&name) {
                seen.insert(
                    shard,
                    ShardSeen {
                        holder: holder(l).map(str::to_string),
                        expired,
                    },
                );
                current.insert(shard, l);
            } else if let Some(h) = holder(l).filter(|_| !expired) {
                members.insert(h.to_string());
            }
        }
        let ring = Ring::new(&members);
        let desired: BTreeMap<u32, String> = (0..SHARDS)
            .filter_map(|s| Some((s, ring.owner(&format!("shard-{s}"))?.to_string())))
            .collect();
        // Shards not held any more (taken after an expiry) are not run.
        state
            .held
            .retain(|s, _| seen.get(s).and_then(|l| l.holder.as_deref()) == Some(me));
        state.handing_over.retain(|s, _| state.held.contains_key(s));
        for (shard, step) in plan(me, &desired, &seen, &state.handing_over, now) {
            let lease = current.get(&shard).copied();
            match step {
                Step::Acquire => {
                    if leases.acquire(shard, lease).await? {
                        state.held.insert(shard, Instant::now());
                    }
                }
                Step::Renew | Step::StartHandover => {
                    let renewed = match lease {
                        Some(l) => leases.renew(l).await?,
                        None => false,
                    };
                    if renewed {
                        state.held.insert(shard, Instant::now());
                    } else {
                        state.held.remove(&shard);
                    }
                    if step == Step::StartHandover {
                        state.handing_over.insert(shard, now);
                    } else if desired.get(&shard).map(String::as_str) == Some(me) {
                        state.handing_over.remove(&shard);
                    }
                }
                Step::Release => {
                    state.held.remove(&shard);
                    state.handing_over.remove(&shard);
                    if let Some(l) = lease {
                        leases.release(l).await?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The tenant's CA certificate and service-account key from its host Secret, once the owner
/// wrote them.
async fn tenant_ca(
    host: &kube::Client,
    tenant: &str,
) -> Result<
    Option<(
        String,
        Arc<fabrik_apiserver::auth::SigningKey>,
        Option<fabrik_apiserver::pki::Ca>,
    )>,
> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(host.clone(), &fabrik_api::tenant::host_namespace(tenant));
    let secret = secrets
        .get_opt(CA_SECRET)
        .await
        .map_err(|source| Error::Ca {
            tenant: tenant.to_string(),
            source,
        })?;
    let Some(secret) = secret else {
        return Ok(None);
    };
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
    };
    let (Some(cert), Some(key)) = (text("ca.crt"), text("sa.key")) else {
        return Ok(None);
    };
    let key = fabrik_apiserver::auth::SigningKey::from_pem(&key)
        .map_err(|_| Error::BadCa(tenant.to_string()))?;
    // The CA's key lets this replica issue its own front-proxy certificate (API aggregation).
    let ca = match text("ca.key") {
        Some(ca_key) => Some(
            fabrik_apiserver::pki::Ca::from_pem(&cert, &ca_key)
                .map_err(|_| Error::BadCa(tenant.to_string()))?,
        ),
        None => None,
    };
    Ok(Some((cert, Arc::new(key), ca)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(owner: &str) -> BTreeMap<u32, String> {
        (0..SHARDS).map(|s| (s, owner.to_string())).collect()
    }

    fn seen(holder: Option<&str>, expired: bool) -> BTreeMap<u32, ShardSeen> {
        (0..SHARDS)
            .map(|s| {
                (
                    s,
                    ShardSeen {
                        holder: holder.map(str::to_string),
                        expired,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn free_missing_and_expired_shards_are_taken_by_the_ring_choice_only() {
        let now = Instant::now();
        let none = BTreeMap::new();
        let steps = plan("r0", &desired("r0"), &BTreeMap::new(), &none, now);
        assert!(steps.values().all(|s| *s == Step::Acquire));
        assert_eq!(steps.len(), SHARDS as usize);
        let steps = plan("r0", &desired("r0"), &seen(None, false), &none, now);
        assert!(steps.values().all(|s| *s == Step::Acquire));
        let steps = plan("r0", &desired("r0"), &seen(Some("r1"), true), &none, now);
        assert!(steps.values().all(|s| *s == Step::Acquire));
        // A live holder keeps it, even against the ring.
        assert!(plan("r0", &desired("r0"), &seen(Some("r1"), false), &none, now).is_empty());
        // Not ours to take.
        assert!(plan("r0", &desired("r1"), &seen(None, false), &none, now).is_empty());
    }

    #[test]
    fn holders_renew_and_hand_over_after_a_grace() {
        let t0 = Instant::now();
        let held = seen(Some("r0"), false);
        let steps = plan("r0", &desired("r0"), &held, &BTreeMap::new(), t0);
        assert!(steps.values().all(|s| *s == Step::Renew));
        let steps = plan("r0", &desired("r1"), &held, &BTreeMap::new(), t0);
        assert!(steps.values().all(|s| *s == Step::StartHandover));
        let handing: BTreeMap<u32, Instant> = (0..SHARDS).map(|s| (s, t0)).collect();
        let steps = plan(
            "r0",
            &desired("r1"),
            &held,
            &handing,
            t0 + Duration::from_secs(1),
        );
        assert!(steps.values().all(|s| *s == Step::Renew));
        let steps = plan("r0", &desired("r1"), &held, &handing, t0 + HANDOVER_GRACE);
        assert!(steps.values().all(|s| *s == Step::Release));
        // The ring names us again during the grace: keep it.
        let steps = plan("r0", &desired("r0"), &held, &handing, t0 + HANDOVER_GRACE);
        assert!(steps.values().all(|s| *s == Step::Renew));
    }

    #[test]
    fn tenants_map_to_shards_by_uid() {
        let mut a = Tenant::new("a", Default::default());
        a.metadata.uid = Some("0f6c1b2e-1111-4c4c-9d9d-000000000001".into());
        let mut b = a.clone();
        b.metadata.name = Some("b".into());
        assert_eq!(shard_of(&a), shard_of(&b), "the UID decides, not the name");
        assert!(shard_of(&a) < SHARDS);
        let spread: BTreeSet<u32> = (0..200)
            .map(|i| {
                let mut t = Tenant::new("t", Default::default());
                t.metadata.uid = Some(format!("uid-{i}"));
                shard_of(&t)
            })
            .collect();
        assert_eq!(spread.len(), SHARDS as usize);
    }
}
