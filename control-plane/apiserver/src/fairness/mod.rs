//! Per-tenant API fairness, in the spirit of upstream's API Priority and Fairness: the tenants
//! behind one listener share a pool of *seats* (requests being served at once); each tenant
//! may hold at most its share of them, and each user within a tenant at most a share of the
//! tenant's. A request that finds no seat waits in its tenant's bounded queue; seats freed are
//! handed round-robin over the tenants with waiting requests (so a tenant with a thousand
//! queued requests gets no more turns than one with a single request). A request whose queue
//! is full, or that waited longer than the queue wait, is answered 429 with `Retry-After`.
//!
//! A seat is held for the request's handling only. A watch keeps it until it has written every
//! event it had at once — its initial list, encoded and handed to the connection — and gives
//! it back when it first has to wait for a change ([`hold_until_idle`]), as upstream's watch
//! initialization does; a client that does not read keeps its own tenant's seat, no other's. A
//! log follow, exec, attach or port-forward gives its seat back once its response starts. Requests to the host cluster and of in-process callers (the controllers,
//! the syncer) take no seat: tenants cannot starve the platform.
//!
//! A seat bounds how many of a tenant's requests are handled at once, not where: a heavy one
//! (a collection read, a large body) also takes one of the tenant's [`lanes`] and runs off the
//! async workers, so that it cannot hold the workers every other tenant's requests need.

mod lanes;

pub use lanes::off_listener;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::oneshot;

use crate::error::ApiError;

tokio::task_local! {
    static TENANT: String;
}

/// The tenant whose request the current task serves (set by the tenant's API server), for
/// per-tenant bounds deeper in the pipeline (CEL evaluation).
pub fn current_tenant() -> Option<String> {
    TENANT.try_with(Clone::clone).ok()
}

/// Runs `f` as serving `tenant` (see [`current_tenant`]).
pub async fn serving<F: std::future::Future>(tenant: String, f: F) -> F::Output {
    TENANT.scope(tenant, f).await
}

/// How many seats, how they are shared, how long requests may wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FairnessSettings {
    /// Seats shared by all tenants.
    pub seats: usize,
    /// The most seats one tenant holds at once.
    pub tenant_seats: usize,
    /// The most seats one user of a tenant holds at once.
    pub user_seats: usize,
    /// The most requests of one tenant waiting for a seat; more are refused at once.
    pub queue_length: usize,
    /// The longest a request waits for a seat (or a lane) before it is refused.
    pub queue_wait: Duration,
    /// How many heavy requests of one tenant run at once, each on a thread of its own
    /// ([`lanes`]).
    pub tenant_lanes: usize,
}

impl Default for FairnessSettings {
    /// Sized from the machine: 16 seats per core in all (at least 32), a quarter of them per
    /// tenant, half of a tenant's per user.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let seats = (16 * cores).max(32);
        let tenant_seats = (seats / 4).max(4);
        FairnessSettings {
            seats,
            tenant_seats,
            user_seats: (tenant_seats / 2).max(2),
            queue_length: 64,
            queue_wait: Duration::from_secs(10),
            tenant_lanes: lanes::default_lanes(),
        }
    }
}

struct Waiter {
    id: u64,
    user: String,
    tx: oneshot::Sender<Seat>,
}

#[derive(Default)]
struct Flow {
    in_use: usize,
    users: HashMap<String, usize>,
    waiting: VecDeque<Waiter>,
}

#[derive(Default)]
struct State {
    free: usize,
    next_id: u64,
    flows: HashMap<String, Flow>,
    /// Tenants with waiting requests, in the order they get their next turn.
    turns: VecDeque<String>,
}

/// The shared seats of one listener's tenants.
pub struct Fairness {
    settings: FairnessSettings,
    state: Mutex<State>,
    lanes: Arc<lanes::Lanes>,
}

/// A seat: given back when dropped.
pub struct Seat {
    fairness: Arc<Fairness>,
    tenant: String,
    user: String,
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat")
            .field("tenant", &self.tenant)
            .field("user", &self.user)
            .finish()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.fairness.release(&self.tenant, &self.user);
    }
}

