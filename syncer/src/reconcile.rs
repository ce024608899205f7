//! One reconcile step per key: compare what the tenant holds with what the host holds (both read
//! from the caches) and make one write to close the gap. Every step is idempotent: it can run any
//! number of times, after any restart, and converges on the same host objects.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Map, Value};

use crate::cache::Cache;
use crate::kinds::Kind;
use crate::migrate::Strays;
use crate::policy::Policy;
use crate::queue::{Key, Queue};
use crate::{
    addresses, claims, events, ingresses, naming, nodes, objects, pods, routes, service_ips,
    services, tokens,
};

/// Errors of one reconcile step (the step is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write to the host failed.
    #[error("host {verb} of {kind:?} {name} failed: {}", brief(source))]
    Host {
        /// What was done.
        verb: &'static str,
        /// The kind.
        kind: Kind,
        /// The host name.
        name: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A write to the tenant failed.
    #[error("tenant {verb} of {kind:?} {name} failed: {}", brief(source))]
    Tenant {
        /// What was done.
        verb: &'static str,
        /// The kind.
        kind: Kind,
        /// The tenant name.
        name: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A host pod could not be built.
    #[error("building the host pod failed: {0}")]
    Build(#[from] pods::Error),
}

/// A kube error in a few words: an API server's refusal as its message, reason and code (not
/// the client's debug dump of the whole Status).
pub fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({}, {})", s.message, s.reason, s.code),
        other => other.to_string(),
    }
}

/// Everything a reconcile step reads.
pub struct Context {
    /// The tenant.
    pub tenant: String,
    /// `fabrik-<tenant>`.
    pub host_namespace: String,
    /// The tenant's policy.
    pub policy: Policy,
    /// Client of the tenant's API server.
    pub tenant_client: kube::Client,
    /// Client of the host.
    pub host_client: kube::Client,
    /// Tenant caches by kind (the down kinds and the syncer's Nodes).
    pub tenant_caches: HashMap<Kind, Arc<Cache>>,
    /// Host caches by kind (this tenant's objects; all Nodes).
    pub host_caches: HashMap<Kind, Arc<Cache>>,
    /// Host objects named by an earlier naming scheme, being migrated.
    pub strays: Strays,
    /// The work queue (to look at stray objects again when the last stray pod goes, and to
    /// look at pods again when their tokens are due).
    pub queue: Arc<Queue>,
    /// The share of a token's lifetime after which it is refreshed.
    pub token_refresh: f64,
    /// Failed TokenRequests, for backoff and reporting once.
    pub token_failures: tokens::Failures,
    /// Host objects created and not yet delivered by the host watch.
    pub expectations: crate::expectations::Expectations,
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether the API refused for now (429: an eviction a disruption budget does not allow yet).
fn is_too_many_requests(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 429)
}

/// The reason of the tenant Event when a disruption budget holds a preempted pod back.
pub const REASON_PREEMPTION_BLOCKED: &str = "PreemptionBlockedByDisruptionBudget";

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Context {
    fn tcache(&self, kind: Kind) -> Option<&Arc<Cache>> {
        self.tenant_caches.get(&kind)
    }

    fn hcache(&self, kind: Kind) -> Option<&Arc<Cache>> {
        self.host_caches.get(&kind)
    }

    /// The tenant object (namespace, name) a message about tenant object `about` (in
    /// `namespace`, where known) names by hashed host name `name` — for
    /// [`naming::tenant_words_with`], which checks the answer: the one whose host copy, of any
    /// synced kind, has that name in the tenant's host namespace, as its origin marks say; or,
    /// with no host copy (a claim that does not exist yet), one `about`'s spec names.
    fn hashed_name(
        &self,
        name: &str,
        about: Option<&Value>,
        namespace: &str,
    ) -> Option<(String, String)> {
        self.host_caches
            .values()
            .find_map(|cache| {
                let host = cache.get(&self.host_namespace, name)?;
                let o = naming::origin(&host).filter(|o| o.tenant == self.tenant)?;
                Some((o.namespace, o.name))
            })
            .or_else(|| naming::referred_to(&about?["spec"], namespace, &self.tenant, name))
    }

    /// The tenant's ReferenceGrants (none while its routes are not synced).
    fn grants(&self) -> Vec<Arc<Value>> {
        self.tcache(Kind::ReferenceGrant)
            .map(|c| c.list())
            .unwrap_or_default()
    }

    fn host_api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.host_client.clone(),
            &self.host_namespace,
            &kind.api_resource(),
        )
    }

    fn tenant_api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        if kind.cluster_scoped() {
            Api::all_with(self.tenant_client.clone(), &kind.api_resource())
        } else {
            Api::namespaced_with(self.tenant_client.clone(), namespace, &kind.api_resource())
        }
    }

    async fn host_delete(&self, kind: Kind, name: &str, grace: Option<u32>) -> Result<(), Error> {
        let dp = DeleteParams {
            grace_period_seconds: grace,
            ..Default::default()
        };
        match self.host_api(kind).delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if is_gone(&e) => Ok(()),
            Err(source) => Err(Error::Host {
                verb: "delete",
                kind,
                name: name.into(),
                source,
            }),
        }
    }

    async fn host_create(&self, kind: Kind, obj: &Value) -> Result<(), Error> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let data: DynamicObject = match serde_json::from_value(obj.clone()) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(?kind, %name, error = %e, "built host object does not decode");
                return Ok(());
            }
        };
        if let Some(wait) = self.expectations.wait(kind, &name) {
            // Created a moment ago: the watch brings it; look again after the window.
            // (A pod's token Secret is written when its pod is looked at.)
            let key = match tokens::token_pod(obj, &self.tenant) {
                Some((namespace, name)) => Some(Key {
                    kind: Kind::Pod,
                    namespace,
                    name,
                }),
                None => naming::origin(obj).map(|o| Key {
                    kind,
                    namespace: o.namespace,
                    name: o.name,
                }),
            };
            if let Some(key) = key {
                self.queue.push_after(key, wait);
            }
            return Ok(());
        }
        match self
            .host_api(kind)
            .create(&PostParams::default(), &data)
            .await
        {
            Ok(_) => {
                self.expectations.created(kind, &name);
                Ok(())
            }
            // Created meanwhile (or by a previous run): the watch brings it and we look again.
            Err(e) if is_conflict(&e) => Ok(()),
            Err(source) => Err(Error::Host {
                verb: "create",
                kind,
                name,
                source,
            }),
        }
    }

    async fn host_replace(&self, kind: Kind, obj: &Value) -> Result<(), Error> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let Ok(data) = serde_json::from_value::<DynamicObject>(obj.clone()) else {
            return Ok(());
        };
        match self
            .host_api(kind)
            .replace(&name, &PostParams::default(), &data)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) || is_gone(&e) => Ok(()),
            Err(source) => Err(Error::Host {
                verb: "update",
                kind,
                name,
                source,
            }),
        }
    }

    async fn tenant_status(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        status: Map<String, Value>,
    ) -> Result<(), Error> {
        let patch = json!({ "status": status });
        match self
            .tenant_api(kind, namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_gone(&e) => Ok(()),
            Err(source) => Err(Error::Tenant {
                verb: "status update",
                kind,
                name: name.into(),
                source,
            }),
        }
    }
}

