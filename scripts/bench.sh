#!/usr/bin/env bash
# Run a benchmark by name; its last line of output is one JSON object.
#   scripts/bench.sh core    pod worker lifecycles, update_pod rate, RSS per worker (fake runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-}"
case "$name" in
  core)
    cargo bench --bench core --quiet 2>/dev/null | tail -n 2
    ;;
  *)
    echo "usage: scripts/bench.sh core" >&2
    exit 2
    ;;
esac
