#!/usr/bin/env bash
# Starts the process node (crates/process-node) for the cluster in DIR; called by cluster-up.sh.
#
#   process-node-up.sh DIR IMAGES_FILE KUBECTL
#
# Picks a free /24 in 10.213.0.0/16 and a bridge name unique to DIR, starts the agent like the
# other components (DIR/process-node.pid, DIR/logs/process-node.log, state in DIR/process-node),
# waits until its Node is Ready and appends PROCESS_NODE* to DIR/ports.env. Needs root.
set -euo pipefail
dir=${1:?usage: process-node-up.sh DIR IMAGES_FILE KUBECTL}
images=$(realpath "${2:?images file}")
kubectl=${3:?kubectl}
log() { echo "process-node-up: $*" >&2; }
[[ -f "$images" ]] || { log "images file $images not found"; exit 1; }
bin=${CAPI_PROCESS_NODE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/capi-provider-operator/target}/debug/capi-process-node}
[[ -x "$bin" ]] || bin=$HOME/.cache/capi-provider-operator/target/debug/capi-process-node
[[ -x "$bin" ]] || { log "no agent binary at $bin: run 'make process-node'"; exit 1; }
name=process-node
hash=$(printf '%s' "$(realpath -m "$dir")" | sha256sum | cut -c1-8)
bridge="cpn$hash"
state="$dir/process-node"
mkdir -p "$state"

# Under a host-wide lock: choose a /24 no interface or route uses and claim it on the bridge,
# so concurrent clusters never pick the same one.
# shellcheck source=subnet.sh
source "$(dirname "$0")/subnet.sh"
exec 9>"$SUBNET_LOCK"
flock 9
if ! cidr=$(ip -4 -o addr show dev "$bridge" 2>/dev/null | awk '{print $4}' | grep -m1 .); then
  i=$(free_subnet "$hash")
  cidr="10.213.$i.1/24"
  ip link add "$bridge" type bridge
  ip addr add "$cidr" dev "$bridge"
  ip link set "$bridge" up
fi
flock -u 9
pod_cidr="${cidr%.*/24}.0/24"

# shellcheck disable=SC2086 # CAPI_PROCESS_NODE_ARGS is a list of flags
setsid "$bin" --kubeconfig "$dir/kubeconfig" --node-name "$name" --state-dir "$state" \
  --images "$images" --pod-cidr "$pod_cidr" --bridge "$bridge" ${CAPI_PROCESS_NODE_ARGS:-} \
  >"$dir/logs/process-node.log" 2>&1 </dev/null &
echo $! >"$dir/process-node.pid"

for i in $(seq 1 240); do
  ready=$("$kubectl" --kubeconfig "$dir/kubeconfig" get node "$name" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}/{.spec.taints[*].key}' 2>/dev/null || true)
  if [[ "$ready" == True/* && "$ready" != *not-ready* ]]; then break; fi
  if ! kill -0 "$(cat "$dir/process-node.pid")" 2>/dev/null; then
    log "the process node exited; last log lines:"; tail -20 "$dir/logs/process-node.log" >&2; exit 1
  fi
  [[ $i -eq 240 ]] && { log "node $name never became Ready"; tail -20 "$dir/logs/process-node.log" >&2; exit 1; }
  sleep 0.25
done
cat >>"$dir/ports.env" <<ENV
PROCESS_NODE=$name
PROCESS_NODE_STATE_DIR=$state
PROCESS_NODE_BRIDGE=$bridge
PROCESS_NODE_POD_CIDR=$pod_cidr
ENV
log "node $name is Ready (pods in $pod_cidr on $bridge; logs in $state/logs)"
