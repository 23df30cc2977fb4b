#!/usr/bin/env bash
# Starts a real local Kubernetes control plane in the background: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (one fake node whose pods become Running and
# Ready). Everything listens on 127.0.0.1 only, on free ports; data lives in one directory.
#
#   cluster-up.sh [--dir DIR] [--watch-pid PID] [--real-node] [--audit]
#
# --dir           state directory (default: $CAPI_CLUSTER_DIR or /tmp/capi-provider-operator-cluster-$UID)
# --watch-pid     stop the cluster automatically once process PID exits (used by test binaries)
# --real-node     also start a real node (e2e/scripts/real-node-up.sh, needs root): containerd,
#                 runc, CNI, kubelet and kube-proxy in namespaces of their own, Node "real-node"
#                 (tainted capi-provider-operator.dev/real-node). The API server then also listens
#                 on the node's host address and serves the `kubernetes` Service from it.
# --audit         the API server writes an audit log of every write request (verb, user agent,
#                 resource; no bodies) to DIR/logs/audit.log: e2e/bench/peer.py counts each
#                 client's writes from it.
#
# Idempotent: when a healthy cluster already runs in DIR it is reused. Prints the kubeconfig path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${CAPI_CLUSTER_DIR:-${TMPDIR:-/tmp}/capi-provider-operator-cluster-$(id -u)}
watch_pid=""
audit=false
real_node=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --watch-pid) watch_pid=$2; shift 2 ;;
    --real-node) real_node=true; shift ;;
    --audit) audit=true; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

log() { echo "cluster-up: $*" >&2; }

healthy() {
  [[ -f "$dir/kubeconfig" && -f "$dir/ports.env" ]] || return 1
  # A cluster without the real node asked for is started anew with it.
  if $real_node && ! grep -q '^REAL_NODE=' "$dir/ports.env"; then return 1; fi
  # shellcheck disable=SC1091
  source "$dir/ports.env"
  curl -fsS --max-time 2 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:${API_PORT}/readyz" >/dev/null 2>&1
}

if healthy; then
  log "reusing the running cluster in $dir"
  echo "$dir/kubeconfig"
  exit 0
fi
if [[ -d "$dir" ]]; then
  log "stale state in $dir: cleaning it up"
  "$here/cluster-down.sh" --dir "$dir" >&2 || true
fi

bindir=$("$here/build.sh")
mkdir -p "$dir"/{pki,logs,etcd}
cd "$dir"

# Free ports, chosen by the kernel and released just before use.
read -r ETCD_PORT ETCD_PEER_PORT API_PORT KWOK_PORT < <(python3 - <<'EOF'
import socket
socks = []
for _ in range(4):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
EOF
)
cat > ports.env <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
KWOK_PORT=$KWOK_PORT
EOF

"$here/make-certs.sh" "$dir/pki" >&2

# The real node's network comes first: the API server listens on its host address.
apiserver_net=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
if $real_node; then
  "$here/real-node-up.sh" net "$dir" || { "$here/cluster-down.sh" --dir "$dir" >&2 || true; exit 1; }
  # shellcheck disable=SC1091
  source ports.env
  # Pods reach it through the `kubernetes` Service (kube-proxy), whose EndpointSlice real-node-up.sh
  # writes (the lease reconciler would hold the API server's exit for a minute); kubectl logs/exec
  # go to the kubelet at the Node's InternalIP with the admin pair.
  apiserver_net=(--bind-address 0.0.0.0 --advertise-address "$REAL_NODE_HOST_IP" --endpoint-reconciler-type none
    --kubelet-preferred-address-types InternalIP
    --kubelet-client-certificate pki/admin.crt --kubelet-client-key pki/admin.key)
fi
audit_flags=()
if $audit; then
  # Writes only, at Metadata level: who (user agent) changed what, without the objects.
  printf '%s\n' "apiVersion: audit.k8s.io/v1" "kind: Policy" "omitStages: [RequestReceived]" "rules:" \
    "- level: Metadata" "  verbs: [create, update, patch, delete, deletecollection]" "- level: None" > audit-policy.yaml
  audit_flags=(--audit-policy-file audit-policy.yaml --audit-log-path "$dir/logs/audit.log"
               --audit-log-format json --audit-log-mode blocking)
fi

server="https://127.0.0.1:${API_PORT}"
cat > kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capi-local
  cluster:
    server: ${server}
    certificate-authority: ${dir}/pki/ca.crt
