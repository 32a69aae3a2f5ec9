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
# IAP_CLIENT_ID / IAP_CLIENT_SECRET: your own OAuth client for IAP (learners outside your organisation, or a
#   project without one). BUDGET=0: no budget alert (on by default). GPUS_OFF_AT: when the GPUs go back to 0
#   each night (cron, UTC; default "0 22 * * *").
# Re-running is safe: each step picks up where things are.
# An hour's workshop instead (NOT FOR A CLASS): PROJECT_ID=... bash deploy/setup.sh --quick (see below).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# What each GPU choice costs per hour, on demand, us-central1, approximately (deploy/README.md section 8; prices
# change: https://cloud.google.com/compute/gpus-pricing). Spot is typically 60-90 % less, and can be reclaimed.
cost_per_hour() {
  case "$1" in
    l4) echo "g2-standard-8 + 1 L4: about \$0.85/h per GPU node (Spot about \$0.30/h)" ;;
    h100) echo "a3-highgpu-1g + 1 H100: about \$11/h per GPU node (Spot about \$3-4/h)" ;;
    h200) echo "a3-ultragpu-8g + 8 H200: about \$85/h per node, 8 GPUs (Spot or a reservation: ask your account team)" ;;
    *) echo "unknown GPU $1" ;;
  esac
}

# Stops (exit 2) when the project has no quota for this GPU in the region or no "GPUs (all regions)".
gpu_quota() {  # gpu_quota PROJECT REGION GPU SPOT(true|false) NODES
  local metric quota all
  metric=$(tr '[:lower:]' '[:upper:]' <<<"NVIDIA_${3}_GPUS")
  [ "$4" = true ] && metric="PREEMPTIBLE_$metric"
  quota=$(gcloud compute regions describe "$2" --project="$1" --flatten=quotas \
    --filter="quotas.metric=$metric" --format='value(quotas.limit)' 2>/dev/null || true)
  all=$(gcloud compute project-info describe --project="$1" --flatten=quotas \
    --filter="quotas.metric=GPUS_ALL_REGIONS" --format='value(quotas.limit)' 2>/dev/null || true)
  echo "GPU quota: $metric in $2 = ${quota:-unknown}; GPUs (all regions) = ${all:-unknown}; this asks for $5 node(s)"
  if [ "${quota%.*}" = 0 ] || [ "${all%.*}" = 0 ]; then
    echo "NO GPU QUOTA: request it (IAM & Admin > Quotas: $metric in $2, and GPUs (all regions)) days before class" >&2
    exit 2
  fi
}

