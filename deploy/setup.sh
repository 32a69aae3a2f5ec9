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
# TAG: image tag (default: this checkout's commit; a tag is built once and never moved). GPUS: device workers,
#   one per GPU (default 1 on the first run; a re-run keeps the running cluster's count, 0 after the nightly stop).
# IAP_CLIENT_ID / IAP_CLIENT_SECRET: your own OAuth client for IAP (learners outside your organisation, or a
#   project without one). BUDGET=0: no budget alert (on by default). GPUS_OFF_AT: when the GPUs go back to 0
#   each night (cron; default "0 22 * * *") in GPUS_OFF_TZ (a time zone name such as America/Chicago; default
#   this machine's own zone; where it is UTC, as in Cloud Shell, the region's: region_tz).
# Re-running is safe: each step picks up where things are; a new TAG (new code) recreates the Ray cluster's pods.
# An hour's workshop instead (NOT FOR A CLASS): PROJECT_ID=... bash deploy/setup.sh --quick (see below).
# Portable: bash 3.2 (macOS's own) or newer, GNU or BSD tools; Cloud Shell has everything it needs.
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

gpus_per_node() { if [ "$1" = h200 ]; then echo 8; else echo 1; fi; }

# One regional quota's limit as a whole number, or nothing when it cannot be read.
quota_of() {  # quota_of PROJECT REGION METRIC
  local q
  q=$(gcloud compute regions describe "$2" --project="$1" --flatten=quotas \
    --filter="quotas.metric=$3" --format='value(quotas.limit)' 2>/dev/null | head -1 || true)
  echo "${q%.*}"
}

# Stops (exit 2) unless the quota can hold NEED GPUs of this kind in the region, counting the pools the class may
# use: the on-demand quota for an on-demand pool, the preemptible one for a Spot pool (Spot VMs draw on the
# on-demand quota where the project has no preemptible one), and never more than "GPUs (all regions)".
gpu_quota() {  # gpu_quota PROJECT REGION GPU NEED ONDEMAND(true|false) SPOT(true|false)
  local base od sp all usable=0
  base=$(printf 'NVIDIA_%s_GPUS' "$3" | tr '[:lower:]' '[:upper:]')
  od=$(quota_of "$1" "$2" "$base")
  sp=""
  if [ "$6" = true ]; then sp=$(quota_of "$1" "$2" "PREEMPTIBLE_$base"); fi
  all=$(gcloud compute project-info describe --project="$1" --flatten=quotas \
    --filter="quotas.metric=GPUS_ALL_REGIONS" --format='value(quotas.limit)' 2>/dev/null | head -1 || true)
  all=${all%.*}
  echo "GPU quota in $2: $base = ${od:-unknown}, PREEMPTIBLE_$base = ${sp:-unknown}, GPUs (all regions) = ${all:-unknown};"
  echo "  this asks for $4 GPU(s) ($([ "$5" = true ] && echo "on demand")$([ "$5$6" = truetrue ] && echo ", then ")$([ "$6" = true ] && echo "Spot"))"
  if [ -z "$od" ] || [ -z "$all" ] || { [ "$6" = true ] && [ -z "$sp" ]; }; then
    echo "GPU QUOTA NOT READ: check it by hand (IAM & Admin > Quotas: $base in $2, GPUs (all regions))" >&2
    return 0
  fi
  if [ "$5" = true ]; then usable=$od; fi
  if [ "$6" = true ] && [ "$sp" -gt 0 ]; then
    usable=$((usable + sp))
  elif [ "$6" = true ] && [ "$5" != true ]; then
    usable=$od  # Spot only, and no preemptible quota: Spot VMs use the on-demand one
  fi
  if [ "$all" -lt "$usable" ]; then usable=$all; fi
  if [ "$usable" -lt "$4" ]; then
    echo "NO GPU QUOTA for $4 GPU(s): request it (IAM & Admin > Quotas: $base$([ "$6" = true ] && echo " or PREEMPTIBLE_$base") in $2, and GPUs (all regions)) days before class" >&2
    exit 2
  fi
  if [ "$5" = true ] && [ "$6" = true ] && [ "$od" -lt "$4" ]; then
    echo "Only $od of the $4 GPUs fit the on-demand quota: the rest can come up only as Spot (reclaimable mid-class)" >&2
  fi
}

