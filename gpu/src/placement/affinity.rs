//! Required inter-pod affinity and anti-affinity
//! (`requiredDuringSchedulingIgnoredDuringExecution`), as kube-scheduler's `InterPodAffinity`
//! filter applies them: a term selects pods (by labels, in its namespaces — the pod's own by
//! default) and a topology key; the node's domain is every node with the same value of that
//! key (`kubernetes.io/hostname` is the node's name when the label is missing).
//!
//! - Affinity: some selected pod runs in the node's domain — or, for the first pod of a group,
//!   no selected pod runs anywhere and the pod would select itself.
//! - Anti-affinity: no selected pod runs in the node's domain (a node without the key has no
//!   domain and passes).
//!
//! Topology spread constraints (`whenUnsatisfiable: DoNotSchedule`): placing the pod in the
//! node's domain may not make its count of selected pods (of the pod's namespace) exceed the
//! least-loaded domain's by more than `maxSkew` (the least counts 0 while there are fewer
//! domains than `minDomains`); a node without the key does not fit.
//!
//! Preferred terms and `ScheduleAnyway` constraints are scores and are not used here. Not done: existing pods' anti-affinity
//! toward the incoming pod (upstream's symmetry), `namespaceSelector` other than empty (all
//! namespaces), `matchLabelKeys` / `mismatchLabelKeys` — a term with those is refused with the
//! reason, never ignored.

use std::collections::BTreeMap;

use fabrik_machinery::labels::Selector;
use serde_json::{Map, Value};

/// The hostname label, which every node has (its name, when the label is missing).
const HOSTNAME: &str = "kubernetes.io/hostname";

/// One required term.
#[derive(Clone, Debug)]
pub struct Term {
    selector: Selector,
    /// Namespaces whose pods it selects; `None`: all.
    namespaces: Option<Vec<String>>,
    topology_key: String,
}

/// One `whenUnsatisfiable: DoNotSchedule` topology spread constraint.
#[derive(Clone, Debug)]
pub struct Spread {
    max_skew: i64,
    topology_key: String,
    selector: Selector,
    min_domains: i64,
}

/// A pod's required affinity and anti-affinity terms, and its hard spread constraints.
#[derive(Clone, Debug, Default)]
pub struct Required {
    /// Terms some selected pod must satisfy in the node's domain.
    pub affinity: Vec<Term>,
    /// Terms no selected pod may satisfy in the node's domain.
    pub anti_affinity: Vec<Term>,
    /// Topology spread constraints it may not violate.
    pub spread: Vec<Spread>,
}

impl Required {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty() && self.anti_affinity.is_empty() && self.spread.is_empty()
    }
}

/// A pod running (or placed this round) on a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placed {
    /// Its namespace.
    pub namespace: String,
    /// Its labels.
    pub labels: Map<String, Value>,
}

