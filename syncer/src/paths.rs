//! Paths inside volumes that a tenant pod names: `volumeMounts[].subPath` / `subPathExpr`,
//! and the file paths of `configMap` / `secret` / `downwardAPI` / `projected` volume items.
//!
//! They are checked as upstream's validation does (`validateSubPath`,
//! `validateLocalDescendingPath`, `validateLocalNonReservedPath`): relative, without a `..`
//! element, item paths not starting with `..`; file modes within `0..=0o777`. A `subPathExpr`
//! is checked as written and, further than upstream's API validation (upstream leaves it to the
//! kubelet), after expanding `$(VAR)` with what is known when the pod is admitted: the
//! container's literal `env` values (expanded in order, as the kubelet does) and downward API
//! fields whose values are names or IPs. A reference to a variable whose value is only known on
//! the node (a ConfigMap or Secret key, an annotation, anything from `envFrom`) is refused: its
//! value could escape the volume.
//!
//! The tenant's admission refuses such pods, and the pod builder ([`crate::pods`]) runs the same
//! check again and refuses to build a host pod that fails it.

use std::collections::HashMap;

use serde_json::Value;

/// Upstream's `validateLocalDescendingPath`: relative and no `..` element.
fn descending(path: &str) -> Option<&'static str> {
    if path.starts_with('/') {
        Some("must be a relative path")
    } else if path.split('/').any(|p| p == "..") {
        Some("must not contain '..'")
    } else {
        None
    }
}

/// Upstream's `validateLocalNonReservedPath`: descending, and not starting with `..` (the
/// kubelet's atomic writer keeps its own `..data` links there).
fn non_reserved(path: &str) -> Option<&'static str> {
    descending(path).or_else(|| path.starts_with("..").then_some("must not start with '..'"))
}

fn invalid(field: &str, value: &str, why: &str) -> String {
    format!("{field}: Invalid value: {value:?}: {why}")
}

/// Downward API fields whose values are DNS names, UIDs or IPs: never a path that escapes.
const SAFE_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// What a container's environment variable expands to, as far as admission can know.
#[derive(Clone, Debug)]
enum Var {
    /// Known text.
    Known(String),
    /// A safe token (a name, UID or IP) known only on the node.
    Safe,
    /// Known only on the node, and could be anything.
    Unknown,
}

