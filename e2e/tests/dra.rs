//! Dynamic resource allocation (`resource.k8s.io/v1`) from a tenant, end to end on `fabrik up`:
//! the host's DeviceClasses are mirrored into the tenant read-only; a pod's claim template
//! becomes a ResourceClaim (tenant controller), synced to the host, allocated a GPU by the
//! host's scheduler with the pod, status (allocation, `reservedFor` naming the tenant pod)
//! back in the tenant; the simulated kubelet shows the device; claimed GPUs count against the
//! tenant's GPU quota; a finished pod's claim is released and deleted on both sides. The pod
//! is written as for NVIDIA's stack: a GPU feature discovery node label and NVIDIA's DRA
//! attribute names.

use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{kc, kc_apply, kc_apply_ok, kc_ok, kubectls, Fabrik};

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

const TEMPLATE_AND_POD: &str = "\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: \"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('1Gi')) >= 0\"}
          - cel: {expression: \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'\"}
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  annotations: {sim.fabrik.dev/run-seconds: \"3\"}
spec:
  restartPolicy: Never
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
  containers:
  - name: main
    image: trainer
    resources: {claims: [{name: gpu}]}
";

#[test]
fn a_tenant_pod_gets_a_gpu_through_a_claim_template() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("dra", &["--gpus", "2"])?;
    let host = f.kubeconfig();
    let k = &kubectls()[0];

    // The host's classes, mirrored; the tenant cannot change them.
    poll("the DeviceClasses mirrored", || {
        let names = kc_ok(k, &cfg, &["get", "deviceclasses", "-o", "name"])?;
        Ok(names.contains("deviceclass.resource.k8s.io/gpu.nvidia.com")
            && names.contains("deviceclass.resource.k8s.io/mig.nvidia.com"))
    })?;
    let out = kc(k, &cfg, &["delete", "deviceclass", "gpu.nvidia.com"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("read-only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let own = kc_apply(
        k,
        &cfg,
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: mine}\nspec: {}\n",
    )?;
    assert!(!own.status.success(), "a tenant may not add device classes");

    // A selector that does not compile is refused at once, with the field named.
    let bad = kc_apply(
        k,
        &cfg,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: bad}\nspec:\n  devices:\n    requests:\n    - name: g\n      exactly:\n        deviceClassName: gpu.nvidia.com\n        selectors: [{cel: {expression: \"device.driver ==\"}}]\n",
    )?;
    assert!(!bad.status.success());
    let why = String::from_utf8_lossy(&bad.stderr);
    assert!(
        why.contains("spec.devices.requests[0].exactly.selectors[0].cel.expression"),
        "{why}"
    );

    // The pod and its claim.
    kc_apply_ok(k, &cfg, TEMPLATE_AND_POD)?;
    let claim_name = || {
        kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pod",
                "trainer",
                "-o",
                "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}",
            ],
        )
    };
    poll("the claim made from the template", || {
        Ok(claim_name()?.starts_with("trainer-gpu-"))
    })?;
    let claim = claim_name()?;
    poll("the pod running with its claim allocated", || {
        let phase = kc_ok(
            k,
            &cfg,
            &["get", "pod", "trainer", "-o", "jsonpath={.status.phase}"],
        )?;
        let state = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "resourceclaim",
                &claim,
                "-o",
                "jsonpath={.status.allocation.devices.results[0].device}/{.status.reservedFor[0].name}",
            ],
        )?;
        Ok(matches!(phase.as_str(), "Running" | "Succeeded")
            && state.starts_with("gpu-")
            && state.ends_with("/trainer"))
    })?;
    let device = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "resourceclaim",
            &claim,
            "-o",
            "jsonpath={.status.allocation.devices.results[0].device}",
        ],
    )?;
    let row = kc_ok(k, &cfg, &["get", "resourceclaims", "--no-headers"])?;
    assert!(
        row.contains(&claim) && row.contains("allocated,reserved"),
        "{row}"
    );
    let logs = kc_ok(k, &cfg, &["logs", "trainer"])?;
    assert!(logs.contains(&format!("GPU devices: {device}")), "{logs}");
    // On the host: the claim's copy, allocated there.
    let host_claims = kc_ok(
        k,
        &host,
        &["get", "resourceclaims", "-n", "fabrik-dra", "-o", "name"],
    )?;
    assert_eq!(host_claims.lines().count(), 1, "{host_claims}");

    // One GPU is claimed: a claim for two more is over the tenant's two.
    let over = kc_apply(
        k,
        &cfg,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: two}\nspec:\n  devices:\n    requests:\n    - name: g\n      exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n",
    )?;
    assert!(!over.status.success());
    let why = String::from_utf8_lossy(&over.stderr);
    assert!(
        why.contains("exceeded the quota") && why.contains("requests.nvidia.com/gpu"),
        "{why}"
    );

    // The pod finishes: its claim is released and deleted, here and on the host.
    poll("the pod done", || {
        let phase = kc_ok(
            k,
            &cfg,
            &["get", "pod", "trainer", "-o", "jsonpath={.status.phase}"],
        )?;
        Ok(phase == "Succeeded")
    })?;
    poll("the finished pod's claim deleted", || {
        let left = kc_ok(k, &cfg, &["get", "resourceclaims", "-o", "name"])?;
        let on_host = kc_ok(
            k,
            &host,
            &["get", "resourceclaims", "-n", "fabrik-dra", "-o", "name"],
        )?;
        Ok(left.trim().is_empty() && on_host.trim().is_empty())
    })?;

    // A claim no device satisfies: its pod stays Pending, told why (condition and Event).
    // Claim `claim`, which no device satisfies, and pod `pod` waiting on it.
    let unsatisfiable = |claim: &str, pod: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {claim}}}\nspec:\n  devices:\n    requests:\n    - name: g\n      exactly:\n        deviceClassName: gpu.nvidia.com\n        selectors: [{{cel: {{expression: \"device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('100Ti'))\"}}}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\nspec:\n  resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]\n  containers: [{{name: main, image: trainer, resources: {{claims: [{{name: gpu}}]}}}}]\n"
        )
    };
    kc_apply_ok(k, &cfg, &unsatisfiable("huge", "waiter"))?;
    poll("the waiting pod told why", || {
        let why = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pod",
                "waiter",
                "-o",
                "jsonpath={.status.phase}/{.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ],
        )?;
        Ok(why.starts_with("Pending/")
            && why.contains("cannot allocate resource claim default/huge"))
    })?;
    poll("the FailedScheduling Event in the tenant", || {
        let events = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=FailedScheduling",
            ],
        )?;
        Ok(events.contains("pod/waiter")
            && events.contains("cannot allocate resource claim default/huge"))
    })?;
    // The same under a name too long to be written readably on the host (its host name is
    // hashed): the message names it as the tenant does all the same.
    let long = format!("huge-{}", "g".repeat(50));
    kc_apply_ok(k, &cfg, &unsatisfiable(&long, "waiter-long"))?;
    let mut why = String::new();
    poll("the pod of the long-named claim told why", || {
        why = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pod",
                "waiter-long",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ],
        )?;
        Ok(why.contains("cannot allocate resource claim"))
    })?;
    if !why.contains(&format!("cannot allocate resource claim default/{long}")) {
        bail!("the message names the claim by its host name: {why}");
    }
    Ok(())
}
