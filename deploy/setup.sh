#!/usr/bin/env bash
# From nothing to a class-only HTTPS address, in one command (NOT RUN in CI or by the authors'
# tooling: it needs a Google Cloud project; the pieces it uses are validated offline by
# tests/test_deploy.py). Guide: deploy/README.md.
#
#   cp deploy/terraform/terraform.tfvars.example deploy/terraform/terraform.tfvars   # then edit it
#   DOMAIN=attnlab.example.edu bash deploy/setup.sh
#
# DOMAIN: a DNS name you can point at the static IP (the certificate and IAP need one).
# DOOR=campus: the Cloud Armor campus allowlist instead of IAP (set campus_cidrs in tfvars).
# TAG: image tag (default v1). GPUS: device workers to start, one per GPU (default 1).
# Re-running is safe: each step picks up where things are.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${DOMAIN:?set DOMAIN, the DNS name learners will open (e.g. attnlab.example.edu)}"
TAG=${TAG:-v1}
DOOR=${DOOR:-iap}
GPUS=${GPUS:-1}
TF=(terraform -chdir=deploy/terraform)
step() { printf '\n== %s\n' "$*"; }

TFVARS=deploy/terraform/terraform.tfvars
[ -f "$TFVARS" ] || {
  echo "copy deploy/terraform/terraform.tfvars.example to terraform.tfvars and edit it first" >&2
  exit 2
}
tfvar() { sed -n "s/^$1 *= *\"\([^\"]*\)\".*/\1/p" "$TFVARS" | head -1; }

step "0/5 Preflight: the APIs on, your roles, the GPU quota (nothing is created yet)"
P=$(tfvar project_id)
R=$(tfvar region)
R=${R:-us-central1}
GPU=$(tfvar gpu)
GPU=${GPU:-l4}
# the codelab's order: services first, so Terraform's first calls (IAM, Resource Manager) do not race them
gcloud services enable serviceusage.googleapis.com cloudresourcemanager.googleapis.com iam.googleapis.com \
  compute.googleapis.com container.googleapis.com --project="$P"
ME=$(gcloud config get-value account 2>/dev/null)
ROLES=$(gcloud projects get-iam-policy "$P" --flatten=bindings[].members \
  --filter="bindings.members:$ME" --format='value(bindings.role)' 2>/dev/null || true)
if ! grep -qx 'roles/owner' <<<"$ROLES"; then
  for need in roles/editor roles/resourcemanager.projectIamAdmin roles/iap.admin; do
    grep -qx "$need" <<<"$ROLES" || echo "MISSING ROLE for $ME: $need (or roles/owner); ask the project's owner" >&2
  done
fi
METRIC=$(tr '[:lower:]' '[:upper:]' <<<"NVIDIA_${GPU}_GPUS")
[ "$(tfvar gpu_spot)" = true ] && METRIC="PREEMPTIBLE_$METRIC"
QUOTA=$(gcloud compute regions describe "$R" --project="$P" --flatten=quotas \
  --filter="quotas.metric=$METRIC" --format='value(quotas.limit)' 2>/dev/null || true)
ALL=$(gcloud compute project-info describe --project="$P" --flatten=quotas \
  --filter="quotas.metric=GPUS_ALL_REGIONS" --format='value(quotas.limit)' 2>/dev/null || true)
echo "GPU quota: $METRIC in $R = ${QUOTA:-unknown}; GPUs (all regions) = ${ALL:-unknown}; this class asks for $GPUS node(s)"
if [ "${QUOTA%.*}" = 0 ] || [ "${ALL%.*}" = 0 ]; then
  echo "NO GPU QUOTA: request it (IAM & Admin > Quotas: $METRIC in $R, and GPUs (all regions)) days before class" >&2
  exit 2
fi

