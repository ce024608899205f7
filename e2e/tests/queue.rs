//! The GPU queue (issue gpu-queues) on `fabrik up`'s simulated factory (2 nodes × 8 GPUs):
//! guarantees hold, a tenant borrows idle GPUs up to its limit, and when the owner's demand
//! comes back the borrowed GPUs are reclaimed — by preempting only the borrower's pods beyond
//! its fair share — until both tenants hold their fair share; the waiting pods say why in the
//! tenant, the preempted ones say `Preempted`, the Tenants' `status.queue` and `/metrics` show
//! each standing. Host pods wait at the queue's scheduling gate until admitted.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use e2e::{kc_apply_ok, kc_ok, kubectls, poll_until, Fabrik};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

/// A Deployment of `replicas` pods of one GPU each.
fn gpu_deployment(name: &str, replicas: usize) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  \
         selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    \
         spec:\n      containers:\n      - name: main\n        image: trainer\n        \
         resources: {{limits: {{nvidia.com/gpu: \"1\"}}}}\n"
    )
}

/// The tenant's pods of `app`: (bound, waiting with the queue's message, failed as preempted).
fn pods_of(k: &e2e::Kubectl, t: &std::path::Path, app: &str) -> Result<(usize, usize, usize)> {
    let out = kc_ok(
        k,
        t,
        &["get", "pods", "-l", &format!("app={app}"), "-o", "json"],
    )?;
    let list: Value = serde_json::from_str(&out).context("pod list")?;
    let (mut bound, mut queued, mut preempted) = (0, 0, 0);
    for p in list["items"].as_array().into_iter().flatten() {
        if p["status"]["phase"] == "Failed" {
            if p["status"]["reason"] == "Preempted" {
                preempted += 1;
            }
            continue;
        }
        if p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
        {
            bound += 1;
        } else if p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "PodScheduled"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("queued by Fabrik's GPU queue"))
            })
        {
            queued += 1;
        }
    }
    Ok((bound, queued, preempted))
}