users:
- name: admin
  user:
    client-certificate: ${dir}/pki/admin.crt
    client-key: ${dir}/pki/admin.key
contexts:
- name: capi-local
  context: {cluster: capi-local, user: admin}
current-context: capi-local
EOF

start() { # name, command...
  local name=$1; shift
  setsid "$@" >"logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$name.pid"
}

start etcd "$bindir/etcd" --name local --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster "local=http://127.0.0.1:${ETCD_PEER_PORT}" --unsafe-no-fsync --quota-backend-bytes 4294967296 \
  --log-level warn

start kube-apiserver "$bindir/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
  "${apiserver_net[@]}" --secure-port "$API_PORT" \
  --tls-cert-file pki/apiserver.crt --tls-private-key-file pki/apiserver.key --cert-dir "$dir/pki" \
  --client-ca-file pki/ca.crt \
  --service-cluster-ip-range 10.0.0.0/24 \
  --service-account-issuer "$server" --service-account-key-file pki/sa.pub \
  --service-account-signing-key-file pki/sa.key \
  --authorization-mode RBAC --allow-privileged=true \
  --enable-aggregator-routing=true \
  --profiling=false "${audit_flags[@]}"

wait_ready() {
  local i
  for i in $(seq 1 240); do
    if curl -fsS --max-time 2 --cacert pki/ca.crt --cert pki/admin.crt --key pki/admin.key \
      "$server/readyz" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$(cat kube-apiserver.pid)" 2>/dev/null; then
      log "kube-apiserver exited; last log lines:"; tail -20 logs/kube-apiserver.log >&2; return 1
    fi
    sleep 0.25
  done
  log "kube-apiserver not ready after 60 s; last log lines:"; tail -20 logs/kube-apiserver.log >&2
  return 1
}
if ! wait_ready; then "$here/cluster-down.sh" --dir "$dir" >&2 || true; exit 1; fi

start kube-controller-manager "$bindir/kube-controller-manager" \
  --kubeconfig kubeconfig --authentication-kubeconfig kubeconfig --authorization-kubeconfig kubeconfig \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
  --root-ca-file pki/ca.crt --service-account-private-key-file pki/sa.key \
  --use-service-account-credentials=false --controllers '*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle' \
  --concurrent-deployment-syncs 10 --concurrent-replicaset-syncs 10

start kube-scheduler "$bindir/kube-scheduler" \
  --kubeconfig kubeconfig --authentication-kubeconfig kubeconfig --authorization-kubeconfig kubeconfig \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false

start kwok "$bindir/kwok" --kubeconfig kubeconfig \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:${KWOK_PORT}" --node-ip 127.0.0.1 --cidr 10.0.1.0/24 \
  --config "$here/kwok-stages.yaml"

ln -sf "$bindir/kubectl" kubectl
kubectl=("$bindir/kubectl" --kubeconfig kubeconfig)
"${kubectl[@]}" apply -f "$here/kwok-node.yaml" >&2

# The node is usable once kwok has marked it Ready.
for i in $(seq 1 120); do
  if "${kubectl[@]}" get node kwok-node-0 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; then
    break
  fi
  [[ $i -eq 120 ]] && { log "kwok node never became Ready"; tail -20 logs/kwok.log >&2; exit 1; }
  sleep 0.25
done
# Node admission taints a new node not-ready; the node lifecycle controller that would lift it is
# off (a fake node sends no heartbeats), so lift it here once kwok has marked the node Ready.
"${kubectl[@]}" taint node kwok-node-0 node.kubernetes.io/not-ready:NoSchedule- >&2 || true
# The default ServiceAccount must exist before pods can be admitted in "default".
for i in $(seq 1 120); do
  "${kubectl[@]}" get serviceaccount default -n default >/dev/null 2>&1 && break
  sleep 0.25
done

if $real_node; then
  "$here/real-node-up.sh" start "$dir" "$bindir/kubectl" || { "$here/cluster-down.sh" --dir "$dir" >&2 || true; exit 1; }
fi

if [[ -n "$watch_pid" ]]; then
  setsid bash -c "while kill -0 $watch_pid 2>/dev/null; do sleep 1; done; exec '$here/cluster-down.sh' --dir '$dir'" \
    >"logs/reaper.log" 2>&1 < /dev/null &
  echo $! > reaper.pid
fi

log "ready: kubectl --kubeconfig $dir/kubeconfig get nodes"
echo "$dir/kubeconfig"
