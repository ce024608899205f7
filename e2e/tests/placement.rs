//! A tenant's pod anti-affinity spreads its pods over the host's nodes, confined to its own
//! pods: a Deployment of three replicas that may not share a node, on `fabrik up`'s two
//! nodes, runs two and leaves the third Pending with the scheduler's reason; another tenant's
//! identical pods do not count.

use std::time::Duration;

use anyhow::Result;
use e2e::{kc_apply_ok, kc_ok, kubectls, Fabrik};

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

const SPREAD: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: web}}\n            topologyKey: kubernetes.io/hostname\n      containers: [{name: main, image: nginx}]\n";

#[test]
fn anti_affinity_spreads_a_tenant_s_pods_and_only_its_own() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "2"])?;
    let a = f.create_tenant("spread-a", &[])?;
    let b = f.create_tenant("spread-b", &[])?;
    let k = &kubectls()[0];
    for cfg in [&a, &b] {
        kc_apply_ok(k, cfg, SPREAD)?;
    }
    for cfg in [&a, &b] {
        poll("two pods running on two nodes, one pending", || {
            let rows = kc_ok(
                k,
                cfg,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase}/{.spec.nodeName} {end}",
                ],
            )?;
            let running: Vec<&str> = rows
                .split_whitespace()
                .filter(|r| r.starts_with("Running/"))
                .collect();
            let pending = rows
                .split_whitespace()
                .filter(|r| r.starts_with("Pending/"))
                .count();
            let nodes: std::collections::BTreeSet<&str> = running.iter().map(|r| &r[8..]).collect();
            Ok(running.len() == 2 && nodes.len() == 2 && pending == 1)
        })?;
        poll("the pending pod told why", || {
            let why = kc_ok(
                k,
                cfg,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={.items[*].status.conditions[?(@.type==\"PodScheduled\")].message}",
                ],
            )?;
            Ok(why.contains("didn't match pod anti-affinity rules"))
        })?;
    }
    Ok(())
}

/// A hard topology spread constraint: four replicas over two nodes end two and two, where the
/// scheduler's best fit alone would pack them onto one node.
#[test]
fn spread_constraints_balance_a_tenant_s_pods() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "2"])?;
    let cfg = f.create_tenant("balanced", &[])?;
    let k = &kubectls()[0];
    kc_apply_ok(
        k,
        &cfg,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  replicas: 4\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec:\n      topologySpreadConstraints:\n      - maxSkew: 1\n        topologyKey: kubernetes.io/hostname\n        whenUnsatisfiable: DoNotSchedule\n        labelSelector: {matchLabels: {app: api}}\n      containers: [{name: main, image: nginx}]\n",
    )?;
    poll("two pods on each node", || {
        let nodes = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pods",
                "-l",
                "app=api",
                "--field-selector",
                "status.phase=Running",
                "-o",
                "jsonpath={.items[*].spec.nodeName}",
            ],
        )?;
        let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
        for n in nodes.split_whitespace() {
            *per.entry(n).or_default() += 1;
        }
        Ok(per.len() == 2 && per.values().all(|c| *c == 2))
    })?;
    Ok(())
}
