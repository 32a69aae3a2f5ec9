# AttnLab's cloud side, from nothing: network, GKE cluster (a small system pool plus a GPU pool that
# starts at 0 nodes, so nothing bills for a GPU while the image builds), the image repository, the
# Cloud Build staging bucket, a least-privilege node service account, the static IP of the HTTPS
# load balancer and the class-only door (IAP access for the class group, or a Cloud Armor
# allowlist). deploy/setup.sh runs it; deploy/teardown.sh undoes it. Guide: deploy/README.md.

locals {
  gpus = {
    l4   = { machine_type = "g2-standard-8", accelerator = "nvidia-l4", count = 1, disk_type = "pd-balanced" }
    h100 = { machine_type = "a3-highgpu-1g", accelerator = "nvidia-h100-80gb", count = 1, disk_type = "pd-balanced" }
    # A3 Ultra takes Hyperdisk only: a pd-balanced pool is made, and its first node fails on class day
    h200 = { machine_type = "a3-ultragpu-8g", accelerator = "nvidia-h200-141gb", count = 8, disk_type = "hyperdisk-balanced" }
  }
  gpu = local.gpus[var.gpu]

  # Enabled first, everything else depends on them (on a fresh project an IAM binding made while
  # iam.googleapis.com is still turning on fails). setup.sh also enables them before Terraform runs,
  # as the codelab does, so that the provider's own calls (serviceusage, cloudresourcemanager) work.
  apis = [
    "serviceusage.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "iam.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "iap.googleapis.com",
    "storage.googleapis.com",
    "billingbudgets.googleapis.com",
    "containerfilesystem.googleapis.com", # image streaming (gcfs_config on the node pools)
  ]

  # The default compute service account runs Cloud Build in new projects, which may not grant it
  # what a build needs; grant it up front.
  build_sa = "serviceAccount:${data.google_project.this.number}-compute@developer.gserviceaccount.com"
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "apis" {
  for_each           = toset(local.apis)
  service            = each.value
  disable_on_destroy = false
}

# ---------------------------------------------------------------------------------------------
# Network

resource "google_compute_network" "vpc" {
  # checkov:skip=CKV2_GCP_18:GKE and its Ingress controller create and delete the firewall rules they need.
  name                    = "${var.cluster_name}-vpc"
  auto_create_subnetworks = false
  depends_on              = [google_project_service.apis]
}

resource "google_compute_subnetwork" "nodes" {
  name                     = "${var.cluster_name}-nodes"
  region                   = var.region
  network                  = google_compute_network.vpc.id
  ip_cidr_range            = "10.0.0.0/20"
  private_ip_google_access = true

  secondary_ip_range {
    range_name    = "pods"
    ip_cidr_range = "10.4.0.0/14"
  }

  secondary_ip_range {
    range_name    = "services"
    ip_cidr_range = "10.8.0.0/20"
  }

  log_config {
    aggregation_interval = "INTERVAL_10_MIN"
    flow_sampling        = 0.1
  }
}

# The Ingress takes this address by name (kubernetes.io/ingress.global-static-ip-name: attnlab-ip);
# point your DNS name at it. Reserved addresses bill while they exist: teardown releases it.
resource "google_compute_global_address" "ingress" {
  name       = "attnlab-ip"
  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# Least-privilege service account for the nodes: GKE's node role (logs, metrics), reading the image
# repository and, for image streaming, calling the Container File System API on this project (GKE requires
# Service Usage Consumer for a node account other than the default), nothing else (not the default compute
# account, which is often project Editor).

resource "google_service_account" "nodes" {
  account_id   = "${var.cluster_name}-nodes"
  display_name = "AttnLab GKE nodes"
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "nodes_default_role" {
  project    = var.project_id
  role       = "roles/container.defaultNodeServiceAccount"
  member     = google_service_account.nodes.member
  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "nodes_image_streaming" {
  project    = var.project_id
  role       = "roles/serviceusage.serviceUsageConsumer"
  member     = google_service_account.nodes.member
  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# Images and builds

resource "google_artifact_registry_repository" "images" {
  # checkov:skip=CKV_GCP_84:Google-managed encryption; customer keys (KMS) add cost and a key to lose.
  repository_id = "attnlab"
  location      = var.region
  format        = "DOCKER"
  description   = "AttnLab images"

  # Images are several GB each: keep the five newest, delete the rest after 30 days.
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 5
    }
  }
  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_artifact_registry_repository_iam_member" "nodes_pull" {
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.reader"
  member     = google_service_account.nodes.member
  depends_on = [google_project_service.apis]
}

resource "google_artifact_registry_repository_iam_member" "build_push" {
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = local.build_sa
  depends_on = [google_project_service.apis]
}

resource "google_project_iam_member" "build_builder" {
  # checkov:skip=CKV_GCP_46:Deliberate: new projects run Cloud Build as the default compute account and may not grant it this role.
  # checkov:skip=CKV_GCP_49:roles/cloudbuild.builds.builder is the role Cloud Build documents for its build account.
  project    = var.project_id
  role       = "roles/cloudbuild.builds.builder"
  member     = local.build_sa
  depends_on = [google_project_service.apis]
}

# Where `gcloud builds submit --gcs-source-staging-dir` uploads the source; terraform destroy
# empties and removes it (no stray <project>_cloudbuild bucket).
resource "google_storage_bucket" "build" {
  # checkov:skip=CKV_GCP_62:A staging bucket of source tarballs, deleted after 7 days; access logs would outlive it.
  # checkov:skip=CKV_GCP_78:Versioning would keep deleted source tarballs (and bill for them).
  name                        = "${var.project_id}-${var.cluster_name}-build"
  location                    = var.region
  force_destroy               = true
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = false
  }

  lifecycle_rule {
    condition {
      age = 7
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket_iam_member" "build_source" {
  bucket     = google_storage_bucket.build.name
  role       = "roles/storage.objectUser"
  member     = local.build_sa
  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# GKE

resource "google_container_cluster" "attnlab" {
  # checkov:skip=CKV_GCP_12:One app in one namespace; NetworkPolicy enforcement adds a component and cost for no gain here.
  # checkov:skip=CKV_GCP_61:Intranode visibility multiplies flow-log volume (cost); subnet flow logs are on.
  # checkov:skip=CKV_GCP_64:Public nodes keep the set-up to one command (no Cloud NAT); only the load balancer is exposed.
  # checkov:skip=CKV_GCP_25:As CKV_GCP_64: not a private cluster, by choice, for a short-lived teaching cluster.
  # checkov:skip=CKV_GCP_20:The instructor's address changes (home, campus); kubectl access is guarded by IAM.
  # checkov:skip=CKV_GCP_66:Binary Authorization needs an attestation pipeline beyond a class set-up.
  # checkov:skip=CKV_GCP_65:Google Groups for RBAC needs a Workspace security group; the instructor is a project IAM member.
  name     = var.cluster_name
  location = var.zone

  resource_labels = { app = "attnlab" }

  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }

  network         = google_compute_network.vpc.id
  subnetwork      = google_compute_subnetwork.nodes.id
  networking_mode = "VPC_NATIVE"
  ip_allocation_policy {
    cluster_secondary_range_name  = "pods"
    services_secondary_range_name = "services"
  }

  # Node pools are managed below; the default one is removed right after creation.
  remove_default_node_pool = true
  initial_node_count       = 1
  node_config {
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  release_channel {
    channel = "REGULAR"
  }

  workload_identity_config {
    workload_pool = "${var.project_id}.svc.id.goog"
  }

  # Upgrades only at weekends, and never during the class days listed in var.class_hours.
  maintenance_policy {
    recurring_window {
      start_time = "2026-01-03T02:00:00Z"
      end_time   = "2026-01-03T08:00:00Z"
      recurrence = "FREQ=WEEKLY;BYDAY=SA,SU"
    }
    dynamic "maintenance_exclusion" {
      for_each = var.class_hours
      content {
        exclusion_name = maintenance_exclusion.value.name
        start_time     = maintenance_exclusion.value.start
        end_time       = maintenance_exclusion.value.end
        exclusion_options {
          scope = "NO_UPGRADES"
        }
      }
    }
  }

  # GKE's managed Ray Operator (KubeRay): runs deploy/k8s/raycluster.yaml, the device workers, one per GPU.
  addons_config {
    ray_operator_config {
      enabled = true
    }
  }

  enable_shielded_nodes = true
  deletion_protection   = false

  depends_on = [google_project_service.apis]
}

# GKE's own system pods (and nothing else) on one small node.
resource "google_container_node_pool" "system" {
  name       = "system"
  cluster    = google_container_cluster.attnlab.id
  location   = var.zone
  node_count = 1

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = "e2-standard-2"
    disk_size_gb    = 50
    disk_type       = "pd-balanced"
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }
}

# The UI pods (Streamlit, JAX on the CPU) and the Ray head: CPU nodes, a 1-CPU replica per 5 learners or so.
resource "google_container_node_pool" "ui" {
  name       = "ui-pool"
  cluster    = google_container_cluster.attnlab.id
  location   = var.zone
  node_count = var.ui_nodes

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = "e2-standard-8"
    disk_size_gb    = 100 # the image is several GB
    disk_type       = "pd-balanced"
    labels          = { "attnlab/role" = "ui" }
    service_account = google_service_account.nodes.email
    gcfs_config {
      enabled = true
    }
    oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }
}

# The GPU pool starts EMPTY (0 nodes) and goes back to 0 by itself: the cluster autoscaler adds a node when a
# device worker pod waits for a GPU (class day: the RayCluster's worker replicas are raised) and removes it
# about 10 minutes after the last one has gone (after class: replicas back to 0, by hand or by the nightly
# CronJob attnlab-gpus-off in deploy/k8s/scaledown.yaml). Nothing bills for a GPU between classes.
# Getting a GPU at class time (deploy/README.md, "Getting a GPU"): the pool may span several zones of the
# region (gpu_zones: the autoscaler takes whichever zone has one), may consume a reservation (gpu_reservation),
# and a Spot pool (gpu_spot_fallback) is tried when no on-demand GPU is to be had: both pools carry the
# compute class attnlab-gpu (deploy/k8s-cluster/computeclass.yaml), which says in which order to try them.
# Image streaming (gcfs_config) starts a pod before the several-GB image has been pulled in full; it needs the
# Container File System API and the node account's Service Usage Consumer role (both above), and an image in
# Artifact Registry (the lab's is).
resource "google_container_node_pool" "gpu" {
  name               = "gpu-pool"
  cluster            = google_container_cluster.attnlab.id
  location           = var.zone
  node_locations     = length(var.gpu_zones) > 0 ? var.gpu_zones : null
  initial_node_count = 0

  autoscaling {
    total_min_node_count = 0
    total_max_node_count = var.gpu_max_nodes
    location_policy      = "ANY"
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type = local.gpu.machine_type
    spot         = var.gpu_spot
    disk_size_gb = 200 # the NVIDIA JAX image is several GB
    disk_type    = local.gpu.disk_type
    labels       = { "attnlab/gpu" = var.gpu, "cloud.google.com/compute-class" = "attnlab-gpu" }

    taint {
      key    = "cloud.google.com/compute-class"
      value  = "attnlab-gpu"
      effect = "NO_SCHEDULE"
    }

    guest_accelerator {
      type  = local.gpu.accelerator
      count = local.gpu.count
      gpu_driver_installation_config {
        # deliberately LATEST: the image is CUDA 13, which needs driver branch 580 or newer, and GKE's
        # DEFAULT may be older; the pods' gate (scripts/entrypoint.py --check) says so in one log line
        gpu_driver_version = "LATEST"
      }
    }

    gcfs_config {
      enabled = true
    }

    dynamic "reservation_affinity" {
      for_each = var.gpu_reservation == "" ? [] : [var.gpu_reservation]
      content {
        consume_reservation_type = "SPECIFIC_RESERVATION"
        key                      = "compute.googleapis.com/reservation-name"
        values                   = [reservation_affinity.value]
      }
    }

    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  lifecycle {
    ignore_changes = [node_count, initial_node_count]
  }
}

# The fallback: the same GPU as Spot VMs (much cheaper, reclaimable at any time; a reclaimed worker's page
# says its request was lost, and Ray starts the worker again when a node comes back). Tried only when
# gpu-pool cannot get a node (the compute class's second priority).
resource "google_container_node_pool" "gpu_spot" {
  count              = var.gpu_spot_fallback ? 1 : 0
  name               = "gpu-spot-pool"
  cluster            = google_container_cluster.attnlab.id
  location           = var.zone
  node_locations     = length(var.gpu_zones) > 0 ? var.gpu_zones : null
  initial_node_count = 0

  autoscaling {
    total_min_node_count = 0
    total_max_node_count = var.gpu_max_nodes
    location_policy      = "ANY"
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type = local.gpu.machine_type
    spot         = true
    disk_size_gb = 200
    disk_type    = local.gpu.disk_type
    labels       = { "attnlab/gpu" = var.gpu, "cloud.google.com/compute-class" = "attnlab-gpu" }

    taint {
      key    = "cloud.google.com/compute-class"
      value  = "attnlab-gpu"
      effect = "NO_SCHEDULE"
    }

    guest_accelerator {
      type  = local.gpu.accelerator
      count = local.gpu.count
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }

    gcfs_config {
      enabled = true
    }

    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
  }

  lifecycle {
    ignore_changes = [node_count, initial_node_count]
  }
}

# ---------------------------------------------------------------------------------------------
# The class-only door

# IAP (the default, deploy/k8s): members of the class group may pass.
resource "google_iap_web_iam_member" "class" {
  count   = var.class_group == "" ? 0 : 1
  project = var.project_id
  role    = "roles/iap.httpsResourceAccessor"
  member  = "group:${var.class_group}"

  depends_on = [google_project_service.apis]
}

# Off by default: with a Google account an IAP session lasts as long as the Google login (IAP's "Managing IAP
# sessions"); a reauthentication policy only adds a forced sign-in every iap_session_hours, for every IAP app of
# the project (DEFAULT: an organisation's own stricter policy still wins). The provider cannot delete it: teardown
# leaves it, and setting the variable back to 0 only forgets it (deploy/README.md, "how long a sign-in lasts").
resource "google_iap_settings" "session" {
  count = var.class_group != "" && var.iap_session_hours > 0 ? 1 : 0
  name  = "projects/${data.google_project.this.number}/iap_web/compute"

  access_settings {
    reauth_settings {
      method      = "LOGIN"
      max_age     = "${var.iap_session_hours * 3600}s"
      policy_type = "DEFAULT"
    }
  }

  depends_on = [google_project_service.apis]
}

# The cheap alternative (deploy/k8s-campus): only the campus network gets in, no login.
resource "google_compute_security_policy" "campus" {
  # checkov:skip=CKV_GCP_73:An allowlist: everything outside the campus ranges is denied already; the app is not Java.
  count       = length(var.campus_cidrs) == 0 ? 0 : 1
  name        = "attnlab-campus"
  description = "AttnLab: allow the campus network only"

  # a rule matches at most 10 ranges (Cloud Armor's limit): one allow rule for each 10 of them
  dynamic "rule" {
    for_each = chunklist(var.campus_cidrs, 10)
    content {
      action   = "allow"
      priority = 1000 + rule.key
      match {
        versioned_expr = "SRC_IPS_V1"
        config {
          src_ip_ranges = rule.value
        }
      }
      description = "campus ${rule.key + 1}"
    }
  }

  rule {
    action   = "deny(403)"
    priority = 2147483647
    match {
      versioned_expr = "SRC_IPS_V1"
      config {
        src_ip_ranges = ["*"]
      }
    }
    description = "everyone else"
  }

  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------------
# A budget alert, on by default: deploy/setup.sh fills billing_account with the project's own billing account
# when you may create budgets on it (Billing Account Costs Manager or Administrator), and says so when not.

resource "google_billing_budget" "attnlab" {
  count           = var.billing_account == "" ? 0 : 1
  billing_account = var.billing_account
  display_name    = "AttnLab ${var.project_id}"

  budget_filter {
    projects = ["projects/${data.google_project.this.number}"]
  }

  amount {
    specified_amount {
      currency_code = "USD"
      units         = tostring(var.monthly_budget_usd)
    }
  }

  threshold_rules {
    threshold_percent = 0.5
  }
  threshold_rules {
    threshold_percent = 0.9
  }
  threshold_rules {
    threshold_percent = 1.0
  }

  depends_on = [google_project_service.apis]
}