/// Whether every field of `want` is in `have` with the same value (objects compared by the keys
/// of `want`, so fields the server defaults do not count as differences).
pub fn contains(have: &Value, want: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| contains(h.get(k).unwrap_or(&Value::Null), v)),
        (Value::Object(w), Value::Null) => w.values().all(Value::is_null),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(w, h)| contains(h, w))
        }
        (Value::Null, _) => true,
        (w, h) => w == h,
    }
}

/// Whether an existing host object already is what `desired` says: the fields of `desired`
/// present with the same values, labels and data exactly equal.
pub fn up_to_date(existing: &Value, desired: &Value) -> bool {
    let Some(d) = desired.as_object() else {
        return false;
    };
    for (k, v) in d {
        let ok = match k.as_str() {
            "apiVersion" | "kind" => true,
            "metadata" => {
                existing["metadata"]["labels"] == v["labels"]
                    && contains(&existing["metadata"]["annotations"], &v["annotations"])
            }
            "data" | "binaryData" => &existing[k] == v,
            _ => contains(&existing[k], v),
        };
        if !ok {
            return false;
        }
    }
    true
}

fn is_deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// Runs one reconcile step.
pub async fn reconcile(ctx: &Context, key: &Key) -> Result<(), Error> {
    match key.kind {
        Kind::Pod => pod(ctx, &key.namespace, &key.name).await,
        Kind::Node => node(ctx, &key.name).await,
        Kind::DeviceClass => device_class(ctx, &key.name).await,
        Kind::Event => event(ctx, &key.namespace, &key.name).await,
        kind @ (Kind::Endpoints
        | Kind::EndpointSlice
        | Kind::Ingress
        | Kind::HttpRoute
        | Kind::GrpcRoute) => partial(ctx, kind, &key.namespace, &key.name).await,
        kind @ (Kind::CoschedulingPodGroup | Kind::VolcanoPodGroup | Kind::Job | Kind::JobSet) => {
            // It sizes the gang of pods of its namespace: look at those again (a Job or
            // JobSet, only its own pods not on the host yet — it changes with each pod).
            let host = ctx.hcache(Kind::Pod);
            for p in ctx.tcache(Kind::Pod).map(|c| c.list()).unwrap_or_default() {
                let (namespace, name) = crate::cache::key_of(&p);
                if namespace != key.namespace {
                    continue;
                }
                if matches!(kind, Kind::Job | Kind::JobSet) {
                    let mine = crate::gangs::owner(&p, kind).as_deref() == Some(key.name.as_str());
                    let synced = host.is_some_and(|h| {
                        h.get(
                            &ctx.host_namespace,
                            &naming::host_name(&name, &namespace, &ctx.tenant),
                        )
                        .is_some()
                    });
                    if !mine || synced {
                        continue;
                    }
                }
                ctx.queue.push(Key {
                    kind: Kind::Pod,
                    namespace,
                    name,
                });
            }
            Ok(())
        }
        Kind::ReferenceGrant => {
            // What a grant allows is read when routes are built: look at them all again.
            for kind in [Kind::HttpRoute, Kind::GrpcRoute] {
                for r in ctx.tcache(kind).map(|c| c.list()).unwrap_or_default() {
                    let (namespace, name) = crate::cache::key_of(&r);
                    ctx.queue.push(Key {
                        kind,
                        namespace,
                        name,
                    });
                }
            }
            Ok(())
        }
        kind => simple(ctx, kind, &key.namespace, &key.name).await,
    }
}

/// The host copy of a tenant object of a simple kind, or `None` when it should not exist.
fn desired(ctx: &Context, kind: Kind, obj: &Value, host: Option<&Value>) -> Option<Value> {
    let t = ctx.tenant.as_str();
    match kind {
        Kind::ConfigMap => Some(objects::host_config_map(obj, t)),
        Kind::Secret => Some(objects::host_secret(obj, t)),
        Kind::PersistentVolumeClaim => Some(objects::host_pvc(obj, t)),
        Kind::Service if is_api_service_object(obj) => None,
        Kind::Service => Some(services::host_service(
            obj,
            t,
            host.map(|h| &h["spec"]["clusterIP"]),
            &ctx.policy,
        )),
        Kind::Endpoints | Kind::EndpointSlice => address_copy(ctx, kind, obj)?.object,
        Kind::Ingress => ingresses::host_ingress(obj, t, &ctx.policy),
        Kind::HttpRoute | Kind::GrpcRoute => {
            routes::host_route(kind, obj, t, &ctx.policy, &ctx.grants()).object
        }
        // A tenant that may not use devices (no DeviceClass is mirrored to it) gets none.
        Kind::ResourceClaim if ctx.policy.device_classes => Some(claims::host_claim(obj, t)),
        Kind::ResourceClaim => None,
        Kind::PodDisruptionBudget => Some(objects::host_pdb(obj, t)),
        Kind::Pod
        | Kind::Event
        | Kind::Node
        | Kind::DeviceClass
        | Kind::ReferenceGrant
        | Kind::CoschedulingPodGroup
        | Kind::VolcanoPodGroup
        | Kind::Job
        | Kind::JobSet => None,
    }
}

/// How long to leave a host Service copy whose tenant Service does not exist (yet): one made
/// for a Service being created ([`crate::service_ips`]) is young for a moment.
fn young_service_copy(kind: Kind, no_tenant_object: bool, host: &Value) -> Option<Duration> {
    if kind != Kind::Service || !no_tenant_object {
        return None;
    }
    let created = host["metadata"]["creationTimestamp"]
        .as_str()?
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()?;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(created);
    let grace = k8s_openapi::jiff::SignedDuration::try_from(service_ips::ORPHAN_GRACE).ok()?;
    (age < grace)
        .then(|| Duration::try_from(grace - age).ok())
        .flatten()
        .map(|d| d.min(service_ips::ORPHAN_GRACE) + Duration::from_millis(100))
}

