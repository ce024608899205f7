//! The generic REST registry: every verb implemented once for every resource, with the
//! resource's [`Strategy`](crate::strategy::Strategy) plugged in where kinds differ.
//!
//! Guarantees:
//! - writes are compare-and-swap on the stored revision (optimistic concurrency); an update
//!   without a `resourceVersion` retries internally, one with a stale one is a 409;
//! - nothing is written when validation fails, when `dryRun` is set, or when an update changes
//!   nothing;
//! - every key is built from the resource's prefix and validated names, so a request can only
//!   touch objects of the resource and namespace it addressed.

mod apply;
mod configs;
mod continue_token;
pub mod lock;
mod patch;
mod subresources;
mod watch;

use std::sync::Arc;

use fabrik_machinery::fields::FieldSelector;
use fabrik_machinery::labels::Selector;
use fabrik_machinery::validation;
use fabrik_store::{ListOptions, Store, StoreError};
use serde_json::{json, Value};

use crate::admission::{
    Admission, Admitted, Chain, Objects, Operation as AdmissionOp, Request as AdmissionRequest,
};
use crate::error::{ApiError, Result};
use crate::object::{self, random_suffix};
use crate::resources::{Catalog, ResourceDef, Subresource};
use crate::strategy::{GracefulDelete, StrategyContext};

pub use patch::apply as apply_patch;
pub use subresources::scale_of;
pub use watch::{WatchEvent, WatchParams};

/// How many times an unconditional write retries after losing a race.
const MAX_RETRIES: usize = 64;

/// The pause after the `attempt`-th lost race: a few milliseconds, growing, so that a write
/// competing with a busy controller gets its turn instead of losing every race.
async fn backoff(attempt: usize) {
    let ms = (attempt as u64).min(20);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// `fieldValidation`: what to do with unknown fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and warn (the server default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter.
    pub fn parse(s: &str) -> Result<FieldValidation> {
        match s {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::BadRequest(format!(
                "fieldValidation must be one of Ignore, Warn, or Strict, got {other:?}"
            ))),
        }
    }
}

