#!/usr/bin/env bash
# Back to nothing, in one command, and a list of anything left that still costs money (NOT RUN
# in CI or by the authors' tooling: it needs the Google Cloud project; tests/test_deploy.py runs
# it against stand-in gcloud/kubectl/terraform commands to check the order). Guide: deploy/README.md.
#
#   bash deploy/teardown.sh            # reads project/zone/cluster from the Terraform state
#   PROJECT_ID=p ZONE=z CLUSTER=c bash deploy/teardown.sh   # if you set things up by hand
#
# Order matters: the Ingress (and any persistent disk a claim made: the lab makes none today, an older version
# did) are cloud resources that GKE controllers create and delete; deleting the cluster first would orphan the
# load balancer and a disk (both bill).
# Exit status: 0 when nothing that bills is left, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

TF=(terraform -chdir=deploy/terraform)
# a checkout with the state but without .terraform/ (a fresh clone, the state copied in): output and destroy need init
if [ -f deploy/terraform/terraform.tfstate ]; then "${TF[@]}" init -input=false >/dev/null || true; fi
tf_out() { "${TF[@]}" output -raw "$1" 2>/dev/null; }
PROJECT=${PROJECT_ID:-$(tf_out project_id)}
ZONE=${ZONE:-$(tf_out zone)}
CLUSTER=${CLUSTER:-$(tf_out cluster)}
: "${PROJECT:?no PROJECT_ID and no Terraform state}" "${ZONE:?set ZONE}" "${CLUSTER:?set CLUSTER}"
G=(--project="$PROJECT" --quiet)
step() { printf '\n== %s\n' "$*"; }

step "1/4 The app, its load balancer (forwarding rules, certificate) and any disk a claim left"
if gcloud container clusters describe "$CLUSTER" --location="$ZONE" "${G[@]}" >/dev/null 2>&1; then
  gcloud container clusters get-credentials "$CLUSTER" --location="$ZONE" --project="$PROJECT"
  kubectl -n attnlab delete ingress attnlab --ignore-not-found --wait=true --timeout=15m
  kubectl delete namespace attnlab --ignore-not-found --wait=true --timeout=15m
  # A claim's disk goes when its PersistentVolume does (reclaim policy Delete): wait for any (none today).
  for _ in $(seq 60); do
    pv=$(kubectl get pv -o jsonpath='{range .items[?(@.spec.claimRef.namespace=="attnlab")]}{.metadata.name}{"\n"}{end}')
    [ -z "$pv" ] && break
    echo "waiting for the cache disk to go: $pv"
    sleep 5
  done
else
  echo "no cluster $CLUSTER in $ZONE"
fi

step "2/4 Cluster, node pools, static IP, image repository, build bucket, service account, network"
if "${TF[@]}" state list >/dev/null 2>&1; then
  "${TF[@]}" destroy -input=false -auto-approve
else  # set up by hand (the guide's manual path)
  gcloud container clusters delete "$CLUSTER" --location="$ZONE" "${G[@]}" || true
  gcloud compute addresses delete attnlab-ip --global "${G[@]}" || true
  gcloud artifacts repositories delete attnlab --location="${REGION:-us-central1}" "${G[@]}" || true
  gcloud compute security-policies delete attnlab-campus "${G[@]}" || true  # DOOR=campus's Cloud Armor policy
  gcloud storage rm --recursive "gs://${PROJECT}-${CLUSTER}-build" "${G[@]}" || true
fi

step "3/4 Cloud Build's default bucket: only if the lab made it (labelled attnlab=setup)"
# setup.sh stages its source in the lab's own bucket (Terraform removes it), so a gs://PROJECT_cloudbuild
# bucket is someone else's unless it carries the lab's label: never delete another tool's builds
DEFAULT_BUCKET="gs://${PROJECT}_cloudbuild"
if gcloud storage buckets describe "$DEFAULT_BUCKET" "${G[@]}" >/dev/null 2>&1; then
  if [ "$(gcloud storage buckets describe "$DEFAULT_BUCKET" "${G[@]}" --format='value(labels.attnlab)')" = setup ]; then
    gcloud storage rm --recursive "$DEFAULT_BUCKET" "${G[@]}"
  else
    echo "left alone: $DEFAULT_BUCKET is not labelled attnlab=setup, so the lab did not make it"
  fi
fi

step "4/4 What still costs money in $PROJECT"
left=0
check() {  # check "what" gcloud args...: print and count anything listed
  local what=$1 found
  shift
  found=$(gcloud "$@" --project="$PROJECT" --format='value(name)' 2>/dev/null)
  if [ -n "$found" ]; then
    printf 'STILL THERE (%s):\n%s\n' "$what" "$found"
    left=1
  else
    echo "none: $what"
  fi
}
check "GKE clusters (and their node pools)" container clusters list
for c in $(gcloud container clusters list --project="$PROJECT" --format='value(name)' 2>/dev/null); do
  check "node pools of $c" container node-pools list --cluster="$c" --location="$ZONE"
done
check "VM instances" compute instances list
check "disks" compute disks list
check "reserved addresses" compute addresses list
check "forwarding rules" compute forwarding-rules list
check "Artifact Registry repositories" artifacts repositories list
check "storage buckets" storage buckets list
check "Cloud Armor policies" compute security-policies list
if [ "$left" = 0 ]; then
  echo "Nothing that bills is left."
else
  echo "Some resources above still exist and may bill: delete them, or check that they are not AttnLab's."
fi
exit "$left"
