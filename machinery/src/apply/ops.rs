//! The two writes that keep `metadata.managedFields`: [`apply`] and [`update_managed_fields`].

use serde_json::{Map, Value};

use super::conflict::Conflict;
use super::fieldset::FieldSet;
use super::managed::{
    managed_fields_of, set_managed_fields, strip_managed_fields, ManagedFieldsEntry, Operation,
};
use super::path::{Path, PathElement};
use super::typed::{Flat, ShapeError, Typer};
use super::ApplyError;
use crate::patch::PatchSchema;

/// The Update manager the existing fields of an object without managedFields are given to on
/// its first apply (as upstream).
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Metadata fields nobody owns (upstream strips them from every manager's set).
const UNOWNED_METADATA: [&str; 9] = [
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// What every managedFields write needs besides the objects.
#[derive(Clone, Copy)]
pub struct WriteContext<'a> {
    /// How fields merge.
    pub schema: &'a dyn PatchSchema,
    /// The object's definition in `schema` (e.g. `io.k8s.api.apps.v1.Deployment`); empty for
    /// an untyped object.
    pub definition: &'a str,
    /// The apiVersion of the request (`apps/v1`), recorded in the entries.
    pub api_version: &'a str,
    /// `Some("status")` for a write to `/status`: only `.status` (and metadata) fields are
    /// recorded and applied. `None` for the main resource: `.status` is neither recorded nor
    /// applied. Other subresources record everything.
    pub subresource: Option<&'a str>,
    /// The time recorded on the entries that change (RFC 3339, e.g. `2024-05-01T10:00:00Z`).
    pub now: &'a str,
}

/// Whether anyone may own `path`: not `apiVersion`, `kind`, `metadata` itself, or one of the
/// metadata fields nobody owns. Independent of the (sub)resource being written.
fn ownable(path: &Path) -> bool {
    let mut it = path.0.iter();
    let first = match it.next() {
        Some(PathElement::Field(f)) => f.as_str(),
        _ => return true,
    };
    match (first, it.next(), it.next()) {
        ("apiVersion" | "kind" | "metadata", None, _) => false,
        ("metadata", Some(PathElement::Field(f)), None) => !UNOWNED_METADATA.contains(&f.as_str()),
        _ => true,
    }
}

impl WriteContext<'_> {
    /// Whether a top-level field belongs to what this write may own.
    fn owns_top_level(&self, field: &str) -> bool {
        match self.subresource {
            None => field != "status",
            Some("status") => matches!(field, "status" | "metadata" | "apiVersion" | "kind"),
            Some(_) => true,
        }
    }

    /// Whether `path` may be owned by this write: not reset by the (sub)resource, not one of
    /// the metadata fields nobody owns.
    fn recordable(&self, path: &Path) -> bool {
        match path.0.first() {
            Some(PathElement::Field(f)) if !self.owns_top_level(f) => false,
            _ => ownable(path),
        }
    }

    fn entry(&self, manager: &str, operation: Operation, fields: FieldSet) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: manager.to_owned(),
            operation,
            api_version: self.api_version.to_owned(),
            time: Some(self.now.to_owned()),
            fields,
            subresource: self.subresource.map(str::to_owned),
        }
    }
}

/// The field set of `object` (a member per leaf, list element and map key; see
/// [`FieldSet`]), typed by `definition` in `schema`. Lists that cannot be keyed are errors.
pub fn field_set(
    object: &Value,
    schema: &dyn PatchSchema,
    definition: &str,
) -> Result<FieldSet, ShapeError> {
    Typer::new(schema, definition).field_set(object, true)
}

/// What changed between two objects, as upstream's comparison reports it.
struct Changes {
    /// Members new in the second object or whose leaf value changed.
    changed: FieldSet,
    /// Members gone from the second object.
    removed: FieldSet,
}

fn compare(old: &Flat, new: &Flat, ctx: &WriteContext<'_>) -> Changes {
    let mut changed = FieldSet::new();
    let mut removed = FieldSet::new();
    for (path, value) in &new.members {
        let differs = match old.members.get(path) {
            None => true,
            Some(before) => before != value,
        };
        if differs && ctx.recordable(path) {
            changed.insert(path.clone());
        }
    }
    for path in &new.maps {
        let appeared = !old.maps.contains(path) && !old.members.contains_key(path);
        if appeared && ctx.recordable(path) {
            changed.insert(path.clone());
        }
    }
    let gone = |path: &Path| !new.members.contains_key(path) && !new.maps.contains(path);
    for path in old.members.keys().chain(&old.maps) {
        if gone(path) && ctx.recordable(path) {
            removed.insert(path.clone());
        }
    }
    Changes { changed, removed }
}