/// The messages of the preemption Events in a tenant.
fn preemption_events(k: &e2e::Kubectl, t: &std::path::Path) -> Result<Vec<String>> {
    let out = kc_ok(
        k,
        t,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=PreemptedByFairShare",
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ],
    )?;
    Ok(out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// A Tenant's queue standing in `nvidia.com/gpu`: (admitted, borrowed, lent, fairShare).
fn standing(f: &Fabrik, k: &e2e::Kubectl, tenant: &str) -> Result<(i64, i64, i64, i64)> {
    let host = f.data_dir().join("host.kubeconfig");
    let out = kc_ok(k, &host, &["get", "tenant", tenant, "-o", "json"])?;
    let t: Value = serde_json::from_str(&out).context("tenant")?;
    let entry = t["status"]["queue"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["resource"] == "nvidia.com/gpu")
        .cloned()
        .unwrap_or_default();
    let n = |f: &str| entry[f].as_i64().unwrap_or(0);
    Ok((n("admitted"), n("borrowed"), n("lent"), n("fairShare")))
}

#[test]
fn borrowed_gpus_go_back_to_their_owner_until_both_hold_their_fair_share() {
    let mut f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    let mut leads = (0.0, 0.0);
    f.check(|| {
        let alpha = f.create_tenant("alpha", &["--gpus", "8"])?;
        let beta = f.create_tenant("beta", &["--gpus", "4", "--borrow-gpus", "12"])?;

        // beta alone: its 4 and 8 borrowed (4 of them alpha's idle guarantee).
        kc_apply_ok(&k, &beta, &gpu_deployment("train", 12))?;
        let mut seen = (0, 0, 0);
        poll_until("beta's 12 pods bound", WAIT, || {
            seen = pods_of(&k, &beta, "train")?;
            Ok(seen.0 == 12)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        let mut st = (0, 0, 0, 0);
        poll_until("beta's standing", WAIT, || {
            st = standing(&f, &k, "beta")?;
            Ok(st.0 == 12 && st.1 == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: beta {st:?}"))?;
        let a = standing(&f, &k, "alpha")?;
        if a.2 != 4 {
            bail!("alpha lends 4 of its idle 8 (the other 4 beta borrows are nobody's): {a:?}");
        }
        // Host pods were gated, then admitted pinned to a node.
        let hp = kc_ok(
            &k,
            &host,
            &[
                "get",
                "pods",
                "-n",
                "fabrik-beta",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.annotations.fabrik\.dev/queue-admitted}|{.spec.nodeSelector.kubernetes\.io/hostname}{"\n"}{end}"#,
            ],
        )?;
        let rows: Vec<&str> = hp.lines().filter(|l| !l.is_empty()).collect();
        if rows.len() != 12
            || rows.iter().filter(|r| r.contains(" borrowed|")).count() != 8
            || rows.iter().any(|r| r.ends_with('|'))
        {
            bail!("host pods' admissions: {hp}");
        }

        // The platform turns reclaim off (its policy ConfigMap): alpha gets the 4 free GPUs
        // and waits for the rest; beta keeps what it borrowed.
        let policy = |reclaim: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: fabrik-gpu-queue, namespace: fabrik-system}}\n\
                 data: {{reclaim: \"{reclaim}\"}}\n"
            )
        };
        // (The namespace may not exist yet: node agents make it when they first publish.)
        let _ = e2e::kc(&k, &host, &["create", "namespace", "fabrik-system"])?;
        kc_apply_ok(&k, &host, &policy("false"))?;
        std::thread::sleep(Duration::from_secs(1));
        kc_apply_ok(&k, &alpha, &gpu_deployment("serve", 8))?;
        poll_until("alpha's 4 pods bound, 4 queued", WAIT, || {
            seen = pods_of(&k, &alpha, "serve")?;
            Ok(seen == (4, 4, 0))
        })
        .map_err(|e| anyhow::anyhow!("{e}: alpha {seen:?}"))?;
        std::thread::sleep(Duration::from_secs(3));
        let b = pods_of(&k, &beta, "train")?;
        if b != (12, 0, 0) {
            bail!("beta lost pods with reclaim off: {b:?}");
        }
        // Reclaim on again: 4 come back from beta.
        kc_apply_ok(&k, &host, &policy("true"))?;
        poll_until("alpha's 8 pods bound", WAIT, || {
            seen = pods_of(&k, &alpha, "serve")?;
            Ok(seen.0 == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: alpha {seen:?}"))?;
        poll_until(
            "beta at its fair share, its replaced pods waiting",
            WAIT,
            || {
                seen = pods_of(&k, &beta, "train")?;
                Ok(seen == (8, 4, 4))
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}: beta (bound, queued, preempted) {seen:?}"))?;
        poll_until("both at their fair share", WAIT, || {
            Ok(standing(&f, &k, "alpha")? == (8, 0, 0, 8) && standing(&f, &k, "beta")?.3 == 8)
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}: alpha {:?} beta {:?}",
                standing(&f, &k, "alpha"),
                standing(&f, &k, "beta")
            )
        })?;
        let b = standing(&f, &k, "beta")?;
        if b.0 != 8 || b.1 != 4 {
            bail!("beta holds its 4 and 4 borrowed: {b:?}");
        }
        // Why, in the preempted tenant: an Event on each preempted pod.
        let lines = preemption_events(&k, &beta)?;
        if lines.len() < 4 || !lines.iter().all(|l| l.contains("tenant alpha")) {
            bail!("preemption events in beta: {lines:?}");
        }
        // Nothing of alpha was touched.
        let a_failed = kc_ok(
            &k,
            &alpha,
            &[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Failed",
                "-o",
                "name",
            ],
        )?;
        if !a_failed.trim().is_empty() {
            bail!("alpha lost pods: {a_failed}");
        }
        // The figures on the host's /metrics.
        let metrics = kc_ok(&k, &host, &["get", "--raw", "/metrics"])?;
        for want in [
            "fabrik_queue_fair_share_gpus{tenant=\"beta\",resource=\"nvidia.com/gpu\"} 8",
            "fabrik_queue_borrowed_gpus{tenant=\"beta\",resource=\"nvidia.com/gpu\"} 4",
        ] {
            if !metrics.contains(want) {
                bail!("/metrics lacks {want}");
            }
        }
        // Over time: beta held 4 beyond its share while alpha waited below its own (reclaim
        // off), so beta is ahead and alpha behind.
        match (lead(&metrics, "beta"), lead(&metrics, "alpha")) {
            (Some(b), Some(a)) if b > 0.0 && a < 0.0 => leads = (b, a),
            other => bail!("leads over fair shares (beta, alpha): {other:?}"),
        }
        // The deciding replica keeps the ledger on the host for the next one.
        poll_until("the fair-share ledger saved on the host", WAIT, || {
            let saved = e2e::kc(
                &k,
                &host,
                &[
                    "get",
                    "configmap",
                    "fabrik-gpu-queue-ledger",
                    "-n",
                    "fabrik-system",
                    "-o",
                    r"jsonpath={.data.ledger\.json}",
                ],
            )?;
            let text = String::from_utf8_lossy(&saved.stdout);
            Ok(text.contains("\"beta\"") && text.contains("\"alpha\""))
        })?;
        Ok(())
    });
    // A new control plane goes on from it: both tenants now hold their fair share, so only
    // what was saved can put beta ahead and alpha behind (a ledger started afresh has neither).
    f.restart().expect("fabrik up restarted");
    f.check(|| {
        let mut now = (None, None);
        poll_until("the queue's first decision after the restart", WAIT, || {
            let metrics = kc_ok(&k, &host, &["get", "--raw", "/metrics"])?;
            now = (lead(&metrics, "beta"), lead(&metrics, "alpha"));
            Ok(metrics.contains("fabrik_queue_fair_share_gpus{"))
        })?;
        match now {
            (Some(b), Some(a)) if b >= leads.0 / 2.0 && a <= leads.1 / 2.0 => Ok(()),
            other => {
                bail!("leads (beta, alpha) after the restart: {other:?}; before it: {leads:?}")
            }
        }
    });
}

/// A tenant's lead over its fair share, device-seconds, on `/metrics`.
fn lead(metrics: &str, tenant: &str) -> Option<f64> {
    let key = format!(
        "fabrik_queue_fair_share_lead_gpu_seconds{{tenant=\"{tenant}\",resource=\"nvidia.com/gpu\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// A borrower's pods that a PodDisruptionBudget protects are not chosen for reclaim: the
/// borrower's other pods go instead, though the protected ones are newer.
#[test]
fn reclaim_leaves_the_pods_a_disruption_budget_protects() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let alpha = f.create_tenant("alpha", &["--gpus", "4"])?;
        let beta = f.create_tenant("beta", &["--gpus", "4", "--borrow-gpus", "4"])?;
        let mut seen = (0, 0, 0);
        kc_apply_ok(&k, &beta, &gpu_deployment("spare", 4))?;
        poll_until("beta's spare pods bound", WAIT, || {
            seen = pods_of(&k, &beta, "spare")?;
            Ok(seen.0 == 4)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        kc_apply_ok(
            &k,
            &beta,
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: keep}\nspec:\n  \
             maxUnavailable: 0\n  selector: {matchLabels: {app: keep}}\n",
        )?;
        poll_until("the budget on the host", WAIT, || {
            let out = kc_ok(
                &k,
                &host,
                &["get", "pdb", "-n", "fabrik-beta", "-o", "name"],
            )?;
            Ok(!out.trim().is_empty())
        })?;
        // The newest, borrowed, and protected.
        kc_apply_ok(&k, &beta, &gpu_deployment("keep", 4))?;
        poll_until("beta's keep pods bound (borrowed)", WAIT, || {
            seen = pods_of(&k, &beta, "keep")?;
            Ok(seen.0 == 4)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        // alpha's demand returns: two of beta's GPUs come back — from spare.
        kc_apply_ok(&k, &alpha, &gpu_deployment("serve", 2))?;
        poll_until("alpha's 2 pods bound", WAIT, || {
            seen = pods_of(&k, &alpha, "serve")?;
            Ok(seen.0 == 2)
        })
        .map_err(|e| anyhow::anyhow!("{e}: alpha {seen:?}"))?;
        let keep = pods_of(&k, &beta, "keep")?;
        let spare = pods_of(&k, &beta, "spare")?;
        if keep != (4, 0, 0) || spare.2 != 2 {
            bail!("keep (bound, queued, preempted) {keep:?}, spare {spare:?}");
        }
        // Had a budget changed between a decision and its eviction, the queue would have
        // marked a protected pod: the eviction is refused, and the pod runs on in its tenant
        // (not `Failed`), which is told why. (Marked here as the queue marks.)
        let marked = kc_ok(
            &k,
            &host,
            &[
                "get",
                "pods",
                "-n",
                "fabrik-beta",
                "-l",
                "app=keep",
                "-o",
                r#"jsonpath={.items[0].metadata.name} {.items[0].metadata.annotations.fabrik\.dev/virtual-name}"#,
            ],
        )?;
        let Some((host_pod, tenant_pod)) = marked.trim().split_once(' ') else {
            bail!("a keep pod on the host: {marked:?}");
        };
        let condition = format!(
            r#"{{"status":{{"conditions":[{{"type":"DisruptionTarget","status":"True","reason":"{}","message":"preempted by Fabrik's GPU queue (test)"}}]}}}}"#,
            "PreemptedByFairShare"
        );
        kc_ok(
            &k,
            &host,
            &[
                "patch",
                "pod",
                host_pod,
                "-n",
                "fabrik-beta",
                "--subresource=status",
                "--type=strategic",
                "-p",
                &condition,
            ],
        )?;
        let mut events = String::new();
        poll_until("beta told that a budget holds the pod back", WAIT, || {
            events = kc_ok(
                &k,
                &beta,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "reason=PreemptionBlockedByDisruptionBudget",
                    "-o",
                    r#"jsonpath={range .items[*]}{.involvedObject.name}: {.message}{"\n"}{end}"#,
                ],
            )?;
            Ok(events.lines().any(|l| {
                l.starts_with(&format!("{tenant_pod}: "))
                    && l.contains("a disruption budget does not let it go now")
            }))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {events:?}"))?;
        let phase = kc_ok(
            &k,
            &beta,
            &["get", "pod", tenant_pod, "-o", "jsonpath={.status.phase}"],
        )?;
        if phase != "Running" {
            bail!("the pod a budget holds back is {phase:?} in its tenant");
        }
        Ok(())
    });
}

#[test]
fn a_pod_gated_in_the_tenant_runs_only_once_its_gates_are_gone() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let t = f.create_tenant("gated", &["--gpus", "2"])?;
        // A tenant's own queue (Kueue, say) holds the pod with its gate.
        kc_apply_ok(
            &k,
            &t,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: held\nspec:\n  schedulingGates:\n  \
             - name: example.com/tenant-queue\n  containers:\n  - name: main\n    image: trainer\n    \
             resources: {limits: {nvidia.com/gpu: \"1\"}}\n",
        )?;
        let reason = kc_ok(
            &k,
            &t,
            &[
                "get",
                "pod",
                "held",
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}"#,
            ],
        )?;
        if reason != "SchedulingGated" {
            bail!("a gated pod's PodScheduled reason: {reason:?}");
        }
        // A new gate may not be added; binding while gated is refused.
        let add = e2e::kc(
            &k,
            &t,
            &[
                "patch",
                "pod",
                "held",
                "--type",
                "json",
                "-p",
                r#"[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"x"}}]"#,
            ],
        )?;
        if add.status.success() {
            bail!("a scheduling gate was added to an existing pod");
        }
        std::thread::sleep(Duration::from_secs(2));
        let copies = kc_ok(
            &k,
            &host,
            &["get", "pods", "-n", "fabrik-gated", "-o", "name"],
        )?;
        if !copies.trim().is_empty() {
            bail!("a pod gated in its tenant reached the host: {copies}");
        }
        kc_ok(
            &k,
            &t,
            &[
                "patch",
                "pod",
                "held",
                "--type",
                "json",
                "-p",
                r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
            ],
        )?;
        let mut node = String::new();
        poll_until("the pod bound once its gate is gone", WAIT, || {
            node = kc_ok(
                &k,
                &t,
                &["get", "pod", "held", "-o", "jsonpath={.spec.nodeName}"],
            )?;
            Ok(!node.is_empty())
        })?;
        Ok(())
    });
}

/// A Job of `parallelism` pods of `gpus` GPUs each (indexed when `indexed`).
fn gpu_job(name: &str, parallelism: usize, gpus: usize, indexed: bool) -> String {
    let mode = if indexed { "Indexed" } else { "NonIndexed" };
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n  parallelism: {parallelism}\n  \
         completions: {parallelism}\n  completionMode: {mode}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    \
         spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: trainer\n        \
         resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}\n"
    )
}

#[test]
fn a_job_is_admitted_with_all_its_parallelism_or_not_at_all() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        // The quota counts waiting pods too: room for both Jobs.
        let t = f.create_tenant("jobs", &["--gpus", "24"])?;
        // Two pods of 8 GPUs on one node of 8: neither may start (half a job holds GPUs for
        // nothing); each says it waits as a gang.
        kc_apply_ok(&k, &t, &gpu_job("wide", 2, 8, true))?;
        let mut seen = String::new();
        poll_until("the wide Job's pods told why they wait", WAIT, || {
            seen = kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=wide",
                    "-o",
                    r#"jsonpath={range .items[*]}{.spec.nodeName}|{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}"#,
                ],
            )?;
            let rows: Vec<&str> = seen.lines().filter(|r| !r.is_empty()).collect();
            Ok(rows.len() == 2
                && rows
                    .iter()
                    .all(|r| r.starts_with('|') && r.contains("gang default/job/wide")))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;
        // Two pods of 4: admitted together, the Job completes.
        kc_apply_ok(&k, &t, &gpu_job("pair", 2, 4, false))?;
        poll_until("the pair Job complete", WAIT, || {
            seen = kc_ok(
                &k,
                &t,
                &["get", "job", "pair", "-o", "jsonpath={.status.succeeded}"],
            )?;
            Ok(seen == "2")
        })
        .map_err(|e| anyhow::anyhow!("{e}: succeeded {seen:?}"))?;
        let bound = kc_ok(
            &k,
            &t,
            &[
                "get",
                "pods",
                "-l",
                "app=wide",
                "-o",
                "jsonpath={.items[*].spec.nodeName}",
            ],
        )?;
        if !bound.trim().is_empty() {
            bail!("a pod of the Job that cannot fit whole was bound: {bound}");
        }
        Ok(())
    });
}

/// What each node can take now, from the host: node → (whole GPUs, 1g.18gb instances).
fn allocatable(k: &e2e::Kubectl, host: &std::path::Path) -> Result<BTreeMap<String, (i64, i64)>> {
    let out = kc_ok(k, host, &["get", "nodes", "-o", "json"])?;
    let list: Value = serde_json::from_str(&out).context("node list")?;
    let count = |v: &Value| v.as_str().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let a = &n["status"]["allocatable"];
            (
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                (
                    count(&a["nvidia.com/gpu"]),
                    count(&a["nvidia.com/mig-1g.18gb"]),
                ),
            )
        })
        .collect())
}

