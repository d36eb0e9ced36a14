#!/usr/bin/env bash
# Creates (once) the Python environment graphfeed needs and prints its path on stdout.
#
# The venv lives outside the clone, keyed by the hash of requirements.lock, so a fresh
# clone on a machine that already has it starts in seconds, and a fresh machine builds it
# from PyPI (about 3 GB, torch 2.2.1 is a CUDA build that runs on the CPU).
# Override the location with GRAPHFEED_VENV=/path.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${GRAPHFEED_PYTHON:-python3.11}"
command -v "$py" >/dev/null || py=python3
key="$(cat "$repo/requirements.lock" | sha256sum | cut -c1-12)"
venv="${GRAPHFEED_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/graphfeed/venv-$key}"
log() { echo "[bootstrap] $*" >&2; }

if [ ! -f "$venv/.graphfeed-deps-ok" ]; then
  log "creating $venv (first run on this machine: downloads ~3 GB of wheels)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade "pip>=24" >&2
  # /etc/xdg/pip may cap torch; torch==2.2.1 is under any such cap.
  "$venv/bin/python" -m pip install -q -r "$repo/requirements.lock" >&2
  # Carries the bundled Cora and LastFM parquet files; its client deps are not needed.
  "$venv/bin/python" -m pip install -q --no-deps "graphdatascience==2.2" >&2
  touch "$venv/.graphfeed-deps-ok"
fi

# Editable install of this checkout; redone when the venv served another clone or the
# package layout in pyproject.toml changed.
stamp="$repo $(sha256sum "$repo/pyproject.toml" | cut -c1-12)"
if [ "$(cat "$venv/.graphfeed-src" 2>/dev/null)" != "$stamp" ]; then
  log "installing graphfeed from $repo (editable)"
  "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$repo" >&2
  echo "$stamp" > "$venv/.graphfeed-src"
fi
echo "$venv"
