//! A Tenant's quota is checked at the tenant's own admission, across all its namespaces: going
//! over it fails at `kubectl` with a message naming the quota, instead of a host pod left
//! pending; changing the Tenant's quota takes effect.

use std::path::Path;

use anyhow::{bail, Result};
use e2e::{kubectls, Fabrik};

fn kc(k: &e2e::Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?)
}

fn gpu_pod(name: &str, ns: &str, gpus: u32) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}"}},
"spec":{{"containers":[{{"name":"c","image":"cuda","resources":{{"limits":{{"nvidia.com/gpu":"{gpus}"}}}}}}]}}}}"#
    )
}

fn create(
    k: &e2e::Kubectl,
    cfg: &Path,
    dir: &Path,
    name: &str,
    body: &str,
) -> Result<std::process::Output> {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, body)?;
    kc(k, cfg, &["create", "-f", &file.display().to_string()])
}

#[test]
fn tenant_quota_is_enforced_at_the_tenant_admission() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.data_dir().join("q.kubeconfig");
    let out = f.fabrik_cli(&[
        "tenant",
        "create",
        "quotas",
        "--gpus",
        "2",
        "--pods",
        "3",
        "--wait",
        "--kubeconfig-out",
        &cfg.display().to_string(),
    ])?;
    if !out.status.success() {
        bail!("tenant create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dir = tempfile::tempdir()?;
    let ok = kc(&k, &cfg, &["create", "namespace", "other"])?;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = create(&k, &cfg, dir.path(), "two", &gpu_pod("two", "default", 2))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // GPUs are counted across namespaces.
    let out = create(&k, &cfg, dir.path(), "more", &gpu_pod("more", "other", 1))?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exceeded the quota of tenant \"quotas\"")
            && err.contains("requests.nvidia.com/gpu=2"),
        "{err}"
    );
    // Pods: three in all.
    for (i, ns) in ["default", "other"].iter().enumerate() {
        let out = kc(
            &k,
            &cfg,
            &["run", &format!("cpu{i}"), "-n", ns, "--image", "busybox"],
        )?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = kc(&k, &cfg, &["run", "fourth", "--image", "busybox"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pods=3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Raising the quota on the host lets the pod in.
    let host = f.kubectl_ok(
        &k,
        &[
            "patch",
            "tenant",
            "quotas",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"quota":{"pods":4}}}"#,
        ],
    )?;
    assert!(host.contains("patched"), "{host}");
    let start = std::time::Instant::now();
    loop {
        let out = kc(&k, &cfg, &["run", "fourth", "--image", "busybox"])?;
        if out.status.success() {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            bail!(
                "raised quota not applied: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}