fn terms(list: &Value, namespace: &str) -> Result<Vec<Term>, String> {
    let mut out = Vec::new();
    for t in list.as_array().into_iter().flatten() {
        for unsupported in ["matchLabelKeys", "mismatchLabelKeys"] {
            if t[unsupported].as_array().is_some_and(|a| !a.is_empty()) {
                return Err(format!(
                    "pod affinity {unsupported} is not supported by this scheduler"
                ));
            }
        }
        let namespaces = match &t["namespaceSelector"] {
            Value::Null => Some(
                t["namespaces"]
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .map(|a| {
                        a.iter()
                            .filter_map(|n| n.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_else(|| vec![namespace.to_string()]),
            ),
            Value::Object(m) if m.is_empty() => None,
            _ => {
                return Err(
                    "pod affinity namespaceSelector is not supported by this scheduler".into(),
                )
            }
        };
        let selector = Selector::from_label_selector(&t["labelSelector"])
            .map_err(|e| format!("pod affinity labelSelector: {e}"))?;
        let topology_key = t["topologyKey"].as_str().unwrap_or("").to_string();
        if topology_key.is_empty() {
            return Err("pod affinity term without a topologyKey".into());
        }
        out.push(Term {
            selector,
            namespaces,
            topology_key,
        });
    }
    Ok(out)
}

/// The pod's required terms (`spec.affinity` as JSON), or why they cannot be honoured.
pub fn required(affinity: &Value, namespace: &str) -> Result<Required, String> {
    let key = "requiredDuringSchedulingIgnoredDuringExecution";
    Ok(Required {
        affinity: terms(&affinity["podAffinity"][key], namespace)?,
        anti_affinity: terms(&affinity["podAntiAffinity"][key], namespace)?,
        spread: Vec::new(),
    })
}

/// The pod's `DoNotSchedule` topology spread constraints (`spec.topologySpreadConstraints`);
/// `ScheduleAnyway` ones only score, and are not used here.
pub fn spread(constraints: &Value) -> Result<Vec<Spread>, String> {
    let mut out = Vec::new();
    for c in constraints.as_array().into_iter().flatten() {
        if c["whenUnsatisfiable"].as_str().unwrap_or("DoNotSchedule") != "DoNotSchedule" {
            continue;
        }
        if c["matchLabelKeys"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return Err("topology spread matchLabelKeys is not supported by this scheduler".into());
        }
        let topology_key = c["topologyKey"].as_str().unwrap_or("").to_string();
        if topology_key.is_empty() {
            return Err("topology spread constraint without a topologyKey".into());
        }
        out.push(Spread {
            max_skew: c["maxSkew"].as_i64().unwrap_or(1).max(1),
            topology_key,
            selector: Selector::from_label_selector(&c["labelSelector"])
                .map_err(|e| format!("topology spread labelSelector: {e}"))?,
            min_domains: c["minDomains"].as_i64().unwrap_or(1).max(1),
        });
    }
    Ok(out)
}

impl Term {
    fn selects(&self, p: &Placed) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|ns| ns.contains(&p.namespace))
            && self.selector.matches(Some(&p.labels))
    }
}

/// A node's value of a topology key.
fn domain<'a>(name: &'a str, labels: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    labels
        .get(key)
        .map(String::as_str)
        .or_else(|| (key == HOSTNAME).then_some(name))
}

/// A node as the check needs it: name, labels and the pods on it.
pub type NodePods<'a> = (&'a str, &'a BTreeMap<String, String>, &'a [Placed]);

