#!/usr/bin/env bash
# Rotates the bearer token of a running graphfeed (docs/DEPLOY.md, "Authentication") with no
# restart and no failed call. Every pod mounts the Secret graphfeed-auth: servers accept every
# line of `tokens`, clients send the first, and both re-read the file when the kubelet updates it.
#   1. tokens = "NEW\nOLD": clients switch to NEW as their kubelet refreshes the volume, while
#      servers that have not refreshed yet still take OLD, and those that have take both;
#   2. after --settle seconds (the kubelet's sync period plus its Secret cache TTL: about a
#      minute by default), tokens = "NEW": OLD is refused from then on.
# Usage: k8s/tools/rotate-token.sh [NAMESPACE] [--settle SECONDS]   (default graphfeed, 180)
set -euo pipefail
ns="graphfeed"
settle=180
while [ $# -gt 0 ]; do
  case "$1" in
    --settle) settle="${2:?--settle needs seconds}"; shift ;;
    -*) echo "rotate-token.sh: unknown option $1" >&2; exit 2 ;;
    *) ns="$1" ;;
  esac
  shift
done
log() { echo "[rotate-token.sh] $*" >&2; }
current="$(kubectl get secret graphfeed-auth -n "$ns" -o jsonpath='{.data.tokens}' | base64 -d | head -n 1)"
[ -n "$current" ] || { echo "rotate-token.sh: Secret graphfeed-auth in $ns holds no token" >&2; exit 1; }
new="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
put() {
  kubectl create secret generic graphfeed-auth -n "$ns" --from-literal=tokens="$1" --dry-run=client -o yaml |
    kubectl label --local -f - app.kubernetes.io/part-of=graphfeed app.kubernetes.io/name=graphfeed -o yaml |
    kubectl apply -f - >/dev/null
}
put "$new
$current"
log "step 1: clients send the new token, servers accept both; waiting ${settle}s for every pod to see it"
sleep "$settle"
put "$new"
log "step 2: only the new token is accepted"