# Runs a command again, 15 s later then twice as long, up to 4 tries: a service enabled a moment ago can
# answer 503 for a minute or two.
retry() {
  local try=1 wait=15
  until "$@"; do
    [ "$try" -ge 4 ] && return 1
    echo "failed (try $try of 4; a service just enabled can answer 503 for a while): again in ${wait}s" >&2
    sleep "$wait"
    try=$((try + 1))
    wait=$((wait * 2))
  done
}

# This machine's time zone name (TZ, else where /etc/localtime points), or Etc/UTC.
local_tz() {
  local tz=${TZ:-}
  tz=${tz#:}
  case "$tz" in /* | "") ;; */* | UTC) echo "$tz" && return ;; esac
  tz=$(readlink /etc/localtime 2>/dev/null || true)
  case "$tz" in */zoneinfo/?*) echo "${tz#*/zoneinfo/}" && return ;; esac
  echo Etc/UTC
}

# A time zone for a Google Cloud region (its city's), or nothing for a region not listed: where the machine running
# setup.sh says UTC (Cloud Shell does), the class is more likely near its GPUs than on UTC, and 22:00 UTC is the
# afternoon in the Americas
region_tz() {
  case "$1" in
    us-central1 | us-south1) echo America/Chicago ;;
    us-east1 | us-east4 | us-east5) echo America/New_York ;;
    us-west1 | us-west2 | us-west4) echo America/Los_Angeles ;;
    us-west3) echo America/Denver ;;
    northamerica-northeast1 | northamerica-northeast2) echo America/Toronto ;;
    southamerica-east1) echo America/Sao_Paulo ;;
    europe-west1) echo Europe/Brussels ;;
    europe-west2) echo Europe/London ;;
    europe-west3) echo Europe/Berlin ;;
    europe-west4) echo Europe/Amsterdam ;;
    europe-west9) echo Europe/Paris ;;
    europe-north1) echo Europe/Helsinki ;;
    asia-east1) echo Asia/Taipei ;;
    asia-northeast1) echo Asia/Tokyo ;;
    asia-northeast3) echo Asia/Seoul ;;
    asia-south1) echo Asia/Kolkata ;;
    asia-southeast1) echo Asia/Singapore ;;
    australia-southeast1) echo Australia/Sydney ;;
  esac
}

# Whether you may create budgets on billing account $1 (the API quota billed to project $2): the permission
# Terraform's budget needs, asked of Cloud Billing itself. Listing budgets is not it: a Billing Account Viewer may
# list them, and Terraform's apply then fails with 403 after it has made the cluster.
may_create_budgets() {
  curl -fsS -X POST "https://cloudbilling.googleapis.com/v1/billingAccounts/$1:testIamPermissions" \
    -H "Authorization: Bearer $(gcloud auth print-access-token)" -H "x-goog-user-project: $2" \
    -H "Content-Type: application/json" -d '{"permissions": ["billing.budgets.create"]}' 2>/dev/null |
    grep -q '"billing.budgets.create"'
}

# Whether GPUS of the Ray cluster's GPU worker pods are Ready, looking every 10 s for up to 30 minutes.
workers_ready() {
  local i n
  for i in $(seq 1 180); do
    n=$(kubectl -n attnlab get pods -l ray.io/cluster=attnlab,ray.io/group=gpu \
      -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
      grep -c True || true)
    [ "${n:-0}" -ge "$GPUS" ] && return 0
    [ $((i % 6)) -eq 0 ] && echo "GPU workers Ready: ${n:-0} of $GPUS (minute $((i / 6)) of 30; a new node and the image's first pull take minutes)"
    sleep 10
  done
  return 1
}

