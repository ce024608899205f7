//! Acceptance tests: the real `terraform` binary drives this provider (built by cargo, found
//! through `dev_overrides`) against a real `fabrik up`: create, in-place update, replacement,
//! drift, import, destroy, data sources, and the errors users see.

mod common;

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use common::{kubectl, kubectl_with, preamble, Workspace};
use e2e::Fabrik;

fn tenant_tf(name: &str, gpus: u32) -> String {
    format!(
        r#"
resource "fabrik_tenant" "team" {{
  name   = "{name}"
  owners = ["alice", "group:ml"]
  quota = {{
    cpu         = "16"
    memory      = "64Gi"
    pods        = 50
    gpus        = {gpus}
    gpu_sharing = "mig:1g.18gb"
  }}
  isolation = {{
    node_selector = {{ pool = "a100" }}
    allow         = ["hostPath"]
  }}
  network = {{ segment = 42 }}
  sync    = {{ extra_kinds = ["widgets.example.com"] }}
}}

output "kubeconfig" {{
  value     = fabrik_tenant.team.kubeconfig
  sensitive = true
}}

output "endpoint" {{
  value = fabrik_tenant.team.endpoint
}}
"#
    )
}

fn host_json(f: &Fabrik, args: &[&str]) -> Result<Option<serde_json::Value>> {
    let out = f.kubectl(&kubectl(), args)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("NotFound") || err.contains("not found") {
            return Ok(None);
        }
        bail!("kubectl {args:?}: {err}");
    }
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}

fn tenant(f: &Fabrik, name: &str) -> Result<Option<serde_json::Value>> {
    host_json(f, &["get", "tenant", name, "-o", "json"])
}

fn namespace_exists(f: &Fabrik, ns: &str) -> Result<bool> {
    Ok(host_json(f, &["get", "namespace", ns, "-o", "json"])?.is_some())
}

