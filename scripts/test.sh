#!/usr/bin/env bash
# Runs the test suite (unit + integration + fidelity). Extra arguments go to pytest.
# Exits non-zero when no test ran (pytest's exit code 5), so an empty run never passes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$("$repo/scripts/bootstrap.sh")" || exit 1
cd "$repo"
"$venv/bin/python" -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