/// Creates a host Service copy; when the host refuses the address it asks for (the tenant's,
/// which is not free there), once more without one, and says so in the tenant.
async fn create_service_copy(ctx: &Context, mut want: Value) -> Result<(), Error> {
    match ctx.host_create(Kind::Service, &want).await {
        Err(Error::Host {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 422 && want["spec"]["clusterIP"].is_string() => {
            let asked = want["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
            if let Some(o) = want["spec"].as_object_mut() {
                o.remove("clusterIP");
            }
            ctx.host_create(Kind::Service, &want).await?;
            let Some(origin) = naming::origin(&want) else {
                return Ok(());
            };
            let (ns, name, uid) = (&origin.namespace, &origin.name, &origin.uid);
            let message = format!(
                "the host cannot give this Service its address {asked} ({}); its pods reach it at \
                 another one until it is created again",
                s.message
            );
            report(
                ctx,
                Kind::Service,
                ns,
                name,
                uid,
                REASON_CLUSTER_IP,
                &message,
            )
            .await
            .map(|_| ())
        }
        other => other,
    }
}

/// The Event reason of a Service whose address the host could not give its copy.
pub const REASON_CLUSTER_IP: &str = "ClusterIPNotOnHost";

fn is_api_service_object(obj: &Value) -> bool {
    let meta = &obj["metadata"];
    services::is_api_service(
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
    )
}

/// The host copy of a tenant Endpoints / EndpointSlice with the addresses left out of it;
/// `None` when it is not synced at all (its Service has a selector, or there is none).
fn address_copy(ctx: &Context, kind: Kind, obj: &Value) -> Option<services::Built> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    let selectorless_service = |svc: &str| {
        ctx.tcache(Kind::Service)
            .and_then(|c| c.get(ns, svc))
            .is_some_and(|s| !services::has_selector(&s))
    };
    let service = match kind {
        Kind::Endpoints => obj["metadata"]["name"].as_str(),
        _ => services::slice_service(obj),
    }?;
    if services::is_api_service(ns, service) || !selectorless_service(service) {
        return None;
    }
    let host_pods = ctx.hcache(Kind::Pod).map(|c| c.list()).unwrap_or_default();
    let pods = addresses::PodAddresses::from_host_pods(&host_pods, &ctx.tenant);
    let actx = services::AddressContext {
        tenant: &ctx.tenant,
        pods: &pods,
    };
    Some(match kind {
        Kind::Endpoints => services::host_endpoints(obj, &actx),
        _ => services::host_endpoint_slice(obj, &actx),
    })
}

/// Why a tenant object (or part of it) is not copied to the host, for an Event in the tenant:
/// `(reason, message)`, or `None` when all of it is.
fn refusal(ctx: &Context, kind: Kind, obj: &Value) -> Option<(&'static str, String)> {
    match kind {
        Kind::Endpoints | Kind::EndpointSlice => {
            let built = address_copy(ctx, kind, obj)?;
            if built.refused.is_empty() {
                return None;
            }
            let mut refused = built.refused;
            refused.sort();
            refused.dedup();
            Some((
                addresses::REASON_REFUSED,
                format!(
                    "addresses left out of the host copy: {} (only the addresses of this \
                     tenant's running pods are synced)",
                    refused.join(", ")
                ),
            ))
        }
        Kind::HttpRoute | Kind::GrpcRoute => {
            let built = routes::host_route(kind, obj, &ctx.tenant, &ctx.policy, &ctx.grants());
            (!built.refused.is_empty()).then(|| {
                (
                    routes::REASON_REFUSED,
                    format!("not copied to the host: {}", built.refused.join("; ")),
                )
            })
        }
        Kind::Ingress => ingresses::ingress_class(obj, &ctx.policy).err().map(|why| {
            (
                ingresses::REASON_CLASS_REFUSED,
                format!("not synced to the host: {why}"),
            )
        }),
        _ => None,
    }
}

/// A kind whose objects may be copied in part: synced as the other simple kinds, then what was
/// left out is reported in the tenant, once per distinct refusal (the Event's name is derived
/// from the object's UID and the message, so that retries and resyncs do not repeat it).
async fn partial(ctx: &Context, kind: Kind, ns: &str, name: &str) -> Result<(), Error> {
    // What was left out is reported even when the host refuses the rest.
    let synced = simple(ctx, kind, ns, name).await;
    let Some(obj) = ctx.tcache(kind).and_then(|c| c.get(ns, name)) else {
        return synced;
    };
    if is_deleting(&obj) {
        return synced;
    }
    let Some((reason, message)) = refusal(ctx, kind, &obj) else {
        return synced;
    };
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("");
    if report(ctx, kind, ns, name, uid, reason, &message).await? {
        tracing::info!(tenant = %ctx.tenant, ?kind, %ns, %name, %reason, %message,
            "not copied to the host");
    }
    synced
}

/// Writes a Warning Event about tenant object `ns/name` (UID `uid`) once: its name is derived
/// from the UID, the reason and the message, so that retries, resyncs and restarts do not repeat
/// it. Returns whether it was written now (not before).
async fn report(
    ctx: &Context,
    kind: Kind,
    ns: &str,
    name: &str,
    uid: &str,
    reason: &str,
    message: &str,
) -> Result<bool, Error> {
    // At most 200 + 17 characters: an Event name is a DNS subdomain (253).
    let prefix: String = name.chars().take(200).collect();
    let ename = format!(
        "{prefix}.{:016x}",
        naming::fnv1a(format!("{uid}/{reason}/{message}").as_bytes())
    );
    let now = json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now()
    ));
    let api_version = kind.api_resource().api_version;
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": ename, "namespace": ns},
        "involvedObject": {"apiVersion": api_version, "kind": kind.api_resource().kind,
            "name": name, "namespace": ns, "uid": uid},
        "reason": reason, "message": message, "type": "Warning", "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": "fabrik-syncer"}});
    let Ok(data) = serde_json::from_value::<DynamicObject>(event) else {
        return Ok(false);
    };
    match ctx
        .tenant_api(Kind::Event, ns)
        .create(&PostParams::default(), &data)
        .await
    {
        Ok(_) => Ok(true),
        // Reported already.
        Err(e) if is_conflict(&e) => Ok(false),
        Err(source) => Err(Error::Tenant {
            verb: "create",
            kind: Kind::Event,
            name: ename,
            source,
        }),
    }
}

