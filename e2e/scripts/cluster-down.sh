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
# The real node (real-node-up.sh): killing the first process of its PID namespace ends every
# process of the node (components, shims, containers); its mounts and the pods' network
# namespaces go with its mount namespace. Its cgroup tree and network namespace go last.
real_ns=$(sed -n 's/^REAL_NODE_NETNS=//p' "$dir/ports.env" 2>/dev/null)
[[ -n "$real_ns" ]] || real_ns="crn$(printf '%s' "$(realpath -m "$dir")" | sha256sum | cut -c1-8)"
real_node_procs() {
  ip netns pids "$real_ns" 2>/dev/null
  find /sys/fs/cgroup -mindepth 2 -path "*/$real_ns/*" -name cgroup.procs -exec cat {} + 2>/dev/null
}
if [[ -f "$dir/real-node.pid" ]]; then
  pid=$(cat "$dir/real-node.pid")
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  rm -f "$dir/real-node.pid"
fi
for _ in $(seq 1 100); do
  left=$(real_node_procs)
  [[ -z "$left" ]] && break
  # shellcheck disable=SC2086 # one pid per word
  kill -KILL $left 2>/dev/null
  sleep 0.1
done
# The reaper of --watch-pid, unless this is it (it execs this script): nothing left to reap.
if [[ -f "$dir/reaper.pid" && "$(cat "$dir/reaper.pid")" != "$$" ]]; then
  kill -TERM -- "-$(cat "$dir/reaper.pid")" 2>/dev/null
fi
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
# Only now the real node's network namespace (its bridge, veths and kube-proxy's chains) and the
# host end of its veth: the API server, stopping above, still got the node's connections reset
# instead of waiting a minute on peers gone silent. Then its cgroups, children first.
ip netns del "$real_ns" 2>/dev/null
ip link del "$real_ns" 2>/dev/null
find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -name "$real_ns" 2>/dev/null | while read -r root; do
  find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
done
rm -rf "$dir"
echo "cluster-down: stopped and removed $dir" >&2