/// Removes the top-level fields this write does not apply (`status` on the main resource,
/// all but `status` and metadata on `/status`).
fn strip_reset_fields(config: &mut Value, ctx: &WriteContext<'_>) {
    if let Value::Object(m) = config {
        m.retain(|k, _| ctx.owns_top_level(k));
    }
}

/// Server-side apply of `config` by `manager`.
///
/// `live` is the current object (`None` or `null` to create). Returns the merged object with
/// updated `metadata.managedFields`, with upstream's semantics:
///
/// - fields in the configuration are set (objects merge, `map` lists merge by key, `set` lists
///   by value, atomic lists and maps are replaced, `null` removes);
/// - fields the manager applied before but no longer applies are removed, unless another
///   manager (or this configuration) still owns them;
/// - changing the value of a field another manager owns is a conflict
///   ([`ApplyError::Conflicts`]) unless `force`, which moves the field to this manager;
///   setting it to the value it has already shares ownership;
/// - fields removed from the object are removed from every manager's set, and managers that
///   own nothing more disappear;
/// - an existing object without managedFields first has its fields given to the Update
///   manager [`BEFORE_FIRST_APPLY`].
///
/// The manager's entry gets operation `Apply`, `ctx.api_version` and time `ctx.now`; other
/// entries keep their times. The caller still runs its strategies on the result (status
/// reset, validation).
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    ctx: &WriteContext<'_>,
) -> Result<Value, ApplyError> {
    if manager.is_empty() {
        return Err(ApplyError::MissingManager);
    }
    check_config(config, ctx)?;
    let live = live.filter(|v| !v.is_null());
    let mut entries = match live {
        Some(Value::Object(_)) => live
            .map(managed_fields_of)
            .transpose()
            .map_err(ApplyError::ManagedFields)?
            .unwrap_or_default(),
        Some(_) => return Err(ApplyError::InvalidLive),
        None => Vec::new(),
    };
    let mut live_obj = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    strip_managed_fields(&mut live_obj);
    let typer = Typer::new(ctx.schema, ctx.definition);
    let live_flat = typer.flatten(&live_obj, false).unwrap_or_default();

    if live.is_some() && entries.is_empty() {
        let mut owned: FieldSet = live_flat.members.keys().cloned().collect();
        owned.retain(|p| ctx.recordable(p));
        entries.push(ctx.entry(BEFORE_FIRST_APPLY, Operation::Update, owned));
    }

    let mut config = config.clone();
    strip_reset_fields(&mut config, ctx);
    strip_managed_fields(&mut config);
    let mut applied = typer
        .field_set(&config, true)
        .map_err(ApplyError::InvalidShape)?;
    applied.retain(|p| ctx.owns_top_level_path(p));
    let mut merged = typer
        .merge(&live_obj, &config)
        .map_err(ApplyError::InvalidShape)?;

    let me = ctx.entry(manager, Operation::Apply, applied);
    let last = match entries.iter().position(|e| e.same_manager(&me)) {
        Some(i) => std::mem::replace(&mut entries[i], me).fields,
        None => {
            entries.push(me);
            FieldSet::new()
        }
    };
    if !last.is_empty() {
        let owned = entries
            .iter()
            .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
        let prune = last
            .with_named_prefixes()
            .difference(&owned.with_named_prefixes());
        typer.remove(&mut merged, &prune);
    }

    let merged_flat = typer.flatten(&merged, false).unwrap_or_default();
    let changes = compare(&live_flat, &merged_flat, ctx);
    let mut conflicts = Vec::new();
    for e in &entries {
        if e.operation == Operation::Apply
            && e.manager == manager
            && e.subresource.as_deref() == ctx.subresource
        {
            continue;
        }
        for path in e.fields.intersection(&changes.changed).iter() {
            conflicts.push(Conflict {
                manager: e.manager.clone(),
                operation: e.operation,
                api_version: e.api_version.clone(),
                subresource: e.subresource.clone(),
                field: path.to_string(),
            });
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(conflicts));
    }
    for e in &mut entries {
        let is_me = e.operation == Operation::Apply
            && e.manager == manager
            && e.subresource.as_deref() == ctx.subresource;
        if !is_me {
            e.fields = e
                .fields
                .difference(&changes.changed)
                .difference(&changes.removed);
        }
        e.fields.retain(|p| ctx.recordable(p));
    }
    set_managed_fields(&mut merged, entries);
    Ok(merged)
}