async fn simple(ctx: &Context, kind: Kind, ns: &str, name: &str) -> Result<(), Error> {
    let (Some(tc), Some(hc)) = (ctx.tcache(kind), ctx.hcache(kind)) else {
        return Ok(());
    };
    let tobj = tc.get(ns, name);
    migrate_strays(ctx, kind, ns, name, tobj.is_none()).await?;
    let hname = naming::host_name(name, ns, &ctx.tenant);
    let found = hc.get(&ctx.host_namespace, &hname);
    // A host object of the name that is not this object's copy is someone else's: the host's
    // own Endpoints of a Service with a selector (the host's endpoints controller writes them),
    // or another tenant object's copy. Never written; worth a word only when the syncer would
    // have written there.
    let taken = found
        .as_deref()
        .is_some_and(|h| !naming::is_copy_of(h, &ctx.tenant, ns, name));
    let host = found.filter(|_| !taken);
    let want = tobj
        .as_deref()
        .filter(|o| !is_deleting(o))
        .and_then(|o| desired(ctx, kind, o, host.as_deref()));
    if taken {
        if want.is_some() {
            tracing::warn!(tenant = %ctx.tenant, ?kind, %ns, %name, host = %hname,
                "host name is taken by another object; not synced");
        }
        return Ok(());
    }
    match (want, host.as_deref()) {
        (None, Some(h)) => {
            if let Some(wait) = young_service_copy(kind, tobj.is_none(), h) {
                ctx.queue.push_after(
                    Key {
                        kind,
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    },
                    wait,
                );
                return Ok(());
            }
            ctx.host_delete(kind, &hname, None).await
        }
        (None, None) => Ok(()),
        (Some(w), None) if kind == Kind::Service => create_service_copy(ctx, w).await,
        (Some(w), None) => ctx.host_create(kind, &w).await,
        (Some(mut w), Some(h)) => {
            if kind == Kind::ResourceClaim {
                // A claim's spec cannot change: a new tenant claim of the name replaces its
                // predecessor's copy (made again once that is gone).
                let host_uid = naming::origin(h).map(|o| o.uid).unwrap_or_default();
                if tobj
                    .as_deref()
                    .is_some_and(|t| t["metadata"]["uid"] != host_uid.as_str())
                {
                    return ctx.host_delete(kind, &hname, None).await;
                }
                return claim_status(ctx, ns, name, tobj.as_deref(), h).await;
            }
            if !up_to_date(h, &w) {
                w["metadata"]["resourceVersion"] = h["metadata"]["resourceVersion"].clone();
                ctx.host_replace(kind, &w).await?;
            }
            let status = match kind {
                Kind::Service => services::tenant_service_status(h),
                Kind::PersistentVolumeClaim => objects::tenant_pvc_status(h),
                Kind::Ingress => ingresses::tenant_ingress_status(h),
                Kind::HttpRoute | Kind::GrpcRoute => match tobj.as_deref() {
                    Some(t) => routes::tenant_route_status(t, h, &ctx.policy),
                    None => return Ok(()),
                },
                Kind::PodDisruptionBudget => objects::tenant_pdb_status(h),
                _ => return Ok(()),
            };
            // Its messages name the tenant's objects as the tenant knows them.
            let mut status = status;
            naming::tenant_messages(&mut status, &ctx.tenant, &|w| {
                ctx.hashed_name(w, tobj.as_deref(), ns)
            });
            let current = tobj.as_deref().map(|t| &t["status"]);
            if !status.is_empty()
                && !contains(
                    current.unwrap_or(&Value::Null),
                    &Value::Object(status.clone()),
                )
            {
                ctx.tenant_status(kind, ns, name, status).await?;
            }
            Ok(())
        }
    }
}