fn wait_gone(f: &Fabrik, name: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tenant(f, name)?.is_some() || namespace_exists(f, &format!("fabrik-{name}"))? {
        if Instant::now() > deadline {
            bail!("tenant {name} or its namespace still exists");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn actions_of(ws: &Workspace) -> Result<Vec<String>> {
    let actions = ws.planned_actions()?;
    let Some((_, a)) = actions
        .iter()
        .find(|(addr, _)| addr == "fabrik_tenant.team")
    else {
        bail!("no planned change for fabrik_tenant.team: {actions:?}");
    };
    Ok(a.clone())
}

#[test]
fn tenant_lifecycle() -> Result<()> {
    let f = Fabrik::start()?;
    let ws = Workspace::new()?;
    let head = preamble(&f.kubeconfig());

    // Create: the tenant is Ready and its kubeconfig works with kubectl.
    ws.write(&format!("{head}{}", tenant_tf("ml", 4)))?;
    let out = ws.apply()?;
    assert!(out.contains("1 added"), "{out}");
    let t = tenant(&f, "ml")?.expect("tenant ml exists");
    assert_eq!(t["status"]["phase"], "Ready");
    assert_eq!(t["spec"]["quota"]["gpus"], 4);
    assert_eq!(t["spec"]["quota"]["gpuSharing"], "mig:1g.18gb");
    assert_eq!(t["spec"]["isolation"]["nodeSelector"]["pool"], "a100");
    assert_eq!(t["spec"]["network"]["segment"], 42);
    assert_eq!(t["spec"]["sync"]["extraKinds"][0], "widgets.example.com");
    assert_eq!(t["spec"]["owners"][1], "group:ml");
    let endpoint = ws.output("endpoint")?;
    assert!(endpoint.ends_with("/clusters/ml"), "{endpoint}");
    let kubeconfig = ws.path().join("ml.kubeconfig");
    std::fs::write(&kubeconfig, ws.output("kubeconfig")?)?;
    let ns = kubectl_with(&kubeconfig, &["get", "ns", "-o", "name"])?;
    assert!(
        ns.status.success(),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );
    assert!(String::from_utf8_lossy(&ns.stdout).contains("namespace/default"));

    // Nothing to do right after apply.
    let plan = ws.terraform(&["plan", "-detailed-exitcode", "-no-color"])?;
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}\nstate: {}",
        String::from_utf8_lossy(&plan.stdout),
        std::fs::read_to_string(ws.path().join("terraform.tfstate")).unwrap_or_default()
    );

    // A quota change is an in-place update.
    ws.write(&format!("{head}{}", tenant_tf("ml", 8)))?;
    assert_eq!(actions_of(&ws)?, ["update"]);
    let out = ws.apply()?;
    assert!(out.contains("1 changed"), "{out}");
    let t = tenant(&f, "ml")?.expect("tenant ml exists");
    assert_eq!(t["spec"]["quota"]["gpus"], 8);

    // A change behind Terraform's back shows as drift.
    let patch = f.kubectl(
        &kubectl(),
        &[
            "patch",
            "tenant",
            "ml",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"quota":{"gpus":2}}}"#,
        ],
    )?;
    assert!(
        patch.status.success(),
        "{}",
        String::from_utf8_lossy(&patch.stderr)
    );
    let plan = ws.terraform(&["plan", "-detailed-exitcode", "-no-color"])?;
    let text = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(plan.status.code(), Some(2), "{text}");
    assert!(text.contains("gpus") && text.contains("2 -> 8"), "{text}");
    ws.apply()?;
    assert_eq!(
        tenant(&f, "ml")?.expect("tenant")["spec"]["quota"]["gpus"],
        8
    );

    // Import: forget the tenant, import it by name, and nothing differs.
    ws.terraform_ok(&["state", "rm", "fabrik_tenant.team"])?;
    ws.terraform_ok(&["import", "-no-color", "fabrik_tenant.team", "ml"])?;
    let plan = ws.terraform(&["plan", "-detailed-exitcode", "-no-color"])?;
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&plan.stdout)
    );
    let shown = ws.terraform_ok(&["state", "show", "-no-color", "fabrik_tenant.team"])?;
    assert!(
        shown.contains("gpu_sharing") && shown.contains("mig:1g.18gb"),
        "{shown}"
    );

    // A rename replaces the tenant.
    ws.write(&format!("{head}{}", tenant_tf("ml-two", 8)))?;
    assert_eq!(actions_of(&ws)?, ["delete", "create"]);
    ws.apply()?;
    wait_gone(&f, "ml")?;
    assert!(tenant(&f, "ml-two")?.is_some());
    assert!(ws.output("endpoint")?.ends_with("/clusters/ml-two"));

    // Destroy removes the tenant and its host namespace.
    let out = ws.terraform_ok(&["destroy", "-auto-approve", "-no-color"])?;
    assert!(out.contains("1 destroyed"), "{out}");
    assert!(tenant(&f, "ml-two")?.is_none());
    assert!(!namespace_exists(&f, "fabrik-ml-two")?);
    Ok(())
}