/// Expands `$(NAME)` as the kubelet does (`$$` is a literal `$`; an undefined reference stays
/// as written). `Err(name)` when a reference's value is unknown here.
fn expand(s: &str, vars: &HashMap<String, Var>, any_unknown: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(') {
            match tail.find(')') {
                Some(end) => {
                    let name = &tail[..end];
                    match vars.get(name) {
                        Some(Var::Known(v)) => out.push_str(v),
                        // A name, UID or IP: one path element without `/` or `..`.
                        Some(Var::Safe) => out.push('x'),
                        Some(Var::Unknown) => return Err(name.to_string()),
                        None if any_unknown => return Err(name.to_string()),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &tail[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = tail;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The container's variables as admission knows them; `true` when `envFrom` may define more.
fn container_vars(c: &Value) -> (HashMap<String, Var>, bool) {
    let any_unknown = c["envFrom"].as_array().is_some_and(|a| !a.is_empty());
    let mut vars = HashMap::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let from = &e["valueFrom"];
        let var = if from.is_object() {
            let field = from["fieldRef"]["fieldPath"].as_str().unwrap_or("");
            let label = field.starts_with("metadata.labels[");
            if SAFE_FIELDS.contains(&field) || label || from["resourceFieldRef"].is_object() {
                // Label values have no `/` and never are `..`; resources are numbers.
                Var::Safe
            } else {
                Var::Unknown
            }
        } else {
            let v = e["value"].as_str().unwrap_or("");
            match expand(v, &vars, any_unknown) {
                Ok(v) => Var::Known(v),
                Err(_) => Var::Unknown,
            }
        };
        vars.insert(name.to_string(), var);
    }
    (vars, any_unknown)
}

fn check_mounts(c: &Value, path: &str, errs: &mut Vec<String>) {
    let mut vars = None;
    for (j, m) in c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}.volumeMounts[{j}]");
        let sub = m["subPath"].as_str().unwrap_or("");
        let expr = m["subPathExpr"].as_str().unwrap_or("");
        if !m["subPath"].is_null() && !m["subPath"].is_string() {
            errs.push(invalid(&format!("{at}.subPath"), "", "must be a string"));
        }
        if !m["subPathExpr"].is_null() && !m["subPathExpr"].is_string() {
            errs.push(invalid(
                &format!("{at}.subPathExpr"),
                "",
                "must be a string",
            ));
        }
        if !sub.is_empty() && !expr.is_empty() {
            errs.push(invalid(
                &format!("{at}.subPathExpr"),
                expr,
                "subPathExpr and subPath are mutually exclusive",
            ));
        }
        if let Some(why) = descending(sub) {
            errs.push(invalid(&format!("{at}.subPath"), sub, why));
        }
        if expr.is_empty() {
            continue;
        }
        if let Some(why) = descending(expr) {
            errs.push(invalid(&format!("{at}.subPathExpr"), expr, why));
            continue;
        }
        let (vars, any_unknown) = vars.get_or_insert_with(|| container_vars(c));
        match expand(expr, vars, *any_unknown) {
            Ok(expanded) => {
                if let Some(why) = descending(&expanded) {
                    errs.push(invalid(
                        &format!("{at}.subPathExpr"),
                        expr,
                        &format!("expands to {expanded:?}, which {why}"),
                    ));
                }
            }
            Err(var) => errs.push(invalid(
                &format!("{at}.subPathExpr"),
                expr,
                &format!(
                    "refers to $({var}), whose value is not known when the pod is admitted \
                     (only literal env values and name/UID/IP downward API fields may be used)"
                ),
            )),
        }
    }
}

fn check_mode(v: &Value, field: &str, errs: &mut Vec<String>) {
    if v.is_null() {
        return;
    }
    if !v.as_i64().is_some_and(|m| (0..=0o777).contains(&m)) {
        errs.push(invalid(
            field,
            &v.to_string(),
            "must be a number between 0 and 0777 (octal), both inclusive",
        ));
    }
}

fn check_items(items: &Value, at: &str, errs: &mut Vec<String>) {
    for (k, item) in items.as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.items[{k}]");
        match item["path"].as_str() {
            Some(p) if !p.is_empty() => {
                if let Some(why) = non_reserved(p) {
                    errs.push(invalid(&format!("{field}.path"), p, why));
                }
            }
            _ => errs.push(format!("{field}.path: Required value")),
        }
        check_mode(&item["mode"], &format!("{field}.mode"), errs);
    }
}

fn check_projection(s: &Value, at: &str, errs: &mut Vec<String>) {
    for kind in ["configMap", "secret", "downwardAPI"] {
        if s[kind].is_object() {
            check_items(&s[kind]["items"], &format!("{at}.{kind}"), errs);
        }
    }
    let token = &s["serviceAccountToken"];
    if token.is_object() {
        match token["path"].as_str() {
            Some(p) if !p.is_empty() => {
                if let Some(why) = non_reserved(p) {
                    errs.push(invalid(&format!("{at}.serviceAccountToken.path"), p, why));
                }
            }
            _ => errs.push(format!("{at}.serviceAccountToken.path: Required value")),
        }
    }
    if s["clusterTrustBundle"].is_object() {
        let p = s["clusterTrustBundle"]["path"].as_str().unwrap_or("");
        if let Some(why) = non_reserved(p) {
            errs.push(invalid(&format!("{at}.clusterTrustBundle.path"), p, why));
        }
    }
}

fn check_volume(v: &Value, at: &str, errs: &mut Vec<String>) {
    for kind in ["configMap", "secret", "downwardAPI"] {
        if v[kind].is_object() {
            let field = format!("{at}.{kind}");
            check_items(&v[kind]["items"], &field, errs);
            check_mode(
                &v[kind]["defaultMode"],
                &format!("{field}.defaultMode"),
                errs,
            );
        }
    }
    let projected = &v["projected"];
    if projected.is_object() {
        let field = format!("{at}.projected");
        check_mode(
            &projected["defaultMode"],
            &format!("{field}.defaultMode"),
            errs,
        );
        for (k, s) in projected["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            check_projection(s, &format!("{field}.sources[{k}]"), errs);
        }
    }
}

/// Checks every volume path of a pod spec; one message per offending field, in the API
/// server's field error style.
pub fn check_spec(spec: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            check_mounts(c, &format!("spec.{list}[{i}]"), &mut errs);
        }
    }
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        check_volume(v, &format!("spec.volumes[{i}]"), &mut errs);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_with_mount(mount: Value, env: Value) -> Value {
        json!({"containers": [{"name": "c", "image": "x", "env": env, "volumeMounts": [mount]}],
            "volumes": [{"name": "v", "emptyDir": {}}]})
    }

    #[test]
    fn hostile_sub_paths_are_refused() {
        // (mount, env, expected message start)
        let table: &[(Value, Value, &str)] = &[
            (json!({"name": "v", "mountPath": "/m", "subPath": "../../etc"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../../etc\": must not contain '..'"),
            (json!({"name": "v", "mountPath": "/m", "subPath": "a/../../b"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPath: Invalid value"),
            (json!({"name": "v", "mountPath": "/m", "subPath": ".."}), json!([]),
                "spec.containers[0].volumeMounts[0].subPath: Invalid value"),
            (json!({"name": "v", "mountPath": "/m", "subPath": "/etc/shadow"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"/etc/shadow\": must be a relative path"),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "/$(X)"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"/$(X)\": must be a relative path"),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "../$(X)"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value"),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(UP)/etc"}), json!([{"name": "UP", "value": ".."}]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"$(UP)/etc\": expands to \"../etc\""),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(ROOT)"}), json!([{"name": "ROOT", "value": "/"}]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value"),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(B)"}),
                json!([{"name": "A", "value": "."}, {"name": "B", "value": "$(A)$(A)/x"}]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"$(B)\": expands to \"../x\""),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(S)"}),
                json!([{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"$(S)\": refers to $(S)"),
            (json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(A)"}),
                json!([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['p']"}}}]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"$(A)\": refers to $(A)"),
            (json!({"name": "v", "mountPath": "/m", "subPath": "a", "subPathExpr": "b"}), json!([]),
                "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"b\": subPathExpr and subPath are mutually exclusive"),
        ];
        for (mount, env, want) in table {
            let errs = check_spec(&pod_with_mount(mount.clone(), env.clone()));
            assert!(
                errs.len() == 1 && errs[0].starts_with(want),
                "{mount} {env}: want {want:?}, got {errs:?}"
            );
        }
    }

    #[test]
    fn from_env_from_is_unknown() {
        let mut spec = pod_with_mount(
            json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(FROM_CM)"}),
            json!([]),
        );
        spec["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "cm"}}]);
        assert_eq!(check_spec(&spec).len(), 1);
    }

    #[test]
    fn ordinary_sub_paths_pass() {
        for (mount, env) in [
            (
                json!({"name": "v", "mountPath": "/m", "subPath": "data/x"}),
                json!([]),
            ),
            (
                json!({"name": "v", "mountPath": "/m", "subPath": "a..b/..c"}),
                json!([]),
            ),
            (
                json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(POD)/logs"}),
                json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
            ),
            (
                json!({"name": "v", "mountPath": "/m", "subPathExpr": "$(DIR)"}),
                json!([{"name": "DIR", "value": "cache/a"}]),
            ),
            (
                json!({"name": "v", "mountPath": "/m", "subPathExpr": "$$(X)/$(UNDEFINED)"}),
                json!([]),
            ),
            (json!({"name": "v", "mountPath": "/m"}), json!([])),
        ] {
            let spec = pod_with_mount(mount.clone(), env);
            assert_eq!(check_spec(&spec), Vec::<String>::new(), "{mount}");
        }
    }

    #[test]
    fn item_paths_are_checked_everywhere() {
        let spec = json!({"containers": [], "volumes": [
            {"name": "a", "configMap": {"name": "c", "items": [{"key": "k", "path": "../x"}]}},
            {"name": "b", "secret": {"secretName": "s", "items": [{"key": "k", "path": "/etc/x"}]}},
            {"name": "c", "downwardAPI": {"items": [{"path": "..data", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"name": "d", "projected": {"sources": [
                {"configMap": {"name": "c", "items": [{"key": "k", "path": "ok/../../x"}]}},
                {"secret": {"name": "s", "items": [{"key": "k", "path": "fine"}]}},
                {"downwardAPI": {"items": [{"path": "/abs"}]}},
                {"serviceAccountToken": {"path": "../token"}}]}},
            {"name": "e", "secret": {"secretName": "s", "defaultMode": 4095}},
            {"name": "f", "configMap": {"name": "c", "items": [{"key": "k", "path": "p", "mode": -1}]}},
            {"name": "g", "configMap": {"name": "c", "items": [{"key": "k", "path": "sub/dir/file", "mode": 420}], "defaultMode": 256}}]});
        let errs = check_spec(&spec);
        let fields: Vec<&str> = errs
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            vec![
                "spec.volumes[0].configMap.items[0].path",
                "spec.volumes[1].secret.items[0].path",
                "spec.volumes[2].downwardAPI.items[0].path",
                "spec.volumes[3].projected.sources[0].configMap.items[0].path",
                "spec.volumes[3].projected.sources[2].downwardAPI.items[0].path",
                "spec.volumes[3].projected.sources[3].serviceAccountToken.path",
                "spec.volumes[4].secret.defaultMode",
                "spec.volumes[5].configMap.items[0].mode",
            ],
            "{errs:?}"
        );
    }

    #[test]
    fn every_container_list_is_checked() {
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            let mut spec = json!({});
            spec[list] = json!([{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/m", "subPath": "../x"}]}]);
            let errs = check_spec(&spec);
            assert_eq!(errs.len(), 1, "{list}");
            assert!(errs[0].starts_with(&format!("spec.{list}[0].volumeMounts[0].subPath")));
        }
    }
}
