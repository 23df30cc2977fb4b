#!/usr/bin/env bash
# Stops every process cluster-up.sh started in DIR and removes DIR. Idempotent.
set -uo pipefail
dir=${CAPI_CLUSTER_DIR:-${TMPDIR:-/tmp}/capi-provider-operator-cluster-$(id -u)}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -d "$dir" ]] || exit 0
pids=()
for f in "$dir"/*.pid; do
  [[ -f "$f" ]] || continue
  [[ "$(basename "$f")" == reaper.pid ]] && continue
  pid=$(cat "$f")
  # Each component leads its own session (setsid): signal the whole group.
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  pids+=("$pid")
done
for _ in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [[ $alive -eq 0 ]] && break
  sleep 0.2
done
for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
rm -rf "$dir"
echo "cluster-down: stopped and removed $dir" >&2
