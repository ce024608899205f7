//! Helpers shared by the acceptance tests and the benchmark: a Terraform working directory
//! wired to the provider binary built by cargo (through `dev_overrides`, never `terraform
//! init`), driving the real `terraform` on the PATH.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

/// The provider's source address in configurations.
pub const SOURCE: &str = "fabrik.dev/fabrik/fabrik";

/// The provider binary cargo built for this package's tests.
pub fn provider_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_terraform-provider-fabrik"))
}

/// A Terraform working directory with its own CLI configuration.
pub struct Workspace {
    dir: tempfile::TempDir,
}

/// The `terraform { required_providers }` block and a provider block for a host kubeconfig.
pub fn preamble(host_kubeconfig: &Path) -> String {
    format!(
        r#"terraform {{
  required_providers {{
    fabrik = {{ source = "{SOURCE}" }}
  }}
}}

provider "fabrik" {{
  config_path = "{}"
}}
"#,
        host_kubeconfig.display()
    )
}

impl Workspace {
    /// A new working directory whose CLI config points the provider at the built binary.
    pub fn new() -> Result<Workspace> {
        let dir = tempfile::tempdir().context("tempdir")?;
        let binary = provider_binary();
        let Some(bin_dir) = binary.parent() else {
            bail!("provider binary {} has no directory", binary.display());
        };
        if !binary.exists() {
            bail!("provider binary {} is missing", binary.display());
        }
        let cli = format!(
            "provider_installation {{\n  dev_overrides {{\n    \"{SOURCE}\" = \"{}\"\n  }}\n  direct {{}}\n}}\n",
            bin_dir.display()
        );
        std::fs::write(dir.path().join("cli.tfrc"), cli)?;
        Ok(Workspace { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `main.tf`.
    pub fn write(&self, main_tf: &str) -> Result<()> {
        std::fs::write(self.dir.path().join("main.tf"), main_tf)?;
        Ok(())
    }

    /// Runs `terraform ARGS` here (no colour, no prompts).
    pub fn terraform(&self, args: &[&str]) -> Result<Output> {
        Command::new("terraform")
            .args(args)
            .current_dir(self.dir.path())
            .env("TF_CLI_CONFIG_FILE", self.dir.path().join("cli.tfrc"))
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .env_remove("KUBECONFIG")
            .env_remove("TF_LOG")
            .output()
            .context("running terraform (is it on the PATH?)")
    }

    /// Runs `terraform ARGS` and requires success; returns stdout.
    pub fn terraform_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.terraform(args)?;
        if !out.status.success() {
            bail!(
                "terraform {args:?} failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `terraform apply -auto-approve`.
    pub fn apply(&self) -> Result<String> {
        self.terraform_ok(&["apply", "-auto-approve", "-no-color"])
    }

    /// The actions planned for each resource address (`terraform show -json` of a saved plan).
    pub fn planned_actions(&self) -> Result<Vec<(String, Vec<String>)>> {
        self.terraform_ok(&["plan", "-no-color", "-out=tfplan"])?;
        let json = self.terraform_ok(&["show", "-json", "tfplan"])?;
        let plan: serde_json::Value = serde_json::from_str(&json)?;
        let changes = plan["resource_changes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(changes
            .iter()
            .map(|c| {
                let address = c["address"].as_str().unwrap_or_default().to_string();
                let actions = c["change"]["actions"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                (address, actions)
            })
            .collect())
    }

    /// A string output.
    pub fn output(&self, name: &str) -> Result<String> {
        self.terraform_ok(&["output", "-raw", name])
    }
}

/// The newest kubectl the harness knows, or `kubectl` from the PATH.
pub fn kubectl() -> e2e::Kubectl {
    e2e::kubectls().pop().unwrap_or_else(|| e2e::Kubectl {
        version: "path".into(),
        path: PathBuf::from("kubectl"),
    })
}

/// Runs kubectl with an explicit kubeconfig.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> Result<Output> {
    Command::new(kubectl().path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .context("running kubectl")
}
