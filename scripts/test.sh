#!/usr/bin/env bash
# Runs the checks, then the test suite: ruff (lint), mypy (types), pytest (unit + integration +
# fidelity). Extra arguments go to pytest. Every step runs even when an earlier one fails, so
# one run shows every problem; the script fails when any step failed. pytest's exit code 5 (no
# test collected) counts as a failure, so an empty run never passes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$("$repo/scripts/bootstrap.sh")" || exit 1
cd "$repo"
status=0

echo "test.sh: ruff check (lint; settings in pyproject.toml [tool.ruff])"
"$venv/bin/python" -m ruff check . || { echo "test.sh: ruff found problems" >&2; status=1; }

echo "test.sh: mypy (types; settings in pyproject.toml [tool.mypy])"
"$venv/bin/python" -m mypy || { echo "test.sh: mypy found problems" >&2; status=1; }

echo "test.sh: pytest $*"
"$venv/bin/python" -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; failing" >&2
  status=1
elif [ "$rc" -ne 0 ]; then
  status="$rc"
fi
exit "$status"