# The image's tag when TAG is not given: this checkout's commit and, where the files Cloud Build uploads (every file
# .gitignore leaves, committed or not) differ from it, the first 8 digits of their git tree (v1 outside a git
# checkout). The tree is written through a copy of the index, so the checkout's own is untouched. The pods pull with
# IfNotPresent, so a node keeps the bytes it pulled for a tag: a tag that moved to new code would leave the UI node
# on the old build and a GPU node started later on the new. Here new code is a new tag, and an existing tag is never
# built again (step 2).
image_tag() {
  local c index tree
  c=$(git rev-parse --short=12 HEAD 2>/dev/null) || { echo v1; return; }
  index=$(mktemp)
  cp "$(git rev-parse --git-dir)/index" "$index" 2>/dev/null || true
  tree=$(GIT_INDEX_FILE=$index git add -A . >/dev/null 2>&1 && GIT_INDEX_FILE=$index git write-tree 2>/dev/null) || tree=""
  rm -f "$index"
  if [ -n "$tree" ] && [ "$tree" != "$(git rev-parse 'HEAD^{tree}')" ]; then
    c="$c-$(printf '%s' "$tree" | cut -c1-8)"
  fi
  echo "$c"
}

# The IPv4 addresses a name resolves to, with what this machine has (macOS has no getent).
resolve() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket, sys
try:
    print(" ".join(sorted({a[4][0] for a in socket.getaddrinfo(sys.argv[1], None, socket.AF_INET)})))
except OSError:
    pass' "$1"
  elif command -v dig >/dev/null 2>&1; then
    dig +short A "$1"
  elif command -v host >/dev/null 2>&1; then
    host -t A "$1" || true
  else
    nslookup "$1" 2>/dev/null || true
  fi
}

