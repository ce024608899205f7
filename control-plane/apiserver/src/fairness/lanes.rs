//! Lanes: where a tenant's heavy requests run. Work whose cost grows with the data it touches
//! (a list encoded, a large body decoded, validated and stored) runs to its end once started —
//! an async worker that polls it serves nothing else meanwhile, so a few such requests of one
//! tenant hold every worker and every other tenant's small requests wait behind them (on two
//! cores, two 900 KiB writes are enough). A heavy request therefore runs on a runtime of its
//! own (one thread per core, made once per process), whose threads the kernel shares with the
//! listener's workers, so small requests keep being served; and a tenant runs at most its
//! lanes' worth of them at once (half the cores), so its heavy work never takes every core of
//! that runtime either. A request waits for a lane as for a seat: up to the queue wait, then
//! 429. A heavy request whose client goes away still finishes, in its lane (it may be half-way
//! through a write).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

/// The runtime heavy requests run on: made at first use, never shut down (a heavy request in
/// flight when the process stops must not hold its exit).
fn heavy_runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    RUNTIME
        .get_or_init(|| runtime("fabrik-heavy", cores))
        .as_ref()
}

/// The runtime new connections' TLS handshakes run on (half the cores), apart from heavy
/// requests: a flood of connections delays new connections only.
fn handshake_runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| runtime("fabrik-handshake", default_lanes()))
        .as_ref()
}

fn runtime(name: &str, threads: usize) -> Option<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(
            |e| tracing::warn!(error = %e, name, "no runtime of its own; the work runs in place"),
        )
        .ok()
}

/// The default number of lanes per tenant: half the cores, at least one.
pub fn default_lanes() -> usize {
    (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1)
}

/// Runs `work`, a new connection's TLS handshake, on the handshake runtime (in place when
/// there is none): CPU-bound work that no tenant's seat or lane bounds, since the tenant is
/// known only once the certificate or token is read. `None` when `work` panicked.
pub async fn off_listener<F>(work: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match handshake_runtime() {
        Some(runtime) => runtime.spawn(work).await.ok(),
        None => Some(work.await),
    }
}

/// Every tenant's lanes on one listener.
pub(super) struct Lanes {
    per_tenant: usize,
    /// Tenants with heavy work running or waiting; a tenant's entry goes once it has none.
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Why a heavy request was not run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NoLane {
    /// None of the tenant's lanes freed up within the wait.
    Busy,
    /// The request panicked (its task ended without an answer).
    Failed,
}

impl Lanes {
    pub(super) fn new(per_tenant: usize) -> Lanes {
        Lanes {
            per_tenant: per_tenant.max(1),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn lane(&self, tenant: &str) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone()
    }

    fn forget_if_idle(&self, tenant: &str) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map holds it, and every permit is back: nothing runs or waits.
        if tenants
            .get(tenant)
            .is_some_and(|s| Arc::strong_count(s) == 1 && s.available_permits() == self.per_tenant)
        {
            tenants.remove(tenant);
        }
    }

    /// Tenants with heavy work running or waiting (for tests).
    #[cfg(test)]
    pub(super) fn busy(&self) -> usize {
        self.tenants.lock().map(|t| t.len()).unwrap_or_default()
    }

    /// Runs `work` in one of `tenant`'s lanes, on the heavy runtime, as serving `tenant`
    /// (see [`super::current_tenant`]). Waits at most `wait` for a lane.
    pub(super) async fn run<F>(
        self: &Arc<Self>,
        tenant: &str,
        wait: Duration,
        work: F,
    ) -> Result<F::Output, NoLane>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let lane = self.lane(tenant);
        let permit = tokio::time::timeout(wait, lane.clone().acquire_owned()).await;
        drop(lane);
        let Ok(Ok(permit)) = permit else {
            self.forget_if_idle(tenant);
            return Err(NoLane::Busy);
        };
        let Some(runtime) = heavy_runtime() else {
            let out = work.await;
            drop(permit);
            self.forget_if_idle(tenant);
            return Ok(out);
        };
        // The lane is given back when the work ends, even if the caller stopped waiting.
        let (lanes, name) = (self.clone(), tenant.to_string());
        let task = runtime.spawn(super::serving(name.clone(), async move {
            let out = work.await;
            drop(permit);
            lanes.forget_if_idle(&name);
            out
        }));
        task.await.map_err(|_| NoLane::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_runs_at_most_its_lanes_and_others_are_not_held() {
        let lanes = Arc::new(Lanes::new(1));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut heavy = Vec::new();
        for _ in 0..3 {
            let (lanes, running, most) = (lanes.clone(), running.clone(), most.clone());
            heavy.push(tokio::spawn(async move {
                lanes
                    .run("a", Duration::from_secs(5), async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        // CPU-bound: nothing to await, as a large encode.
                        std::thread::sleep(Duration::from_millis(100));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        // While a's heavy work blocks its lane's thread, small work on the workers goes on.
        let started = std::time::Instant::now();
        for _ in 0..10 {
            tokio::spawn(async {}).await.ok();
        }
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "{:?}",
            started.elapsed()
        );
        // Another tenant's lane is its own.
        let b = lanes.run("b", Duration::from_millis(50), async { 7 }).await;
        assert_eq!(b, Ok(7));
        for h in heavy {
            assert_eq!(h.await.ok(), Some(Ok(())));
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "one lane: one at a time");
        assert_eq!(lanes.busy(), 0, "idle tenants are forgotten");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_lane_within_the_wait_is_refused() {
        let lanes = Arc::new(Lanes::new(1));
        let l2 = lanes.clone();
        let held = tokio::spawn(async move {
            l2.run("a", Duration::from_secs(1), async {
                std::thread::sleep(Duration::from_millis(300));
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = lanes.run("a", Duration::from_millis(20), async {}).await;
        assert_eq!(refused, Err(NoLane::Busy));
        assert_eq!(held.await.ok(), Some(Ok(())));
        assert_eq!(lanes.busy(), 0);
    }
}
