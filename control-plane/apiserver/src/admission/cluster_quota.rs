//! A quota over a whole cluster rather than one namespace: a tenant's quota (pods, CPU and
//! memory requests, GPUs, node ports, load balancers) counts every namespace of the tenant's
//! cluster, so that `kubectl apply` fails at once with a message naming the quota instead of
//! leaving a host object refused or pending. What an object counts is
//! [`fabrik_machinery::quota`]'s (as for namespace quotas and the quota controller): a pod's
//! sidecars add to its app containers, a Service takes one node port per port. Creates are
//! charged their usage, updates of Services and claims their increase.
//!
//! Same bookkeeping as [`super::resource_quota`]: per kind, an upper bound of usage raised by
//! every admitted write, exact recount (with no write in flight) only when a write would not
//! fit. [`ClusterQuota::set_exact`] drops the bound (every write counts exactly), for a
//! replica whose store other replicas write too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use fabrik_machinery::quota::{self, describe, over, Usage};
use serde_json::Value;

use super::resource_quota::charge;
use super::{Admission, Request, Verdict};
use crate::error::ApiError;

/// The plugin.
pub struct ClusterQuota {
    /// What the quota is called in messages (e.g. `tenant "team-a"`).
    name: String,
    hard: RwLock<Usage>,
    /// Upper bounds of usage per kind (`plural.group`), with the limits they were counted for.
    bounds: Mutex<HashMap<String, Usage>>,
    lock: Arc<tokio::sync::RwLock<()>>,
    exact: AtomicBool,
}

impl ClusterQuota {
    /// A quota called `name` with `hard` limits (keys as in ResourceQuota: `pods`,
    /// `requests.cpu`, `requests.nvidia.com/gpu`, `services.nodeports`, ...).
    pub fn new(name: &str, hard: Usage) -> ClusterQuota {
        ClusterQuota {
            name: name.to_string(),
            hard: RwLock::new(hard),
            bounds: Mutex::new(HashMap::new()),
            lock: Arc::new(tokio::sync::RwLock::new(())),
            exact: AtomicBool::new(false),
        }
    }

    /// Changes the limits (the Tenant's spec changed).
    pub fn set_hard(&self, hard: Usage) {
        let changed = match self.hard.write() {
            Ok(mut h) => {
                let changed = *h != hard;
                *h = hard;
                changed
            }
            Err(_) => true,
        };
        // Bounds hold the resources of the old limits only.
        if changed {
            if let Ok(mut b) = self.bounds.lock() {
                b.clear();
            }
        }
    }

    /// The limits enforced.
    pub fn hard(&self) -> Usage {
        self.hard.read().map(|h| h.clone()).unwrap_or_default()
    }

    /// Counts exactly on every write (keeps no upper bound): set where other replicas write
    /// the same store, since their writes would not raise this replica's bound.
    pub fn set_exact(&self, exact: bool) {
        self.exact.store(exact, Ordering::Relaxed);
        if exact {
            if let Ok(mut b) = self.bounds.lock() {
                b.clear();
            }
        }
    }

    /// Whether every write is counted exactly.
    pub fn is_exact(&self) -> bool {
        self.exact.load(Ordering::Relaxed)
    }

    /// The name of the lock replicas take to count exactly: the quota's name, key-safe.
    fn lock_name(&self) -> String {
        let safe: String = self
            .name
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() {
                true => c.to_ascii_lowercase(),
                false => '-',
            })
            .collect();
        format!("clusterquota/{safe}")
    }

    /// Charges `requested` to `kind`'s bound if, with the bounds of the kinds in `sharing`
    /// (which count some of the same resources), it fits under `hard`; false if a bound is
    /// missing or too tight.
    fn try_charge(
        &self,
        kind: &str,
        sharing: &[String],
        requested: &Usage,
        hard: &Usage,
        dry_run: bool,
    ) -> bool {
        if self.is_exact() {
            return false;
        }
        let Ok(mut bounds) = self.bounds.lock() else {
            return false;
        };
        let mut total = Usage::new();
        for k in std::iter::once(kind).chain(sharing.iter().map(String::as_str)) {
            match bounds.get(k) {
                Some(b) => quota::add_all(&mut total, b),
                None => return false,
            }
        }
        if !over(&total, requested, hard).is_empty() {
            return false;
        }
        if !dry_run {
            if let Some(b) = bounds.get_mut(kind) {
                quota::add_all(b, requested);
            }
        }
        true
    }
}