# ---------------------------------------------------------------------------------------------------------
# The quick mode: NOT FOR A CLASS (deploy/README.md, "Quick mode"). A project and GPU quota are all it needs:
# no Terraform, no domain, no group, no organisation, no image build (NVIDIA's JAX image as built, the code
# copied in). One GPU node; a plain-HTTP address with a one-time token, or `kubectl port-forward`.
#   PROJECT_ID=my-project bash deploy/setup.sh --quick [--spot]  ZONE (us-central1-a), GPU (l4 | h100)
#   bash deploy/setup.sh --quick-down                         removes the quick cluster and everything in it
QUICK_CLUSTER=attnlab-quick
if [ "${1:-}" = --quick ] || [ "${1:-}" = --quick-down ]; then
  P=${PROJECT_ID:-$(gcloud config get-value project 2>/dev/null)}
  : "${P:?set PROJECT_ID (or gcloud config set project ...)}"
  ZONE=${ZONE:-us-central1-a}
  # the LoadBalancer Service's forwarding rule (GKE names the Service in the rule's description)
  quick_rules() {
    gcloud compute forwarding-rules list --project="$P" --filter='description~attnlab-quick/attnlab' \
      --format='value(name,region.basename())' 2>/dev/null || true
  }
  if [ "$1" = --quick-down ]; then
    # The cluster wherever it is (the ZONE given to --quick may not be this shell's), then its Service first, so
    # that GKE's controller removes its load balancer while the cluster is still there
    AT=$(gcloud container clusters list --project="$P" --filter="name=$QUICK_CLUSTER" --format='value(location)' \
      2>/dev/null | head -1 || true)
    if [ -n "$AT" ]; then
      gcloud container clusters get-credentials "$QUICK_CLUSTER" --location="$AT" --project="$P"
      kubectl -n attnlab-quick delete service attnlab --ignore-not-found --wait=true --timeout=10m || true
      for _ in $(seq 60); do
        [ -z "$(quick_rules)" ] && break
        echo "waiting for the load balancer's forwarding rule to go"
        sleep 5
      done
      gcloud container clusters delete "$QUICK_CLUSTER" --location="$AT" --project="$P" --quiet
    else
      echo "No cluster $QUICK_CLUSTER in project $P (gcloud container clusters list): nothing to delete there"
    fi
    LEFT=$(quick_rules)
    if [ -n "$LEFT" ]; then
      printf 'STILL THERE (forwarding rules of attnlab-quick/attnlab, name and region; they bill):\n%s\n' "$LEFT"
      echo "delete each: gcloud compute forwarding-rules delete NAME --region=REGION --project=$P"
      exit 1
    fi
    echo "Removed $QUICK_CLUSTER: its node, and no forwarding rule of its load balancer is left."
    exit 0
  fi
  GPU=${GPU:-l4}
  QUICK_SPOT=false
  [ "${2:-}" = --spot ] && QUICK_SPOT=true
  case "$GPU" in
    l4) MACHINE=g2-standard-8 ACCEL=nvidia-l4 ;;
    h100) MACHINE=a3-highgpu-1g ACCEL=nvidia-h100-80gb ;;
    *) echo "the quick mode takes GPU=l4 or GPU=h100 (one GPU)" >&2; exit 2 ;;
  esac
  step "quick 1/4 NOT FOR A CLASS: one GPU node for a workshop of an hour, plain HTTP with a one-time token"
  gcloud services enable compute.googleapis.com container.googleapis.com --project="$P"
  if [ "$QUICK_SPOT" = true ]; then
    gpu_quota "$P" "${ZONE%-*}" "$GPU" 1 false true
  else
    gpu_quota "$P" "${ZONE%-*}" "$GPU" 1 true false
  fi
  echo "Cost while it runs: $(cost_per_hour "$GPU"), plus the cluster fee (\$0.10/h, often covered by the free tier). Remove it after: bash deploy/setup.sh --quick-down"
  if [ "$GPU" = h100 ] && [ "$QUICK_SPOT" = false ]; then
    echo "NOTE: an on-demand a3-highgpu-1g may not be offered in $ZONE (often only as Spot, flex-start or a reservation);" >&2
    echo "  if the node never comes, run again with --spot (cheaper; can be reclaimed during the workshop)" >&2
  fi
  step "quick 2/4 Cluster $QUICK_CLUSTER: one $MACHINE node with its GPU (5-10 min)"
  # no image streaming: it streams only from Artifact Registry (and Docker Hub), and this pod pulls from nvcr.io
  SPOT_FLAG=()
  [ "$QUICK_SPOT" = true ] && SPOT_FLAG=(--spot)
  # shellcheck disable=SC2329  # called through retry
  quick_cluster() {
    gcloud container clusters describe "$QUICK_CLUSTER" --location="$ZONE" --project="$P" >/dev/null 2>&1 ||
      gcloud container clusters create "$QUICK_CLUSTER" --location="$ZONE" --project="$P" --num-nodes=1 \
        --machine-type="$MACHINE" --accelerator="type=$ACCEL,count=1,gpu-driver-version=latest" \
        --disk-size=200 --image-type=COS_CONTAINERD --labels=attnlab=quick ${SPOT_FLAG[@]+"${SPOT_FLAG[@]}"}
  }
  retry quick_cluster
  gcloud container clusters get-credentials "$QUICK_CLUSTER" --location="$ZONE" --project="$P"
  step "quick 3/4 The pod: NVIDIA's JAX image as built, the lab's code copied in, its lock installed (first pull: minutes)"
  kubectl apply -f deploy/quick/attnlab-quick.yaml
  TOKEN=$(kubectl -n attnlab-quick get secret attnlab-token -o jsonpath='{.data.token}' 2>/dev/null | base64 --decode || true)
  if [ -z "$TOKEN" ]; then
    TOKEN=$(openssl rand -hex 16)
    kubectl -n attnlab-quick create secret generic attnlab-token --from-literal=token="$TOKEN"
  fi
  kubectl -n attnlab-quick wait pod/attnlab --for=jsonpath='{.status.phase}'=Running --timeout=30m
  # COPYFILE_DISABLE: macOS's tar leaves out its ._ resource files
  COPYFILE_DISABLE=1 tar -cf - --exclude=./.git --exclude=./.venv --exclude=./.te --exclude=./.whl \
    --exclude=./artifacts --exclude=./deploy/terraform/.terraform . |
    kubectl -n attnlab-quick exec -i attnlab -c app -- tar -xf - -C /app
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
TAG=${TAG:-$(image_tag)}
DOOR=${DOOR:-iap}
GPUS_SET=${GPUS:-}  # the instructor's own count; else a re-run keeps the running cluster's (step 4)
GPUS=${GPUS:-1}
case "$GPUS" in *[!0-9]*) echo "GPUS must be a whole number, not '$GPUS'" >&2; exit 2 ;; esac
case "${UI_REPLICAS:-}" in *[!0-9]*) echo "UI_REPLICAS must be a whole number, not '$UI_REPLICAS'" >&2; exit 2 ;; esac
GPUS_OFF_AT=${GPUS_OFF_AT:-0 22 * * *}  # the nightly CronJob that sets the GPU workers to 0 ...
GPUS_OFF_TZ_SET=${GPUS_OFF_TZ:-}  # the instructor's own choice, kept even where it is UTC
GPUS_OFF_TZ=${GPUS_OFF_TZ:-$(local_tz)}  # ... at that time in this zone (UTC: the region's, below)
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
case "$GPUS_OFF_TZ" in
  UTC | Etc/UTC | Etc/GMT | GMT | Etc/Universal | Universal | Zulu | Etc/Zulu)
    if [ -z "${GPUS_OFF_TZ_SET:-}" ] && [ -n "$(region_tz "$R")" ]; then
      GPUS_OFF_TZ=$(region_tz "$R")
      echo "NOTE: this machine is on UTC (Cloud Shell is); the nightly GPU stop runs at '$GPUS_OFF_AT' in $GPUS_OFF_TZ," \
        "the zone of region $R. Set GPUS_OFF_TZ (e.g. America/Chicago, or Etc/UTC) to choose." >&2
    fi ;;
