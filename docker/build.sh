#!/usr/bin/env bash
# Builds the graphfeed image with podman, from a Debian base image made here with debootstrap
# (no registry image is pulled), then runs the image's health check: `graphfeed ingest` of
# Cora into a host directory, `graphfeed serve graph-store` on it in a container with a
# read-only root filesystem, no capabilities and a non-root user, the gRPC health service
# asked from inside the container until SERVING, and a graceful SIGTERM (exit status 0).
#
# Usage: docker/build.sh [--no-check]
# Environment: GRAPHFEED_IMAGE (default localhost/graphfeed:0.1.0),
#   GRAPHFEED_BASE_IMAGE (default localhost/graphfeed-base:bookworm, built once),
#   DEBIAN_MIRROR (default: the first Debian URI in this machine's apt sources),
#   GRAPHFEED_BUILD_CA (a CA bundle for pip during the build; default: this machine's).
# Needs root (debootstrap), podman, debootstrap: GRAPHFEED_CONTAINER_TESTS=1 scripts/install_ci_tools.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${GRAPHFEED_IMAGE:-localhost/graphfeed:0.1.0}"
base="${GRAPHFEED_BASE_IMAGE:-localhost/graphfeed-base:bookworm}"
suite=bookworm
check=1
[ "${1:-}" = "--no-check" ] && check=0
log() { echo "[docker/build.sh] $*" >&2; }
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { log "$tool not found: run GRAPHFEED_CONTAINER_TESTS=1 scripts/install_ci_tools.sh"; exit 1; }
done

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1 || true)"
  [ -n "$uri" ] || uri="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v security | head -n1 || true)"
  [ -n "$uri" ] || { log "no Debian mirror in the apt sources: set DEBIAN_MIRROR"; exit 1; }
  echo "$uri"
}

# Explicit limits at or below this shell's hard limits: podman's defaults are higher, which a
# container runtime without CAP_SYS_RESOURCE (a sandbox, a CI runner) may not set. runc, when
# installed, also copes with hybrid cgroup v1/v2 hosts, where crun refuses to start.
nofile="$(ulimit -Hn)"
[ "$nofile" = "unlimited" ] && nofile=1048576
podman=(podman)
command -v runc >/dev/null && podman+=(--runtime runc)
limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=4096:4096")

# --- 1. base image: Debian minbase + Python 3.11 (the version graphfeed's lock is made for) ---
if ! "${podman[@]}" image exists "$base"; then
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  log "debootstrap $suite into $rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$suite" "$rootfs" "$(debian_mirror)" >&2
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
  tar -C "$rootfs" -c . | "${podman[@]}" import --change 'CMD ["/bin/bash"]' - "$base" >&2
  rm -rf "$rootfs"
  trap - EXIT
fi

# --- 2. the image ---
ca="${GRAPHFEED_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}"
volumes=()
[ -f "$ca" ] && volumes+=(--volume "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
log "podman build -t $image"
start=$(date +%s)
"${podman[@]}" build --format oci -f "$repo/docker/Dockerfile" --build-arg "BASE_IMAGE=$base" \
  "${limits[@]}" "${volumes[@]}" -t "$image" "$repo" >&2
log "built $image in $(( $(date +%s) - start ))s, $("${podman[@]}" image inspect "$image" --format '{{.Size}}') bytes"
[ "$check" = 1 ] || exit 0

# --- 3. health check of a graph-store container ---
work="$(mktemp -d)"
chmod 0777 "$work"
ctr="graphfeed-check-$$"
cleanup() { "${podman[@]}" rm -f "$ctr" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
run=("${podman[@]}" run "${limits[@]}" --read-only --tmpfs /tmp --user 10001:10001 --cap-drop ALL
     --security-opt no-new-privileges --network none)
"${run[@]}" --rm -v "$work:/data" "$image" ingest --source cora --out /data/graph --num-partitions 2 --no-progress >&2
# The data is mounted read-write: rocksdict rewrites its config file even when it opens read-only.
"${run[@]}" -d --name "$ctr" -v "$work:/data" "$image" \
  serve graph-store --part-dir /data/graph/part-00000 --host 127.0.0.1 --port 50051 --metrics-port 8080 >/dev/null
probe='import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel("127.0.0.1:50051"))
try:
    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
except grpc.RpcError:
    sys.exit(1)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
sys.exit(0 if status == health_pb2.HealthCheckResponse.SERVING else 1)'
for _ in $(seq 1 60); do
  if status="$("${podman[@]}" exec "$ctr" python -c "$probe" 2>/dev/null)"; then
    log "health check: $status"
    "${podman[@]}" stop --time 30 "$ctr" >/dev/null
    code="$("${podman[@]}" inspect "$ctr" --format '{{.State.ExitCode}}')"
    log "graph-store stopped by SIGTERM with exit status $code"
    [ "$code" = "0" ] || { "${podman[@]}" logs "$ctr" >&2; exit 1; }
    exit 0
  fi
  [ "$("${podman[@]}" inspect "$ctr" --format '{{.State.Running}}')" = "true" ] || { "${podman[@]}" logs "$ctr" >&2; log "graph-store exited"; exit 1; }
  sleep 1
done
"${podman[@]}" logs "$ctr" >&2
log "graph-store never reported SERVING"
exit 1
