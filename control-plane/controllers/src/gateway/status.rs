//! The statuses a Gateway controller writes, computed from a snapshot of the cluster
//! ([`World`]): its GatewayClasses, their Gateways (listeners and the routes attached to each)
//! and its entries in the `status.parents` of routes that name those Gateways.
//!
//! Pure: [`plan`] takes the snapshot and the time, and returns only the writes that change
//! something. A status equal to the stored one, `lastTransitionTime` aside, is not written, and a
//! condition whose status did not change keeps its `lastTransitionTime`, so a pass over an
//! unchanged cluster writes nothing (no write loops on our own watch events).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{json, Value};

use super::attach::{self, Listener, ParentRef, Route, RouteKind, GROUP};
use super::refs::{self, Grant, Rule};

/// The `controllerName` of this implementation.
pub const CONTROLLER_NAME: &str = "fabrik.dev/simulated-gateway";

/// An object of the snapshot: its identity and the parts of it statuses are computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Object {
    /// Its namespace (empty for a GatewayClass).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.resourceVersion`, the precondition of the status write.
    pub resource_version: Option<String>,
    /// Its `spec`.
    pub spec: Value,
    /// Its `status` (null when it has none).
    pub status: Value,
}

/// What [`plan`] reads: everything that decides the statuses.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// GatewayClasses (of every controller).
    pub classes: Vec<Object>,
    /// Gateways (of every class).
    pub gateways: Vec<Object>,
    /// HTTPRoutes and GRPCRoutes.
    pub routes: Vec<(RouteKind, Object)>,
    /// ReferenceGrants.
    pub grants: Vec<Grant>,
    /// Services, as (namespace, name).
    pub services: BTreeSet<(String, String)>,
    /// Namespaces and their labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

/// The kind of object a [`Write`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A GatewayClass.
    GatewayClass,
    /// A Gateway.
    Gateway,
    /// An HTTPRoute or a GRPCRoute.
    Route(RouteKind),
}

impl Target {
    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            Target::GatewayClass => "GatewayClass",
            Target::Gateway => "Gateway",
            Target::Route(k) => k.name(),
        }
    }
}

/// A status to write: merged into the object's `status` (each field given replaces the stored
/// one; null removes it), with the object's resourceVersion as precondition.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// The object's kind.
    pub target: Target,
    /// Its namespace (empty for a GatewayClass).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The resourceVersion the status was computed from.
    pub resource_version: Option<String>,
    /// The status fields.
    pub status: Value,
    /// The new status in a few words, for the log.
    pub summary: String,
}

/// A condition to report.
struct Cond {
    type_: &'static str,
    ok: bool,
    reason: &'static str,
    message: String,
}

impl Cond {
    fn new(
        type_: &'static str,
        ok: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Cond {
        Cond {
            type_,
            ok,
            reason,
            message: message.into(),
        }
    }
}

/// The conditions as written: with `observedGeneration`, and the `lastTransitionTime` of the
/// condition of the same type in `previous` (an array) when its status is unchanged.
fn conditions(want: Vec<Cond>, generation: i64, previous: &Value, now: &str) -> Vec<Value> {
    want.into_iter()
        .map(|c| {
            let status = if c.ok { "True" } else { "False" };
            let since = previous
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["type"] == c.type_ && p["status"] == status)
                .and_then(|p| p["lastTransitionTime"].as_str())
                .unwrap_or(now);
            json!({
                "type": c.type_,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "observedGeneration": generation,
                "lastTransitionTime": since,
            })
        })
        .collect()
}

/// `previous` (an array of conditions) with ours in place of those of the same types, others'
/// kept where they are, and ours that are new appended.
fn merge_conditions(previous: &Value, ours: Vec<Value>) -> Vec<Value> {
    let mut ours: Vec<Option<Value>> = ours.into_iter().map(Some).collect();
    let mut out: Vec<Value> = previous
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            ours.iter_mut()
                .find(|o| o.as_ref().is_some_and(|o| o["type"] == p["type"]))
                .and_then(Option::take)
                .unwrap_or_else(|| p.clone())
        })
        .collect();
    out.extend(ours.into_iter().flatten());
    out
}