esac
GPU=$(tfvar gpu)
GPU=${GPU:-l4}
# the codelab's order: services first, so Terraform's first calls (IAM, Resource Manager) do not race them,
# and before the budget probe below (Billing Budgets) and Terraform's IAP binding (IAP)
gcloud services enable serviceusage.googleapis.com cloudresourcemanager.googleapis.com iam.googleapis.com \
  compute.googleapis.com container.googleapis.com iap.googleapis.com billingbudgets.googleapis.com \
  cloudbilling.googleapis.com containerfilesystem.googleapis.com --project="$P"
ME=$(gcloud config get-value account 2>/dev/null)
ROLES=$(gcloud projects get-iam-policy "$P" --flatten=bindings[].members \
  --filter="bindings.members:$ME" --format='value(bindings.role)' 2>/dev/null || true)
if ! grep -qx 'roles/owner' <<<"$ROLES"; then
  for need in roles/editor roles/resourcemanager.projectIamAdmin roles/iap.admin; do
    grep -qx "$need" <<<"$ROLES" || echo "MISSING ROLE for $ME: $need (or roles/owner); ask the project's owner" >&2
  done
fi
tfbool() { sed -n "s/^$1 *= *\([a-z]*\).*/\1/p" "$TFVARS" | head -1; }  # POSIX sed: BSD's too
SPOT=$(tfbool gpu_spot)
FALLBACK=$(tfbool gpu_spot_fallback)
PER_NODE=$(gpus_per_node "$GPU")
tfnum() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$TFVARS" | head -1; }
POOLS=1
[ "${FALLBACK:-true}" = true ] && POOLS=2  # the Spot pool beside the first, each up to gpu_max_nodes
MAX_NODES=$(tfnum gpu_max_nodes)
REACH=$((${MAX_NODES:-4} * PER_NODE * POOLS))  # 4: variables.tf's default
if [ "$GPUS" -gt "$REACH" ]; then
  echo "GPUS=$GPUS is more than the GPU pools can hold: gpu_max_nodes x $PER_NODE GPU(s) a node x $POOLS pool(s) = $REACH;" \
    "raise gpu_max_nodes in terraform.tfvars" >&2
  exit 2
