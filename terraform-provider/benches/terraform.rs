//! Benchmark: the real `terraform` driving this provider against `fabrik up --nodes 0`.
//!
//! Measures `terraform apply` creating N tenants (default 10, each waited for until `Ready`),
//! then, with M tenants (default 100) in state, `terraform apply` creating them, `terraform
//! plan` (a refresh of every tenant: one Tenant and one Secret read each) three times, and
//! `terraform destroy`. Prints a Markdown table.
//!
//! `cargo bench -p terraform-provider-fabrik --bench terraform [-- N M]` (set `FABRIK_BIN` to
//! a release `fabrik` for representative figures; the provider is built by `cargo bench` in
//! the release profile).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use common::{preamble, Workspace};
use e2e::Fabrik;

fn tenants_tf(prefix: &str, count: usize) -> String {
    format!(
        r#"
resource "fabrik_tenant" "t" {{
  count = {count}
  name  = "{prefix}-${{count.index}}"
  owners = ["team-${{count.index}}"]
  quota = {{
    gpus = 1
    cpu  = "4"
  }}
}}
"#
    )
}

fn timed(what: &str, f: impl FnOnce() -> Result<String>) -> Result<Duration> {
    let started = Instant::now();
    let out = f()?;
    let took = started.elapsed();
    eprintln!("{what}: {:.2} s", took.as_secs_f64());
    if out.contains("Error") {
        bail!("{what}: {out}");
    }
    Ok(took)
}

fn main() -> Result<()> {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .filter_map(|a| a.parse().ok())
        .collect();
    let small = numbers.first().copied().unwrap_or(10);
    let large = numbers.get(1).copied().unwrap_or(100);
    e2e::init_crypto();
    let fabrik = Fabrik::start_with(&["--nodes", "0"])?;
    let head = preamble(&fabrik.kubeconfig());

    let ws_small = Workspace::new()?;
    ws_small.write(&format!("{head}{}", tenants_tf("small", small)))?;
    let apply_small = timed(&format!("apply {small} tenants"), || ws_small.apply())?;

    let ws = Workspace::new()?;
    ws.write(&format!("{head}{}", tenants_tf("bench", large)))?;
    let apply_large = timed(&format!("apply {large} tenants"), || ws.apply())?;
    let mut plans = Vec::new();
    for i in 0..3 {
        plans.push(timed(
            &format!("plan with {large} in state (run {i})"),
            || {
                let out = ws.terraform(&["plan", "-detailed-exitcode", "-no-color"])?;
                if out.status.code() != Some(0) {
                    bail!(
                        "plan is not empty: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                Ok(String::new())
            },
        )?);
    }
    plans.sort();
    let destroy = timed(&format!("destroy {large} tenants"), || {
        ws.terraform_ok(&["destroy", "-auto-approve", "-no-color"])
    })?;

    let s = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    println!("| operation | tenants | wall time |");
    println!("| --- | --- | --- |");
    println!(
        "| `terraform apply` (create, wait until Ready) | {small} | {} |",
        s(apply_small)
    );
    println!(
        "| `terraform apply` (create, wait until Ready) | {large} | {} |",
        s(apply_large)
    );
    println!(
        "| `terraform plan` (refresh, no changes), min / median / max of 3 | {large} in state | {} / {} / {} |",
        s(plans[0]),
        s(plans[1]),
        s(plans[2])
    );
    println!(
        "| `terraform destroy` (until tenant and namespace are gone) | {large} | {} |",
        s(destroy)
    );
    Ok(())
}
