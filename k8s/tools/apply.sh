#!/usr/bin/env bash
# Applies an overlay after a change to k8s/values/values.yaml, or after switching overlays
# (docs/DEPLOY.md, "Changing values"). `kubectl apply -k` alone refuses some changes: a Job's
# pod template (image, trainers, partitions), a StatefulSet's volumeClaimTemplates (partition
# size or class) and a bound claim's class are immutable. This script applies, and re-creates
# exactly the objects the API server refused:
#   - a Job or PyTorchJob: deleted and created again (it runs again: a re-created ingest Job
#     re-ingests, a trainer Job resumes from its checkpoints);
#   - the graph-store StatefulSet: deleted with its partition claims (copies of graph-source
#     that each pod stages again) and pods, then created again;
#   - a shared claim (graph-source, trainer-checkpoints, graph-packs) only with
#     --recreate-volumes, since its data is lost: the workloads that mount it are deleted
#     first, then the claim.
# Workloads, Services and NetworkPolicies of graphfeed that the overlay no longer has (switching
# from gpu to gpu-pytorchjob, say) are deleted; claims never are. The first run also creates
# the Secret graphfeed-auth with a random bearer token (pods wait for it).
#
# Usage: k8s/tools/apply.sh OVERLAY_DIR [--recreate-volumes] [--wait SECONDS]
#   --wait S   when the ingest Job was (re)created, wait up to S seconds for it to complete and
#              then restart the graph-stores, which otherwise keep serving the old graph.
# kubectl's own settings (KUBECONFIG, context) apply.
set -euo pipefail
overlay="${1:?usage: k8s/tools/apply.sh OVERLAY_DIR [--recreate-volumes] [--wait SECONDS]}"
shift
recreate_volumes=0
wait_s=""
while [ $# -gt 0 ]; do
  case "$1" in
    --recreate-volumes) recreate_volumes=1 ;;
    --wait) wait_s="${2:?--wait needs seconds}"; shift ;;
    *) echo "apply.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "[apply.sh] $*" >&2; }

rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
kubectl kustomize "$overlay" >"$rendered"
ns="$(grep -m1 -E '^  namespace: ' "$rendered" | awk '{print $2}')"
[ -n "$ns" ] || { echo "apply.sh: no namespace in the rendered $overlay" >&2; exit 1; }

# What graphfeed has in the namespace that this overlay does not render: deleted.
kubectl apply --dry-run=client -f "$rendered" -o name | sort >"$rendered.names"
kinds="jobs.batch,statefulsets.apps,deployments.apps,services,networkpolicies.networking.k8s.io,horizontalpodautoscalers.autoscaling,poddisruptionbudgets.policy"
kubectl get crd pytorchjobs.kubeflow.org >/dev/null 2>&1 && kinds="$kinds,pytorchjobs.kubeflow.org"
if kubectl get namespace "$ns" >/dev/null 2>&1; then
  kubectl get "$kinds" -n "$ns" -l app.kubernetes.io/part-of=graphfeed -o name | sort >"$rendered.live"
  # `-o name` spells the group differently per command (job.batch/x both ways, but services are "service/x").
  # Only kinds the overlay renders: k8s/monitoring (no workloads) must not delete the workloads.
  sed 's|/.*||' "$rendered.names" | sort -u >"$rendered.kinds"
  for obj in $(comm -13 "$rendered.names" "$rendered.live"); do
    grep -qx "${obj%%/*}" "$rendered.kinds" || continue
    log "deleting $obj: not in $overlay"
    kubectl delete -n "$ns" "$obj" --wait=false
  done
fi
rm -f "$rendered.names" "$rendered.live" "$rendered.kinds"

refused() { # the objects of the last apply's errors, as kind/name
  grep -oE '(Job|StatefulSet|PersistentVolumeClaim|PyTorchJob)(\.[a-z.]+)? "[a-z0-9-]+" is invalid' "$1" |
    sed -E 's/^([A-Za-z]+)(\.[a-z.]+)? "([a-z0-9-]+)".*/\1 \3/' | sort -u
}
mounting() { # the workloads whose pods mount claim $1
  kubectl get jobs.batch,statefulsets.apps -n "$ns" -o \
    jsonpath='{range .items[*]}{.kind}/{.metadata.name}{" "}{.spec.template.spec.volumes[*].persistentVolumeClaim.claimName}{"\n"}{end}' |
    awk -v c="$1" '{for (i = 2; i <= NF; i++) if ($i == c) print $1}'
}