/// Deletes the stray copies (see [`crate::migrate`]) of a tenant object of a simple kind once
/// they are no longer needed: when the tenant object is gone, or when no stray pod (which may
/// still mount them) is left.
async fn migrate_strays(
    ctx: &Context,
    kind: Kind,
    ns: &str,
    name: &str,
    tenant_gone: bool,
) -> Result<(), Error> {
    let key = Key {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    let strays = ctx.strays.get(&key);
    if strays.is_empty() {
        return Ok(());
    }
    let Some(hc) = ctx.hcache(kind) else {
        return Ok(());
    };
    for stray in strays {
        let present = hc.get(&ctx.host_namespace, &stray).is_some();
        if present && !tenant_gone && ctx.strays.pods_left() {
            // Still mounted by a stray pod, perhaps.
            continue;
        }
        if present {
            tracing::info!(tenant = %ctx.tenant, ?kind, %ns, %name, host = %stray,
                "deleting a host copy named by an earlier scheme");
            ctx.host_delete(kind, &stray, None).await?;
        }
        ctx.strays.forget(&key, &stray);
    }
    Ok(())
}

/// The name of the stray host pod (named by an earlier scheme) that still runs tenant pod
/// `ns/name`, if there is one. A stray pod that is gone is forgotten; when it was the last one,
/// the other kinds' strays are looked at again (they may be deleted now).
fn stray_pod(ctx: &Context, hc: &Cache, ns: &str, name: &str) -> Option<String> {
    let key = Key {
        kind: Kind::Pod,
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    let mut found = None;
    for stray in ctx.strays.get(&key) {
        if hc.get(&ctx.host_namespace, &stray).is_some() {
            found = Some(stray);
        } else {
            ctx.strays.forget(&key, &stray);
            if !ctx.strays.pods_left() {
                for k in ctx.strays.keys() {
                    ctx.queue.push(k);
                }
            }
        }
    }
    found
}

fn phase(obj: &Value) -> &str {
    obj["status"]["phase"].as_str().unwrap_or("")
}

async fn pod(ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let (Some(tc), Some(hc)) = (ctx.tcache(Kind::Pod), ctx.hcache(Kind::Pod)) else {
        return Ok(());
    };
    let hname =
        stray_pod(ctx, hc, ns, name).unwrap_or_else(|| naming::host_name(name, ns, &ctx.tenant));
    let host = hc.get(&ctx.host_namespace, &hname);
    if let Some(h) = &host {
        if !naming::is_copy_of(h, &ctx.tenant, ns, name) {
            tracing::warn!(tenant = %ctx.tenant, %ns, %name, host = %hname,
                "host pod name is taken by another tenant pod; not synced");
            return Ok(());
        }
    }
    let Some(tpod) = tc.get(ns, name) else {
        ctx.token_failures.clear(ns, name);
        if host.is_some() {
            ctx.host_delete(Kind::Pod, &hname, None).await?;
        }
        // Owned by the host pod too (the host's garbage collector would remove it); deleted
        // here so that nothing is left where the host collects no garbage or the pod never came.
        return delete_token_secret(ctx, ns, name, &hname).await;
    };
    let uid = tpod["metadata"]["uid"].as_str().unwrap_or("");
    if let Some(h) = &host {
        let host_uid = naming::origin(h).map(|o| o.uid).unwrap_or_default();
        if host_uid != uid {
            // The host pod belongs to an earlier tenant pod of the same name.
            return ctx.host_delete(Kind::Pod, &hname, Some(0)).await;
        }
    }
    if is_deleting(&tpod) {
        // Act as the kubelet of a tenant pod: delete the host pod, then finish the deletion.
        return match &host {
            Some(h) if !is_deleting(h) => {
                let grace = tpod["metadata"]["deletionGracePeriodSeconds"]
                    .as_u64()
                    .and_then(|g| u32::try_from(g).ok());
                ctx.host_delete(Kind::Pod, &hname, grace).await
            }
            Some(_) => Ok(()),
            None => {
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                match ctx.tenant_api(Kind::Pod, ns).delete(name, &dp).await {
                    Ok(_) => Ok(()),
                    Err(e) if is_gone(&e) => Ok(()),
                    Err(source) => Err(Error::Tenant {
                        verb: "delete",
                        kind: Kind::Pod,
                        name: name.into(),
                        source,
                    }),
                }
            }
        };
    }
    let Some(h) = host else {
        let bound = tpod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        if matches!(phase(&tpod), "Succeeded" | "Failed") {
            return Ok(());
        }
        if bound {
            // It ran on the host and its host pod is gone (evicted, deleted on the host): the
            // tenant pod fails, as a pod whose node lost it does; it is not started again.
            let mut status = Map::new();
            status.insert("phase".into(), json!("Failed"));
            // Preempted by the GPU queue (the condition came up with the host pod's status):
            // say so, as upstream's `Preempted`.
            match queue_preemption(&tpod) {
                Some(message) => {
                    status.insert("reason".into(), json!("Preempted"));
                    status.insert("message".into(), json!(message));
                }
                None => {
                    status.insert("reason".into(), json!("HostPodLost"));
                    status.insert(
                        "message".into(),
                        json!("the pod's host pod was deleted on the host"),
                    );
                }
            }
            return ctx.tenant_status(Kind::Pod, ns, name, status).await;
        }
        if tpod["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
        {
            // Gated in the tenant (by the tenant's own queue, e.g. Kueue): not scheduled
            // anywhere until its gates are cleared, as on any cluster; its tenant API server
            // already says `SchedulingGated`. Looked at again when the pod changes.
            return Ok(());
        }
        if let Some(why) = claims_refused(ctx, &tpod) {
            // Never run a pod without the devices it claims: say why, once, and wait (the
            // pod is reconciled again when the host or the Tenant changes).
            let condition = json!([{"type": "PodScheduled", "status": "False",
                "reason": "ResourceClaimsUnavailable", "message": why}]);
            if contains(&tpod["status"]["conditions"], &condition) {
                return Ok(());
            }
            let mut status = Map::new();
            status.insert("conditions".into(), condition);
            return ctx.tenant_status(Kind::Pod, ns, name, status).await;
        }
        let gang = match crate::gangs::asked(&tpod, |kind, group| {
            let mut obj = (*ctx.tcache(kind)?.get(ns, group)?).clone();
            if kind == Kind::Job {
                // Its completions so far, as its pods show them (the Job's status may lag a
                // replacement pod: a gang sized by a stale count would wait for ever).
                let done = tc
                    .list()
                    .iter()
                    .filter(|p| {
                        p["metadata"]["namespace"] == ns
                            && phase(p) == "Succeeded"
                            && crate::gangs::owner(p, Kind::Job).as_deref() == Some(group)
                    })
                    .count() as u64;
                let reported = obj["status"]["succeeded"].as_u64().unwrap_or(0);
                obj["status"]["succeeded"] = json!(reported.max(done));
            }
            Some(obj)
        }) {
            crate::gangs::Asked::None => None,
            crate::gangs::Asked::Gang(g, size) => Some((g, size)),
            crate::gangs::Asked::Waiting(why) => {
                // Never bound without its gang: wait, unsynced, for its PodGroup (the pod is
                // looked at again when PodGroups of its namespace change).
                let condition = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "PodGroupNotFound", "message": why}]);
                if contains(&tpod["status"]["conditions"], &condition) {
                    return Ok(());
                }
                let mut status = Map::new();
                status.insert("conditions".into(), condition);
                return ctx.tenant_status(Kind::Pod, ns, name, status).await;
            }
        };
        let services = ctx
            .tcache(Kind::Service)
            .map(|c| c.list())
            .unwrap_or_default();
        let pctx = pods::PodContext {
            tenant: &ctx.tenant,
            policy: &ctx.policy,
            services: &services,
            gang,
        };
        let want = match pods::host_pod(&tpod, &pctx) {
            Ok(mut want) => {
                if want["spec"]["schedulingGates"].is_array() {
                    // Its place in the GPU queue, finer than the one-second creation time.
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or(0);
                    want["metadata"]["annotations"][fabrik_api::ANNOTATION_QUEUE_ARRIVAL] =
                        json!(now.to_string());
                    // Its place among its tenant's pods: the priority its tenant resolved.
                    if let Some(p) = tpod["spec"]["priority"].as_i64().filter(|p| *p != 0) {
                        want["metadata"]["annotations"][fabrik_api::ANNOTATION_QUEUE_PRIORITY] =
                            json!(p.to_string());
                    }
                }
                want
            }
            // Permanent (the pod's spec is immutable where it matters): say so in the tenant
            // pod's status once, and do not retry.
            Err(e @ pods::Error::UnsafePath(_)) => {
                let condition = json!([{"type": "PodScheduled", "status": "False",
                    "reason": "RefusedByTenantPolicy", "message": e.to_string()}]);
                if contains(&tpod["status"]["conditions"], &condition) {
                    return Ok(());
                }
                tracing::info!(tenant = %ctx.tenant, %ns, %name, error = %e,
                    "tenant pod not synced to the host");
                let mut status = Map::new();
                status.insert("conditions".into(), condition);
                return ctx.tenant_status(Kind::Pod, ns, name, status).await;
            }
            // A claim of a template is being made: its tenant pod's status will change.
            Err(pods::Error::ClaimPending(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // What the host pod mounts first, so that its kubelet finds it: the tokens and the
        // tenant's root CA (which the `kube-api-access-*` volume projects).
        let want_name = want["metadata"]["name"].as_str().unwrap_or(&hname);
        let sources = pods::token_sources(&tpod);
        if !sources.is_empty() {
            ensure_tokens(ctx, &tpod, want_name, None, &sources).await?;
        }
        if mounts_config_map(&tpod, ROOT_CA_CONFIG_MAP) {
            simple(ctx, Kind::ConfigMap, ns, ROOT_CA_CONFIG_MAP).await?;
        }
        let created = ctx.host_create(Kind::Pod, &want).await;
        if let Err(Error::Host {
            source: kube::Error::Api(status),
            ..
        }) = &created
        {
            if is_refusal(status.code) {
                refused_by_host(ctx, &tpod, ns, name, status).await;
            }
        }
        // A refusal is retried with backoff too: the host's quota or policy may change.
        return created;
    };
    // Up: binding, then status.
    let node = h["spec"]["nodeName"].as_str().unwrap_or("");
    if !node.is_empty() && tpod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let api: Api<DynamicObject> = ctx.tenant_api(Kind::Pod, ns);
        match api
            .create_subresource::<Value, Value>("binding", name, &PostParams::default(), &binding)
            .await
        {
            Ok(_) => {}
            Err(e) if is_gone(&e) || is_conflict(&e) => {}
            Err(source) => {
                return Err(Error::Tenant {
                    verb: "binding",
                    kind: Kind::Pod,
                    name: name.into(),
                    source,
                })
            }
        }
    }
    if let Some(message) = queue_preemption(&h) {
        // Preempted by the GPU queue: the host pod goes through the Eviction API, so that
        // disruption budgets hold, within its own grace period; once the eviction is accepted
        // the tenant is told (an Event; the pod `Failed`, reason `Preempted`, as a preempted pod
        // ends upstream). A budget that refuses it now (it changed since the queue decided)
        // leaves the pod running, and the tenant is told why it has not gone yet. The condition
        // goes up first, so that a host pod gone before the tenant is told still reads as
        // preempted.
        if queue_preemption(&tpod).is_none() && phase(&tpod) != "Failed" {
            ctx.tenant_status(
                Kind::Pod,
                ns,
                name,
                pods::tenant_status(&h, &|w| ctx.hashed_name(w, Some(&tpod), ns)),
            )
            .await?;
        }
        if !is_deleting(&h) {
            let pods: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(ctx.host_client.clone(), &ctx.host_namespace);
            match pods.evict(&hname, &Default::default()).await {
                Ok(_) => {}
                Err(e) if is_gone(&e) => {}
                Err(e) if is_too_many_requests(&e) => {
                    let why = format!(
                        "the GPU queue preempts this pod, but a disruption budget does not let it \
                         go now; it runs on until one does ({message})"
                    );
                    report(
                        ctx,
                        Kind::Pod,
                        ns,
                        name,
                        uid,
                        REASON_PREEMPTION_BLOCKED,
                        &why,
                    )
                    .await?;
                    return Ok(());
                }
                Err(source) => {
                    return Err(Error::Host {
                        verb: "evict",
                        kind: Kind::Pod,
                        name: hname,
                        source,
                    })
                }
            }
        }
        if phase(&tpod) != "Failed" {
            report(
                ctx,
                Kind::Pod,
                ns,
                name,
                uid,
                fabrik_api::REASON_QUEUE_RECLAIM,
                &message,
            )
            .await?;
            let mut status = pods::tenant_status(&h, &|w| ctx.hashed_name(w, Some(&tpod), ns));
            status.insert("phase".into(), json!("Failed"));
            status.insert("reason".into(), json!("Preempted"));
            status.insert("message".into(), json!(message));
            ctx.tenant_status(Kind::Pod, ns, name, status).await?;
        }
        return Ok(());
    }
    let status = pods::tenant_status(&h, &|w| ctx.hashed_name(w, Some(&tpod), ns));
    if !status.is_empty() && !contains(&tpod["status"], &Value::Object(status.clone())) {
        ctx.tenant_status(Kind::Pod, ns, name, status).await?;
    }
    // Tokens: for host pods built to mount them, while they may still run.
    let finished = matches!(phase(&h), "Succeeded" | "Failed");
    if !finished && tokens::mounts_secret(&h, &naming::token_secret_name(&hname)) {
        let sources = pods::token_sources(&tpod);
        if !sources.is_empty() {
            ensure_tokens(ctx, &tpod, &hname, Some(&h), &sources).await?;
        }
    }
    Ok(())
}

/// The GPU queue's message when a pod (host, or tenant with the status copied up) carries its
/// preemption condition.
fn queue_preemption(pod: &Value) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| {
            c["type"] == "DisruptionTarget"
                && c["status"] == "True"
                && c["reason"] == fabrik_api::REASON_QUEUE_RECLAIM
        })
        .map(|c| c["message"].as_str().unwrap_or("preempted").to_string())
}