step "1/5 Infrastructure: cluster, GPU pool at 0 nodes (no GPU bills yet), repository, bucket, IP"
"${TF[@]}" init -input=false
"${TF[@]}" apply -input=false -auto-approve
out() { "${TF[@]}" output -raw "$1"; }
PROJECT=$(out project_id)
ZONE=$(out zone)
CLUSTER=$(out cluster)
IMAGE_NAME=$(out image)
ACCELERATOR=$(out gpu_accelerator)
BUCKET=$(out build_bucket)
IP=$(out static_ip)
# the certificate starts only once DNS points here (up to an hour): say it now, not at the end
echo "Static IP: $IP. Point a DNS A record for $DOMAIN at it NOW; the certificate waits for it."

step "2/5 Image, with Cloud Build (15-30 min; still no GPU billing)"
gcloud builds submit --project="$PROJECT" --config=deploy/cloudbuild.yaml \
  --gcs-source-staging-dir="gs://$BUCKET/source" \
  --substitutions="_IMAGE=$IMAGE_NAME:$TAG" .

step "3/5 This class's manifests: deploy/k8s-local (git-ignored; deploy/k8s stays untouched)"
base=../k8s
[ "$DOOR" = campus ] && base=../k8s-campus
mkdir -p deploy/k8s-local
cat > deploy/k8s-local/kustomization.yaml <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $base
images:
  - name: REGION-docker.pkg.dev/PROJECT/attnlab/attnlab
    newName: $IMAGE_NAME
    newTag: $TAG
patches:
  - target: {kind: ManagedCertificate, name: attnlab-cert}
    patch: |-
      - {op: replace, path: /spec/domains, value: ["$DOMAIN"]}
  - target: {kind: RayCluster, name: attnlab}
    patch: |-
      - {op: replace, path: /spec/workerGroupSpecs/0/template/spec/nodeSelector/cloud.google.com~1gke-accelerator, value: "$ACCELERATOR"}
      - {op: replace, path: /spec/workerGroupSpecs/0/replicas, value: $GPUS}
YAML

step "4/5 $GPUS GPU node(s), the device workers, then the UI (a worker refuses to start unless JAX sees the GPU)"
gcloud container clusters get-credentials "$CLUSTER" --location="$ZONE" --project="$PROJECT"
gcloud container clusters resize "$CLUSTER" --node-pool=gpu-pool --num-nodes="$GPUS" \
  --location="$ZONE" --project="$PROJECT" --quiet
kubectl apply -f deploy/k8s/namespace.yaml
# one secret for every UI replica's Streamlit cookies (made once; kept across re-runs)
kubectl -n attnlab get secret attnlab-cookie >/dev/null 2>&1 ||
  kubectl -n attnlab create secret generic attnlab-cookie --from-literal=cookieSecret="$(openssl rand -hex 32)"
kubectl apply -k deploy/k8s-local
kubectl -n attnlab wait raycluster/attnlab --for=jsonpath='{.status.state}'=ready --timeout=30m || {
  kubectl -n attnlab logs -l ray.io/group=gpu -c gpu-check --tail=30 || true
  exit 1
}
kubectl -n attnlab rollout status deployment/attnlab --timeout=15m || {
  kubectl -n attnlab logs deployment/attnlab --tail=30 || true
  exit 1
}
kubectl -n attnlab exec "$(kubectl -n attnlab get pod -l ray.io/group=gpu -o name | head -1)" -c ray-worker -- \
  nvidia-smi --query-gpu=name,driver_version --format=csv

step "5/5 The door: DNS, then the certificate (set up the day before class, never on the day)"
if [ "${DNS_WAIT:-1}" != 0 ]; then  # DNS_WAIT=0 skips the wait
  for i in $(seq 1 60); do
    getent hosts "$DOMAIN" | grep -qw "$IP" && break
    echo "waiting for $DOMAIN to resolve to $IP (minute $i of 60; set the A record at your DNS provider)"
    sleep 60
  done
  getent hosts "$DOMAIN" | grep -qw "$IP" || echo "$DOMAIN does not resolve to $IP yet: the certificate cannot start" >&2
fi
echo "The certificate turns Active up to an hour after DNS resolves:"
echo "  kubectl -n attnlab get managedcertificate attnlab-cert"
echo "Then open https://$DOMAIN/ (learners sign in with a Google account of the class group)."
echo "After class: scale the GPUs to zero (deploy/README.md, 'Class day'); to remove everything: bash deploy/teardown.sh"