# ---------------------------------------------------------------------------------------------------------
# The quick mode: NOT FOR A CLASS (deploy/README.md, "Quick mode"). A project and GPU quota are all it needs:
# no Terraform, no domain, no group, no organisation, no image build (NVIDIA's JAX image as built, the code
# copied in). One GPU node; a plain-HTTP address with a one-time token, or `kubectl port-forward`.
#   PROJECT_ID=my-project bash deploy/setup.sh --quick        ZONE (us-central1-a), GPU (l4 | h100)
#   bash deploy/setup.sh --quick-down                         removes the quick cluster and everything in it
QUICK_CLUSTER=attnlab-quick
if [ "${1:-}" = --quick ] || [ "${1:-}" = --quick-down ]; then
  P=${PROJECT_ID:-$(gcloud config get-value project 2>/dev/null)}
  : "${P:?set PROJECT_ID (or gcloud config set project ...)}"
  ZONE=${ZONE:-us-central1-a}
  if [ "$1" = --quick-down ]; then
    gcloud container clusters delete "$QUICK_CLUSTER" --location="$ZONE" --project="$P" --quiet
    echo "Removed $QUICK_CLUSTER (its node, its load balancer and its address went with it)."
    exit 0
  fi
  GPU=${GPU:-l4}
  case "$GPU" in
    l4) MACHINE=g2-standard-8 ACCEL=nvidia-l4 ;;
    h100) MACHINE=a3-highgpu-1g ACCEL=nvidia-h100-80gb ;;
    *) echo "the quick mode takes GPU=l4 or GPU=h100 (one GPU)" >&2; exit 2 ;;
  esac
  step "quick 1/4 NOT FOR A CLASS: one GPU node for a workshop of an hour, plain HTTP with a one-time token"
  gcloud services enable compute.googleapis.com container.googleapis.com --project="$P"
  gpu_quota "$P" "${ZONE%-*}" "$GPU" false 1
  echo "Cost while it runs: $(cost_per_hour "$GPU"), plus the cluster fee (\$0.10/h, often covered by the free tier). Remove it after: bash deploy/setup.sh --quick-down"
  step "quick 2/4 Cluster $QUICK_CLUSTER: one $MACHINE node with its GPU (5-10 min)"
  gcloud container clusters describe "$QUICK_CLUSTER" --location="$ZONE" --project="$P" >/dev/null 2>&1 ||
    gcloud container clusters create "$QUICK_CLUSTER" --location="$ZONE" --project="$P" --num-nodes=1 \
      --machine-type="$MACHINE" --accelerator="type=$ACCEL,count=1,gpu-driver-version=latest" \
      --disk-size=200 --image-type=COS_CONTAINERD --enable-image-streaming --labels=attnlab=quick
  gcloud container clusters get-credentials "$QUICK_CLUSTER" --location="$ZONE" --project="$P"
  step "quick 3/4 The pod: NVIDIA's JAX image as built, the lab's code copied in, its lock installed (first pull: minutes)"
  kubectl apply -f deploy/quick/attnlab-quick.yaml
  TOKEN=$(kubectl -n attnlab-quick get secret attnlab-token -o jsonpath='{.data.token}' 2>/dev/null | base64 -d || true)
  if [ -z "$TOKEN" ]; then
    TOKEN=$(openssl rand -hex 16)
    kubectl -n attnlab-quick create secret generic attnlab-token --from-literal=token="$TOKEN"
  fi
  kubectl -n attnlab-quick wait pod/attnlab --for=jsonpath='{.status.phase}'=Running --timeout=30m
  tar -cf - --exclude=./.git --exclude=./.venv --exclude=./.te --exclude=./.whl --exclude=./artifacts \
    --exclude=./deploy/terraform/.terraform . | kubectl -n attnlab-quick exec -i attnlab -c app -- tar -xf - -C /app
  kubectl -n attnlab-quick exec attnlab -c app -- touch /app/.ready
  kubectl -n attnlab-quick wait pod/attnlab --for=condition=Ready --timeout=20m || {
    kubectl -n attnlab-quick logs attnlab --tail=30 || true
    exit 1
  }
  step "quick 4/4 The address (NOT FOR A CLASS: plain HTTP; the token is the only door)"
  IP=""
  for _ in $(seq 60); do
    IP=$(kubectl -n attnlab-quick get service attnlab -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
    [ -n "$IP" ] && break
    sleep 5
  done
  echo "Learners open: http://${IP:-<pending: kubectl -n attnlab-quick get service attnlab>}/?token=$TOKEN"
  echo "Only you, over kubectl instead: kubectl -n attnlab-quick port-forward pod/attnlab 8501:8501, then http://localhost:8501/?token=$TOKEN"
  echo "It bills until you remove it: bash deploy/setup.sh --quick-down"
  exit 0
fi

: "${DOMAIN:?set DOMAIN, the DNS name learners will open (e.g. attnlab.example.edu), or use --quick}"
TAG=${TAG:-v1}
DOOR=${DOOR:-iap}
GPUS=${GPUS:-1}
GPUS_OFF_AT=${GPUS_OFF_AT:-0 22 * * *}  # the nightly CronJob that sets the GPU workers to 0 (UTC)
TF=(terraform -chdir=deploy/terraform)

TFVARS=deploy/terraform/terraform.tfvars
[ -f "$TFVARS" ] || {
  echo "copy deploy/terraform/terraform.tfvars.example to terraform.tfvars and edit it first" >&2
  exit 2
}
tfvar() { sed -n "s/^$1 *= *\"\([^\"]*\)\".*/\1/p" "$TFVARS" | head -1; }

step "0/5 Preflight: the APIs on, your roles, the GPU quota, the budget, the door (nothing is created yet)"
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
SPOT=$(sed -n 's/^gpu_spot *= *\(true\|false\).*/\1/p' "$TFVARS" | head -1)
gpu_quota "$P" "$R" "$GPU" "${SPOT:-false}" "$GPUS"
echo "Cost per hour while the GPUs are up: $GPUS x $(cost_per_hour "$GPU"); the rest (CPU node, system node,"
echo "  load balancer, cluster fee) about \$0.45/h, always on until teardown (deploy/README.md, section 8)."
# A budget alert by default: on the project's own billing account, when you may create budgets there.
TF_ARGS=()
if [ -z "$(tfvar billing_account)" ] && [ "${BUDGET:-1}" != 0 ]; then
  BILLING=$(gcloud billing projects describe "$P" --format='value(billingAccountName)' 2>/dev/null || true)
  BILLING=${BILLING#billingAccounts/}
  if [ -n "$BILLING" ] && gcloud billing budgets list --billing-account="$BILLING" --limit=1 >/dev/null 2>&1; then
    TF_ARGS+=(-var "billing_account=$BILLING")
    echo "Budget alert: on billing account $BILLING (monthly_budget_usd in tfvars; BUDGET=0 for none)"
  else
    echo "NO BUDGET ALERT: you may not create budgets on the billing account ${BILLING:-(none found)}; make one in Billing > Budgets & alerts" >&2
  fi
fi
# IAP's Google-managed OAuth client admits only the accounts of the project's organisation, and nobody at all
# when the project has none: then the door needs your own OAuth client (deploy/README.md, "External learners").
if [ "$DOOR" = iap ] && [ -z "${IAP_CLIENT_ID:-}" ]; then
  PARENT=$(gcloud projects describe "$P" --format='value(parent.type)' 2>/dev/null || true)
  if [ "$PARENT" != organization ]; then
    echo "NO ORGANISATION: project $P has none, so IAP's built-in sign-in admits nobody. Create an OAuth client" >&2
    echo "  (deploy/README.md, 'External learners') and run again with IAP_CLIENT_ID=... IAP_CLIENT_SECRET=...," >&2
    echo "  or use DOOR=campus, or the quick mode (--quick)" >&2
    exit 2
  fi
fi

step "1/5 Infrastructure: cluster, GPU pool at 0 nodes (no GPU bills yet), repository, bucket, IP"
"${TF[@]}" init -input=false
"${TF[@]}" apply -input=false -auto-approve "${TF_ARGS[@]}"
out() { "${TF[@]}" output -raw "$1"; }
PROJECT=$(out project_id)
ZONE=$(out zone)
CLUSTER=$(out cluster)
IMAGE_NAME=$(out image)
ACCELERATOR=$(out gpu_accelerator)
BUCKET=$(out build_bucket)
IP=$(out static_ip)
PROJECT_NUMBER=$(out project_number)
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
  - target: {kind: CronJob, name: attnlab-gpus-off}
    patch: |-
      - {op: replace, path: /spec/schedule, value: "$GPUS_OFF_AT"}
YAML
if [ "$DOOR" = iap ]; then  # IAP's signed header must name a backend service of this project
  cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: Deployment, name: attnlab}
    patch: |-
      - {op: replace, path: /spec/template/spec/containers/0/env/5, value: {name: ATTNLAB_IAP_AUDIENCE, value: /projects/$PROJECT_NUMBER/global/backendServices/}}
YAML
  if [ -n "${IAP_CLIENT_ID:-}" ]; then  # learners outside the organisation: your own OAuth client
    cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: BackendConfig, name: attnlab}
    patch: |-
      - {op: add, path: /spec/iap/oauthclientCredentials, value: {secretName: attnlab-iap}}