fi
NEED=$(((GPUS + PER_NODE - 1) / PER_NODE * PER_NODE))  # whole nodes: an H200 node brings 8 GPUs
if [ "${SPOT:-false}" = true ]; then
  gpu_quota "$P" "$R" "$GPU" "$NEED" false true
elif [ "${FALLBACK:-true}" = true ]; then
  gpu_quota "$P" "$R" "$GPU" "$NEED" true true
else
  gpu_quota "$P" "$R" "$GPU" "$NEED" true false
fi
echo "Cost per hour while the GPUs are up: $GPUS x $(cost_per_hour "$GPU"); the rest (CPU node, system node,"
echo "  load balancer, cluster fee) about \$0.45/h, always on until teardown (deploy/README.md, section 8)."
# A budget alert by default: on the project's own billing account, when you may create budgets there.
TF_ARGS=()
if [ -z "$(tfvar billing_account)" ] && [ "${BUDGET:-1}" != 0 ]; then
  BILLING=$(gcloud billing projects describe "$P" --format='value(billingAccountName)' 2>/dev/null || true)
  BILLING=${BILLING#billingAccounts/}
  if [ -n "$BILLING" ] && may_create_budgets "$BILLING" "$P"; then
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
"${TF[@]}" apply -input=false -auto-approve ${TF_ARGS[@]+"${TF_ARGS[@]}"}  # bash 3.2: an empty array is unset
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

step "2/5 Image $TAG, with Cloud Build (15-30 min; still no GPU billing)"
if gcloud artifacts docker images describe "$IMAGE_NAME:$TAG" --project="$PROJECT" >/dev/null 2>&1; then
  echo "The image $IMAGE_NAME:$TAG is built already: not built again (a tag never moves; new code is a new TAG)"
else
  gcloud builds submit --project="$PROJECT" --config=deploy/cloudbuild.yaml \
    --gcs-source-staging-dir="gs://$BUCKET/source" \
    --substitutions="_IMAGE=$IMAGE_NAME:$TAG" .
fi

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
  - target: {kind: CronJob, name: attnlab-gpus-off}
    patch: |-
      - {op: replace, path: /spec/schedule, value: "$GPUS_OFF_AT"}
      - {op: replace, path: /spec/timeZone, value: "$GPUS_OFF_TZ"}
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

step "4/5 The device workers, the GPU nodes they need, then the UI (a worker refuses to start unless JAX sees the GPU)"
# No `clusters resize`: on a pool spread over several zones it sets the size of every zone (gpu_zones x GPUS
# nodes), and it never tries the Spot pool. The workers' pods ask for their GPUs; the cluster autoscaler adds
# the nodes they need, in whichever zone has them, on demand first, then Spot (the compute class).
gcloud container clusters get-credentials "$CLUSTER" --location="$ZONE" --project="$PROJECT"
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
# A re-run keeps what the instructor changed with kubectl since the last run (`kubectl apply` would put the
# manifests' values back): the UI replicas (`scale`), the class's shapes (`set env`), the IAP audience narrowed
# to the lab's backend service, and the OAuth client of an earlier IAP_CLIENT_ID. UI_REPLICAS=N and
# CLASS_SHAPES='...' set the first two here instead (CLASS_SHAPES='' clears them).
live_env() { kubectl -n attnlab get deployment attnlab -o jsonpath="{.spec.template.spec.containers[0].env[?(@.name==\"$1\")].value}" 2>/dev/null || true; }
yaml_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }
KEEP_UI=${UI_REPLICAS:-$(kubectl -n attnlab get deployment attnlab -o jsonpath='{.spec.replicas}' 2>/dev/null || true)}
KEEP_SHAPES=${CLASS_SHAPES-$(live_env ATTNLAB_CLASS_SHAPES)}
KEEP_AUD=""
AUD_PREFIX=/projects/$PROJECT_NUMBER/global/backendServices/
if [ "$DOOR" = iap ]; then
  KEEP_AUD=$(live_env ATTNLAB_IAP_AUDIENCE)
  case "$KEEP_AUD" in "$AUD_PREFIX"?*) ;; *) KEEP_AUD="" ;; esac  # only a narrowing of this project's audience