/// `events` holding `seat` until the stream first has nothing ready (or ends): the events it
/// yields at once — a watch's initial list — are produced, and encoded by whoever maps them,
/// under the seat.
pub fn hold_until_idle<T: Send + 'static>(
    events: BoxStream<'static, T>,
    seat: Option<Seat>,
) -> BoxStream<'static, T> {
    let Some(seat) = seat else {
        return events;
    };
    let mut events = events;
    let mut seat = Some(seat);
    futures::stream::poll_fn(move |cx| {
        let polled = events.poll_next_unpin(cx);
        if !matches!(polled, std::task::Poll::Ready(Some(_))) {
            // Nothing ready: the seat goes back to the pool (dropping it releases it).
            drop(seat.take());
        }
        polled
    })
    .boxed()
}

/// Counts of a tenant's seats (for tests and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Seats held.
    pub in_use: usize,
    /// Requests waiting.
    pub waiting: usize,
}

/// Removes a waiter that stopped waiting (timed out, or its request was dropped).
struct Pending<'a> {
    fairness: &'a Arc<Fairness>,
    tenant: &'a str,
    id: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut state = self.fairness.lock();
        if let Some(flow) = state.flows.get_mut(self.tenant) {
            flow.waiting.retain(|w| w.id != self.id);
        }
        Fairness::forget_if_idle(&mut state, self.tenant);
    }
}

impl Fairness {
    /// Seats shared as `settings` says (shares are clamped to at least one seat).
    pub fn new(settings: FairnessSettings) -> Arc<Fairness> {
        let seats = settings.seats.max(1);
        let settings = FairnessSettings {
            seats,
            tenant_seats: settings.tenant_seats.clamp(1, seats),
            user_seats: settings.user_seats.clamp(1, seats),
            ..settings
        };
        Arc::new(Fairness {
            state: Mutex::new(State {
                free: seats,
                ..State::default()
            }),
            lanes: Arc::new(lanes::Lanes::new(settings.tenant_lanes)),
            settings,
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> &FairnessSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held leaves consistent counts (no step panics half-way).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seats held and requests waiting for `tenant`.
    pub fn stats(&self, tenant: &str) -> FlowStats {
        let state = self.lock();
        state
            .flows
            .get(tenant)
            .map(|f| FlowStats {
                in_use: f.in_use,
                waiting: f.waiting.len(),
            })
            .unwrap_or_default()
    }

    fn fits(&self, state: &State, flow: &Flow, user: &str) -> bool {
        state.free > 0
            && flow.in_use < self.settings.tenant_seats
            && flow.users.get(user).copied().unwrap_or(0) < self.settings.user_seats
    }

    fn take(self: &Arc<Self>, state: &mut State, tenant: &str, user: &str) -> Seat {
        state.free = state.free.saturating_sub(1);
        let flow = state.flows.entry(tenant.to_string()).or_default();
        flow.in_use += 1;
        *flow.users.entry(user.to_string()).or_default() += 1;
        Seat {
            fairness: self.clone(),
            tenant: tenant.to_string(),
            user: user.to_string(),
        }
    }

    fn forget_if_idle(state: &mut State, tenant: &str) {
        if state
            .flows
            .get(tenant)
            .is_some_and(|f| f.in_use == 0 && f.waiting.is_empty())
        {
            state.flows.remove(tenant);
        }
        if state.flows.get(tenant).is_none_or(|f| f.waiting.is_empty()) {
            state.turns.retain(|t| t != tenant);
        }
    }

    fn throttled(&self, tenant: &str, why: &str) -> ApiError {
        ApiError::Throttled {
            message: format!(
                "too many requests from tenant {tenant:?}: {why}; please try again later"
            ),
            retry_after: 1,
        }
    }

    /// A seat for a request of `user` in `tenant`: at once if the tenant (and the user) are
    /// under their share and a seat is free, else after waiting in the tenant's queue.
    /// Refused with 429 when the queue is full or the wait runs out.
    pub async fn acquire(self: &Arc<Self>, tenant: &str, user: &str) -> Result<Seat, ApiError> {
        let (id, rx) = {
            let mut state = self.lock();
            let flow = state.flows.entry(tenant.to_string()).or_default();
            let queued = flow.waiting.len();
            if queued == 0 {
                let flow = state.flows.get(tenant);
                if flow.is_some_and(|f| self.fits(&state, f, user)) {
                    return Ok(self.take(&mut state, tenant, user));
                }
            }
            if queued >= self.settings.queue_length {
                return Err(self.throttled(tenant, "its queue is full"));
            }
            let id = state.next_id;
            state.next_id = state.next_id.wrapping_add(1);
            let (tx, rx) = oneshot::channel();
            let flow = state.flows.entry(tenant.to_string()).or_default();
            flow.waiting.push_back(Waiter {
                id,
                user: user.to_string(),
                tx,
            });
            if !state.turns.iter().any(|t| t == tenant) {
                state.turns.push_back(tenant.to_string());
            }
            (id, rx)
        };
        let pending = Pending {
            fairness: self,
            tenant,
            id,
        };
        let outcome = tokio::time::timeout(self.settings.queue_wait, rx).await;
        drop(pending);
        match outcome {
            Ok(Ok(seat)) => Ok(seat),
            Ok(Err(_)) => Err(self.throttled(tenant, "its request was dropped from the queue")),
            Err(_) => Err(self.throttled(
                tenant,
                &format!(
                    "no seat within {}s (the tenant uses its share of the server)",
                    self.settings.queue_wait.as_secs()
                ),
            )),
        }
    }

    /// Runs `work`, a heavy request of `tenant`, in one of the tenant's lanes (see [`lanes`]);
    /// 429 when none frees up within the queue wait.
    pub async fn off_workers<F>(&self, tenant: &str, work: F) -> Result<F::Output, ApiError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.lanes
            .run(tenant, self.settings.queue_wait, work)
            .await
            .map_err(|e| match e {
                lanes::NoLane::Busy => self.throttled(
                    tenant,
                    &format!(
                        "no lane for its heavy requests within {}s (at most {} at once)",
                        self.settings.queue_wait.as_secs(),
                        self.settings.tenant_lanes
                    ),
                ),
                lanes::NoLane::Failed => {
                    ApiError::Internal("the request failed while it was being handled".into())
                }
            })
    }

    /// Gives a seat back and hands free seats to waiting requests, one tenant per turn.
    fn release(self: &Arc<Self>, tenant: &str, user: &str) {
        let grants = {
            let mut state = self.lock();
            state.free = (state.free + 1).min(self.settings.seats);
            if let Some(flow) = state.flows.get_mut(tenant) {
                flow.in_use = flow.in_use.saturating_sub(1);
                if let Some(n) = flow.users.get_mut(user) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        flow.users.remove(user);
                    }
                }
            }
            let grants = self.dispatch(&mut state);
            Fairness::forget_if_idle(&mut state, tenant);
            grants
        };
        // Sent with the lock released: a seat whose waiter is gone is dropped here, which
        // releases it again (and needs the lock).
        for (tx, seat) in grants {
            let _ = tx.send(seat);
        }
    }

