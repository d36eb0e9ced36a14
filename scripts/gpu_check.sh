#!/usr/bin/env bash
# The GPU checks in one command, for a lent GPU machine that has torch, CuPy and NumPy but not
# the project's other dependencies. Those travel as wheels in .whl/ (git-ignored: add /.whl/ to
# .git/info/exclude), fetched here for the machine's Python (3.12) at requirements.lock's versions:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl grpcio==1.85.1 protobuf==6.33.6 grpcio-health-checking==1.81.1 grpcio-reflection==1.81.1 \
#     pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 rocksdict==0.3.29 \
#     pydantic-settings==2.16.3 python-dotenv==1.2.4
# Without them the loader's and the TGN job's on-device tests are skipped and the rest runs.
# The TGN step trains on the temporal graphs in .whl/data (the machine cannot read the bundled
# wheels): for d in collegemsg lastfm; do graphfeed ingest --source $d --out .whl/data/$d
# --num-partitions 1 --method random; done
#   scripts/gpu_check.sh OUT_DIR [TEST_S] [BENCH_S] [TGN_S]
# Writes OUT_DIR/{tests.log,bench.log,tgn.log} and the benches' JSON/markdown under OUT_DIR/gpu;
# each step has its own time limit (0 skips it), so one slow step still leaves the others' output.
set -uo pipefail
out="${1:?OUT_DIR}"; test_s="${2:-180}"; bench_s="${3:-240}"; tgn_s="${4:-0}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
mkdir -p "$out/gpu"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gf-site .whl/*.whl \
    && export PYTHONPATH=/tmp/gf-site
fi
export PYTHONPATH="services:trainer:gpu_kernels:bench:.${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi -L; python3 -V; python3 -c "import numpy, cupy, torch; print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__)"; } 2>&1 | tee "$out/tests.log"
start=$(date +%s)
timeout "$test_s" python3 -m pytest -q --noconftest -p no:cacheprovider -rs --durations=10 tests/gpu 2>&1 | tee -a "$out/tests.log"
echo "tests rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/tests.log"
if [ "$bench_s" -gt 0 ]; then
  start=$(date +%s)
  timeout "$bench_s" python3 bench/gpu.py --part gpu --out "$out/gpu" 2>&1 | tee "$out/bench.log"
  echo "bench rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/bench.log"
fi
if [ "$tgn_s" -gt 0 ] && [ -d .whl/data ]; then  # the GPU's seeds first: a timeout cuts the CPU's
  start=$(date +%s)
  data=(); for d in .whl/data/*/; do data+=(--dataset "${d%/}"); done
  timeout "$tgn_s" bash -c 'python3 -m graphfeed.bench.tgn_device "$@" --device cuda --seeds 0 1 2 --out "$0/gpu/tgn_cuda.json" \
    && python3 -m graphfeed.bench.tgn_device "$@" --device cpu --seeds 0 --out "$0/gpu/tgn_cpu.json"' "$out" "${data[@]}" 2>&1 | tee "$out/tgn.log"
  echo "tgn rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/tgn.log"
fi