out="$(mktemp)"
ingest_created=0
# Nothing to do when the server already holds exactly these manifests (`kubectl diff`: a
# server-side dry run): say so, rather than kubectl's "configured" for the PodDisruptionBudgets,
# whose selector kubectl always sends (patch strategy "replace") though nothing changes.
if kubectl diff -f "$rendered" >/dev/null 2>&1; then
  echo "no change: the cluster already matches $overlay"
  skip_apply=1
else
  skip_apply=0
fi
for attempt in 1 2; do
  [ "$skip_apply" = 1 ] && break
  if kubectl apply -f "$rendered" >"$out" 2>&1; then
    cat "$out"
    grep -qE '^job.batch/ingest created' "$out" && ingest_created=1
    break
  fi
  grep -qE '^job.batch/ingest created' "$out" && ingest_created=1
  if [ "$attempt" = 2 ]; then
    cat "$out" >&2
    exit 1
  fi
  todo="$(refused "$out")"
  if [ -z "$todo" ]; then
    cat "$out" >&2
    exit 1
  fi
  while read -r kind name; do
    case "$kind" in
      Job | PyTorchJob)
        log "re-creating $kind/$name (its pod template changed)"
        kubectl delete -n "$ns" "$kind" "$name" --cascade=background --wait=false
        kubectl wait -n "$ns" --for=delete "$kind/$name" --timeout=120s >/dev/null 2>&1 || true
        ;;
      StatefulSet)
        log "re-creating StatefulSet/$name and its partition claims (copies, staged again)"
        kubectl delete -n "$ns" statefulset "$name" --cascade=background --wait=false
        kubectl delete -n "$ns" pod,pvc -l "app.kubernetes.io/component=$name" --wait=false
        kubectl wait -n "$ns" --for=delete pvc -l "app.kubernetes.io/component=$name" --timeout=300s
        ;;
      PersistentVolumeClaim)
        if [ "$recreate_volumes" != 1 ]; then
          echo "apply.sh: the claim $name cannot change in place (storage class, access mode, or a" \
            "smaller size). Its data is lost if it is re-created: run again with --recreate-volumes." >&2
          exit 1
        fi
        for w in $(mounting "$name"); do
          log "deleting $w (mounts $name)"
          kubectl delete -n "$ns" "$w" --cascade=foreground --wait=false
        done
        log "re-creating claim $name (its data is lost)"
        kubectl delete -n "$ns" pvc "$name" --wait=false
        kubectl wait -n "$ns" --for=delete "pvc/$name" --timeout=300s
        ;;
    esac
  done <<<"$todo"
done
rm -f "$out"

# The bearer token every graphfeed pod sends and accepts (docs/DEPLOY.md, "Authentication"):
# created once, random, never in the repository; k8s/tools/rotate-token.sh replaces it.
if ! kubectl get secret graphfeed-auth -n "$ns" >/dev/null 2>&1; then
  log "creating Secret/graphfeed-auth (a random bearer token)"
  token="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  kubectl create secret generic graphfeed-auth -n "$ns" --from-literal=tokens="$token"
  kubectl label secret graphfeed-auth -n "$ns" app.kubernetes.io/part-of=graphfeed app.kubernetes.io/name=graphfeed
fi

if [ "$ingest_created" = 1 ]; then
  if [ -n "$wait_s" ]; then
    log "waiting up to ${wait_s}s for the ingest Job, then restarting the graph-stores"
    kubectl wait -n "$ns" --for=condition=complete job/ingest --timeout="${wait_s}s"
    kubectl rollout restart -n "$ns" statefulset/graph-store
  else
    log "the ingest Job runs again: once it completes, restart the graph-stores so they stage the new graph:"
    log "  kubectl wait -n $ns --for=condition=complete job/ingest --timeout=24h && kubectl rollout restart -n $ns statefulset/graph-store"
  fi
fi
