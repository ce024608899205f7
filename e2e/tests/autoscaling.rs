//! HorizontalPodAutoscaler (`autoscaling/v2`) in a tenant, with kubectl: a GPU Deployment whose
//! pods the simulated nodes report busy (the documented `sim.fabrik.dev/cpu-usage` and
//! `sim.fabrik.dev/gpu-utilization` annotations,
//! kept on the tenant pods' host copies) is scaled up to the autoscaler's maximum, then back
//! down to its minimum when they report idle — through the tenant's built-in resource metrics
//! API, with the status, columns and Events upstream's controller writes.

use std::time::Duration;

use anyhow::Result;
use e2e::kc_apply_ok as apply_ok;
use e2e::{kc_ok, kubectls, Fabrik};

/// Three sync periods of the controller (15 s each) and the pods' start.
fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(90), check)
}

fn deployment(cpu_usage: &str, gpu_percent: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {{sim.fabrik.dev/cpu-usage: {cpu_usage}, sim.fabrik.dev/gpu-utilization: \"{gpu_percent}\"}}\n    spec:\n      containers:\n      - name: main\n        image: nginx\n        resources: {{requests: {{cpu: 100m, nvidia.com/gpu: \"1\"}}, limits: {{nvidia.com/gpu: \"1\"}}}}\n"
    )
}

const HPA: &str = "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  - type: Resource
    resource: {name: nvidia.com/gpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 0}
";

#[test]
fn an_autoscaler_scales_a_gpu_deployment_up_and_down_on_its_pods_cpu() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("scaled", &["--gpus", "4"])?;
    let k = &kubectls()[0];
    let replicas = || -> Result<String> {
        kc_ok(
            k,
            &cfg,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        )
    };

    // Busy pods: 200m of 100m requested is 400 % of the 50 % target — up to the maximum.
    apply_ok(k, &cfg, &deployment("200m", 90))?;
    apply_ok(k, &cfg, HPA)?;
    poll("scaled up to 3", || Ok(replicas()? == "3"))?;
    poll("the autoscaler's status", || {
        let status = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "hpa",
                "web",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"ScalingActive\")].reason}/{.status.desiredReplicas}",
            ],
        )?;
        Ok(status == "ValidMetricFound/3")
    })?;
    // GPU utilisation (the resource metrics API's GPU extension) is measured too.
    let gpu = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "hpa",
            "web",
            "-o",
            "jsonpath={.status.currentMetrics[1].resource.current.averageUtilization}",
        ],
    )?;
    assert_eq!(gpu, "90");
    let row = kc_ok(k, &cfg, &["get", "hpa", "web", "--no-headers"])?;
    assert!(
        row.contains("Deployment/web") && row.contains("cpu: 200%/50%"),
        "{row}"
    );
    poll("the rescale Event", || {
        let events = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=SuccessfulRescale",
            ],
        )?;
        Ok(events.contains("New size: 3"))
    })?;

    // Idle pods (a new template: a rollout): 10 % of the request — down to the minimum.
    apply_ok(k, &cfg, &deployment("10m", 5))?;
    poll("scaled down to 1", || Ok(replicas()? == "1"))?;
    poll("the autoscaler reporting the idle pods", || {
        let cur = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "hpa",
                "web",
                "-o",
                "jsonpath={.status.currentMetrics[0].resource.current.averageUtilization}",
            ],
        )?;
        Ok(cur == "10")
    })?;

    // `kubectl autoscale` of every kubectl (1.27 writes autoscaling/v1, 1.35 autoscaling/v2
    // in protobuf): the same object at both versions.
    for (i, kubectl) in kubectls().iter().enumerate() {
        let name = format!("auto{i}");
        kc_ok(
            kubectl,
            &cfg,
            &[
                "autoscale",
                "deployment",
                "web",
                "--name",
                &name,
                "--min=1",
                "--max=2",
                "--cpu-percent=50",
            ],
        )?;
        let v1 = kc_ok(
            kubectl,
            &cfg,
            &[
                "get",
                "horizontalpodautoscalers.v1.autoscaling",
                &name,
                "-o",
                "jsonpath={.spec.targetCPUUtilizationPercentage}",
            ],
        )?;
        assert_eq!(v1, "50", "kubectl {}", kubectl.version);
        let v2 = kc_ok(
            kubectl,
            &cfg,
            &[
                "get",
                "horizontalpodautoscalers.v2.autoscaling",
                &name,
                "-o",
                "jsonpath={.spec.metrics[0].resource.target.averageUtilization}",
            ],
        )?;
        assert_eq!(v2, "50", "kubectl {}", kubectl.version);
        kc_ok(kubectl, &cfg, &["delete", "hpa", &name])?;
    }
    let preferred = kc_ok(k, &cfg, &["get", "--raw", "/apis/autoscaling"])?;
    assert!(
        preferred.contains("\"preferredVersion\":{\"groupVersion\":\"autoscaling/v2\""),
        "{preferred}"
    );

    // A bad autoscaler is refused naming its fields.
    let bad = e2e::kc_apply(
        k,
        &cfg,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec:\n  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 3\n  maxReplicas: 2\n",
    )?;
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("spec.maxReplicas"), "{err}");
    Ok(())
}