/// The other kinds (`plural.group`) that count a resource of `requested` (see
/// [`quota::counted_by`]): GPUs are requested by pods and claimed by ResourceClaims.
fn sharing_kinds(kind: &str, requested: &Usage) -> Vec<(String, [&'static str; 3])> {
    let mut out: Vec<(String, [&'static str; 3])> = Vec::new();
    for key in requested.keys() {
        for (group, version, plural) in quota::counted_by(key) {
            let k = format!("{plural}.{group}");
            if k != kind && !out.iter().any(|(o, _)| *o == k) {
                out.push((k, [group, version, plural]));
            }
        }
    }
    out
}

#[async_trait::async_trait]
impl Admission for ClusterQuota {
    fn name(&self) -> &'static str {
        "ClusterQuota"
    }

    fn order(&self) -> super::Order {
        super::Order::Quota
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let hard = self.hard();
        let requested: Usage = charge(req, obj, old)
            .into_iter()
            .filter(|(k, _)| hard.contains_key(k))
            .collect();
        if requested.is_empty() {
            return Ok(Verdict::ok());
        }
        let kind = format!("{}.{}", req.def.plural, req.def.group);
        let sharing = sharing_kinds(&kind, &requested);
        let sharing_names: Vec<String> = sharing.iter().map(|(k, _)| k.clone()).collect();
        if !self.is_exact() {
            let read = self.lock.clone().read_owned().await;
            if self.try_charge(&kind, &sharing_names, &requested, &hard, req.dry_run) {
                return Ok(Verdict {
                    warnings: Vec::new(),
                    hold: Some(Box::new(read)),
                });
            }
        }
        let write = self.lock.clone().write_owned().await;
        // Exact: other replicas admit too; count and commit one at a time among them all.
        let shared = match self.is_exact() {
            true => Some(req.objects.exclusive(&self.lock_name()).await?),
            false => None,
        };
        let items = req.objects.list(req.def, None).await?;
        let used = quota::used(
            &Value::Null,
            &hard,
            items
                .iter()
                .map(|o| (req.def.group.as_str(), req.def.plural.as_str(), o)),
        );
        // What the kinds sharing a resource use, counted exactly too.
        let mut others = Usage::new();
        for (name, [group, version, plural]) in &sharing {
            let Some(def) = req.objects.resource(group, version, plural) else {
                continue;
            };
            let items = req.objects.list(&def, None).await?;
            let theirs = quota::used(
                &Value::Null,
                &hard,
                items.iter().map(|o| (*group, *plural, o)),
            );
            quota::add_all(&mut others, &theirs);
            if !self.is_exact() {
                if let Ok(mut b) = self.bounds.lock() {
                    b.insert(name.clone(), theirs);
                }
            }
        }
        let mut total = used.clone();
        quota::add_all(&mut total, &others);
        let exceeded = over(&total, &requested, &hard);
        if !self.is_exact() {
            if let Ok(mut b) = self.bounds.lock() {
                let mut bound = used;
                if exceeded.is_empty() && !req.dry_run {
                    quota::add_all(&mut bound, &requested);
                }
                b.insert(kind, bound);
            }
        }
        if !exceeded.is_empty() {
            return Err(ApiError::Forbidden(format!(
                "{} \"{}\" is forbidden: exceeded the quota of {}: {}",
                req.def.group_resource(),
                obj["metadata"]["name"].as_str().unwrap_or(""),
                self.name,
                describe(&exceeded),
            )));
        }
        Ok(Verdict {
            warnings: Vec::new(),
            hold: Some(Box::new((write.downgrade(), shared))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{ListParams, Part, Registry, WriteOptions};
    use crate::resources::{Catalog, ResourceDef};
    use fabrik_store::{SledBackend, SledConfig, Store};
    use serde_json::json;

    struct Fixture {
        _dir: tempfile::TempDir,
        backend: SledBackend,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("tempdir");
            let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
            Fixture { _dir: dir, backend }
        }

        /// A registry over the shared keyspace (one per replica), with a tenant quota.
        async fn replica(&self, hard: &[(&str, &str)], exact: bool) -> Registry {
            let store: Arc<dyn Store> = Arc::new(self.backend.keyspace("t").expect("keyspace"));
            let hard: Usage = hard
                .iter()
                .map(|(k, v)| (k.to_string(), v.parse().expect("quantity")))
                .collect();
            let quota = Arc::new(ClusterQuota::new("tenant \"t\"", hard));
            quota.set_exact(exact);
            let reg = Registry::new(store, Arc::new(Catalog::builtin()))
                .with_admission([quota as Arc<dyn crate::admission::Admission>]);
            crate::cluster::bootstrap(&reg).await.expect("bootstrap");
            reg
        }
    }

    fn def(reg: &Registry, plural: &str) -> Arc<ResourceDef> {
        reg.catalog().get("", "v1", plural).expect("served")
    }

    fn gpu(n: &str) -> Value {
        json!({"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}})
    }

    fn pod(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    }

    async fn create(reg: &Registry, plural: &str, obj: Value) -> Result<Value, ApiError> {
        reg.create(
            &def(reg, plural),
            Some("default"),
            obj,
            &WriteOptions::default(),
        )
        .await
        .map(|w| w.object)
    }

    #[tokio::test]
    async fn a_sidecar_s_gpu_counts_with_the_app_container_s() {
        let f = Fixture::new();
        let reg = f.replica(&[("requests.nvidia.com/gpu", "1")], false).await;
        let both = pod(
            "both",
            json!({
                "initContainers": [{"name": "s", "image": "x", "restartPolicy": "Always", "resources": gpu("1")}],
                "containers": [{"name": "m", "image": "x", "resources": gpu("1")}],
            }),
        );
        let err = create(&reg, "pods", both)
            .await
            .expect_err("2 GPUs under 1");
        assert_eq!(err.code(), 403);
        assert!(
            err.to_string()
                .contains("requested: requests.nvidia.com/gpu=2"),
            "{err}"
        );
        // A plain init container runs before the app container: 1 GPU at a time.
        let seq = pod(
            "seq",
            json!({
                "initContainers": [{"name": "i", "image": "x", "resources": gpu("1")}],
                "containers": [{"name": "m", "image": "x", "resources": gpu("1")}],
            }),
        );
        create(&reg, "pods", seq).await.expect("one GPU at a time");
        let pods = reg
            .list(&def(&reg, "pods"), None, &ListParams::default())
            .await
            .expect("list");
        assert_eq!(pods.items.len(), 1);
    }

    /// GPUs claimed through DRA and GPUs requested by pods count against one GPU quota,
    /// whichever kind was counted first.
    #[tokio::test]
    async fn claimed_and_requested_gpus_share_the_quota() {
        let f = Fixture::new();
        let reg = f.replica(&[("requests.nvidia.com/gpu", "2")], false).await;
        let claim = |name: &str, n: i64| {
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name}, "spec": {"devices": {"requests": [
                    {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": n}}]}}})
        };
        let claims = reg
            .catalog()
            .get("resource.k8s.io", "v1", "resourceclaims")
            .expect("served");
        let create_claim = |obj: Value| {
            let (reg, claims) = (&reg, claims.clone());
            async move {
                reg.create(&claims, Some("default"), obj, &WriteOptions::default())
                    .await
                    .map(|w| w.object)
            }
        };
        create(
            &reg,
            "pods",
            pod(
                "p",
                json!({"containers": [
            {"name": "m", "image": "x", "resources": gpu("1")}]}),
            ),
        )
        .await
        .expect("1 of 2");
        let err = create_claim(claim("two", 2)).await.expect_err("1 + 2 > 2");
        assert!(err.to_string().contains("requests.nvidia.com/gpu"), "{err}");
        create_claim(claim("one", 1)).await.expect("1 + 1");
        let err = create(
            &reg,
            "pods",
            pod(
                "q",
                json!({"containers": [
            {"name": "m", "image": "x", "resources": gpu("1")}]}),
            ),
        )
        .await
        .expect_err("2 + 1 > 2");
        assert_eq!(err.code(), 403);
    }

    #[tokio::test]
    async fn node_ports_and_load_balancers_are_counted_on_create_and_update() {
        let f = Fixture::new();
        let reg = f
            .replica(
                &[("services.nodeports", "2"), ("services.loadbalancers", "1")],
                false,
            )
            .await;
        let svc = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
        // Three node ports in one Service: over 2.
        let err = create(
            &reg,
            "services",
            svc(
                "three",
                json!({"type": "NodePort", "ports": [{"port": 1, "name": "a"}, {"port": 2, "name": "b"}, {"port": 3, "name": "c"}]}),
            ),
        )
        .await
        .expect_err("3 node ports");
        assert!(err.to_string().contains("services.nodeports=3"), "{err}");
        create(
            &reg,
            "services",
            svc(
                "lb",
                json!({"type": "LoadBalancer", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .expect("1 load balancer, 1 node port");
        let err = create(
            &reg,
            "services",
            svc(
                "lb2",
                json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
            ),
        )
        .await
        .expect_err("2nd load balancer");
        assert!(err.to_string().contains("services.loadbalancers"), "{err}");
        let plain = create(
            &reg,
            "services",
            svc(
                "plain",
                json!({"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}]}),
            ),
        )
        .await
        .expect("ClusterIP takes no node port");
        // Turning it into a NodePort Service takes its 2 ports: 1 + 2 > 2.
        let mut turned = plain.clone();
        turned["spec"]["type"] = json!("NodePort");
        let err = reg
            .update(
                &def(&reg, "services"),
                Some("default"),
                "plain",
                turned,
                Part::Main,
                &WriteOptions::default(),
            )
            .await
            .expect_err("update over the quota");
        assert_eq!(err.code(), 403);
        let stored = reg
            .get(&def(&reg, "services"), Some("default"), "plain")
            .await
            .expect("get");
        assert_ne!(stored["spec"]["type"], "NodePort");
    }

    #[tokio::test]
    async fn exact_replicas_see_each_other_s_writes() {
        let f = Fixture::new();
        let hard = [("pods", "2")];
        let a = f.replica(&hard, true).await;
        let b = f.replica(&hard, true).await;
        let p = |name: &str| pod(name, json!({"containers": [{"name": "c", "image": "x"}]}));
        create(&b, "pods", p("b1")).await.expect("b1");
        create(&a, "pods", p("a1")).await.expect("a1");
        // B's own count says 1; the store holds 2.
        let err = create(&b, "pods", p("b2")).await.expect_err("over 2");
        assert!(err.to_string().contains("pods=2"), "{err}");
    }

    /// Two replicas (the owner and a follower of one tenant) taking creates at the same time
    /// never admit past the quota together.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_creates_through_two_replicas_stay_within_the_quota() {
        let f = Fixture::new();
        let hard = [("pods", "5")];
        let a = Arc::new(f.replica(&hard, true).await);
        let b = Arc::new(f.replica(&hard, true).await);
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let reg = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move {
                    let obj = pod(
                        &format!("p{i}"),
                        json!({"containers": [{"name": "c", "image": "x"}]}),
                    );
                    create(&reg, "pods", obj).await.is_ok()
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            if t.await.expect("task") {
                admitted += 1;
            }
        }
        let stored = a
            .list(&def(&a, "pods"), None, &ListParams::default())
            .await
            .expect("list")
            .items
            .len();
        assert_eq!((admitted, stored), (5, 5));
    }
}
