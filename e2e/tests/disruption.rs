//! A tenant's PodDisruptionBudget holds on the host: the syncer copies it into the tenant's
//! host namespace, over the host copies of the pods it selects, so a host eviction (a node
//! agent's after a GPU fault, a drain) that would break it is refused, as it would be in the
//! tenant; once the budget is gone the eviction goes through.

use std::time::Duration;

use anyhow::Result;
use e2e::{kc, kc_apply_ok, kc_ok, kubectls, Fabrik};

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

#[test]
fn a_tenant_disruption_budget_holds_against_host_evictions() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("budget", &[])?;
    let host = f.kubeconfig();
    let k = &kubectls()[0];
    kc_apply_ok(
        k,
        &cfg,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: main, image: nginx}]\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: web}}\n",
    )?;
    let host_pods = || {
        kc_ok(
            k,
            &host,
            &[
                "get",
                "pods",
                "-n",
                "fabrik-budget",
                "-l",
                "app=web",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
            ],
        )
    };
    poll("two ready host pods and the budget's copy", || {
        let ready = host_pods()?.matches("=True").count();
        let pdb = kc_ok(
            k,
            &host,
            &[
                "get",
                "pdb",
                "-n",
                "fabrik-budget",
                "-o",
                "jsonpath={.items[*].spec.selector.matchLabels}",
            ],
        )?;
        Ok(ready == 2 && pdb.contains("\"fabrik.dev/namespace\":\"default\""))
    })?;
    let victim = host_pods()?
        .split_whitespace()
        .next()
        .and_then(|p| p.split('=').next())
        .unwrap_or_default()
        .to_string();
    let eviction = tempfile::NamedTempFile::new()?;
    std::fs::write(
        eviction.path(),
        format!(
            "{{\"apiVersion\": \"policy/v1\", \"kind\": \"Eviction\", \"metadata\": {{\"name\": \"{victim}\", \"namespace\": \"fabrik-budget\"}}}}"
        ),
    )?;
    let path = format!("/api/v1/namespaces/fabrik-budget/pods/{victim}/eviction");
    let file = eviction.path().display().to_string();
    let evict = || kc(k, &host, &["create", "--raw", &path, "-f", &file]);
    let refused = evict()?;
    assert!(!refused.status.success(), "the budget must hold");
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("disruption budget"), "{why}");

    kc_ok(k, &cfg, &["delete", "pdb", "web"])?;
    poll("the host copy gone and the eviction allowed", || {
        Ok(evict()?.status.success())
    })?;
    Ok(())
}