/// Every GPU is whole and one runs a pod when a tenant on 1g.18gb MIG instances comes: one idle
/// GPU is cut into seven instances for it — on the node already in use, beside the busy GPU,
/// which keeps its run; the idle node stays whole for large jobs.
#[test]
fn an_idle_gpu_is_laid_out_for_a_gpu_kind_nobody_offers() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let t = f.create_tenant("infer", &["--gpus", "4", "--gpu-sharing", "mig:1g.18gb"])?;
        let busy = f.create_tenant("busy", &["--gpus", "8"])?;
        kc_apply_ok(&k, &busy, &gpu_deployment("hold", 1))?;
        let mut seen = (0, 0, 0);
        poll_until("busy's pod bound", WAIT, || {
            seen = pods_of(&k, &busy, "hold")?;
            Ok(seen.0 == 1)
        })?;
        kc_apply_ok(&k, &t, &gpu_deployment("serve", 4))?;
        poll_until("the inference pods running on MIG", WAIT, || {
            seen = pods_of(&k, &t, "serve")?;
            Ok(seen.0 == 4)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        let held = kc_ok(
            &k,
            &busy,
            &[
                "get",
                "pods",
                "-l",
                "app=hold",
                "-o",
                "jsonpath={.items[0].spec.nodeName}",
            ],
        )?;
        let nodes = allocatable(&k, &host)?;
        // One GPU of the busy node cut (7 whole + 7 instances), the other node all whole.
        for (node, (whole, mig)) in &nodes {
            let want = if *node == held { (7, 7) } else { (8, 0) };
            if (*whole, *mig) != want {
                bail!("node {node} offers {whole} GPUs and {mig} instances, not {want:?}: {nodes:?} (busy's pod on {held})");
            }
        }
        if pods_of(&k, &busy, "hold")?.0 != 1 {
            bail!("busy's run did not go on");
        }
        Ok(())
    });
}