#[test]
fn data_sources_and_server_rejections() -> Result<()> {
    let f = Fabrik::start()?;
    let ws = Workspace::new()?;
    // `fabrik up` creates the tenant `demo`.
    let deadline = Instant::now() + Duration::from_secs(60);
    while tenant(&f, "demo")?.and_then(|t| t["status"]["phase"].as_str().map(str::to_string))
        != Some("Ready".into())
    {
        if Instant::now() > deadline {
            bail!("tenant demo is not Ready");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    ws.write(&format!(
        r#"{}
data "fabrik_tenant" "demo" {{
  name = "demo"
}}

data "fabrik_tenant_kubeconfig" "demo" {{
  name = "demo"
}}

output "phase" {{
  value = data.fabrik_tenant.demo.phase
}}

output "endpoint" {{
  value = data.fabrik_tenant_kubeconfig.demo.endpoint
}}

output "kubeconfig" {{
  value     = data.fabrik_tenant_kubeconfig.demo.kubeconfig
  sensitive = true
}}
"#,
        preamble(&f.kubeconfig())
    ))?;
    ws.apply()?;
    assert_eq!(ws.output("phase")?, "Ready");
    assert!(ws.output("endpoint")?.ends_with("/clusters/demo"));
    let kubeconfig = ws.path().join("demo.kubeconfig");
    std::fs::write(&kubeconfig, ws.output("kubeconfig")?)?;
    let ns = kubectl_with(&kubeconfig, &["get", "ns"])?;
    assert!(
        ns.status.success(),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );

    // A data source for a tenant that does not exist names the attribute.
    ws.write(&format!(
        "{}\ndata \"fabrik_tenant\" \"missing\" {{\n  name = \"nope\"\n}}\n",
        preamble(&f.kubeconfig())
    ))?;
    let plan = ws.terraform(&["plan", "-no-color"])?;
    let err = String::from_utf8_lossy(&plan.stderr);
    assert!(!plan.status.success());
    assert!(
        err.contains("Tenant not found") && err.contains("name = \"nope\""),
        "{err}"
    );

    // Creating a tenant that exists is refused by the host, pointing at `name`.
    ws.write(&format!(
        "{}\nresource \"fabrik_tenant\" \"dup\" {{\n  name = \"demo\"\n}}\n",
        preamble(&f.kubeconfig())
    ))?;
    let apply = ws.terraform(&["apply", "-auto-approve", "-no-color"])?;
    let err = String::from_utf8_lossy(&apply.stderr);
    assert!(!apply.status.success());
    assert!(
        err.contains("already exists") && err.contains("name = \"demo\""),
        "{err}"
    );
    Ok(())
}

#[test]
fn invalid_configuration_names_the_attribute() -> Result<()> {
    let ws = Workspace::new()?;
    ws.write(&format!(
        r#"{}
resource "fabrik_tenant" "bad" {{
  name = "Not_A_Label"
  quota = {{
    cpu         = "lots"
    gpus        = 1.5
    gpu_sharing = "half"
  }}
  isolation = {{
    allow = ["root"]
  }}
}}
"#,
        preamble(std::path::Path::new("/nonexistent/host.kubeconfig"))
    ))?;
    let out = ws.terraform(&["validate", "-no-color"])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "Invalid tenant name",
        "name = \"Not_A_Label\"",
        "Invalid quantity",
        "quota.cpu: \"lots\" is not a quantity",
        "quota.gpus: must be a whole number",
        "Invalid GPU sharing mode",
        "quota.gpu_sharing: \"half\"",
        "isolation.allow[0]: \"root\"",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }

    // Provider settings that contradict each other.
    ws.write(&format!(
        r#"terraform {{
  required_providers {{
    fabrik = {{ source = "{}" }}
  }}
}}

provider "fabrik" {{
  host        = "https://127.0.0.1:6443"
  config_path = "x"
}}

resource "fabrik_tenant" "t" {{
  name = "t"
}}
"#,
        common::SOURCE
    ))?;
    let out = ws.terraform(&["plan", "-no-color"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("Conflicting host settings"), "{err}");
    Ok(())
}

#[test]
fn unreachable_host_is_an_error_naming_it() -> Result<()> {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let ws = Workspace::new()?;
    ws.write(&format!(
        r#"terraform {{
  required_providers {{
    fabrik = {{ source = "{}" }}
  }}
}}

provider "fabrik" {{
  host  = "https://127.0.0.1:{port}"
  token = "t"
}}

resource "fabrik_tenant" "t" {{
  name = "t"
}}
"#,
        common::SOURCE
    ))?;
    let out = ws.terraform(&["plan", "-no-color"])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Host cluster unreachable"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    Ok(())
}
