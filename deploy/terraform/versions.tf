terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 8.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
  # The Billing Budgets API (the budget alert) and a few others need a quota project when Terraform
  # runs with user credentials (gcloud auth application-default login): bill their quota to this one.
  user_project_override = true
  billing_project       = var.project_id
}
