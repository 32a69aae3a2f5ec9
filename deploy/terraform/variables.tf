variable "project_id" {
  description = "Google Cloud project ID (billing enabled)."
  type        = string
}

variable "region" {
  description = "Region of the image repository and the build bucket; pick one with GPU quota."
  type        = string
  default     = "us-central1"
}

variable "zone" {
  description = "Zone of the cluster; it must offer the GPU (L4: us-central1-a, -b or -c)."
  type        = string
  default     = "us-central1-a"
}

variable "cluster_name" {
  description = "GKE cluster name; also the prefix of the network, service account and bucket."
  type        = string
  default     = "attnlab"
}

variable "gpu" {
  description = "Which GPU: l4 (default, g2-standard-8), h100 (a3-highgpu-1g) or h200 (a3-ultragpu-8g, 8 GPUs per node)."
  type        = string
  default     = "l4"

  validation {
    condition     = contains(["l4", "h100", "h200"], var.gpu)
    error_message = "gpu must be one of l4, h100, h200."
  }
}

variable "gpu_spot" {
  description = "Run the GPU node as a Spot VM (much cheaper, can be reclaimed; often the only way to get an H100)."
  type        = bool
  default     = false
}

variable "class_group" {
  description = "Google group of the class, e.g. attnlab-fall@example.edu: its members (and only they) pass Identity-Aware Proxy. Empty: grant access by hand."
  type        = string
  default     = ""
}

variable "campus_cidrs" {
  description = "The cheap alternative to IAP: campus network ranges for a Cloud Armor allowlist (policy attnlab-campus, used by deploy/k8s-campus). Empty: no policy."
  type        = list(string)
  default     = []
}

variable "class_hours" {
  description = "Maintenance exclusions (no upgrades) over class days, RFC 3339 times, e.g. [{name = \"week-1\", start = \"2026-01-12T08:00:00Z\", end = \"2026-01-16T18:00:00Z\"}]."
  type = list(object({
    name  = string
    start = string
    end   = string
  }))
  default = []
}

variable "billing_account" {
  description = "Billing account ID (XXXXXX-XXXXXX-XXXXXX) for a budget alert; empty: no budget (set one in the console)."
  type        = string
  default     = ""
}

variable "monthly_budget_usd" {
  description = "Monthly budget; e-mails go to the billing admins at 50%, 90% and 100%. The default is above what the cluster costs with its GPUs off (about $0.40 an hour, $300 a month: deploy/README.md, section 8), so the alert means GPU hours."
  type        = number
  default     = 500
}

variable "ui_nodes" {
  description = "CPU nodes (e2-standard-8) for the UI pods and the Ray head: one holds the head and six 1-CPU UI replicas, about 30 learners (deploy/README.md, section 5)"
  type        = number
  default     = 1
}

variable "gpu_zones" {
  description = "Zones of the region the GPU pools may use, the cluster's zone first (e.g. [\"us-central1-a\", \"us-central1-b\", \"us-central1-c\"]): the autoscaler takes whichever has a GPU. Empty: the cluster's zone only."
  type        = list(string)
  default     = []
}

variable "gpu_max_nodes" {
  description = "Most GPU nodes the autoscaler may add per pool (one device worker per GPU; an H200 node has 8)."
  type        = number
  default     = 4
}

variable "gpu_reservation" {
  description = "Name of a Compute Engine reservation of your GPU machines in the cluster's zone (specific reservation) for gpu-pool to consume; empty: none."
  type        = string
  default     = ""
}

variable "gpu_spot_fallback" {
  description = "Also create gpu-spot-pool, the same GPU as Spot VMs, tried only when gpu-pool gets no node (compute class attnlab-gpu)."
  type        = bool
  default     = true
}

variable "iap_session_hours" {
  description = "0 (default): an IAP sign-in lasts as long as the learner's Google login (IAP's own). N: every user of this project's IAP apps must sign in again after N hours (a reauthentication policy, project-wide, that Terraform cannot remove: teardown leaves it)."
  type        = number
  default     = 0
}