/// Why a tenant pod's host copy was refused, in the tenant pod's conditions and Events.
pub const REASON_REFUSED_BY_HOST: &str = "RefusedByHost";

/// Whether an API status code is the host refusing the object (as opposed to failing to answer).
fn is_refusal(code: u16) -> bool {
    matches!(code, 400 | 403 | 422)
}

/// Tells the tenant that the host refused `tpod`'s copy: a `PodScheduled=False` condition with
/// the host's message, and a Warning Event written once per distinct message. Best effort: the
/// refusal is retried whatever becomes of this.
async fn refused_by_host(
    ctx: &Context,
    tpod: &Value,
    ns: &str,
    name: &str,
    status: &kube::core::Status,
) {
    let message = format!("the host refused the pod: {}", status.message);
    let condition = json!([{"type": "PodScheduled", "status": "False",
        "reason": REASON_REFUSED_BY_HOST, "message": message}]);
    if !contains(&tpod["status"]["conditions"], &condition) {
        let mut st = Map::new();
        st.insert("conditions".into(), condition);
        if let Err(e) = ctx.tenant_status(Kind::Pod, ns, name, st).await {
            tracing::debug!(tenant = %ctx.tenant, %ns, %name, error = %e, "pod condition not written");
        }
    }
    let uid = tpod["metadata"]["uid"].as_str().unwrap_or("");
    if let Err(e) = report(
        ctx,
        Kind::Pod,
        ns,
        name,
        uid,
        REASON_REFUSED_BY_HOST,
        &message,
    )
    .await
    {
        tracing::debug!(tenant = %ctx.tenant, %ns, %name, error = %e, "refusal Event not written");
    }
}