/// The only node is cut into MIG instances (an admin's layout) and nobody uses them when an
/// 8-GPU training pod comes: the queue lays all eight GPUs out whole again (the MIG instances
/// destroyed by the node agent), and the pod runs.
#[test]
fn an_idle_mig_node_is_made_whole_for_an_8_gpu_pod() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        // The simulated node registers a moment after `fabrik up` answers.
        let mut node = String::new();
        poll_until("the simulated node registered", WAIT, || {
            node = kc_ok(&k, &host, &["get", "nodes", "-o", "name"])?
                .trim()
                .trim_start_matches("node/")
                .to_string();
            Ok(!node.is_empty())
        })?;
        kc_ok(
            &k,
            &host,
            &[
                "annotate",
                "node",
                &node,
                r#"fabrik.dev/gpu-layout={"mode": "mig", "geometry": "all-1g.18gb"}"#,
            ],
        )?;
        let mut offered = BTreeMap::new();
        poll_until("the node cut into 56 instances", WAIT, || {
            offered = allocatable(&k, &host)?;
            Ok(offered.values().next() == Some(&(0, 56)))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {offered:?}"))?;
        let t = f.create_tenant("train", &["--gpus", "8"])?;
        kc_apply_ok(&k, &t, &gpu_pod("big", 8, 600))?;
        let mut states = Default::default();
        poll_until("the 8-GPU pod running", WAIT, || {
            states = pod_states(&k, &t)?;
            Ok(states.get("big").is_some_and(|(p, _)| p == "Running"))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        offered = allocatable(&k, &host)?;
        if offered.values().next() != Some(&(8, 0)) {
            bail!("the node is not whole again: {offered:?}");
        }
        Ok(())
    });
}

/// On a pool of whole GPUs, a tenant on capped shares (`share:20480,25`) and one on
/// time-sliced GPUs each get one idle GPU laid out for them — four 20 GiB / 25 % slices, four
/// time-sliced replicas — beside the whole GPUs, on one node, and their pods run.
#[test]
fn shared_and_time_sliced_gpus_are_laid_out_beside_whole_ones() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let share = f.create_tenant(
            "notebooks",
            &["--gpus", "2", "--gpu-sharing", "share:20480,25"],
        )?;
        let ts = f.create_tenant("dev", &["--gpus", "2", "--gpu-sharing", "timeslice"])?;
        kc_apply_ok(&k, &share, &gpu_deployment("nb", 2))?;
        kc_apply_ok(&k, &ts, &gpu_deployment("edit", 2))?;
        let mut seen = ((0, 0, 0), (0, 0, 0));
        poll_until("both tenants' pods running", WAIT, || {
            seen = (pods_of(&k, &share, "nb")?, pods_of(&k, &ts, "edit")?);
            Ok(seen.0 .0 == 2 && seen.1 .0 == 2)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        let out = kc_ok(&k, &host, &["get", "nodes", "-o", "json"])?;
        let nodes: Value = serde_json::from_str(&out).context("node list")?;
        let a = &nodes["items"][0]["status"]["allocatable"];
        let got = |r: &str| a[r].as_str().unwrap_or("0").to_string();
        let offered = (
            got("nvidia.com/gpu"),
            got("fabrik.dev/shared-gpu-20480mib-25pct"),
            got("nvidia.com/gpu.shared"),
        );
        if offered != ("6".into(), "4".into(), "4".into()) {
            bail!("not one GPU each laid out beside six whole ones: {offered:?}");
        }
        Ok(())
    });
}

/// A pod of `gpus` GPUs that runs `seconds` and declares it may run `deadline`.
fn gpu_run(name: &str, gpus: usize, seconds: u64, deadline: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: stream}}\n  \
         annotations: {{sim.fabrik.dev/run-seconds: \"{seconds}\"}}\nspec:\n  restartPolicy: Never\n  \
         activeDeadlineSeconds: {deadline}\n  \
         containers: [{{name: main, image: trainer, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]\n"
    )
}

