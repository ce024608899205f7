//! GPUs by NVIDIA's names in a tenant (issue gpu-fidelity, item 1): a Tenant whose
//! `nvidia.com/gpu` is a whole GPU and which may also request MIG instances runs a training pod
//! selected by GPU feature discovery's `nvidia.com/gpu.product` label and an inference pod
//! asking for `nvidia.com/mig-1g.18gb`, each placed on the host node that has that kind; its
//! nodes show each kind under NVIDIA's name; its `gpus` quota counts the devices of every kind;
//! a kind it was not given is refused with the names it may use.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{kc, kc_apply, kc_apply_ok, kc_ok, kubectls, poll_until, Fabrik, Kubectl};

const WAIT: Duration = Duration::from_secs(60);

fn pod(name: &str, resource: &str, n: u32, selector: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeSelector: {selector}\n  \
         containers:\n  - name: main\n    image: trainer\n    resources: {{limits: {{{resource}: \"{n}\"}}}}\n"
    )
}

fn jsonpath(k: &Kubectl, cfg: &Path, args: &[&str], path: &str) -> Result<String> {
    let mut all = args.to_vec();
    let expr = format!("jsonpath={path}");
    all.extend(["-o", &expr]);
    kc_ok(k, cfg, &all)
}

#[test]
fn a_tenant_requests_whole_gpus_and_mig_instances_by_nvidias_names() {
    let f = Fabrik::start_with(&["--nodes", "2"]).expect("fabrik up");
    let k = kubectls().pop().expect("a kubectl");
    f.check(|| {
        let host = f.kubeconfig();
        // The simulated nodes register a moment after `fabrik up` answers.
        let mut names = String::new();
        poll_until("the two simulated nodes registered", WAIT, || {
            names = kc_ok(&k, &host, &["get", "nodes", "-o", "name"])?;
            Ok(names.lines().count() == 2)
        })
        .map_err(|e| anyhow::anyhow!("{e}: {names:?}"))?;
        let nodes: Vec<&str> = names
            .lines()
            .filter_map(|l| l.strip_prefix("node/"))
            .collect();
        let [whole, mig] = nodes[..] else {
            bail!("two nodes: {names}");
        };
        // The platform partitions the second node into MIG instances.
        kc_ok(
            &k,
            &host,
            &[
                "annotate",
                "node",
                mig,
                r#"fabrik.dev/gpu-layout={"mode": "mig", "geometry": "all-1g.18gb"}"#,
            ],
        )?;
        poll_until("the MIG instances published", WAIT, || {
            let n = jsonpath(
                &k,
                &host,
                &["get", "node", mig],
                r"{.status.allocatable.nvidia\.com/mig-1g\.18gb}",
            )?;
            Ok(n.parse::<u32>().is_ok_and(|n| n > 0))
        })?;
        let t = f.create_tenant(
            "kinds",
            &[
                "--gpus",
                "4",
                "--gpu-sharing",
                "whole",
                "--gpu-type",
                "mig:1g.18gb",
            ],
        )?;

        // Its nodes show each kind under NVIDIA's name.
        let mut seen = String::new();
        poll_until("the tenant's nodes with both kinds", WAIT, || {
            seen = jsonpath(
                &k,
                &t,
                &["get", "nodes"],
                r"{range .items[*]}{.metadata.name}={.status.allocatable.nvidia\.com/gpu}/{.status.allocatable.nvidia\.com/mig-1g\.18gb} {end}",
            )?;
            Ok(seen.contains(&format!("{whole}=8/ ")) && seen.contains(&format!("{mig}=/")) && !seen.contains(&format!("{mig}=/ ")))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {seen}"))?;

        // A training pod selected by GFD's product label, an inference pod on MIG.
        kc_apply_ok(
            &k,
            &t,
            &pod(
                "train",
                "nvidia.com/gpu",
                1,
                "{nvidia.com/gpu.product: NVIDIA-H200}",
            ),
        )?;
        kc_apply_ok(&k, &t, &pod("infer", "nvidia.com/mig-1g.18gb", 2, "{}"))?;
        for (name, node) in [("train", whole), ("infer", mig)] {
            poll_until(&format!("{name} running on {node}"), WAIT, || {
                let s = jsonpath(
                    &k,
                    &t,
                    &["get", "pod", name],
                    "{.status.phase}/{.spec.nodeName}",
                )?;
                Ok(s == format!("Running/{node}"))
            })?;
        }
        let host_infer = fabrik_api::naming::host_name("infer", "default", "kinds");
        let limits = jsonpath(
            &k,
            &host,
            &["get", "pod", &host_infer, "-n", "fabrik-kinds"],
            "{.spec.containers[0].resources.limits}",
        )?;
        if !limits.contains("nvidia.com/mig-1g.18gb") || limits.contains("\"nvidia.com/gpu\"") {
            bail!("the host pod asks for {limits}");
        }

        // 1 + 2 devices held; two more whole GPUs would make 5 of 4.
        let out = kc_apply(&k, &t, &pod("greedy", "nvidia.com/gpu", 2, "{}"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("requests.fabrik.dev/gpu-devices") {
            bail!("over the tenant's GPU devices: {err}");
        }
        kc_apply_ok(&k, &t, &pod("last", "nvidia.com/mig-1g.18gb", 1, "{}"))?;
        // A kind the tenant was not given, named with the ones it may use.
        let out = kc_apply(&k, &t, &pod("big", "nvidia.com/mig-7g.141gb", 1, "{}"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("nvidia.com/mig-1g.18gb") {
            bail!("a kind the tenant was not given: {err}");
        }
        let pods = kc(&k, &t, &["get", "pods", "-o", "name"])?;
        let listed = String::from_utf8_lossy(&pods.stdout);
        if listed.contains("greedy") || listed.contains("big") {
            bail!("refused pods were created: {listed}");
        }
        Ok(())
    });
}