/// The ConfigMap upstream's root-CA publisher puts in every namespace, which the
/// `kube-api-access-*` volume projects.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// Whether a tenant pod mounts ConfigMap `name` (as a volume or a projected source).
fn mounts_config_map(pod: &Value, name: &str) -> bool {
    let volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
    volumes.into_iter().any(|v| {
        v["configMap"]["name"].as_str() == Some(name)
            || v["projected"]["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["configMap"]["name"].as_str() == Some(name))
    })
}

/// Deletes the token Secret of host pod `host_pod` when it holds tenant pod `ns/name`'s tokens.
async fn delete_token_secret(
    ctx: &Context,
    ns: &str,
    name: &str,
    host_pod: &str,
) -> Result<(), Error> {
    let secret = naming::token_secret_name(host_pod);
    let ours = ctx
        .hcache(Kind::Secret)
        .and_then(|c| c.get(&ctx.host_namespace, &secret))
        .and_then(|s| tokens::token_pod(&s, &ctx.tenant))
        .is_some_and(|(sns, sname)| sns == ns && sname == name);
    if ours {
        ctx.host_delete(Kind::Secret, &secret, None).await?;
    }
    Ok(())
}

/// Asks the tenant for one token per source, bound to the tenant pod.
async fn request_tokens(
    ctx: &Context,
    tpod: &Value,
    service_account: &str,
    sources: &[pods::TokenSource],
) -> Result<Vec<tokens::Issued>, tokens::Error> {
    if !tokens::valid_service_account(service_account) {
        return Err(tokens::Error::ServiceAccountName(service_account.into()));
    }
    let meta = &tpod["metadata"];
    let ns = meta["namespace"].as_str().unwrap_or("");
    let name = meta["name"].as_str().unwrap_or("");
    let uid = meta["uid"].as_str().unwrap_or("");
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(ctx.tenant_client.clone(), ns);
    let mut issued = Vec::with_capacity(sources.len());
    for source in sources {
        let asked_at = tokens::now_ms();
        let body = tokens::token_request(source, name, uid);
        let answer: Value = api
            .create_subresource("token", service_account, &PostParams::default(), &body)
            .await
            .map_err(|source| tokens::Error::request(service_account, source))?;
        let token = tokens::read_answer(&answer, source, asked_at)
            .ok_or_else(|| tokens::Error::NoToken(service_account.into()))?;
        issued.push(token);
    }
    Ok(issued)
}

/// The reason of the Event about a pod whose tokens could not be had (the kubelet's, for a
/// volume it cannot set up).
pub const REASON_TOKEN_FAILED: &str = "FailedMount";

/// Keeps the token Secret of host pod `host_pod` (which exists when `host` is given) holding
/// fresh tokens of tenant pod `tpod`: asks the tenant when there are none for this pod and
/// spec or they are due, adds the host pod as the Secret's owner once it exists, and looks at
/// the pod again when they are next due. A refused TokenRequest is not an error of the step:
/// the pod runs without the token, the request is retried with backoff, and the refusal is
/// reported (log and tenant Event) once per distinct error.
async fn ensure_tokens(
    ctx: &Context,
    tpod: &Value,
    host_pod: &str,
    host: Option<&Value>,
    sources: &[pods::TokenSource],
) -> Result<(), Error> {
    let meta = &tpod["metadata"];
    let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
        return Ok(());
    };
    let uid = meta["uid"].as_str().unwrap_or("");
    let key = Key {
        kind: Kind::Pod,
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    let service_account = tpod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let spec = tokens::spec_hash(service_account, sources);
    let secret_name = naming::token_secret_name(host_pod);
    let existing = ctx
        .hcache(Kind::Secret)
        .and_then(|c| c.get(&ctx.host_namespace, &secret_name));
    if let Some(e) = &existing {
        if tokens::token_pod(e, &ctx.tenant) != Some((ns.to_string(), name.to_string())) {
            tracing::warn!(tenant = %ctx.tenant, %ns, %name, host = %secret_name,
                "host token Secret name is taken by another object; tokens not written");
            return Ok(());
        }
    }
    let owner = host.and_then(|h| h["metadata"]["uid"].as_str());
    let fresh = existing.as_deref().and_then(|e| {
        tokens::current_refresh_at(e, uid, &spec)
            .filter(|at| *at > tokens::now_ms())
            .map(|at| (e, at))
    });
    if let Some((e, at)) = fresh {
        if let Some(owner) = owner.filter(|o| !tokens::owned_by(e, o)) {
            let patch = json!({"metadata": {
                "ownerReferences": [tokens::owner_reference(host_pod, owner)]}});
            match ctx
                .host_api(Kind::Secret)
                .patch(&secret_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_gone(&e) => {}
                Err(source) => {
                    return Err(Error::Host {
                        verb: "update",
                        kind: Kind::Secret,
                        name: secret_name,
                        source,
                    })
                }
            }
        }
        ctx.queue.push_after(key, tokens::until(at));
        return Ok(());
    }
    if let Some(wait) = ctx.token_failures.wait(ns, name, uid) {
        ctx.queue.push_after(key, wait);
        return Ok(());
    }
    let issued_at = tokens::now_ms();
    match request_tokens(ctx, tpod, service_account, sources).await {
        Ok(issued) => {
            ctx.token_failures.clear(ns, name);
            let refresh_at = tokens::refresh_at_ms(issued_at, &issued, ctx.token_refresh);
            let f = tokens::SecretFor {
                tenant: &ctx.tenant,
                namespace: ns,
                pod: name,
                pod_uid: uid,
                spec: &spec,
                host_pod,
                host_pod_uid: owner,
            };
            let mut secret = tokens::host_secret(&f, &issued, refresh_at);
            match &existing {
                Some(e) => {
                    secret["metadata"]["resourceVersion"] =
                        e["metadata"]["resourceVersion"].clone();
                    ctx.host_replace(Kind::Secret, &secret).await?;
                }
                None => ctx.host_create(Kind::Secret, &secret).await?,
            }
            tracing::debug!(tenant = %ctx.tenant, %ns, %name, host = %secret_name,
                tokens = issued.len(), "service account tokens written");
            ctx.queue.push_after(key, tokens::until(refresh_at));
        }
        Err(e) => {
            let message = format!(
                "no service account token for the pod (its host pod runs without it; \
                 retried): {e}"
            );
            let (wait, changed) = ctx.token_failures.failed(ns, name, uid, &message);
            if changed {
                tracing::warn!(tenant = %ctx.tenant, %ns, %name, error = %e,
                    retry_in = ?wait, "TokenRequest failed; the host pod runs without the token");
                if let Err(e) =
                    report(ctx, Kind::Pod, ns, name, uid, REASON_TOKEN_FAILED, &message).await
                {
                    tracing::warn!(tenant = %ctx.tenant, %ns, %name, error = %e,
                        "the Event about a failed TokenRequest was not written");
                }
            }
            ctx.queue.push_after(key, wait);
        }
    }
    Ok(())
}

/// The nodes the tenant's host pods run on.
pub fn tenant_nodes(host_pods: &[Arc<Value>]) -> Vec<String> {
    let mut nodes: Vec<String> = host_pods
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

async fn node(ctx: &Context, name: &str) -> Result<(), Error> {
    let (Some(tc), Some(hc), Some(pods)) = (
        ctx.tcache(Kind::Node),
        ctx.hcache(Kind::Node),
        ctx.hcache(Kind::Pod),
    ) else {
        return Ok(());
    };
    let host = hc.get("", name);
    let used = tenant_nodes(&pods.list()).iter().any(|n| n == name)
        || host.as_ref().is_some_and(|h| ctx.policy.pool_includes(h));
    let mine = tc.get("", name);
    let api = ctx.tenant_api(Kind::Node, "");
    let tenant_err = |verb, source| Error::Tenant {
        verb,
        kind: Kind::Node,
        name: name.into(),
        source,
    };
    match (used, host) {
        (true, Some(h)) => {
            let (want, status) = nodes::tenant_node(&h, &ctx.policy);
            match &mine {
                None => {
                    let data: DynamicObject = match serde_json::from_value(want) {
                        Ok(d) => d,
                        Err(_) => return Ok(()),
                    };
                    match api.create(&PostParams::default(), &data).await {
                        Ok(_) => {}
                        Err(e) if is_conflict(&e) => {}
                        Err(e) => return Err(tenant_err("create", e)),
                    }
                    ctx.tenant_status(Kind::Node, "", name, status).await
                }
                Some(current) => {
                    if !up_to_date(current, &want) {
                        let patch = json!({"metadata": {"labels": want["metadata"]["labels"]},
                            "spec": want["spec"]});
                        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .map_err(|e| tenant_err("update", e))?;
                    }
                    if !contains(&current["status"], &Value::Object(status.clone())) {
                        ctx.tenant_status(Kind::Node, "", name, status).await?;
                    }
                    Ok(())
                }
            }
        }
        _ => {
            if mine.is_some() {
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_gone(&e) => {}
                    Err(e) => return Err(tenant_err("delete", e)),
                }
            }
            Ok(())
        }
    }
}

/// Why a tenant pod with resource claims cannot go to the host: the tenant may not use
/// devices, or the host does not serve (or lets Fabrik use) `resource.k8s.io/v1`.
fn claims_refused(ctx: &Context, pod: &Value) -> Option<&'static str> {
    let claims = pod["spec"]["resourceClaims"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    if !claims {
        return None;
    }
    if !ctx.policy.device_classes {
        return Some(
            "the tenant's quota allows no devices: its resource claims are not synced to the host",
        );
    }
    let unavailable = ctx
        .hcache(Kind::ResourceClaim)
        .is_none_or(|c| c.is_unavailable());
    unavailable.then_some(
        "the host does not serve resource.k8s.io/v1 (or does not let Fabrik use it): a pod with resource claims cannot run there",
    )
}

/// Copies a host claim's status to its tenant claim (reservations naming tenant pods).
async fn claim_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    tobj: Option<&Value>,
    host: &Value,
) -> Result<(), Error> {
    let Some(t) = tobj else {
        return Ok(());
    };
    let host_pods = ctx.hcache(Kind::Pod);
    let status = claims::tenant_claim_status(host, |pod| {
        host_pods.and_then(|c| c.get(&ctx.host_namespace, pod))
    });
    if claims::status_matches(&t["status"], &status) {
        return Ok(());
    }
    ctx.tenant_status(Kind::ResourceClaim, ns, name, status)
        .await
}