/// The only node's eight whole GPUs all run when a tenant on MIG instances comes: past the
/// starvation bound one GPU — the one whose run declares the earliest end — is laid out for
/// MIG and drains (its node agent stops offering it; nothing is preempted), and once its run
/// ends the MIG pod runs while the other seven runs go on.
#[test]
fn a_busy_gpu_drains_for_a_gpu_kind_nobody_offers() {
    let f = Fabrik::start_with(&["--nodes", "1", "--queue-starvation-seconds", "3"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let busy = f.create_tenant("busy", &["--gpus", "8"])?;
        let t = f.create_tenant("infer", &["--gpus", "4", "--gpu-sharing", "mig:1g.18gb"])?;
        kc_apply_ok(&k, &busy, &gpu_run("short", 1, 20, 40))?;
        for i in 0..7 {
            kc_apply_ok(&k, &busy, &gpu_run(&format!("long-{i}"), 1, 120, 300))?;
        }
        let mut states = Default::default();
        poll_until("busy's eight runs started", WAIT, || {
            states = pod_states(&k, &busy)?;
            Ok(states.values().filter(|(p, _)| p == "Running").count() == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        kc_apply_ok(&k, &t, &gpu_deployment("serve", 1))?;
        // One GPU is laid out for MIG while the short run holds it: it drains (no longer
        // offered), and the waiting pod is told so in its tenant.
        let mut told = String::new();
        let mut status = String::new();
        let (mut seen_told, mut seen_pending) = (false, false);
        poll_until("a GPU draining for MIG, the MIG pod told", WAIT, || {
            told = kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=serve",
                    "-o",
                    r#"jsonpath={.items[0].status.conditions[?(@.type=="PodScheduled")].message}"#,
                ],
            )?;
            seen_told |= told.contains("is being laid out for nvidia.com/mig-1g.18gb");
            status = kc_ok(
                &k,
                &host,
                &[
                    "get",
                    "nodes",
                    "-o",
                    r#"jsonpath={.items[0].metadata.annotations.fabrik\.dev/gpu-layout-status}"#,
                ],
            )?;
            let waiting: Value = serde_json::from_str(&status).unwrap_or(Value::Null);
            if waiting["state"] == "pending" {
                if waiting["waitingGpus"].as_array().map(Vec::len) != Some(1) {
                    bail!("more than one GPU drains: {status}");
                }
                // The GPU chosen is the short run's (its declared end is the earliest).
                let on_it = waiting["waitingFor"]
                    .as_object()
                    .and_then(|m| m.values().next())
                    .map(Value::to_string)
                    .unwrap_or_default();
                if !on_it.contains("short") {
                    bail!("the GPU draining is not the short run's: {status}");
                }
                // (The node's status may trail its annotations by a moment.)
                let offered = allocatable(&k, &host)?;
                seen_pending |= offered.values().next().map(|(whole, _)| *whole) == Some(7);
            }
            Ok(seen_pending && seen_told)
        })
        .map_err(|e| anyhow::anyhow!("{e}: told {told:?}, status {status}"))?;
        // The short run ends on its own, the GPU is cut, the MIG pod runs; the long runs go on.
        let mut seen = (0, 0, 0);
        poll_until("the inference pod running on MIG", WAIT, || {
            seen = pods_of(&k, &t, "serve")?;
            Ok(seen.0 == 1)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        poll_until("busy's short run ended on its own", WAIT, || {
            states = pod_states(&k, &busy)?;
            Ok(states.get("short").is_some_and(|(p, _)| p == "Succeeded"))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        let running = states
            .iter()
            .filter(|(n, (p, _))| n.starts_with("long-") && p == "Running")
            .count();
        if running != 7 {
            bail!("the long runs did not all go on: {states:?}");
        }
        Ok(())
    });
}

/// Reclaim across kinds. `infer` (guaranteed 7 MIG instances, allowed to borrow 7) gets two
/// idle GPUs cut into 14 instances; then `train`, guaranteed the node's 8 whole GPUs, asks for
/// all of them. The two GPUs are laid out whole again, and they do not wait for the runs
/// `infer` borrowed: those 7 are preempted, each with an Event saying why; the 7 within its
/// guarantee run to their end, and then the training pod runs.
#[test]
fn borrowed_mig_runs_go_for_a_guarantee_of_whole_gpus() {
    let f = Fabrik::start_with(&["--nodes", "1", "--queue-starvation-seconds", "3"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let infer = f.create_tenant(
            "infer",
            &[
                "--gpus",
                "7",
                "--borrow-gpus",
                "7",
                "--gpu-sharing",
                "mig:1g.18gb",
            ],
        )?;
        let train = f.create_tenant("train", &["--gpus", "8"])?;
        for i in 0..14 {
            kc_apply_ok(&k, &infer, &gpu_pod(&format!("serve-{i}"), 1, 90))?;
        }
        let mut states = Default::default();
        poll_until("infer's 14 runs on two GPUs cut for MIG", WAIT, || {
            states = pod_states(&k, &infer)?;
            Ok(states.values().filter(|(p, _)| p == "Running").count() == 14)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        kc_apply_ok(&k, &train, &gpu_pod("big", 8, 600))?;
        let mut preempted = 0;
        poll_until("7 of infer's runs preempted", WAIT, || {
            preempted = pods_of(&k, &infer, "stream")?.2;
            if preempted > 7 {
                bail!("{preempted} of infer's runs preempted: it keeps its guarantee of 7");
            }
            Ok(preempted == 7)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {preempted} preempted"))?;
        let said = preemption_events(&k, &infer)?;
        if said.len() != 7
            || !said.iter().all(|l| {
                l.contains("laid out for nvidia.com/gpu")
                    && l.contains("tenant train waits for below its guarantee")
            })
        {
            bail!("preemption events in infer: {said:?}");
        }
        poll_until(
            "train's 8-GPU pod running",
            WAIT + Duration::from_secs(90),
            || {
                states = pod_states(&k, &train)?;
                Ok(states.get("big").is_some_and(|(p, _)| p == "Running"))
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        // The runs within infer's guarantee ran to their end.
        states = pod_states(&k, &infer)?;
        let done = states.values().filter(|(p, _)| p == "Succeeded").count();
        if done != 7 || pods_of(&k, &infer, "stream")?.2 != 7 {
            bail!("infer's guaranteed runs did not end on their own: {states:?}");
        }
        Ok(())
    });
}

/// A borrower's Job (one gang of 8 on an 8-GPU node, 4 of them borrowed) goes back whole when
/// the owner of the borrowed 4 asks for them, though its tenant is then below its own fair
/// share; its pods are told why, and a Job that ignores disruptions counts no failure.
#[test]
fn a_guarantee_takes_back_a_borrowed_gang_whole() {
    let f = Fabrik::start_with(&["--nodes", "1", "--queue-starvation-seconds", "2"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let owner = f.create_tenant("owner", &["--gpus", "4"])?;
        let borrower = f.create_tenant("borrower", &["--gpus", "4", "--borrow-gpus", "4"])?;
        let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec:\n  \
                   parallelism: 8\n  completions: 8\n  backoffLimit: 0\n  podFailurePolicy:\n    \
                   rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}]\n  \
                   template:\n    metadata: {labels: {app: stream}, annotations: \
                   {sim.fabrik.dev/run-seconds: \"600\"}}\n    spec:\n      restartPolicy: Never\n      \
                   containers: [{name: main, image: trainer, resources: {limits: \
                   {nvidia.com/gpu: \"1\"}}}]\n";
        kc_apply_ok(&k, &borrower, job)?;
        let mut seen = (0, 0, 0);
        poll_until("the borrower's 8 pods running", WAIT, || {
            seen = pods_of(&k, &borrower, "stream")?;
            Ok(seen.0 == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        for i in 0..4 {
            kc_apply_ok(&k, &owner, &gpu_pod(&format!("mine-{i}"), 1, 600))?;
        }
        poll_until("the owner's 4 pods running", WAIT, || {
            seen = pods_of(&k, &owner, "stream")?;
            Ok(seen.0 == 4)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        let mut said = Vec::new();
        poll_until("an Event for each of the borrower's 8 pods", WAIT, || {
            said = preemption_events(&k, &borrower)?;
            Ok(said.len() >= 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {said:?}"))?;
        if said.len() != 8
            || !said.iter().all(|l| {
                l.contains("tenant borrower borrowed these GPUs beyond its guarantee")
                    && l.contains("tenant owner, below its own guarantee")
            })
        {
            bail!("preemption events in the borrower: {said:?}");
        }
        let failed = kc_ok(
            &k,
            &borrower,
            &["get", "job", "train", "-o", "jsonpath={.status.failed}"],
        )?;
        if !matches!(failed.trim(), "" | "0") {
            bail!("the Job counted {failed} failures for its preempted pods");
        }
        Ok(())
    });
}

/// A pod larger than any node, and a gang (a Kueue pod group) larger than the host, are told
/// they cannot run here (no estimated wait); what the host can run goes on beside them.
#[test]
fn what_the_host_can_never_run_is_told_so() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let t = f.create_tenant("wide", &["--gpus", "4", "--borrow-gpus", "30"])?;
        kc_apply_ok(&k, &t, &gpu_pod("nine", 9, 60))?;
        let member = |i: usize| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: g-{i}\n  labels: \
                 {{kueue.x-k8s.io/pod-group-name: pair}}\n  annotations: \
                 {{kueue.x-k8s.io/pod-group-total-count: \"3\"}}\nspec:\n  containers:\n  \
                 - name: main\n    image: trainer\n    resources: {{limits: {{nvidia.com/gpu: 6}}}}\n"
            )
        };
        kc_apply_ok(&k, &t, &member(0))?;
        kc_apply_ok(&k, &t, &member(1))?;
        kc_apply_ok(&k, &t, &member(2))?;
        kc_apply_ok(&k, &t, &gpu_pod("fits", 2, 60))?;
        let said = |pod: &str| -> Result<String> {
            kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pod",
                    pod,
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}"#,
                ],
            )
        };
        let mut seen = (String::new(), String::new());
        poll_until("both told they cannot run here", WAIT, || {
            seen = (said("nine")?, said("g-0")?);
            Ok(seen.0.contains(
                "it asks for 9 nvidia.com/gpu, more than any node's GPUs could ever offer (8): \
                 it cannot run unless a larger node joins",
            ) && seen.1.contains(
                "it asks for 18 nvidia.com/gpu in all, more than the host's GPUs could ever offer \
                 (16): it cannot run unless the host grows",
            ))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen:?}"))?;
        if seen.0.contains("estimated wait") || seen.1.contains("estimated wait") {
            bail!("an estimated wait for what cannot run: {seen:?}");
        }
        poll_until("the pod that fits Running", WAIT, || {
            let phase = kc_ok(&k, &t, &["get", "pod", "fits", "-o", "jsonpath={.status.phase}"])?;
            Ok(phase == "Running")
        })?;
        Ok(())
    });
}

#[test]
fn turning_the_queue_off_releases_the_pods_it_held() {
    let mut f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let run = |f: &mut Fabrik| -> Result<()> {
        let t = f.create_tenant("held", &["--gpus", "1"])?;
        let other = f.create_tenant("other", &["--gpus", "8"])?;
        kc_apply_ok(&k, &other, &gpu_deployment("all", 8))?;
        let mut seen = (0, 0, 0);
        poll_until("other's 8 pods bound", WAIT, || {
            seen = pods_of(&k, &other, "all")?;
            Ok(seen.0 == 8)
        })?;
        // No GPU left: held's pod waits at the queue's gate.
        kc_apply_ok(&k, &t, &gpu_deployment("one", 1))?;
        poll_until("held's pod queued", WAIT, || {
            seen = pods_of(&k, &t, "one")?;
            Ok(seen.1 == 1)
        })?;
        f.restart_with(&["--nodes", "1", "--gpu-queue=false"])?;
        let host = f.data_dir().join("host.kubeconfig");
        let mut gates = String::new();
        poll_until("the gate released", WAIT, || {
            gates = kc_ok(
                &k,
                &host,
                &[
                    "get",
                    "pods",
                    "-n",
                    "fabrik-held",
                    "-o",
                    "jsonpath={.items[*].spec.schedulingGates}",
                ],
            )?;
            Ok(gates.trim().is_empty())
        })
        .map_err(|e| anyhow::anyhow!("{e}: {gates}"))?;
        Ok(())
    };
    if let Err(e) = run(&mut f) {
        panic!("{e:#}\n--- fabrik up log ---\n{}", f.log());
    }
}

/// The tenant's own PriorityClasses (resolved by its API server, never sent to the host) order
/// its pods in the GPU queue: pods of a higher class go first when GPUs free up, even though
/// others of the tenant waited longer.
#[test]
fn a_tenant_s_priority_classes_order_its_own_queue() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let t = f.create_tenant("prio", &["--gpus", "16"])?;
        kc_apply_ok(
            &k,
            &t,
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: urgent}\nvalue: 1000\n",
        )?;
        kc_apply_ok(&k, &t, &gpu_deployment("filler", 8))?;
        poll_until("the filler on all 8 GPUs", WAIT, || {
            Ok(pods_of(&k, &t, "filler")?.0 == 8)
        })?;
        kc_apply_ok(&k, &t, &gpu_deployment("low", 2))?;
        poll_until("the low pods queued", WAIT, || {
            Ok(pods_of(&k, &t, "low")?.1 == 2)
        })?;
        let high = gpu_deployment("high", 2).replace(
            "      containers:\n",
            "      priorityClassName: urgent\n      containers:\n",
        );
        kc_apply_ok(&k, &t, &high)?;
        poll_until("the high pods queued", WAIT, || {
            Ok(pods_of(&k, &t, "high")?.1 == 2)
        })?;
        let priorities = kc_ok(
            &k,
            &t,
            &[
                "get",
                "pods",
                "-l",
                "app=high",
                "-o",
                "jsonpath={.items[*].spec.priority}",
            ],
        )?;
        if priorities.split_whitespace().collect::<Vec<_>>() != ["1000", "1000"] {
            bail!("the tenant's class was not resolved: priorities {priorities:?}");
        }
        // Two GPUs free up: the urgent pods take them, the older low ones keep waiting.
        kc_ok(
            &k,
            &t,
            &["scale", "deployment", "filler", "--replicas", "6"],
        )?;
        poll_until("the high pods bound", WAIT, || {
            Ok(pods_of(&k, &t, "high")?.0 == 2)
        })?;
        let low = pods_of(&k, &t, "low")?;
        if low.0 != 0 {
            bail!("a low pod was admitted before the urgent ones: {low:?}");
        }
        // GPUs were freed: the waiting pods get an estimate at that rate.
        let mut said = String::new();
        poll_until("the low pods' estimated wait", WAIT, || {
            said = kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=low",
                    "-o",
                    r#"jsonpath={range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}"#,
                ],
            )?;
            Ok(said.lines().filter(|l| !l.is_empty()).count() == 2
                && said
                    .lines()
                    .all(|l| l.contains("estimated wait") && !l.contains("no estimated wait")))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {said}"))?;
        Ok(())
    });
}

/// Tenants of one group (department): a member's idle guarantee goes to its sibling first, so
/// a tenant outside the group gets none of it, and the group's fair share holds.
#[test]
fn a_group_s_idle_guarantee_goes_to_its_own_members_first() {
    let f = Fabrik::start_with(&["--nodes", "1"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let x = f.create_tenant(
            "x",
            &["--gpus", "4", "--borrow-gpus", "4", "--queue-group", "dept"],
        )?;
        f.create_tenant("y", &["--gpus", "4", "--queue-group", "dept"])?;
        let w = f.create_tenant("w", &["--gpus", "0", "--borrow-gpus", "8"])?;
        // x takes its 4 and y's idle 4.
        kc_apply_ok(&k, &x, &gpu_deployment("train", 8))?;
        poll_until("x's 8 pods bound", WAIT, || {
            Ok(pods_of(&k, &x, "train")?.0 == 8)
        })?;
        // w asks for all 8: alone, x and w would share y's idle 4 (fair shares 6 and 2, and 2
        // of x's pods preempted); in the department, y's idle GPUs are x's first.
        kc_apply_ok(&k, &w, &gpu_deployment("eval", 8))?;
        poll_until("w's pods told why they wait", WAIT, || {
            Ok(pods_of(&k, &w, "eval")?.1 == 8)
        })?;
        let (sx, sw) = (standing(&f, &k, "x")?, standing(&f, &k, "w")?);
        if sx.3 != 8 || sw.3 != 0 {
            bail!("fair shares: x {sx:?}, w {sw:?}");
        }
        let xs = pods_of(&k, &x, "train")?;
        if xs.0 != 8 || xs.2 != 0 {
            bail!("x's pods (bound, queued, preempted): {xs:?}");
        }
        Ok(())
    });
}

/// A bare pod of `gpus` GPUs that runs `seconds` and ends.
fn gpu_pod(name: &str, gpus: usize, seconds: u64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: stream}}\n  \
         annotations: {{sim.fabrik.dev/run-seconds: \"{seconds}\"}}\nspec:\n  restartPolicy: Never\n  \
         containers: [{{name: main, image: trainer, resources: {{limits: {{nvidia.com/gpu: \"{gpus}\"}}}}}}]\n"
    )
}

/// The tenant's pods: name → (phase, node).
fn pod_states(
    k: &e2e::Kubectl,
    t: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, (String, String)>> {
    let out = kc_ok(k, t, &["get", "pods", "-o", "json"])?;
    let list: Value = serde_json::from_str(&out).context("pod list")?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&p["metadata"]["name"]),
                (s(&p["status"]["phase"]), s(&p["spec"]["nodeName"])),
            )
        })
        .collect())
}

/// One team's 8-GPU job among a stream of its own 1-GPU pods: the small pods that arrive after
/// it would take every GPU that frees up (they fit, it does not), so without a reservation it
/// never starts. Past the starvation bound a node is reserved for it, small pods keep running
/// elsewhere and as backfill, and it starts — on one node, its 8 GPUs one NVLink island —
/// within the bound plus the longest run already on that node.
#[test]
fn an_8_gpu_job_among_a_stream_of_1_gpu_pods_starts_within_the_bound() {
    let f = Fabrik::start_with(&["--nodes", "2", "--queue-starvation-seconds", "5"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let t = f.create_tenant("team", &["--gpus", "16", "--borrow-gpus", "16"])?;
        // 16 small pods on the 16 GPUs, ending one by one over 8–23 s.
        let fill: Vec<String> = (0..16)
            .map(|i| gpu_pod(&format!("s-{i}"), 1, 8 + i))
            .collect();
        kc_apply_ok(&k, &t, &fill.join("---\n"))?;
        poll_until("the 16 small pods running", WAIT, || {
            Ok(pod_states(&k, &t)?
                .values()
                .filter(|(_, n)| !n.is_empty())
                .count()
                == 16)
        })?;
        kc_apply_ok(&k, &t, &gpu_pod("big", 8, 3600))?;
        let asked = std::time::Instant::now();
        // The stream: 1-GPU pods of 20 s, always four waiting, from now on.
        let mut next = 16;
        let mut started_before_big = 0;
        let mut states = Default::default();
        poll_until("the 8-GPU pod bound", Duration::from_secs(180), || {
            states = pod_states(&k, &t)?;
            if states.get("big").is_some_and(|(_, n)| !n.is_empty()) {
                return Ok(true);
            }
            started_before_big = states
                .iter()
                .filter(|(name, (_, node))| {
                    !node.is_empty()
                        && name
                            .strip_prefix("s-")
                            .and_then(|i| i.parse::<u64>().ok())
                            .is_some_and(|i| i >= 16)
                })
                .count();
            let waiting = states
                .iter()
                .filter(|(name, (phase, node))| {
                    name.starts_with("s-") && phase == "Pending" && node.is_empty()
                })
                .count();
            let more: Vec<String> = (waiting..4)
                .map(|_| {
                    next += 1;
                    gpu_pod(&format!("s-{next}"), 1, 20)
                })
                .collect();
            if !more.is_empty() {
                kc_apply_ok(&k, &t, &more.join("---\n"))?;
            }
            Ok(false)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        let waited = asked.elapsed();
        // Bound: 5 s of starvation, the longest run on the reserved node (23 s), and the
        // decisions, bindings and status updates of a loaded machine (~20 s alone, ~45 s beside
        // the rest of the suite on 2 cores). Without a reservation it never starts.
        if waited > Duration::from_secs(120) {
            bail!("the 8-GPU pod waited {waited:?}");
        }
        if started_before_big == 0 {
            bail!("no small pod of the stream ran while the 8-GPU pod waited: {states:?}");
        }
        let node = states
            .get("big")
            .map(|(_, n)| n.clone())
            .unwrap_or_default();
        let host = f.data_dir().join("host.kubeconfig");
        let islands = kc_ok(
            &k,
            &host,
            &[
                "get",
                "node",
                &node,
                "-o",
                r"jsonpath={.metadata.labels.fabrik\.dev/gpu-nvlink-islands}",
            ],
        )?;
        if islands.trim() != "1" {
            bail!("the 8-GPU pod's node {node} has {islands:?} NVLink islands");
        }
        Ok(())
    });
}

/// Keeps `waiting` pods of `prefix` (1 GPU, `seconds` each) pending in tenant `t`: a tenant
/// whose demand never ends. `next` numbers the pods.
fn keep_asking(
    k: &e2e::Kubectl,
    t: &std::path::Path,
    prefix: &str,
    waiting: usize,
    seconds: u64,
    next: &mut usize,
) -> Result<()> {
    let pending = pod_states(k, t)?
        .iter()
        .filter(|(name, (phase, node))| {
            name.starts_with(prefix) && phase == "Pending" && node.is_empty()
        })
        .count();
    let more: Vec<String> = (pending..waiting)
        .map(|_| {
            *next += 1;
            gpu_pod(&format!("{prefix}{next}"), 1, seconds)
        })
        .collect();
    if !more.is_empty() {
        kc_apply_ok(k, t, &more.join("---\n"))?;
    }
    Ok(())
}

/// Three teams, each guaranteed 5 of the 16 GPUs: two keep asking for 1-GPU pods and hold the
/// GPUs between them, each within its fair share; the third asks for 8 at once — more than
/// the rest of its own share, so reclaim (which takes only what is held beyond a share) cannot
/// make room for it. Past the starvation bound a node is reserved for it and drains as the
/// others' runs end; it starts within the bound plus the longest run there, and, running past
/// its tenant's share, is not taken back while the others wait (that would put its tenant
/// below its share): shares are kept over time.
#[test]
fn a_job_larger_than_the_rest_of_its_tenant_s_share_gets_its_turn() {
    let f = Fabrik::start_with(&["--nodes", "2", "--queue-starvation-seconds", "5"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let quota = ["--gpus", "5", "--borrow-gpus", "11"];
        let a = f.create_tenant("team-a", &quota)?;
        let b = f.create_tenant("team-b", &quota)?;
        let c = f.create_tenant("team-c", &quota)?;
        // a and c fill the factory, 8 pods each, ending over 10–24 s.
        for (t, prefix) in [(&a, "a-"), (&c, "c-")] {
            let fill: Vec<String> = (0..8)
                .map(|i| gpu_pod(&format!("{prefix}{i}"), 1, 10 + 2 * i))
                .collect();
            kc_apply_ok(&k, t, &fill.join("---\n"))?;
        }
        poll_until("the 16 pods of a and c running", WAIT, || {
            let bound = |t| -> Result<usize> {
                Ok(pod_states(&k, t)?
                    .values()
                    .filter(|(_, n)| !n.is_empty())
                    .count())
            };
            Ok(bound(&a)? + bound(&c)? == 16)
        })?;
        kc_apply_ok(&k, &b, &gpu_pod("big", 8, 3600))?;
        let asked = std::time::Instant::now();
        let (mut next_a, mut next_c) = (8, 8);
        let mut states = Default::default();
        poll_until("team-b's 8-GPU pod bound", Duration::from_secs(180), || {
            states = pod_states(&k, &b)?;
            if states.get("big").is_some_and(|(_, n)| !n.is_empty()) {
                return Ok(true);
            }
            keep_asking(&k, &a, "a-", 4, 20, &mut next_a)?;
            keep_asking(&k, &c, "c-", 4, 20, &mut next_c)?;
            Ok(false)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        let waited = asked.elapsed();
        // Bound: 5 s of starvation, the longest run on the reserved node (24 s), and a loaded
        // machine's decisions, bindings and status updates. Without the reservation it waits
        // for as long as a and c ask.
        if waited > Duration::from_secs(120) {
            bail!("the 8-GPU pod waited {waited:?}");
        }
        // It keeps running while a and c wait below their shares.
        let running_since = std::time::Instant::now();
        while running_since.elapsed() < Duration::from_secs(10) {
            keep_asking(&k, &a, "a-", 4, 20, &mut next_a)?;
            keep_asking(&k, &c, "c-", 4, 20, &mut next_c)?;
            let (phase, _) = pod_states(&k, &b)?.remove("big").unwrap_or_default();
            if phase == "Failed" {
                bail!("the 8-GPU pod was taken back: {:?}", pod_states(&k, &b)?);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let (admitted, _, _, fair) = standing(&f, &k, "team-b")?;
        if admitted != 8 || fair >= 8 {
            bail!("team-b holds {admitted} GPUs with a fair share of {fair}");
        }
        Ok(())
    });
}

/// The same 8-GPU job, but the others' runs do not end: three teams are each guaranteed 2 GPUs,
/// two of them hold 8 each, half on each node, for an hour, and the third asks for 8 (its fair
/// share is about a third of 16). Reclaim takes only what the two hold beyond their fair shares
/// (less than 8 in all), and a drain that waited for their runs would wait the hour. Past
/// the starvation bound its node is reserved; once that has waited the bound too, for a team
/// not ahead of its fair share over time, what the two hold there beyond their guarantees —
/// they are ahead of theirs — is preempted, each told why, and the job starts. Each keeps
/// its other 4 (within its guarantee, it would never lose them).
#[test]
fn a_turn_does_not_wait_on_the_runs_of_tenants_ahead_of_their_shares() {
    let f = Fabrik::start_with(&["--nodes", "2", "--queue-starvation-seconds", "5"])
        .expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let small = ["--gpus", "2", "--borrow-gpus", "14"];
        let a = f.create_tenant("team-a", &small)?;
        let c = f.create_tenant("team-c", &small)?;
        let b = f.create_tenant("team-b", &small)?;
        // 4 pods of a, then 4 of c, fill one node (best fit); 4 more of each fill the other.
        let running = |t: &std::path::Path, n: usize| -> Result<BTreeMap<String, String>> {
            let mut on = BTreeMap::new();
            poll_until(&format!("{n} pods running"), WAIT, || {
                on = pod_states(&k, t)?
                    .into_iter()
                    .filter(|(_, (phase, node))| phase == "Running" && !node.is_empty())
                    .map(|(name, (_, node))| (name, node))
                    .collect();
                Ok(on.len() == n)
            })?;
            Ok(on)
        };
        for (round, bound) in [(0, 4), (4, 8)] {
            for (t, prefix) in [(&a, "a-"), (&c, "c-")] {
                let pods: Vec<String> = (round..round + 4)
                    .map(|i| gpu_pod(&format!("{prefix}{i}"), 1, 3600))
                    .collect();
                kc_apply_ok(&k, t, &pods.join("---\n"))?;
                running(t, bound)?;
            }
        }
        let before = running(&a, 8)?;
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for node in before.values().chain(running(&c, 8)?.values()) {
            *per_node.entry(node.clone()).or_default() += 1;
        }
        if per_node.values().any(|n| *n != 8) {
            bail!("expected each node full, half a's and half c's: {before:?}, {per_node:?}");
        }
        kc_apply_ok(&k, &b, &gpu_pod("big", 8, 3600))?;
        let mut states = Default::default();
        poll_until("team-b's 8-GPU pod bound", Duration::from_secs(120), || {
            states = pod_states(&k, &b)?;
            Ok(states.get("big").is_some_and(|(_, n)| !n.is_empty()))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {states:?}"))?;
        let node = states
            .get("big")
            .map(|(_, n)| n.clone())
            .unwrap_or_default();
        for (t, name) in [(&a, "team-a"), (&c, "team-c")] {
            let mut seen = (0, 0, 0);
            poll_until(&format!("4 of {name}'s pods preempted"), WAIT, || {
                seen = pods_of(&k, t, "stream")?;
                Ok(seen.2 == 4)
            })
            .map_err(|e| anyhow::anyhow!("{e}: {seen:?} {:?}", pod_states(&k, t)))?;
            if seen.0 != 4 {
                bail!(
                    "{name}: {} pods kept, not 4: {:?}",
                    seen.0,
                    pod_states(&k, t)?
                );
            }
            // What went was on the job's node; what stays is elsewhere.
            let left = running(t, 4)?;
            if left.values().any(|n| *n == node) {
                bail!("{name} still runs on {node}: {left:?}");
            }
            let said = preemption_events(&k, t)?;
            let why = format!(
                "reserved for a workload of tenant team-b, which waited past the starvation \
                 bound and is not ahead of its fair share over time, while tenant {name} has \
                 held more than its own"
            );
            if said.is_empty() || !said.iter().all(|m| m.contains(&why)) {
                bail!("preemption events in {name}: {said:?}");
            }
        }
        Ok(())
    });
}

/// A pod of `app` that takes one GPU through a ResourceClaim made from template `one-gpu`.
fn claim_pod(app: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: {app}}}\n  \
         annotations: {{sim.fabrik.dev/run-seconds: \"3600\"}}\nspec:\n  restartPolicy: Never\n  \
         resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]\n  \
         containers: [{{name: main, image: trainer, resources: {{claims: [{{name: gpu}}]}}}}]\n"
    )
}

/// GPUs taken through ResourceClaims (dynamic resource allocation) are queued as GPUs asked
/// for in `resources` are: the claim pods are held at the gate and admitted, count in their
/// tenant's standing, and borrowed ones are reclaimed when the owner's demand comes back. (Not
/// counted, the owner's pods would be admitted onto GPUs the claims hold, and wait forever.)
#[test]
fn gpus_taken_through_resource_claims_are_queued_and_reclaimed() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    let host = f.data_dir().join("host.kubeconfig");
    f.check(|| {
        let alpha = f.create_tenant("alpha", &["--gpus", "8"])?;
        let beta = f.create_tenant("beta", &["--gpus", "4", "--borrow-gpus", "12"])?;
        let mut claims = String::from(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one-gpu}\n\
             spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}\n",
        );
        for i in 0..12 {
            claims.push_str("---\n");
            claims.push_str(&claim_pod("claims", &format!("c-{i}")));
        }
        // The DeviceClasses come with the node agents' first slices.
        poll_until("the DeviceClasses mirrored into beta", WAIT, || {
            Ok(kc_ok(&k, &beta, &["get", "deviceclasses", "-o", "name"])?
                .contains("gpu.nvidia.com"))
        })?;
        kc_apply_ok(&k, &beta, &claims)?;
        let mut seen = (0, 0, 0);
        poll_until("beta's 12 claim pods bound", WAIT, || {
            seen = pods_of(&k, &beta, "claims")?;
            Ok(seen.0 == 12)
        })
        .map_err(|e| {
            // Where a pod is neither bound nor queued, what the tenant and the host say of it.
            let show = |kubeconfig: &std::path::Path, args: &[&str]| {
                kc_ok(&k, kubeconfig, args).unwrap_or_else(|e| format!("({e:#})"))
            };
            anyhow::anyhow!(
                "{e}: {seen:?}\n--- beta ---\n{}\n--- host ---\n{}",
                show(&beta, &["get", "pods,resourceclaims", "-o", "wide"]),
                show(
                    &host,
                    &[
                        "get",
                        "pods,resourceclaims",
                        "-n",
                        "fabrik-beta",
                        "-o",
                        r#"custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,GATES:.spec.schedulingGates[*].name,ADMITTED:.metadata.annotations.fabrik\.dev/queue-admitted,SCHEDULED:.status.conditions[?(@.type=="PodScheduled")].message"#,
                    ],
                )
            )
        })?;
        let mut st = (0, 0, 0, 0);
        poll_until("beta's standing counts its claims", WAIT, || {
            st = standing(&f, &k, "beta")?;
            Ok(st.0 == 12 && st.1 == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: beta {st:?}"))?;
        // Admitted by the queue, not passed around it.
        let admitted = kc_ok(
            &k,
            &host,
            &[
                "get",
                "pods",
                "-n",
                "fabrik-beta",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.annotations.fabrik\.dev/queue-admitted}{"\n"}{end}"#,
            ],
        )?;
        let rows = admitted.lines().filter(|l| !l.trim().is_empty()).count();
        if rows != 12 {
            bail!("beta's host pods admitted by the queue: {admitted}");
        }
        // The owner comes back: 4 claim pods of beta go, alpha's 8 run.
        kc_apply_ok(&k, &alpha, &gpu_deployment("serve", 8))?;
        poll_until("alpha's 8 pods bound", WAIT, || {
            seen = pods_of(&k, &alpha, "serve")?;
            Ok(seen.0 == 8)
        })
        .map_err(|e| anyhow::anyhow!("{e}: alpha {seen:?}"))?;
        poll_until("beta at its fair share", WAIT, || {
            seen = pods_of(&k, &beta, "claims")?;
            Ok(seen == (8, 0, 4))
        })
        .map_err(|e| anyhow::anyhow!("{e}: beta (bound, queued, preempted) {seen:?}"))?;
        Ok(())
    });
}
