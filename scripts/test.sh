#!/usr/bin/env bash
# Installs what the tests need, runs the checks, then the test suite: the project venv
# (scripts/bootstrap.sh), the deployment tools the deploy tests run (scripts/install_ci_tools.sh:
# promtool, kubectl, kubernetes-validate, checkov, hadolint, grpcurl, buf, tsc; about a second
# once installed), then ruff (lint), mypy (types), pytest (unit + integration + deploy). Extra arguments go to pytest. Every step runs even when an earlier one fails, so
# one run shows every problem; the script fails when any step failed. pytest's exit code 5 (no
# test collected) counts as a failure, so an empty run never passes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$("$repo/scripts/bootstrap.sh")" || exit 1
"$repo/scripts/install_ci_tools.sh" >/dev/null || { echo "test.sh: installing the deployment tools failed" >&2; exit 1; }
cd "$repo"
status=0

echo "test.sh: ruff check (lint; settings in pyproject.toml [tool.ruff])"
"$venv/bin/python" -m ruff check . || { echo "test.sh: ruff found problems" >&2; status=1; }

echo "test.sh: ruff format --check (the formatter's layout at 120 columns; no fmt: skip)"
"$venv/bin/python" -m ruff format --check . || { echo "test.sh: ruff format would change files (run: ruff format .)" >&2; status=1; }

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
