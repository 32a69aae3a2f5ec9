output "cluster" {
  description = "Cluster name."
  value       = google_container_cluster.attnlab.name
}

output "zone" {
  description = "Cluster zone."
  value       = var.zone
}

output "gpu_accelerator" {
  description = "The node label value for deploy/k8s/deployment.yaml's nodeSelector cloud.google.com/gke-accelerator."
  value       = local.gpu.accelerator
}

output "image" {
  description = "Image name to build and deploy (add a tag, e.g. :v1)."
  value       = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}/attnlab"
}

output "build_bucket" {
  description = "Cloud Build staging bucket (gcloud builds submit --gcs-source-staging-dir=gs://BUCKET/source)."
  value       = google_storage_bucket.build.name
}

output "static_ip" {
  description = "The load balancer's address: point your DNS name at it."
  value       = google_compute_global_address.ingress.address
}

output "node_service_account" {
  description = "The nodes' least-privilege service account."
  value       = google_service_account.nodes.email
}

output "project_id" {
  description = "Project ID (deploy/setup.sh and deploy/teardown.sh read it)."
  value       = var.project_id
}

output "region" {
  description = "Region of the image repository and build bucket."
  value       = var.region
}

output "project_number" {
  description = "Project number: IAP's signed header names it in its audience (ATTNLAB_IAP_AUDIENCE)."
  value       = data.google_project.this.number
}