YAML
  fi
fi

step "4/5 $GPUS GPU node(s), the device workers, then the UI (a worker refuses to start unless JAX sees the GPU)"
gcloud container clusters get-credentials "$CLUSTER" --location="$ZONE" --project="$PROJECT"
gcloud container clusters resize "$CLUSTER" --node-pool=gpu-pool --num-nodes="$GPUS" \
  --location="$ZONE" --project="$PROJECT" --quiet
kubectl apply -f deploy/k8s/namespace.yaml
# one secret for every UI replica's Streamlit cookies (made once; kept across re-runs)
kubectl -n attnlab get secret attnlab-cookie >/dev/null 2>&1 ||
  kubectl -n attnlab create secret generic attnlab-cookie --from-literal=cookieSecret="$(openssl rand -hex 32)"
if [ -n "${IAP_CLIENT_ID:-}" ]; then
  kubectl -n attnlab create secret generic attnlab-iap --from-literal=client_id="$IAP_CLIENT_ID" \
    --from-literal=client_secret="${IAP_CLIENT_SECRET:?set IAP_CLIENT_SECRET with IAP_CLIENT_ID}" \
    --dry-run=client -o yaml | kubectl apply -f -
fi
# the GPU's compute class: on-demand (or the reservation) first, then Spot (GKE without compute classes: skipped)
kubectl apply -f deploy/k8s-cluster/computeclass.yaml ||
  echo "compute class not applied (an older GKE?): the GPU workers still land on either GPU pool" >&2
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
echo "The GPU workers go to 0 every night at '$GPUS_OFF_AT' (UTC), and the autoscaler then removes the GPU nodes;"
echo "class day brings them up again (deploy/README.md, 'Class day'). To remove everything: bash deploy/teardown.sh"