fi
AUD_ENV=""  # a strategic-merge patch: env entries merge by name, so the manifest's order and the rest stay
[ -n "$KEEP_AUD" ] && AUD_ENV="
                  - {name: ATTNLAB_IAP_AUDIENCE, value: $(yaml_str "$KEEP_AUD")}"
cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: Deployment, name: attnlab}
    patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: attnlab}
      spec:
        ${KEEP_UI:+replicas: $KEEP_UI}
        template:
          spec:
            containers:
              - name: attnlab
                env:
                  - {name: ATTNLAB_CLASS_SHAPES, value: $(yaml_str "$KEEP_SHAPES")}$AUD_ENV
YAML
echo "UI replicas: ${KEEP_UI:-as in the manifest}; class shapes: '${KEEP_SHAPES}'${KEEP_AUD:+; IAP audience kept: $KEEP_AUD}"
if [ "$DOOR" = iap ] && [ -z "${IAP_CLIENT_ID:-}" ] && [ -n "$(kubectl -n attnlab get secret attnlab-iap -o name 2>/dev/null || true)" ]; then
  echo "OAuth client: the one stored by an earlier run (Secret attnlab-iap)"
  cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: BackendConfig, name: attnlab}
    patch: |-
      - {op: add, path: /spec/iap/oauthclientCredentials, value: {secretName: attnlab-iap}}
YAML
fi
# KubeRay changes no running pod when its RayCluster changes, unless spec.upgradeStrategy says Recreate (KubeRay
# 1.6 and newer; GKE's add-on runs v1.2-v1.5 on GKE 1.31-1.35, whose CRD refuses the field). The overlay adds it
# where the CRD has it; a new image makes the Ray cluster again below, on any KubeRay, so that the wait sees the
# new pods and not the old cluster's.
UPGRADE=$(kubectl get crd rayclusters.ray.io -o jsonpath='{.spec.versions[?(@.name=="v1")].schema.openAPIV3Schema.properties.spec.properties.upgradeStrategy.type}' 2>/dev/null || true)
if [ -n "$UPGRADE" ]; then
  cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: RayCluster, name: attnlab}
    patch: |-
      - {op: add, path: /spec/upgradeStrategy, value: {type: Recreate}}
YAML
else
  echo "This cluster's KubeRay has no spec.upgradeStrategy (older than 1.6): a new image makes the Ray cluster again" >&2
