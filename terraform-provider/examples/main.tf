# A Fabrik tenant with Terraform, against a local `fabrik up --data-dir .fabrik`.
#
#   cargo build --release -p terraform-provider-fabrik
#   cat > dev.tfrc <<EOT
#   provider_installation {
#     dev_overrides { "fabrik.dev/fabrik/fabrik" = "<repo>/target/release" }
#     direct {}
#   }
#   EOT
#   TF_CLI_CONFIG_FILE=dev.tfrc terraform apply      # no `terraform init` for this provider
#   terraform output -raw kubeconfig > ml.kubeconfig && kubectl --kubeconfig ml.kubeconfig get ns

terraform {
  required_providers {
    fabrik = {
      source = "fabrik.dev/fabrik/fabrik"
    }
  }
}

variable "host_kubeconfig" {
  description = "The host cluster's kubeconfig."
  type        = string
  default     = "../../.fabrik/host.kubeconfig"
}

provider "fabrik" {
  config_path = var.host_kubeconfig
}

resource "fabrik_tenant" "ml" {
  name   = "ml"
  owners = ["alice", "group:ml"]

  quota = {
    cpu         = "32"
    memory      = "256Gi"
    pods        = 200
    gpus        = 4
    gpu_sharing = "mig:1g.18gb"
  }

  isolation = {
    node_selector = { "fabrik.dev/gpu-model" = "H200-141GB" }
  }

  network = { segment = 1042 }
}

data "fabrik_tenant" "ml" {
  name = fabrik_tenant.ml.name
}

output "endpoint" {
  value = fabrik_tenant.ml.endpoint
}

output "phase" {
  value = data.fabrik_tenant.ml.phase
}

output "kubeconfig" {
  value     = fabrik_tenant.ml.kubeconfig
  sensitive = true
}