    fn dispatch(self: &Arc<Self>, state: &mut State) -> Vec<(oneshot::Sender<Seat>, Seat)> {
        let mut grants = Vec::new();
        let mut idle_turns = 0;
        while state.free > 0 && idle_turns < state.turns.len() {
            let Some(tenant) = state.turns.pop_front() else {
                break;
            };
            let pick = state.flows.get(&tenant).and_then(|flow| {
                if flow.in_use >= self.settings.tenant_seats {
                    return None;
                }
                flow.waiting.iter().position(|w| {
                    !w.tx.is_closed()
                        && flow.users.get(&w.user).copied().unwrap_or(0) < self.settings.user_seats
                })
            });
            let waiter = pick.and_then(|i| {
                state
                    .flows
                    .get_mut(&tenant)
                    .and_then(|f| f.waiting.remove(i))
            });
            match waiter {
                Some(w) => {
                    let seat = self.take(state, &tenant, &w.user);
                    grants.push((w.tx, seat));
                    idle_turns = 0;
                }
                None => idle_turns += 1,
            }
            if state
                .flows
                .get(&tenant)
                .is_some_and(|f| !f.waiting.is_empty())
            {
                state.turns.push_back(tenant);
            }
        }
        grants
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(seats: usize, tenant: usize, user: usize, queue: usize) -> FairnessSettings {
        FairnessSettings {
            seats,
            tenant_seats: tenant,
            user_seats: user,
            queue_length: queue,
            queue_wait: Duration::from_millis(200),
            tenant_lanes: 1,
        }
    }

    #[tokio::test]
    async fn a_tenant_over_its_share_waits_then_is_refused_while_another_is_served() {
        let f = Fairness::new(settings(4, 2, 2, 1));
        let a1 = f.acquire("a", "u").await;
        let a2 = f.acquire("a", "u").await;
        assert!(a1.is_ok() && a2.is_ok());
        // Tenant b still gets a seat at once.
        let b = f.acquire("b", "v").await;
        assert!(b.is_ok());
        // A third request of a queues; a fourth finds the queue full: 429 at once.
        let f2 = f.clone();
        let queued = tokio::spawn(async move { f2.acquire("a", "u").await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(f.stats("a").waiting, 1);
        let full = f.acquire("a", "u").await;
        match full {
            Err(e @ ApiError::Throttled { .. }) => {
                assert_eq!(e.code(), 429);
                assert_eq!(e.retry_after(), Some(1));
            }
            other => panic!("expected 429, got {other:?}"),
        }
        // The queued one times out (nobody gives a seat of a back).
        let timed_out = queued.await.ok();
        assert!(matches!(timed_out, Some(Err(ApiError::Throttled { .. }))));
        assert_eq!(f.stats("a").waiting, 0);
        drop((a1, a2, b));
        assert_eq!(f.stats("a"), FlowStats::default());
        assert_eq!(f.lock().free, 4);
    }

    #[tokio::test]
    async fn a_watch_keeps_its_seat_while_it_has_events_ready() {
        let f = Fairness::new(settings(4, 2, 2, 1));
        let seat = f.acquire("a", "u").await.ok();
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        for i in 0..3 {
            tx.unbounded_send(i).ok();
        }
        let mut events = hold_until_idle(rx.boxed(), seat);
        // The initial events come under the seat.
        for want in 0..3 {
            assert_eq!(events.next().await, Some(want));
            assert_eq!(f.stats("a").in_use, 1);
        }
        // Nothing more ready: the seat goes back while the watch waits for changes.
        let waiting = tokio::time::timeout(Duration::from_millis(20), events.next()).await;
        assert!(waiting.is_err());
        assert_eq!(f.stats("a").in_use, 0);
        tx.unbounded_send(9).ok();
        assert_eq!(events.next().await, Some(9));
        assert_eq!(f.lock().free, 4);
    }

    #[tokio::test]
    async fn a_freed_seat_goes_to_the_waiting_tenant_in_turn() {
        let f = Fairness::new(settings(2, 2, 2, 8));
        let a1 = f.acquire("a", "u").await.ok();
        let a2 = f.acquire("a", "u").await.ok();
        assert!(a1.is_some() && a2.is_some());
        // Two more of a queue first, then one of b.
        let mut waits = Vec::new();
        for t in ["a", "a", "b"] {
            let f2 = f.clone();
            waits.push(tokio::spawn(async move {
                f2.acquire(t, "u").await.map(|s| s.tenant.clone())
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // a gives one seat back: a's turn came first; the next one goes to b, not to a again.
        drop(a1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(a2);
        let got: Vec<_> = futures::future::join_all(waits).await;
        let served: Vec<String> = got
            .into_iter()
            .filter_map(|r| r.ok().and_then(|r| r.ok()))
            .collect();
        assert!(served.contains(&"b".to_string()), "{served:?}");
        assert_eq!(f.lock().free, 2);
    }

    #[tokio::test]
    async fn one_user_cannot_take_the_whole_tenant_share() {
        let f = Fairness::new(settings(8, 4, 1, 0));
        let u = f.acquire("a", "u").await;
        assert!(u.is_ok());
        assert!(matches!(
            f.acquire("a", "u").await,
            Err(ApiError::Throttled { .. })
        ));
        assert!(f.acquire("a", "other").await.is_ok());
    }

    #[tokio::test]
    async fn a_dropped_waiter_leaves_the_queue() {
        let f = Fairness::new(settings(1, 1, 1, 4));
        let held = f.acquire("a", "u").await;
        assert!(held.is_ok());
        let f2 = f.clone();
        let waiting = tokio::spawn(async move { f2.acquire("a", "u").await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(f.stats("a").waiting, 1);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(f.stats("a").waiting, 0);
        drop(held);
        assert_eq!(f.lock().free, 1);
    }
}
