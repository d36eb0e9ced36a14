#!/usr/bin/env bash
# The whole system on one machine: ingest Cora into 2 METIS partitions, start 2 graph-stores,
# a sampler and a loader on loopback, train GraphSAGE through RemoteDataLoader.
# Extra arguments go to `graphfeed demo` (see `graphfeed demo --help`).
set -euo pipefail
venv="$("$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh")"
exec "$venv/bin/graphfeed" demo "$@"