/// Whether the pod (`me`) may go to node `node` among `nodes`; the reason when not.
pub fn allows(
    req: &Required,
    me: &Placed,
    node: NodePods<'_>,
    nodes: &[NodePods<'_>],
) -> Result<(), String> {
    let (name, labels, _) = node;
    for t in &req.anti_affinity {
        let Some(value) = domain(name, labels, &t.topology_key) else {
            continue;
        };
        let taken = nodes
            .iter()
            .filter(|(n, l, _)| domain(n, l, &t.topology_key) == Some(value))
            .any(|(_, _, pods)| pods.iter().any(|p| t.selects(p)));
        if taken {
            return Err("node(s) didn't match pod anti-affinity rules".into());
        }
    }
    for c in &req.spread {
        let Some(value) = domain(name, labels, &c.topology_key) else {
            return Err(
                "node(s) didn't match pod topology spread constraints (missing required label)"
                    .into(),
            );
        };
        // Selected pods of the pod's namespace per domain, over the nodes that have one.
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for (n, l, pods) in nodes {
            if let Some(d) = domain(n, l, &c.topology_key) {
                let selected = pods
                    .iter()
                    .filter(|p| p.namespace == me.namespace && c.selector.matches(Some(&p.labels)))
                    .count();
                *counts.entry(d).or_insert(0) += i64::try_from(selected).unwrap_or(i64::MAX);
            }
        }
        let fewer_domains = i64::try_from(counts.len()).unwrap_or(i64::MAX) < c.min_domains;
        let min = if fewer_domains {
            0
        } else {
            counts.values().copied().min().unwrap_or(0)
        };
        let mine = i64::from(c.selector.matches(Some(&me.labels)));
        if counts.get(value).copied().unwrap_or(0) + mine - min > c.max_skew {
            return Err("node(s) didn't match pod topology spread constraints".into());
        }
    }
    for t in &req.affinity {
        let value = domain(name, labels, &t.topology_key);
        let here = value.is_some_and(|v| {
            nodes
                .iter()
                .filter(|(n, l, _)| domain(n, l, &t.topology_key) == Some(v))
                .any(|(_, _, pods)| pods.iter().any(|p| t.selects(p)))
        });
        let anywhere = nodes
            .iter()
            .any(|(_, _, pods)| pods.iter().any(|p| t.selects(p)));
        let first_of_group = !anywhere && t.selects(me) && value.is_some();
        if !here && !first_of_group {
            return Err("node(s) didn't match pod affinity rules".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn placed(app: &str) -> Placed {
        Placed {
            namespace: "ns".into(),
            labels: json!({"app": app}).as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn anti_affinity_spreads_and_affinity_gathers() {
        let zone = |z: &str| BTreeMap::from([("zone".to_string(), z.to_string())]);
        let (za, zb) = (zone("a"), zone("a"));
        let zc = zone("c");
        let web = [placed("web")];
        let none: [Placed; 0] = [];
        let nodes: Vec<NodePods<'_>> =
            vec![("n1", &za, &web), ("n2", &zb, &none), ("n3", &zc, &none)];
        let anti = required(
            &json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}),
            "ns",
        )
        .expect("terms");
        let me = placed("web");
        assert!(allows(&anti, &me, nodes[0], &nodes).is_err());
        assert!(allows(&anti, &me, nodes[1], &nodes).is_ok());
        // By zone: n2 shares n1's zone.
        let by_zone = required(
            &json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}}),
            "ns",
        )
        .expect("terms");
        assert!(allows(&by_zone, &me, nodes[1], &nodes).is_err());
        assert!(allows(&by_zone, &me, nodes[2], &nodes).is_ok());
        // Affinity to web pods in the same zone; a cache pod goes beside them.
        let near = required(
            &json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}}),
            "ns",
        )
        .expect("terms");
        let cache = placed("cache");
        assert!(allows(&near, &cache, nodes[1], &nodes).is_ok());
        assert_eq!(
            allows(&near, &cache, nodes[2], &nodes),
            Err("node(s) didn't match pod affinity rules".into())
        );
        // The first pod of a group that selects itself may go anywhere.
        let group = required(
            &json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}),
            "ns",
        )
        .expect("terms");
        assert!(allows(&group, &placed("db"), nodes[2], &nodes).is_ok());
        assert!(allows(&group, &placed("other"), nodes[2], &nodes).is_err());
        // Another namespace's pods are not selected by default.
        let mut elsewhere = placed("web");
        elsewhere.namespace = "other".into();
        let nodes2: Vec<NodePods<'_>> = vec![("n1", &za, std::slice::from_ref(&elsewhere))];
        assert!(allows(&anti, &me, nodes2[0], &nodes2).is_ok());
    }

    #[test]
    fn spread_constraints_bound_the_skew() {
        let host =
            |n: &str| BTreeMap::from([("kubernetes.io/hostname".to_string(), n.to_string())]);
        let (h1, h2) = (host("n1"), host("n2"));
        let two = [placed("web"), placed("web")];
        let one = [placed("web")];
        let nodes: Vec<NodePods<'_>> = vec![("n1", &h1, &two), ("n2", &h2, &one)];
        let req = Required {
            spread: spread(&json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {}}]))
            .expect("spread"),
            ..Required::default()
        };
        assert_eq!(req.spread.len(), 1, "ScheduleAnyway only scores");
        let me = placed("web");
        assert!(allows(&req, &me, nodes[0], &nodes).is_err(), "3 vs 1 > 1");
        assert!(allows(&req, &me, nodes[1], &nodes).is_ok(), "2 vs 2");
        // A pod its own selector does not pick adds nothing: 2 + 0 - 1 is within the skew.
        assert!(allows(&req, &placed("db"), nodes[0], &nodes).is_ok());
    }

    #[test]
    fn unsupported_terms_are_refused_with_the_reason() {
        let e = required(
            &json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}, "topologyKey": "zone", "namespaceSelector": {"matchLabels": {"x": "y"}}}]}}),
            "ns",
        )
        .expect_err("namespaceSelector");
        assert!(e.contains("namespaceSelector"), "{e}");
        assert!(required(
            &json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}}]}}),
            "ns"
        )
        .is_err());
    }
}