impl WriteContext<'_> {
    /// [`WriteContext::owns_top_level`] for a path's first element.
    fn owns_top_level_path(&self, path: &Path) -> bool {
        match path.0.first() {
            Some(PathElement::Field(f)) => self.owns_top_level(f),
            _ => true,
        }
    }
}

/// Checks what upstream checks of an applied configuration before merging it.
fn check_config(config: &Value, ctx: &WriteContext<'_>) -> Result<(), ApplyError> {
    let Value::Object(m) = config else {
        return Err(ApplyError::InvalidConfig(
            "the applied configuration must be a JSON object".into(),
        ));
    };
    match m.get("apiVersion") {
        Some(Value::String(v)) if v == ctx.api_version => {}
        Some(Value::String(v)) => {
            return Err(ApplyError::IncorrectVersion {
                specified: v.clone(),
                expected: ctx.api_version.to_owned(),
            })
        }
        _ => {
            return Err(ApplyError::InvalidConfig(
                "apiVersion must be set in the applied configuration".into(),
            ))
        }
    }
    if !matches!(m.get("kind"), Some(Value::String(k)) if !k.is_empty()) {
        return Err(ApplyError::InvalidConfig(
            "kind must be set in the applied configuration".into(),
        ));
    }
    match m.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(meta)) => {
            if !meta.get("managedFields").is_none_or(Value::is_null) {
                return Err(ApplyError::InvalidConfig(
                    "metadata.managedFields must be nil".into(),
                ));
            }
        }
        Some(_) => {
            return Err(ApplyError::InvalidConfig(
                "metadata must be an object".into(),
            ))
        }
    }
    Ok(())
}

/// Whether `managedFields` is upstream's reset request: a list of one empty entry.
fn is_reset_request(object: &Value) -> bool {
    match object.get("metadata").and_then(|m| m.get("managedFields")) {
        Some(Value::Array(list)) => {
            matches!(list.as_slice(), [Value::Object(e)] if e.is_empty())
        }
        _ => false,
    }
}

/// Records a non-apply write (create, update, patch) of `new` by `manager` with operation
/// `Update`; returns `new` with its `metadata.managedFields` set.
///
/// `old` is the object before the write (`None` or `null` for a create). As upstream:
///
/// - the managedFields a main-resource write carries in `new` are taken as the starting point
///   when they are a valid non-empty list (clients may edit them); `[{}]` clears them;
///   otherwise (and always for a subresource) `old`'s are (unreadable ones are dropped);
/// - an existing object without managedFields stays untracked (only creates and applies
///   start tracking);
/// - fields added or changed become the manager's (with time `ctx.now`) and are taken from
///   every other manager; removed fields leave every set; empty entries disappear;
/// - `.status` changes are not recorded on the main resource, nor non-status ones on
///   `/status`.
pub fn update_managed_fields(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    ctx: &WriteContext<'_>,
) -> Value {
    let old = old.filter(|v| !v.is_null());
    let mut out = new.clone();
    if ctx.subresource.is_none() && is_reset_request(new) {
        strip_managed_fields(&mut out);
        return out;
    }
    let from_new = match ctx.subresource {
        None => managed_fields_of(new).ok().filter(|e| !e.is_empty()),
        Some(_) => None,
    };
    let mut entries = match from_new {
        Some(entries) => entries,
        None => old
            .and_then(|o| managed_fields_of(o).ok())
            .unwrap_or_default(),
    };
    if entries.is_empty() && old.is_some() {
        strip_managed_fields(&mut out);
        return out;
    }
    let typer = Typer::new(ctx.schema, ctx.definition);
    let mut old_obj = old.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    strip_managed_fields(&mut old_obj);
    let mut new_obj = new.clone();
    strip_managed_fields(&mut new_obj);
    let old_flat = typer.flatten(&old_obj, false).unwrap_or_default();
    let new_flat = typer.flatten(&new_obj, false).unwrap_or_default();
    let changes = compare(&old_flat, &new_flat, ctx);

    for e in &mut entries {
        e.fields = e
            .fields
            .difference(&changes.changed)
            .difference(&changes.removed);
        // Other managers keep what this write could not touch (a /status write leaves their
        // spec alone, a main write their status); only never-owned paths are dropped.
        e.fields.retain(ownable);
    }
    if !changes.changed.is_empty() {
        let me = ctx.entry(manager, Operation::Update, FieldSet::new());
        match entries.iter_mut().find(|e| e.same_manager(&me)) {
            Some(e) => {
                e.fields = e.fields.union(&changes.changed);
                e.time = me.time;
            }
            None => entries.push(ManagedFieldsEntry {
                fields: changes.changed,
                ..me
            }),
        }
    }
    set_managed_fields(&mut out, entries);
    out
}