/// `v` without any `lastTransitionTime`, for comparing statuses.
pub fn without_times(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "lastTransitionTime")
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// `type=status` of each condition (with the reason when not `type`'s own), for logs.
fn brief(conds: &[Value]) -> String {
    conds
        .iter()
        .map(|c| {
            let (t, s, r) = (
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
            );
            if r == t {
                format!("{t}={s}")
            } else {
                format!("{t}={s} ({r})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statuses to write for `world` at `now` (RFC 3339): only those that change something.
pub fn plan(world: &World, now: &str) -> Vec<Write> {
    let classes: BTreeSet<&str> = world
        .classes
        .iter()
        .filter(|c| c.spec["controllerName"] == CONTROLLER_NAME)
        .map(|c| c.name.as_str())
        .collect();
    let mut writes: Vec<Write> = world
        .classes
        .iter()
        .filter(|c| classes.contains(c.name.as_str()))
        .filter_map(|c| class_write(c, now))
        .collect();
    let gateways: BTreeMap<(String, String), Gateway> = world
        .gateways
        .iter()
        .filter_map(|g| {
            let spec: GatewaySpec = serde_json::from_value(g.spec.clone()).ok()?;
            classes.contains(spec.gateway_class_name.as_str()).then(|| {
                (
                    (g.namespace.clone(), g.name.clone()),
                    Gateway { obj: g, spec },
                )
            })
        })
        .collect();
    let mut attached: BTreeMap<(String, String), Vec<i64>> = gateways
        .iter()
        .map(|(k, g)| (k.clone(), vec![0; g.spec.listeners.len()]))
        .collect();
    for (kind, route) in &world.routes {
        writes.extend(route_write(
            world,
            &gateways,
            &mut attached,
            *kind,
            route,
            now,
        ));
    }
    for (key, gw) in &gateways {
        let counts = attached.get(key).map(Vec::as_slice).unwrap_or_default();
        writes.extend(gateway_write(gw, counts, now));
    }
    writes
}

fn class_write(class: &Object, now: &str) -> Option<Write> {
    let previous = &class.status["conditions"];
    let ours = conditions(
        vec![Cond::new(
            "Accepted",
            true,
            "Accepted",
            "accepted by Fabrik's simulated Gateway (status only: nothing routes traffic)",
        )],
        class.generation,
        previous,
        now,
    );
    let summary = brief(&ours);
    let status = json!({"conditions": merge_conditions(previous, ours)});
    changed(&class.status, &status).then(|| Write {
        target: Target::GatewayClass,
        namespace: String::new(),
        name: class.name.clone(),
        resource_version: class.resource_version.clone(),
        status,
        summary,
    })
}

/// Whether `status` (a set of fields) differs from those fields of `stored`, times aside.
fn changed(stored: &Value, status: &Value) -> bool {
    status.as_object().into_iter().flatten().any(|(k, v)| {
        let old = stored.get(k).unwrap_or(&Value::Null);
        without_times(old) != without_times(v)
    })
}

/// A Gateway's spec, as far as this implementation reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct GatewaySpec {
    gateway_class_name: String,
    listeners: Vec<Listener>,
    addresses: Vec<Address>,
}

/// `spec.addresses[]` / `status.addresses[]` of a Gateway.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Address {
    #[serde(rename = "type")]
    type_: Option<String>,
    value: String,
}

/// A Gateway of one of our classes.
struct Gateway<'a> {
    obj: &'a Object,
    spec: GatewaySpec,
}

/// Whether a listener's protocol is one this implementation serves.
fn protocol_supported(l: &Listener) -> bool {
    matches!(l.protocol.as_str(), "HTTP" | "HTTPS")
}

fn gateway_write(gw: &Gateway, attached: &[i64], now: &str) -> Option<Write> {
    let obj = gw.obj;
    let generation = obj.generation;
    let mut invalid = Vec::new();
    let listeners: Vec<Value> = gw
        .spec
        .listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let bad_kinds = attach::invalid_kinds(l);
            let supported = protocol_supported(l);
            if !supported || !bad_kinds.is_empty() {
                invalid.push(l.name.clone());
            }
            let want = vec![
                if supported {
                    Cond::new("Accepted", true, "Accepted", "listener accepted")
                } else {
                    Cond::new(
                        "Accepted",
                        false,
                        "UnsupportedProtocol",
                        format!(
                            "protocol {:?} is not supported: HTTP and HTTPS are",
                            l.protocol
                        ),
                    )
                },
                if supported {
                    Cond::new(
                        "Programmed",
                        true,
                        "Programmed",
                        "simulated: no traffic is routed",
                    )
                } else {
                    Cond::new("Programmed", false, "Invalid", "the listener is not valid")
                },
                if bad_kinds.is_empty() {
                    Cond::new(
                        "ResolvedRefs",
                        true,
                        "ResolvedRefs",
                        "all references resolved",
                    )
                } else {
                    Cond::new(
                        "ResolvedRefs",
                        false,
                        "InvalidRouteKinds",
                        format!("unsupported route kinds: {}", bad_kinds.join(", ")),
                    )
                },
            ];
            let previous = obj.status["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == l.name.as_str())
                .map(|p| &p["conditions"])
                .unwrap_or(&Value::Null);
            let kinds: Vec<Value> = attach::supported_kinds(l)
                .into_iter()
                .map(|k| json!({"group": GROUP, "kind": k.name()}))
                .collect();
            json!({
                "name": l.name,
                "supportedKinds": kinds,
                "attachedRoutes": attached.get(i).copied().unwrap_or(0),
                "conditions": conditions(want, generation, previous, now),
            })
        })
        .collect();
    let accepted = if invalid.is_empty() {
        Cond::new(
            "Accepted",
            true,
            "Accepted",
            "accepted by Fabrik's simulated Gateway",
        )
    } else {
        Cond::new(
            "Accepted",
            true,
            "ListenersNotValid",
            format!("listeners not valid: {}", invalid.join(", ")),
        )
    };
    let programmed = Cond::new(
        "Programmed",
        true,
        "Programmed",
        "simulated: nothing listens on the Gateway's addresses and no traffic is routed",
    );
    let previous = &obj.status["conditions"];
    let ours = conditions(vec![accepted, programmed], generation, previous, now);
    let attached_total: i64 = attached.iter().sum();
    let summary = format!("{}, {attached_total} route attachment(s)", brief(&ours));
    let addresses: Vec<Value> = gw
        .spec
        .addresses
        .iter()
        .filter_map(|a| {
            let t = a.type_.as_deref().unwrap_or("IPAddress");
            matches!(t, "IPAddress" | "Hostname").then(|| json!({"type": t, "value": a.value}))
        })
        .collect();
    let status = json!({
        "conditions": merge_conditions(previous, ours),
        "listeners": listeners,
        "addresses": if addresses.is_empty() { Value::Null } else { json!(addresses) },
    });
    changed(&obj.status, &status).then(|| Write {
        target: Target::Gateway,
        namespace: obj.namespace.clone(),
        name: obj.name.clone(),
        resource_version: obj.resource_version.clone(),
        status,
        summary,
    })
}

/// A route's spec, as far as this implementation reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RouteSpec {
    /// As written: status entries repeat them.
    parent_refs: Vec<Value>,
    hostnames: Vec<String>,
    rules: Vec<Rule>,
}