/// Mirrors a host DeviceClass into the tenant (when its policy lets it use devices), and
/// removes mirrors of classes the host no longer has. A tenant class the syncer did not make
/// is left alone.
async fn device_class(ctx: &Context, name: &str) -> Result<(), Error> {
    let (Some(tc), Some(hc)) = (ctx.tcache(Kind::DeviceClass), ctx.hcache(Kind::DeviceClass))
    else {
        return Ok(());
    };
    let host = hc.get("", name).filter(|_| ctx.policy.device_classes);
    let mine = tc.get("", name);
    let api = ctx.tenant_api(Kind::DeviceClass, "");
    let tenant_err = |verb, source| Error::Tenant {
        verb,
        kind: Kind::DeviceClass,
        name: name.into(),
        source,
    };
    match (host, mine) {
        (Some(h), None) => {
            let Ok(data) = serde_json::from_value::<DynamicObject>(claims::tenant_device_class(&h))
            else {
                return Ok(());
            };
            match api.create(&PostParams::default(), &data).await {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()),
                Err(e) => Err(tenant_err("create", e)),
            }
        }
        (Some(h), Some(m)) if claims::is_mirror(&m) => {
            let mut want = claims::tenant_device_class(&h);
            if up_to_date(&m, &want) {
                return Ok(());
            }
            want["metadata"]["resourceVersion"] = m["metadata"]["resourceVersion"].clone();
            let Ok(data) = serde_json::from_value::<DynamicObject>(want) else {
                return Ok(());
            };
            api.replace(name, &PostParams::default(), &data)
                .await
                .map(|_| ())
                .map_err(|e| tenant_err("update", e))
        }
        (None, Some(m)) if claims::is_mirror(&m) => {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if is_gone(&e) => Ok(()),
                Err(e) => Err(tenant_err("delete", e)),
            }
        }
        _ => Ok(()),
    }
}

async fn event(ctx: &Context, host_ns: &str, name: &str) -> Result<(), Error> {
    let Some(ev) = ctx.hcache(Kind::Event).and_then(|c| c.get(host_ns, name)) else {
        return Ok(());
    };
    let io = &ev["involvedObject"];
    let Some(kind) = io["kind"].as_str().and_then(Kind::from_kind_name) else {
        return Ok(());
    };
    if ev["source"]["component"] == fabrik_api::QUEUE_EVENT_SOURCE {
        // The GPU queue's: the syncer tells the tenant itself (see `pod`).
        return Ok(());
    }
    let obj_name = io["name"].as_str().unwrap_or("");
    let Some(origin) = ctx
        .hcache(kind)
        .and_then(|c| c.get(&ctx.host_namespace, obj_name))
        .and_then(|h| naming::origin(&h))
        .filter(|o| o.tenant == ctx.tenant)
    else {
        return Ok(());
    };
    let api_version = kind.api_resource().api_version;
    // (The object it is about is looked up only for a hashed name in its message.)
    let names = |w: &str| {
        let about = ctx
            .tcache(kind)
            .and_then(|c| c.get(&origin.namespace, &origin.name));
        ctx.hashed_name(w, about.as_deref(), &origin.namespace)
    };
    let want = events::tenant_event(&ev, &origin, &api_version, &names);
    let api = ctx.tenant_api(Kind::Event, &origin.namespace);
    let ename = want["metadata"]["name"].as_str().unwrap_or("").to_string();
    let Ok(data) = serde_json::from_value::<DynamicObject>(want.clone()) else {
        return Ok(());
    };
    match api.create(&PostParams::default(), &data).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => {
            let mut patch = Map::new();
            for f in ["count", "lastTimestamp", "message", "reason", "type"] {
                if !want[f].is_null() {
                    patch.insert(f.into(), want[f].clone());
                }
            }
            match api
                .patch(
                    &ename,
                    &PatchParams::default(),
                    &Patch::Merge(&Value::Object(patch)),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if is_gone(&e) => Ok(()),
                Err(source) => Err(Error::Tenant {
                    verb: "update",
                    kind: Kind::Event,
                    name: ename,
                    source,
                }),
            }
        }
        Err(source) => Err(Error::Tenant {
            verb: "create",
            kind: Kind::Event,
            name: ename,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_on_the_host_are_not_differences() {
        let have = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "sessionAffinity": "None"}, "metadata": {"labels": {"a": "1"}, "annotations": {"x": "1", "y": "2"}}});
        let want = json!({"spec": {"ports": [{"port": 80}]}, "metadata": {"labels": {"a": "1"}, "annotations": {"x": "1"}}});
        assert!(up_to_date(&have, &want));
        let changed =
            json!({"spec": {"ports": [{"port": 81}]}, "metadata": {"labels": {"a": "1"}}});
        assert!(!up_to_date(&have, &changed));
        let relabelled = json!({"metadata": {"labels": {"a": "2"}}});
        assert!(!up_to_date(&have, &relabelled));
    }

    #[test]
    fn removed_data_keys_are_differences() {
        let have = json!({"data": {"a": "1", "b": "2"}, "metadata": {}});
        let want = json!({"data": {"a": "1"}, "metadata": {}});
        assert!(!up_to_date(&have, &want));
    }

    #[test]
    fn nodes_in_use_are_deduplicated() {
        let pods = vec![
            Arc::new(json!({"spec": {"nodeName": "b"}})),
            Arc::new(json!({"spec": {"nodeName": "a"}})),
            Arc::new(json!({"spec": {"nodeName": "b"}})),
            Arc::new(json!({"spec": {}})),
        ];
        assert_eq!(tenant_nodes(&pods), vec!["a".to_string(), "b".to_string()]);
    }
}