/// Options of a write.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// Unknown-field handling.
    pub field_validation: FieldValidation,
    /// The field manager whose changes `metadata.managedFields` records (None: not tracked,
    /// e.g. internal writes and server-side apply, which keeps its own bookkeeping).
    pub field_manager: Option<String>,
    /// Who writes (None: the server itself), for admission.
    pub user: Option<Arc<crate::auth::UserInfo>>,
    /// Create only: keep the object's `.status` where the kind would reset it — for the
    /// server's own objects that are created complete (Local APIServices), one write instead
    /// of a create and a status update. Never set from a request.
    pub with_status: bool,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy` (or `orphanDependents`): how the garbage collector treats dependents.
    pub propagation: Option<Propagation>,
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// Who deletes (None: the server itself), for admission.
    pub user: Option<Arc<crate::auth::UserInfo>>,
}

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the object now; the garbage collector deletes dependents afterwards.
    Background,
    /// Keep the object (finalizer `foregroundDeletion`) until dependents that block it are gone.
    Foreground,
    /// Keep the object (finalizer `orphan`) until dependents no longer reference it.
    Orphan,
}

impl Propagation {
    /// The finalizer the garbage collector acts on for this policy, if any.
    pub fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Background => None,
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
        }
    }
}

/// Options of a list.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    /// Label selector.
    pub labels: Selector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Page size.
    pub limit: Option<usize>,
    /// Continue token from a previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
}

/// What a list answers besides its items.
#[derive(Clone, Debug)]
pub struct ListMeta {
    /// The revision the list is consistent at.
    pub resource_version: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Items after this page (only without selectors).
    pub remaining: Option<u64>,
}

/// A page of a list.
#[derive(Clone, Debug)]
pub struct ListPage {
    /// Items, each with its resourceVersion.
    pub items: Vec<Value>,
    /// The revision the list is consistent at.
    pub resource_version: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Items after this page (only without selectors).
    pub remaining: Option<u64>,
}

/// The result of a write: the object and the warnings to return.
#[derive(Clone, Debug)]
pub struct Written {
    /// The object as stored (or as it would be, for dry runs).
    pub object: Value,
    /// `Warning:` headers.
    pub warnings: Vec<String>,
    /// Whether the object was created (201) rather than updated (200).
    pub created: bool,
}

/// The generic REST registry of one cluster.
pub struct Registry {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    admission: Chain,
    service_ips: Option<Arc<dyn crate::service_ips::ServiceIps>>,
    /// Calls CRD conversion webhooks (set when the cluster is assembled).
    converter: Option<Arc<crate::webhook::Caller>>,
    /// The admission configuration objects admission reads on every write.
    configs: configs::Snapshots,
}

/// Which part of an object a write addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main resource (status is kept from the stored object when the kind has `/status`).
    Main,
    /// `/status`: only `.status` changes.
    Status,
    /// `namespaces/finalize`: only `spec.finalizers` changes.
    Finalize,
}

impl Part {
    /// The part a subresource path addresses.
    pub fn of(sub: Option<Subresource>) -> Part {
        match sub {
            Some(Subresource::Status) => Part::Status,
            Some(Subresource::Finalize) => Part::Finalize,
            _ => Part::Main,
        }
    }
}

/// Upstream `ValidateListOptions` (for a list, not a watch): `resourceVersionMatch` needs a
/// `resourceVersion`, no `continue`, a supported value, and `Exact` a non-zero version. Failures
/// are 422 Invalid on kind `ListOptions` of `meta.k8s.io`, as upstream answers.
fn validate_list_options(params: &ListParams) -> Result<()> {
    let matching = params.resource_version_match.as_deref().unwrap_or("");
    if matching.is_empty() {
        return Ok(());
    }
    let rv = params.resource_version.as_deref().unwrap_or("");
    let field = "resourceVersionMatch";
    let mut causes = Vec::new();
    if rv.is_empty() {
        causes.push(crate::strategy::forbidden(
            field,
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if params
        .continue_token
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        causes.push(crate::strategy::forbidden(
            field,
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if !matches!(matching, "Exact" | "NotOlderThan") {
        causes.push(crate::strategy::not_supported(
            field,
            matching,
            &["Exact", "NotOlderThan", ""],
        ));
    }
    if matching == "Exact" && rv == "0" {
        causes.push(crate::strategy::forbidden(
            field,
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: "ListOptions".into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes,
    })
}

impl Registry {
    /// A registry over `store` serving `catalog`.
    pub fn new(store: Arc<dyn Store>, catalog: Arc<Catalog>) -> Registry {
        Registry {
            store,
            catalog,
            admission: Chain::standard(),
            service_ips: None,
            converter: None,
            configs: configs::Snapshots::default(),
        }
    }

    /// The objects of a kind admission reads on every write (`group/v1` `plural` of
    /// `configs::GROUPS`: admission configurations, PriorityClasses), from a snapshot current
    /// with every write through this registry (see `configs`); none when the kind is not
    /// served or not one of those.
    pub async fn admission_objects(&self, group: &str, plural: &str) -> Result<Arc<Vec<Value>>> {
        if !configs::GROUPS.contains(&group) {
            return Ok(Arc::default());
        }
        let kind = format!("{plural}.{group}");
        if let Some(items) = self.configs.fresh(&kind) {
            return Ok(items);
        }
        let Some(def) = self.resource(group, "v1", plural) else {
            return Ok(Arc::default());
        };
        let generation = self.configs.generation();
        let items = Arc::new(self.list(&def, None, &ListParams::default()).await?.items);
        self.configs.keep(&kind, generation, items.clone());
        Ok(items)
    }

    /// The registry converting custom resources with conversion webhooks through `caller`.
    pub fn with_converter(mut self, caller: Arc<crate::webhook::Caller>) -> Registry {
        self.converter = Some(caller);
        self
    }

    /// Converts `objects` to `def`'s version `desired` through the CRD's webhook (a kind
    /// without one: the objects as they are, `apiVersion` set).
    pub(crate) async fn convert(
        &self,
        def: &ResourceDef,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>> {
        let webhook = match &def.conversion {
            None => {
                return Ok(objects
                    .into_iter()
                    .map(|mut o| {
                        o["apiVersion"] = json!(desired);
                        o
                    })
                    .collect())
            }
            Some(crate::resources::Conversion::Builtin(convert)) => {
                return objects
                    .iter()
                    .map(|o| {
                        convert(o, desired).map_err(|e| {
                            ApiError::Internal(format!(
                                "cannot convert {} to {desired}: {e}",
                                def.group_resource()
                            ))
                        })
                    })
                    .collect();
            }
            Some(crate::resources::Conversion::Webhook(webhook)) => webhook,
        };
        let caller = self
            .converter
            .clone()
            .ok_or_else(|| ApiError::Internal("conversion webhooks are not set up".into()))?;
        // Boxed: the call reads the webhook's Service through this registry.
        let mut out = Box::pin(crate::webhook::conversion::convert(
            &caller, self, def, webhook, objects, desired,
        ))
        .await?;
        // What the webhook wrote is pruned to the schema of the version it is now at, as a
        // request body would be, before it is stored or served.
        let version = desired.rsplit('/').next().unwrap_or(desired);
        if let Some(target) = self.catalog.get(&def.group, version, &def.plural) {
            for o in &mut out {
                target.schemas.get().prune_unknown(&target.definition, o);
            }
        }
        Ok(out)
    }

    /// A stored object as `def` serves it (converted by the CRD's webhook where it has one).
    pub(crate) async fn read(
        &self,
        def: &ResourceDef,
        kv: &fabrik_store::KeyValue,
    ) -> Result<Value> {
        if def.conversion.is_none() {
            return object::decode_as(kv, &def.api_version());
        }
        let obj = object::decode(kv)?;
        let mut out = self.convert(def, vec![obj], &def.api_version()).await?;
        out.pop()
            .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
    }

    /// `obj` as it is stored: at the storage version, converted by the CRD's webhook where it
    /// has one (others are stored as written).
    pub(crate) async fn for_storage(&self, def: &ResourceDef, obj: &Value) -> Result<Value> {
        match (&def.conversion, &def.storage_version) {
            (Some(_), Some(storage)) => {
                let desired = format!("{}/{storage}", def.group);
                let mut out = self.convert(def, vec![obj.clone()], &desired).await?;
                out.pop()
                    .ok_or_else(|| ApiError::Internal("conversion returned no object".into()))
            }
            _ => Ok(obj.clone()),
        }
    }

    fn strategy_context(&self, opts: &WriteOptions) -> StrategyContext<'_> {
        StrategyContext {
            store: self.store.as_ref(),
            service_ips: self.service_ips.as_deref(),
            dry_run: opts.dry_run,
        }
    }

    /// The registry with Service IPs from `source` (see [`crate::service_ips`]).
    pub fn with_service_ips(
        mut self,
        source: Option<Arc<dyn crate::service_ips::ServiceIps>>,
    ) -> Registry {
        self.service_ips = source;
        self
    }

    /// The registry with `plugins` added to its admission chain (each after the plugins of its
    /// [`crate::admission::Order`]). The chain is complete before the registry is shared.
    pub fn with_admission(
        mut self,
        plugins: impl IntoIterator<Item = Arc<dyn Admission>>,
    ) -> Registry {
        self.admission = std::mem::take(&mut self.admission).with(plugins);
        self
    }

    /// The names of the admission plugins, in the order they run.
    pub fn admission_names(&self) -> Vec<&'static str> {
        self.admission.names()
    }

    #[allow(clippy::too_many_arguments)]
    fn admission_request<'a>(
        &'a self,
        def: &'a ResourceDef,
        op: AdmissionOp,
        ns: Option<&'a str>,
        part: Part,
        opts: &'a WriteOptions,
    ) -> AdmissionRequest<'a> {
        AdmissionRequest {
            def,
            op,
            subresource: match part {
                Part::Main => None,
                Part::Status => Some("status"),
                Part::Finalize => Some("finalize"),
            },
            namespace: ns.filter(|_| def.namespaced),
            user: opts.user.as_deref(),
            dry_run: opts.dry_run,
            objects: self,
            warnings: Default::default(),
        }
    }

    /// The served resources.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Checks an incoming object's types and unknown fields against the kind's schema. Returns
    /// the warnings to send (for `Warn`).
    pub fn check_object(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        fv: FieldValidation,
    ) -> Result<Vec<String>> {
        if !obj.is_object() {
            return Err(ApiError::BadRequest(
                "the body of the request was in an unknown format: expected a JSON object".into(),
            ));
        }
        let unknown = def.schemas.get().prune_unknown(&def.definition, obj);
        let mut warnings = Vec::new();
        if !unknown.is_empty() {
            let msgs: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            match fv {
                FieldValidation::Strict => {
                    let text = if msgs.len() == 1 {
                        msgs.join("")
                    } else {
                        msgs.join(", ")
                    };
                    return Err(ApiError::BadRequest(format!(
                        "strict decoding error: {text}"
                    )));
                }
                FieldValidation::Warn => warnings = msgs,
                FieldValidation::Ignore => {}
            }
        }
        if let Some(check) = def.type_check {
            check(obj).map_err(|e| {
                ApiError::BadRequest(format!(
                    "unable to decode {} {}: {e}",
                    def.kind,
                    def.api_version()
                ))
            })?;
        }
        Ok(warnings)
    }

    fn validate_meta(&self, def: &ResourceDef, obj: &Value) -> Result<()> {
        let mut causes = validation::validate_object_meta(
            &obj["metadata"],
            def.namespaced,
            def.strategy.name_validator(),
        );
        causes.extend(def.strategy.validate(obj));
        self.invalid_if_any(def, obj, causes)
    }

    fn invalid_if_any(
        &self,
        def: &ResourceDef,
        obj: &Value,
        causes: Vec<validation::FieldError>,
    ) -> Result<()> {
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::Invalid {
            kind: def.kind.clone(),
            group: def.group.clone(),
            name: obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
            causes,
        })
    }

    /// Creates an object. `ns` is the namespace from the path (namespaced kinds).
    pub async fn create(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let _written = self.configs.write(&def.group);
        let warnings = self.check_object(def, &mut obj, opts.field_validation)?;
        self.set_type_meta(def, &mut obj)?;
        let meta = obj
            .as_object_mut()
            .and_then(|o| {
                o.entry("metadata").or_insert_with(|| json!({}));
                o.get_mut("metadata")
            })
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::BadRequest("metadata must be an object".into()))?;
        if def.namespaced {
            let ns = ns.ok_or_else(|| {
                ApiError::BadRequest("the namespace of the object must be given in the path".into())
            })?;
            match meta.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ))
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(f);
        }
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(object::now()));
        let generate = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
            .map(str::to_string);
        let named = meta
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if obj.get("spec").is_some() {
            obj["metadata"]["generation"] = json!(1);
        }
        if def.has(Subresource::Status)
            && def.strategy.reset_status_on_create()
            && !opts.with_status
        {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        let attempts = if named || generate.is_none() { 1 } else { 8 };
        let mut last_err = None;
        for _ in 0..attempts {
            let mut candidate = obj.clone();
            if let (false, Some(g)) = (named, &generate) {
                candidate["metadata"]["name"] = json!(format!("{g}{}", random_suffix()));
            }
            def.strategy.prepare_for_create(&mut candidate);
            def.strategy
                .allocate(&self.strategy_context(opts), &mut candidate, None)
                .await?;
            let areq = self.admission_request(def, AdmissionOp::Create, ns, Part::Main, opts);
            self.admission.mutate(&areq, &mut candidate, None).await?;
            self.validate_meta(def, &candidate)?;
            let admitted = self.admission.validate(&areq, &candidate, None).await?;
            let mut warnings = warnings.clone();
            warnings.extend(admitted.warnings.iter().cloned());
            if let Some(manager) = opts.field_manager.as_deref() {
                candidate = apply::track(def, None, &candidate, manager, None);
            }
            let name = candidate["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let key = def.key(ns, &name);
            if opts.dry_run {
                if self.store.get(&key).await?.is_some() {
                    return Err(ApiError::AlreadyExists {
                        resource: def.group_resource(),
                        name,
                    });
                }
                return Ok(Written {
                    object: candidate,
                    warnings,
                    created: true,
                });
            }
            def.strategy
                .reserve(&self.strategy_context(opts), &mut candidate, None)
                .await?;
            let stored = self.for_storage(def, &candidate).await?;
            match self.store.create(&key, object::encode(&stored)?).await {
                Ok(kv) => {
                    object::set_resource_version(&mut candidate, kv.mod_revision);
                    return Ok(Written {
                        object: candidate,
                        warnings,
                        created: true,
                    });
                }
                Err(StoreError::AlreadyExists { .. }) if !named && generate.is_some() => {
                    last_err = Some(ApiError::AlreadyExists {
                        resource: def.group_resource(),
                        name,
                    });
                }
                Err(e) => return Err(ApiError::from_store(e, &def.group_resource(), &name)),
            }
        }
        Err(last_err.unwrap_or_else(|| ApiError::Internal("name generation failed".into())))
    }

    fn set_type_meta(&self, def: &ResourceDef, obj: &mut Value) -> Result<()> {
        let api_version = def.api_version();
        let given_kind = obj["kind"].as_str().unwrap_or("");
        let given_version = obj["apiVersion"].as_str().unwrap_or("");
        if !given_kind.is_empty() && given_kind != def.kind {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({given_kind}) does not match the expected kind ({})",
                def.kind
            )));
        }
        if !given_version.is_empty() && given_version != api_version {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({given_version}) does not match the expected API version ({api_version})"
            )));
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(api_version));
            o.insert("kind".into(), json!(def.kind));
        }
        Ok(())
    }

    /// Reads one object.
    pub async fn get(&self, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<Value> {
        let kv = self
            .store
            .get(&def.key(ns, name))
            .await?
            .ok_or_else(|| ApiError::NotFound {
                resource: def.group_resource(),
                name: name.to_string(),
            })?;
        self.read(def, &kv).await
    }

    /// Checks that a field selector uses only fields the kind supports.
    pub fn check_field_selector(&self, def: &ResourceDef, fields: &FieldSelector) -> Result<()> {
        for req in fields.requirements() {
            let f = req.field.as_str();
            let ok = f == "metadata.name"
                || (f == "metadata.namespace" && def.namespaced)
                || def.strategy.allows_field(f);
            if !ok {
                return Err(ApiError::BadRequest(format!(
                    "field label not supported: {f}"
                )));
            }
        }
        Ok(())
    }

    /// Whether an object matches label and field selectors.
    pub fn matches(labels: &Selector, fields: &FieldSelector, obj: &Value) -> bool {
        labels.matches(obj["metadata"]["labels"].as_object())
            && (fields.requirements().is_empty()
                || fields.matches(&|f: &str| crate::strategy::field_value(obj, f)))
    }

    /// Lists objects, paged and filtered.
    pub async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        params: &ListParams,
    ) -> Result<ListPage> {
        let mut items = Vec::new();
        let meta = self
            .list_each(def, ns, params, &mut |obj| {
                items.push(obj);
                Ok(())
            })
            .await?;
        Ok(ListPage {
            items,
            resource_version: meta.resource_version,
            continue_token: meta.continue_token,
            remaining: meta.remaining,
        })
    }

    /// Lists objects, handing each selected one to `visit` as soon as it is decoded, so a large
    /// list never holds every object in memory at once. Returns the list's metadata.
    pub async fn list_each(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        params: &ListParams,
        visit: &mut (dyn FnMut(Value) -> Result<()> + Send),
    ) -> Result<ListMeta> {
        self.check_field_selector(def, &params.fields)?;
        validate_list_options(params)?;
        let prefix = def.key_prefix(ns);
        let mut revision = None;
        let mut start_after = None;
        if let Some(token) = params.continue_token.as_deref().filter(|t| !t.is_empty()) {
            let (rv, key) = continue_token::decode(token, &prefix)?;
            revision = Some(rv);
            start_after = Some(key);
        } else if let Some(rv) = params.resource_version.as_deref().filter(|r| !r.is_empty()) {
            let rv = object::parse_resource_version(rv)?;
            match params.resource_version_match.as_deref() {
                Some("Exact") => revision = Some(rv),
                Some("NotOlderThan") | None | Some("") => {
                    let current = self.store.current_revision().await?;
                    if rv > current {
                        return Err(ApiError::Timeout(format!(
                            "Too large resource version: {rv}, current: {current}"
                        )));
                    }
                }
                Some(other) => {
                    return Err(ApiError::BadRequest(format!(
                        "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                    )))
                }
            }
        } else if params
            .resource_version_match
            .as_deref()
            .is_some_and(|m| !m.is_empty())
        {
            return Err(ApiError::BadRequest(
                "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
            ));
        }
        let filtered = !params.labels.is_empty() || !params.fields.requirements().is_empty();
        let limit = params.limit.filter(|l| *l > 0);
        let mut count = 0usize;
        let chunk = limit.map(|l| l.max(if filtered { 500 } else { l }) + 1);
        loop {
            let page = self
                .store
                .list(ListOptions {
                    prefix: prefix.clone(),
                    start_after: start_after.clone(),
                    limit: chunk,
                    revision,
                })
                .await
                .map_err(|e| match e {
                    StoreError::Compacted { .. } if params.continue_token.is_some() => ApiError::Gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                    ),
                    other => ApiError::from_store(other, &def.group_resource(), ""),
                })?;
            revision = Some(page.revision);
            let n = page.items.len();
            let last_key = page.items.last().map(|kv| kv.key.clone());
            for (i, kv) in page.items.into_iter().enumerate() {
                let obj = self.read(def, &kv).await?;
                if !Self::matches(&params.labels, &params.fields, &obj) {
                    continue;
                }
                visit(obj)?;
                count += 1;
                if let Some(l) = limit {
                    if count == l {
                        let more_here = i + 1 < n;
                        let remaining_after = (n - i - 1) as u64 + page.remaining;
                        if more_here || page.remaining > 0 {
                            return Ok(ListMeta {
                                resource_version: page.revision,
                                continue_token: Some(continue_token::encode(
                                    page.revision,
                                    &prefix,
                                    &kv.key,
                                )),
                                remaining: (!filtered).then_some(remaining_after),
                            });
                        }
                        return Ok(ListMeta {
                            resource_version: page.revision,
                            continue_token: None,
                            remaining: None,
                        });
                    }
                }
            }
            if page.remaining == 0 || n == 0 {
                return Ok(ListMeta {
                    resource_version: page.revision,
                    continue_token: None,
                    remaining: None,
                });
            }
            start_after = last_key;
        }
    }

    /// Replaces an object (PUT), or one part of it.
    pub async fn update(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        mut obj: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Written> {
        let _written = self.configs.write(&def.group);
        let warnings = self.check_object(def, &mut obj, opts.field_validation)?;
        self.set_type_meta(def, &mut obj)?;
        match obj["metadata"]["name"].as_str() {
            Some(n) if n == name => {}
            Some(n) if !n.is_empty() => {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )))
            }
            _ => {
                return Err(ApiError::BadRequest(
                    "name is required in the object's metadata".into(),
                ));
            }
        }
        if def.namespaced {
            if let (Some(given), Some(ns)) = (obj["metadata"]["namespace"].as_str(), ns) {
                if !given.is_empty() && given != ns {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
            }
        }
        let expected = object::resource_version(&obj)?;
        let mut written = self
            .update_with(def, ns, name, expected, part, opts, |_old| Ok(obj.clone()))
            .await?;
        written.warnings = warnings;
        Ok(written)
    }

    /// The write loop shared by update, patch and the controllers: read, transform, run the
    /// update pipeline, compare-and-swap; retried when `expected` is None and the write raced.
    #[allow(clippy::too_many_arguments)]
    pub async fn update_with<F>(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        expected: Option<u64>,
        part: Part,
        opts: &WriteOptions,
        mut transform: F,
    ) -> Result<Written>
    where
        F: FnMut(&Value) -> Result<Value>,
    {
        let _written = self.configs.write(&def.group);
        let key = def.key(ns, name);
        for attempt in 0..MAX_RETRIES {
            let kv = self
                .store
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::NotFound {
                    resource: def.group_resource(),
                    name: name.to_string(),
                })?;
            let old = self.read(def, &kv).await?;
            if let Some(rv) = expected {
                if rv != kv.mod_revision {
                    return Err(ApiError::conflict(&def.group_resource(), name));
                }
            }
            let incoming = transform(&old)?;
            let (mut new, admitted) = self
                .prepare_update(def, ns, &old, incoming, part, opts)
                .await?;
            if let Some(manager) = opts.field_manager.as_deref() {
                let sub = (part == Part::Status).then_some("status");
                new = apply::track(def, Some(&old), &new, manager, sub);
            }
            if object::same_ignoring_rv(&new, &old) {
                return Ok(Written {
                    object: old,
                    warnings: Vec::new(),
                    created: false,
                });
            }
            if opts.dry_run {
                return Ok(Written {
                    object: new,
                    warnings: admitted.warnings,
                    created: false,
                });
            }
            let finished = object::is_deleting(&new) && !self.still_held(def, &new);
            if !finished {
                def.strategy
                    .reserve(&self.strategy_context(opts), &mut new, Some(&old))
                    .await?;
            }
            let result = if finished {
                self.store.delete(&key, Some(kv.mod_revision)).await
            } else {
                let stored = self.for_storage(def, &new).await?;
                self.store
                    .update(
                        &key,
                        object::encode_update(&stored, kv.value.len())?,
                        Some(kv.mod_revision),
                    )
                    .await
            };
            match result {
                Ok(stored) => {
                    let mut out = new;
                    object::set_resource_version(&mut out, stored.mod_revision);
                    return Ok(Written {
                        object: out,
                        warnings: admitted.warnings,
                        created: false,
                    });
                }
                Err(StoreError::Conflict { .. }) if expected.is_none() => {
                    backoff(attempt).await;
                    continue;
                }
                Err(e) => return Err(ApiError::from_store(e, &def.group_resource(), name)),
            }
        }
        Err(ApiError::conflict(&def.group_resource(), name))
    }

    /// Whether a deleting object must stay: finalizers remain, a namespace's `spec.finalizers`
    /// remain, or a graceful pod deletion waits for its node.
    fn still_held(&self, def: &ResourceDef, obj: &Value) -> bool {
        let core = def.group.is_empty();
        !object::finalizers(obj).is_empty()
            || (core
                && def.plural == "namespaces"
                && obj["spec"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()))
            || (core
                && def.plural == "pods"
                && matches!(
                    def.strategy.graceful_delete(obj, None),
                    GracefulDelete::Graceful(_)
                )
                && obj["metadata"]["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(0)
                    > 0)
    }

    async fn prepare_update(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        old: &Value,
        incoming: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<(Value, Admitted)> {
        let mut new = match part {
            Part::Main => {
                let mut new = incoming;
                if def.has(Subresource::Status) {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(o) = new.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                new
            }
            Part::Status => {
                let mut new = old.clone();
                match incoming.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                // Server-side apply to /status records its ownership in the object's metadata.
                if let Some(mf) = incoming["metadata"].get("managedFields") {
                    new["metadata"]["managedFields"] = mf.clone();
                }
                new
            }
            Part::Finalize => {
                let mut new = old.clone();
                new["spec"]["finalizers"] = incoming["spec"]["finalizers"].clone();
                new
            }
        };
        self.set_type_meta(def, &mut new)?;
        // Server-owned metadata comes from the stored object.
        let old_meta = &old["metadata"];
        let new_uid = new["metadata"]["uid"].as_str().unwrap_or("").to_string();
        if !new_uid.is_empty() && Some(new_uid.as_str()) != old_meta["uid"].as_str() {
            return Err(ApiError::Invalid {
                kind: def.kind.clone(),
                group: def.group.clone(),
                name: old_meta["name"].as_str().unwrap_or("").to_string(),
                causes: vec![crate::strategy::invalid(
                    "metadata.uid",
                    &new_uid,
                    "field is immutable",
                )],
            });
        }
        let meta = new["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::BadRequest("metadata must be an object".into()))?;
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "name",
            "namespace",
            "generation",
        ] {
            match old_meta.get(f) {
                Some(v) => {
                    meta.insert(f.to_string(), v.clone());
                }
                None => {
                    meta.remove(f);
                }
            }
        }
        meta.remove("selfLink");
        // Finalizers cannot be added once deletion started.
        if object::is_deleting(old) {
            let before = object::finalizers(old);
            if object::finalizers(&new).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::Forbidden(format!(
                    "{} \"{}\" is forbidden: no new finalizers can be added if the object is being deleted",
                    def.group_resource(),
                    old_meta["name"].as_str().unwrap_or("")
                )));
            }
        }
        if part == Part::Main {
            def.strategy.prepare_for_update(&mut new, old);
        }
        if let Some(g) = old["metadata"]["generation"].as_i64() {
            if object::spec_part(&new) != object::spec_part(old) {
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        def.strategy
            .allocate(&self.strategy_context(opts), &mut new, Some(old))
            .await?;
        let areq = self.admission_request(def, AdmissionOp::Update, ns, part, opts);
        self.admission.mutate(&areq, &mut new, Some(old)).await?;
        self.validate_meta(def, &new)?;
        let causes = def.strategy.validate_update(&new, old);
        self.invalid_if_any(def, &new, causes)?;
        let admitted = self.admission.validate(&areq, &new, Some(old)).await?;
        Ok((new, admitted))
    }

    /// Deletes an object: at once, or by setting `deletionTimestamp` when finalizers or a
    /// graceful period keep it. Returns the object and whether it is gone.
    pub async fn delete(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(Value, bool)> {
        let _written = self.configs.write(&def.group);
        let key = def.key(ns, name);
        for attempt in 0..MAX_RETRIES {
            let kv = self
                .store
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::NotFound {
                    resource: def.group_resource(),
                    name: name.to_string(),
                })?;
            let old = self.read(def, &kv).await?;
            if let Some(uid) = &opts.uid {
                if old["metadata"]["uid"].as_str() != Some(uid.as_str()) {
                    return Err(ApiError::Conflict {
                        resource: def.group_resource(),
                        name: name.to_string(),
                        message: format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            old["metadata"]["uid"].as_str().unwrap_or("")
                        ),
                    });
                }
            }
            if let Some(rv) = &opts.resource_version {
                if *rv != kv.mod_revision.to_string() {
                    return Err(ApiError::Conflict {
                        resource: def.group_resource(),
                        name: name.to_string(),
                        message: format!(
                            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                            kv.mod_revision
                        ),
                    });
                }
            }
            if attempt == 0 {
                let areq = AdmissionRequest {
                    def,
                    op: AdmissionOp::Delete,
                    subresource: None,
                    namespace: ns.filter(|_| def.namespaced),
                    user: opts.user.as_deref(),
                    dry_run: opts.dry_run,
                    objects: self,
                    warnings: Default::default(),
                };
                self.admission.validate_delete(&areq, &old).await?;
            }
            let is_namespace = def.group.is_empty() && def.plural == "namespaces";
            let graceful = def.strategy.graceful_delete(&old, opts.grace_period);
            let gc_finalizer = opts
                .propagation
                .and_then(Propagation::finalizer)
                .filter(|_| !is_namespace);
            let keep = is_namespace
                || gc_finalizer.is_some()
                || !object::finalizers(&old).is_empty()
                || matches!(graceful, GracefulDelete::Graceful(_));
            if object::is_deleting(&old)
                && !(opts.grace_period == Some(0) && object::finalizers(&old).is_empty())
            {
                return Ok((old, false));
            }
            if keep {
                let mut new = old.clone();
                let (ts, grace) = match graceful {
                    GracefulDelete::Graceful(g) => (object::now_plus(g), g),
                    GracefulDelete::Immediate => (object::now(), 0),
                };
                new["metadata"]["deletionTimestamp"] = json!(ts);
                new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                if let Some(f) = gc_finalizer {
                    let mut all = object::finalizers(&new);
                    if !all.iter().any(|x| x == f) {
                        all.push(f.to_string());
                    }
                    new["metadata"]["finalizers"] = json!(all);
                }
                if is_namespace {
                    new["status"]["phase"] = json!("Terminating");
                }
                if opts.dry_run {
                    return Ok((new, false));
                }
                let stored = self.for_storage(def, &new).await?;
                match self
                    .store
                    .update(
                        &key,
                        object::encode_unchecked(&stored)?,
                        Some(kv.mod_revision),
                    )
                    .await
                {
                    Ok(stored) => {
                        object::set_resource_version(&mut new, stored.mod_revision);
                        return Ok((new, false));
                    }
                    Err(StoreError::Conflict { .. }) => {
                        backoff(attempt).await;
                        continue;
                    }
                    Err(e) => return Err(ApiError::from_store(e, &def.group_resource(), name)),
                }
            }
            if opts.dry_run {
                return Ok((old, true));
            }
            match self.store.delete(&key, Some(kv.mod_revision)).await {
                Ok(_) => return Ok((old, true)),
                Err(StoreError::Conflict { .. }) => {
                    backoff(attempt).await;
                    continue;
                }
                Err(e) => return Err(ApiError::from_store(e, &def.group_resource(), name)),
            }
        }
        Err(ApiError::conflict(&def.group_resource(), name))
    }

    /// Admits a connection to `name` (`sub`: `exec`, `attach`, `portforward`) with `options`
    /// by `user`; returns the warnings.
    pub async fn admit_connect(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        name: &str,
        sub: &'static str,
        options: &Value,
        user: Option<&crate::auth::UserInfo>,
    ) -> Result<Vec<String>> {
        let areq = AdmissionRequest {
            def,
            op: AdmissionOp::Connect,
            subresource: Some(sub),
            namespace: ns.filter(|_| def.namespaced),
            user,
            dry_run: false,
            objects: self,
            warnings: Default::default(),
        };
        Ok(self
            .admission
            .validate_connect(&areq, name, options)
            .await?
            .warnings)
    }

    /// Deletes every object a list selects; returns the deleted (or deleting) objects.
    pub async fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        params: &ListParams,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>> {
        let page = self
            .list(
                def,
                ns,
                &ListParams {
                    limit: None,
                    continue_token: None,
                    ..params.clone()
                },
            )
            .await?;
        let mut out = Vec::new();
        for obj in page.items {
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            let obj_ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
            match self
                .delete(def, obj_ns.as_deref().or(ns), &name, opts)
                .await
            {
                Ok((o, _)) => out.push(o),
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Looks up the resource that serves `kind` in `group` (for controllers).
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.catalog.get(group, version, plural)
    }
}

#[async_trait::async_trait]
impl Objects for Registry {
    fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    async fn get(&self, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<Value> {
        Registry::get(self, def, ns, name).await
    }

    async fn list(&self, def: &ResourceDef, ns: Option<&str>) -> Result<Vec<Value>> {
        Ok(Registry::list(self, def, ns, &ListParams::default())
            .await?
            .items)
    }

    async fn admission_objects(&self, group: &str, plural: &str) -> Result<Arc<Vec<Value>>> {
        Registry::admission_objects(self, group, plural).await
    }

    async fn convert(
        &self,
        def: &ResourceDef,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>> {
        Registry::convert(self, def, objects, desired).await
    }

    async fn exclusive(&self, name: &str) -> Result<Box<dyn std::any::Any + Send>> {
        Ok(Box::new(lock::acquire(self.store.clone(), name).await?))
    }
}

#[cfg(test)]
mod tests;

/// For the cost example only: the managedFields bookkeeping of one create.
#[doc(hidden)]
pub fn track_for_bench(def: &ResourceDef, obj: &Value) -> Value {
    apply::track(def, None, obj, "bench", None)
}
