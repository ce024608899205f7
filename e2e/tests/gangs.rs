//! Gangs by the labels a tenant's tooling writes (issue gpu-queues: "tenants cannot ask for a
//! gang"): pods of a Kueue pod group, or of a Volcano PodGroup (the tenant's own CRD, from the
//! shared test data), are bound all together or not at all by `fabrik up`'s scheduler. On two
//! nodes of 8 GPUs, a group of three 8-GPU pods binds none (and says why); a group of two binds
//! both; pods naming a PodGroup that does not exist wait for it.

use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{kc_apply_ok, kc_ok, kubectls, poll_until, repo_root, Fabrik};

const WAIT: Duration = Duration::from_secs(60);

/// `pods` pods of 8 GPUs named `<name>-<i>`, labelled `group: <name>`, with the further labels
/// and the annotations (YAML map entries) that ask for their gang.
fn gpu_pods(name: &str, pods: usize, labels: &str, annotations: &str) -> String {
    (0..pods)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-{i}\n  labels: {{group: {name}{labels}}}\n  \
                 annotations: {{{annotations}}}\nspec:\n  containers:\n  - name: main\n    \
                 image: trainer\n    resources: {{limits: {{nvidia.com/gpu: \"8\"}}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A Kueue plain pod group of `pods` 8-GPU pods.
fn group(name: &str, pods: usize) -> String {
    gpu_pods(
        name,
        pods,
        &format!(", kueue.x-k8s.io/pod-group-name: {name}"),
        &format!("kueue.x-k8s.io/pod-group-total-count: \"{pods}\""),
    )
}

/// `pods` 8-GPU pods of Volcano PodGroup `name`.
fn volcano_group(name: &str, pods: usize) -> String {
    gpu_pods(
        name,
        pods,
        "",
        &format!("scheduling.k8s.io/group-name: {name}"),
    )
}

#[test]
fn a_kueue_pod_group_is_bound_all_or_nothing() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let t = f.create_tenant("gangs", &["--gpus", "40"])?;
        kc_apply_ok(&k, &t, &group("big", 3))?;
        let mut seen = String::new();
        poll_until("the big group's pods told why they wait", WAIT, || {
            seen = kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    "group=big",
                    "-o",
                    r#"jsonpath={range .items[*]}{.spec.nodeName}|{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}"#,
                ],
            )?;
            let rows: Vec<&str> = seen.lines().filter(|r| !r.is_empty()).collect();
            Ok(rows.len() == 3 && rows.iter().all(|r| r.starts_with('|') && r.contains("gang")))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;

        kc_apply_ok(&k, &t, &group("pair", 2))?;
        poll_until("the pair bound together", WAIT, || {
            seen = kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    "group=pair",
                    "-o",
                    "jsonpath={range .items[*]}{.spec.nodeName} {end}",
                ],
            )?;
            Ok(seen.split_whitespace().count() == 2)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;
        let big = kc_ok(
            &k,
            &t,
            &[
                "get",
                "pods",
                "-l",
                "group=big",
                "-o",
                "jsonpath={range .items[*]}{.spec.nodeName}{end}",
            ],
        )?;
        if !big.is_empty() {
            bail!("a pod of the group that cannot fit was bound: {big}");
        }
        Ok(())
    });
}

#[test]
fn a_volcano_pod_group_sizes_its_gang_and_its_pods_wait_for_it() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let t = f.create_tenant("volcano", &["--gpus", "40"])?;
        let crd = repo_root().join("../shared/testdata/crds/scheduling.volcano.sh_podgroups.yaml");
        kc_ok(&k, &t, &["create", "-f", &crd.display().to_string()])?;
        kc_ok(
            &k,
            &t,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=75s",
                "crd/podgroups.scheduling.volcano.sh",
            ],
        )?;
        // The pods come first: they wait for their PodGroup, and say so.
        kc_apply_ok(&k, &t, &volcano_group("trio", 3))?;
        let conditions = |group: &str| -> Result<String> {
            kc_ok(
                &k,
                &t,
                &[
                    "get",
                    "pods",
                    "-l",
                    &format!("group={group}"),
                    "-o",
                    r#"jsonpath={range .items[*]}{.spec.nodeName}|{.status.conditions[?(@.type=="PodScheduled")].reason}|{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}"#,
                ],
            )
        };
        let mut seen = String::new();
        poll_until("the pods waiting for their PodGroup", WAIT, || {
            seen = conditions("trio")?;
            Ok(seen
                .lines()
                .filter(|l| l.starts_with("|PodGroupNotFound|"))
                .count()
                == 3)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;
        kc_apply_ok(
            &k,
            &t,
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: trio}\nspec: {minMember: 3}\n",
        )?;
        poll_until("the trio held back whole by the scheduler", WAIT, || {
            seen = conditions("trio")?;
            Ok(seen
                .lines()
                .filter(|l| l.starts_with('|') && l.contains("gang"))
                .count()
                == 3)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;
        kc_apply_ok(
            &k,
            &t,
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: duo}\nspec: {minMember: 2}\n",
        )?;
        kc_apply_ok(&k, &t, &volcano_group("duo", 2))?;
        poll_until("the duo bound together", WAIT, || {
            seen = conditions("duo")?;
            Ok(seen.lines().filter(|l| !l.starts_with('|')).count() == 2)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;
        if conditions("trio")?.lines().any(|l| !l.starts_with('|')) {
            bail!("a pod of the trio was bound: {}", conditions("trio")?);
        }
        Ok(())
    });
}