fi
# The GPU workers: GPUS when given; else, on a re-run, as many as run now (0 after the nightly stop): a re-run to
# change a setting starts no GPU (an H200 node bills about $85/h until the night's stop). maxReplicas follows:
# KubeRay holds replicas to it (GetWorkerGroupDesiredReplicas), and it is not in the hash that recreates pods.
LIVE_GPUS=$(kubectl -n attnlab get raycluster attnlab -o jsonpath='{.spec.workerGroupSpecs[0].replicas}' 2>/dev/null || true)
case "$LIVE_GPUS" in *[!0-9]* | "") LIVE_GPUS="" ;; esac
if [ -z "$GPUS_SET" ] && [ -n "$LIVE_GPUS" ]; then
  GPUS=$LIVE_GPUS
  echo "GPU workers: $GPUS, as the cluster runs now (GPUS=N to change it; the class-day runbook's step 1 starts them)"
else
  echo "GPU workers: $GPUS"
fi
cat >> deploy/k8s-local/kustomization.yaml <<YAML
  - target: {kind: RayCluster, name: attnlab}
    patch: |-
      - {op: replace, path: /spec/workerGroupSpecs/0/replicas, value: $GPUS}
      - {op: replace, path: /spec/workerGroupSpecs/0/maxReplicas, value: $((GPUS > 8 ? GPUS : 8))}
YAML
RUNNING=$(kubectl -n attnlab get raycluster attnlab -o jsonpath='{.spec.headGroupSpec.template.spec.containers[0].image}' 2>/dev/null || true)
if [ -n "$RUNNING" ] && [ "$RUNNING" != "$IMAGE_NAME:$TAG" ]; then
  echo "New image ($RUNNING -> $IMAGE_NAME:$TAG): the Ray cluster is made again (the pages have no GPU for a few minutes)"
  kubectl -n attnlab delete raycluster attnlab --wait=true --timeout=10m
fi
kubectl apply -k deploy/k8s-local
if [ "$GPUS" -gt 0 ]; then
  # The worker pods themselves, Ready: on any KubeRay (status.readyWorkerReplicas came in 1.2, and .status.state
  # says `ready` once and never takes it back, so after the nightly stop it says so with no GPU pod there)
  workers_ready || {
    echo "Fewer than $GPUS GPU worker pods Ready after 30 minutes (kubectl -n attnlab get pods; events: describe)" >&2
    kubectl -n attnlab logs -l ray.io/group=gpu -c gpu-check --tail=30 || true
    exit 1
  }
fi
kubectl -n attnlab rollout status deployment/attnlab --timeout=15m || {
  kubectl -n attnlab logs deployment/attnlab --tail=30 || true
  exit 1
}
if [ "$GPUS" -gt 0 ]; then
  kubectl -n attnlab exec "$(kubectl -n attnlab get pod -l ray.io/group=gpu -o name | head -1)" -c ray-worker -- \
    nvidia-smi --query-gpu=name,driver_version --format=csv
else
  echo "No GPU worker runs (0): the pages say the GPUs are off; the class-day runbook's step 1 starts them"
fi

step "5/5 The door: DNS, then the certificate (set up the day before class, never on the day)"
if [ "${DNS_WAIT:-1}" != 0 ]; then  # DNS_WAIT=0 skips the wait
  for i in $(seq 1 60); do
    resolve "$DOMAIN" | grep -qw "$IP" && break
    echo "waiting for $DOMAIN to resolve to $IP (minute $i of 60; set the A record at your DNS provider)"
    sleep 60
  done
  resolve "$DOMAIN" | grep -qw "$IP" || echo "$DOMAIN does not resolve to $IP yet: the certificate cannot start" >&2
fi
echo "The certificate turns Active up to an hour after DNS resolves:"
echo "  kubectl -n attnlab get managedcertificate attnlab-cert"
echo "Then open https://$DOMAIN/ (learners sign in with a Google account of the class group)."
echo "The GPU workers go to 0 every night at '$GPUS_OFF_AT' ($GPUS_OFF_TZ; GPUS_OFF_TZ=... to change it), and the"
echo "autoscaler then removes the GPU nodes; class day brings them up again (deploy/README.md, 'Class day')."
echo "To remove everything: bash deploy/teardown.sh"