/// Whether a `status.parents` entry is ours.
fn ours(entry: &Value) -> bool {
    entry["controllerName"] == CONTROLLER_NAME
}

/// An entry of ours as compared: its parent (defaults written out) and conditions (no times).
fn comparable(entry: &Value, route_ns: &str) -> (Option<ParentRef>, Value) {
    let parent = serde_json::from_value::<ParentRef>(entry["parentRef"].clone())
        .ok()
        .map(|p| p.normalized(route_ns));
    (parent, without_times(&entry["conditions"]))
}

fn route_write(
    world: &World,
    gateways: &BTreeMap<(String, String), Gateway>,
    attached: &mut BTreeMap<(String, String), Vec<i64>>,
    kind: RouteKind,
    route: &Object,
    now: &str,
) -> Option<Write> {
    let spec: RouteSpec = serde_json::from_value(route.spec.clone()).ok()?;
    let ns = route.namespace.as_str();
    let no_labels = BTreeMap::new();
    let view = Route {
        kind,
        namespace: ns,
        hostnames: &spec.hostnames,
        namespace_labels: world.namespaces.get(ns).unwrap_or(&no_labels),
    };
    let old_parents: Vec<&Value> = route.status["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mut resolved: Option<Option<refs::Problem>> = None;
    let mut seen: Vec<ParentRef> = Vec::new();
    let mut entries: Vec<Value> = Vec::new();
    let mut summary: Vec<String> = Vec::new();
    for written in &spec.parent_refs {
        let Ok(parent) = serde_json::from_value::<ParentRef>(written.clone()) else {
            continue;
        };
        let Some(key) = parent.gateway(ns) else {
            continue;
        };
        let Some(gw) = gateways.get(&key) else {
            continue;
        };
        let normalized = parent.normalized(ns);
        if seen.contains(&normalized) {
            continue;
        }
        seen.push(normalized.clone());
        let accepted = match attach::attach(&gw.spec.listeners, &key.0, &parent, &view) {
            Ok(listeners) => {
                if let Some(counts) = attached.get_mut(&key) {
                    for i in listeners {
                        if let Some(c) = counts.get_mut(i) {
                            *c += 1;
                        }
                    }
                }
                Cond::new("Accepted", true, "Accepted", "accepted by the Gateway")
            }
            Err(r) => Cond::new("Accepted", false, r.reason(), r.message()),
        };
        let problem = resolved.get_or_insert_with(|| {
            refs::resolve(
                kind,
                ns,
                &refs::backend_refs(&spec.rules),
                &world.grants,
                |n, s| world.services.contains(&(n.to_string(), s.to_string())),
            )
        });
        let resolved_refs = match problem {
            None => Cond::new(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "all references resolved",
            ),
            Some(p) => Cond::new("ResolvedRefs", false, p.why.reason(), p.message.clone()),
        };
        let previous = old_parents
            .iter()
            .find(|e| ours(e) && comparable(e, ns).0.as_ref() == Some(&normalized))
            .map(|e| &e["conditions"])
            .unwrap_or(&Value::Null);
        let conds = conditions(
            vec![accepted, resolved_refs],
            route.generation,
            previous,
            now,
        );
        let section = parent
            .section_name
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        summary.push(format!("{}/{}{section}: {}", key.0, key.1, brief(&conds)));
        entries.push(json!({
            "parentRef": written,
            "controllerName": CONTROLLER_NAME,
            "conditions": conds,
        }));
    }
    let before: Vec<_> = old_parents
        .iter()
        .filter(|e| ours(e))
        .map(|e| comparable(e, ns))
        .collect();
    let after: Vec<_> = entries.iter().map(|e| comparable(e, ns)).collect();
    if before == after {
        return None;
    }
    let mut parents: Vec<Value> = old_parents
        .into_iter()
        .filter(|e| !ours(e))
        .cloned()
        .collect();
    parents.extend(entries);
    Some(Write {
        target: Target::Route(kind),
        namespace: route.namespace.clone(),
        name: route.name.clone(),
        resource_version: route.resource_version.clone(),
        status: json!({"parents": parents}),
        summary: if summary.is_empty() {
            "no parent of ours".to_string()
        } else {
            summary.join("; ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2024-01-01T00:00:00Z";
    const T1: &str = "2024-01-01T00:01:00Z";

    fn obj(ns: &str, name: &str, spec: Value) -> Object {
        Object {
            namespace: ns.into(),
            name: name.into(),
            generation: 1,
            resource_version: Some("1".into()),
            spec,
            status: Value::Null,
        }
    }

    fn world() -> World {
        World {
            classes: vec![
                obj("", "fabrik", json!({"controllerName": CONTROLLER_NAME})),
                obj("", "other", json!({"controllerName": "example.com/gw"})),
            ],
            gateways: vec![
                obj(
                    "infra",
                    "gw",
                    json!({"gatewayClassName": "fabrik",
                        "addresses": [{"value": "198.18.1.1"}, {"type": "NamedAddress", "value": "x"}],
                        "listeners": [
                            {"name": "http", "port": 80, "protocol": "HTTP",
                             "allowedRoutes": {"namespaces": {"from": "All"}}},
                            {"name": "tcp", "port": 9000, "protocol": "TCP"}]}),
                ),
                obj(
                    "infra",
                    "foreign",
                    json!({"gatewayClassName": "other",
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}),
                ),
            ],
            routes: vec![(
                RouteKind::Http,
                obj(
                    "apps",
                    "web",
                    json!({"parentRefs": [
                            {"name": "gw", "namespace": "infra"},
                            {"name": "gw", "namespace": "infra", "sectionName": "nope"},
                            {"name": "foreign", "namespace": "infra"}],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
                ),
            )],
            grants: vec![],
            services: [("apps".to_string(), "web".to_string())].into(),
            namespaces: BTreeMap::new(),
        }
    }

    /// Applies the writes to the world as a server would (a merge of the status fields).
    fn apply(world: &mut World, writes: &[Write]) {
        for w in writes {
            let objects: Vec<&mut Object> = match w.target {
                Target::GatewayClass => world.classes.iter_mut().collect(),
                Target::Gateway => world.gateways.iter_mut().collect(),
                Target::Route(_) => world.routes.iter_mut().map(|(_, o)| o).collect(),
            };
            for o in objects {
                if o.namespace == w.namespace && o.name == w.name {
                    if !o.status.is_object() {
                        o.status = json!({});
                    }
                    for (k, v) in w.status.as_object().into_iter().flatten() {
                        if v.is_null() {
                            o.status.as_object_mut().map(|m| m.remove(k));
                        } else {
                            o.status[k] = v.clone();
                        }
                    }
                }
            }
        }
    }

    fn find<'a>(writes: &'a [Write], target: Target, name: &str) -> &'a Write {
        writes
            .iter()
            .find(|w| w.target == target && w.name == name)
            .expect("write")
    }

    #[test]
    fn statuses_of_our_class_gateways_and_routes() {
        let mut w = world();
        let writes = plan(&w, T0);
        assert_eq!(writes.len(), 3, "{writes:#?}");
        let class = find(&writes, Target::GatewayClass, "fabrik");
        assert_eq!(class.status["conditions"][0]["status"], "True");
        assert_eq!(class.status["conditions"][0]["observedGeneration"], 1);

        let route = find(&writes, Target::Route(RouteKind::Http), "web");
        let parents = route.status["parents"].as_array().expect("parents");
        assert_eq!(
            parents.len(),
            2,
            "the foreign Gateway's parentRef is not ours"
        );
        assert_eq!(
            parents[0]["parentRef"],
            json!({"name": "gw", "namespace": "infra"})
        );
        assert_eq!(parents[0]["controllerName"], CONTROLLER_NAME);
        assert_eq!(parents[0]["conditions"][0]["reason"], "Accepted");
        assert_eq!(parents[0]["conditions"][1]["reason"], "ResolvedRefs");
        assert_eq!(parents[1]["conditions"][0]["reason"], "NoMatchingParent");
        assert_eq!(parents[1]["conditions"][0]["status"], "False");

        let gw = find(&writes, Target::Gateway, "gw");
        assert_eq!(
            gw.status["addresses"],
            json!([{"type": "IPAddress", "value": "198.18.1.1"}])
        );
        assert_eq!(gw.status["conditions"][0]["reason"], "ListenersNotValid");
        assert_eq!(gw.status["conditions"][1]["reason"], "Programmed");
        let http = &gw.status["listeners"][0];
        assert_eq!(http["attachedRoutes"], 1);
        assert_eq!(
            http["supportedKinds"],
            json!([{"group": GROUP, "kind": "HTTPRoute"}, {"group": GROUP, "kind": "GRPCRoute"}])
        );
        let tcp = &gw.status["listeners"][1];
        assert_eq!(tcp["attachedRoutes"], 0);
        assert_eq!(tcp["supportedKinds"], json!([]));
        assert_eq!(tcp["conditions"][0]["reason"], "UnsupportedProtocol");

        // Written, the same world needs nothing more, even later.
        apply(&mut w, &writes);
        assert_eq!(plan(&w, T1), vec![]);
    }

    #[test]
    fn a_change_keeps_the_times_of_unchanged_conditions() {
        let mut w = world();
        w.services.clear();
        let writes = plan(&w, T0);
        apply(&mut w, &writes);
        let route = &w.routes[0].1;
        assert_eq!(
            route.status["parents"][0]["conditions"][1]["reason"],
            "BackendNotFound"
        );

        // The Service appears: ResolvedRefs flips (new time), Accepted keeps its time.
        w.services.insert(("apps".into(), "web".into()));
        let writes = plan(&w, T1);
        assert_eq!(writes.len(), 1, "only the route changes: {writes:#?}");
        let conds = &writes[0].status["parents"][0]["conditions"];
        assert_eq!(conds[0]["lastTransitionTime"], T0);
        assert_eq!(conds[1]["reason"], "ResolvedRefs");
        assert_eq!(conds[1]["lastTransitionTime"], T1);
    }

    #[test]
    fn other_controllers_entries_and_conditions_are_kept() {
        let mut w = world();
        let theirs = json!({"parentRef": {"name": "foreign", "namespace": "infra"},
            "controllerName": "example.com/gw",
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]});
        w.routes[0].1.status = json!({"parents": [theirs.clone()]});
        w.classes[0].status = json!({"conditions": [
            {"type": "Custom", "status": "True", "reason": "X", "message": ""},
            {"type": "Accepted", "status": "Unknown", "reason": "Waiting", "message": ""}]});
        let writes = plan(&w, T0);
        let route = find(&writes, Target::Route(RouteKind::Http), "web");
        assert_eq!(route.status["parents"][0], theirs);
        assert_eq!(route.status["parents"].as_array().map(Vec::len), Some(3));
        let class = find(&writes, Target::GatewayClass, "fabrik");
        assert_eq!(class.status["conditions"][0]["type"], "Custom");
        assert_eq!(class.status["conditions"][1]["type"], "Accepted");
        assert_eq!(class.status["conditions"][1]["status"], "True");
    }

    #[test]
    fn entries_for_parents_no_longer_named_are_removed() {
        let mut w = world();
        let writes = plan(&w, T0);
        apply(&mut w, &writes);
        w.routes[0].1.spec["parentRefs"] = json!([{"name": "foreign", "namespace": "infra"}]);
        w.routes[0].1.generation = 2;
        let writes = plan(&w, T1);
        let route = find(&writes, Target::Route(RouteKind::Http), "web");
        assert_eq!(route.status["parents"], json!([]));
        assert_eq!(route.summary, "no parent of ours");
        // The Gateway's listener loses its attached route.
        let gw = find(&writes, Target::Gateway, "gw");
        assert_eq!(gw.status["listeners"][0]["attachedRoutes"], 0);
    }

    #[test]
    fn defaults_written_out_by_the_server_are_no_change() {
        let mut w = world();
        let writes = plan(&w, T0);
        apply(&mut w, &writes);
        // A server that defaults the status' parentRefs (upstream's CRDs do).
        for p in w.routes[0].1.status["parents"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            p["parentRef"]["group"] = json!(GROUP);
            p["parentRef"]["kind"] = json!("Gateway");
        }
        assert_eq!(plan(&w, T1), vec![]);
    }

    #[test]
    fn gateways_of_other_classes_and_their_routes_are_left_alone() {
        let mut w = world();
        w.classes.remove(0);
        assert_eq!(plan(&w, T0), vec![]);
    }
}
