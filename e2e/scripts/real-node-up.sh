#!/usr/bin/env bash
# The real node of the cluster in DIR: containerd (CRI, overlayfs) + runc + CNI bridge/host-local +
# kubelet + kube-proxy (iptables), all Kubernetes-built parts of v1.34.4; called by cluster-up.sh
# --real-node. Needs root.
#
#   real-node-up.sh net DIR       before the API server starts: claims a free 10.213.i.0/24 and
#                                 creates the node's network namespace; writes REAL_NODE_* to
#                                 DIR/ports.env (the API server listens on REAL_NODE_HOST_IP)
#   real-node-up.sh start DIR KUBECTL
#                                 starts the node (DIR/real-node.pid, logs in DIR/logs) and waits
#                                 until its Node is Ready
#
# Isolation, so that cluster-down.sh leaves nothing behind and clusters run side by side: the node's
# processes run in their own network namespace (its bridge, pod veths, iptables chains and sysctls
# stay in there; a veth pair joins it to the host), their own mount namespace (every mount, the
# pods' network namespaces, tmpfs over /run, /var/lib and /var/log for what containerd, kubelet
# and CNI write to fixed host paths, files of its own over the host-wide sysctls the kubelet
# would set) and their own PID namespace (killing its first process kills every shim and
# container), and the pods' cgroups live under one cgroup per node (crn<hash>).
#
# The /24: pods get 10.213.i.0/25 on the bridge cni0 (gateway .1; IPAM cni-pinned-ip.py: host-local's
# pool .2-.99, .100-.126 for addresses pods pin with cni.projectcalico.org/ipAddrs); the host end of the veth is
# .129, the node end .130 (the Node's InternalIP). The host routes the pods' /25 to the node, so
# the API server reaches the kubelet and pod IPs (webhooks) directly.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: real-node-up.sh net|start DIR [KUBECTL]}
dir=$(realpath -m "${2:?cluster directory}")
node="$dir/node"
hash=$(printf '%s' "$dir" | sha256sum | cut -c1-8)
ns="crn$hash"
name=real-node
log() { echo "real-node-up: $*" >&2; }

net() {
  # shellcheck source=subnet.sh
  source "$here/subnet.sh"
  exec 9>"$SUBNET_LOCK"
  flock 9
  local i
  i=$(free_subnet "$hash")
  ip netns add "$ns"
  ip link add "$ns" type veth peer name eth0 netns "$ns"
  ip addr add "10.213.$i.129/25" dev "$ns"
  ip link set "$ns" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.213.$i.130/25" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "10.213.$i.129"
  ip route add "10.213.$i.0/25" via "10.213.$i.130" dev "$ns"
  flock -u 9
  cat >>"$dir/ports.env" <<ENV
REAL_NODE=$name
REAL_NODE_NETNS=$ns
REAL_NODE_CGROUP=$ns
REAL_NODE_HOST_IP=10.213.$i.129
REAL_NODE_IP=10.213.$i.130
REAL_NODE_POD_CIDR=10.213.$i.0/25
ENV
}

# configs: the node's configuration files, all under DIR/node.
configs() {
  # shellcheck disable=SC1091
  source "$dir/ports.env"
  mkdir -p "$node"/{containerd,cni,ipam,kubelet,pod-logs,volume-plugins}
  cat >"$node/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: capi-local
  cluster:
    server: https://${REAL_NODE_HOST_IP}:${API_PORT}
    certificate-authority: $dir/pki/ca.crt
    tls-server-name: kubernetes
users:
- name: node
  user: {client-certificate: $dir/pki/admin.crt, client-key: $dir/pki/admin.key}
contexts:
- name: capi-local
  context: {cluster: capi-local, user: node}
current-context: capi-local
KC
  # restrict_oom_score_adj: sessions here lack CAP_SYS_RESOURCE, so runc cannot set the negative
  # oom_score_adj the sandbox asks for ("can't get final child's PID from pipe: EOF" without it).
  # netns_mounts_under_state_dir keeps the pods' network namespaces out of /run/netns.
  cat >"$node/containerd.toml" <<TOML
version = 2
root = "$node/containerd/root"
state = "$node/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$node/containerd.sock"
[ttrpc]
  address = "$node/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$node/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$node/cni-bin"
    conf_dir = "$node/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$node/certs.d"
TOML
  local p=${REAL_NODE_POD_CIDR%.0/25} plugin
  # Pinned pod addresses: the IPAM is cni-pinned-ip.py, host-local (pool .2-.99) plus the address
  # in .100-.126 a pod's cni.projectcalico.org/ipAddrs annotation asks for (containerd hands CNI no annotations, so it
  # reads the pod from the API server with the node's credentials, the extra ipam keys below).
  # containerd 1.6 takes one CNI bin directory: Debian's plugins and it, linked side by side.
  mkdir -p "$node/cni-bin"
  for plugin in /usr/lib/cni/*; do ln -sfn "$plugin" "$node/cni-bin/"; done
  ln -sfn "$here/cni-pinned-ip.py" "$node/cni-bin/capi-pinned-ip"
  cat >"$node/cni/10-bridge.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "$ns", "plugins": [{"type": "bridge", "bridge": "cni0",
  "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "capi-pinned-ip", "dataDir": "$node/ipam", "routes": [{"dst": "0.0.0.0/0"}],
    "ranges": [[{"subnet": "$REAL_NODE_POD_CIDR", "rangeStart": "$p.2", "rangeEnd": "$p.99", "gateway": "$p.1"}]],
    "pinnedRange": {"rangeStart": "$p.100", "rangeEnd": "$p.126"},
    "server": "https://${REAL_NODE_HOST_IP}:${API_PORT}", "serverName": "kubernetes", "ca": "$dir/pki/ca.crt",
    "cert": "$dir/pki/admin.crt", "key": "$dir/pki/admin.key"}}]}
CNI
  # cgroup v1 (this machine's hierarchy): kubelet 1.34 refuses it unless failCgroupV1 is false.
  # cgroupRoot: the node's pods live in the QoS tree (kubepods/…/pod<uid>) under one cgroup of
  # its own, crn<hash>, in every hierarchy, which teardown removes; enforceNodeAllocatable is
  # empty so the kubelet writes no limit on that tree itself.
  cat >"$node/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: true
cgroupRoot: /$ns
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://$node/containerd.sock
podLogsDir: $node/pod-logs
volumePluginDir: $node/volume-plugins
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
readOnlyPort: 0
clusterDomain: cluster.local
# The disk is the whole machine's: its fill level is not this node's to act on (disk-pressure
# eviction would evict the pods, image GC delete the imported images, at the usual 85 %).
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", nodefs.inodesFree: "0%",
  imagefs.available: "0%", imagefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerWithTaints: [{key: capi-provider-operator.dev/real-node, value: "true", effect: NoSchedule}]
YAML
  # Conntrack and localhost node ports left alone: no host-wide sysctl is written.
  cat >"$node/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $name
clientConnection: {kubeconfig: $node/kubeconfig}
clusterCIDR: $REAL_NODE_POD_CIDR
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {masqueradeAll: true, localhostNodePorts: false}
YAML
}

# images BINDIR: the archives of the node's own images (the sandbox's pause, the test probe) for
# `ctr images import`: docker archives crane writes (oci.sh), which containerd imports under their
# repository tag; written again whenever their binary or oci.sh is newer.
images() {
  local bins=$1 spec ref bin user todo=()
  mkdir -p "$bins/images"
  for spec in "registry.k8s.io/pause:3.10 pause 65535" "capi-provider-operator.local/probe:v1 probe 65532"; do
    read -r ref bin user <<<"$spec"
    [[ "$bins/images/$bin.tar" -nt "$bins/$bin" && "$bins/images/$bin.tar" -nt "$here/oci.sh" ]] || todo+=("$spec")
  done
  [[ ${#todo[@]} -eq 0 ]] && return 0
  # In a subshell, so that its trap stops the scratch registry however it ends.
  (
    CRANE=$("$here/crane.sh")
    # shellcheck source=oci.sh
    source "$here/oci.sh"
    tmp=$(mktemp -d)
    trap 'kill -- "-$(cat "$tmp/scratch/scratch.pid" 2>/dev/null)" 2>/dev/null; rm -rf "$tmp"' EXIT
    oci_scratch "$tmp/scratch"
    for spec in "${todo[@]}"; do
      read -r ref bin user <<<"$spec"
      mkdir -m 0755 "$tmp/$bin"
      install -m 0755 "$bins/$bin" "$tmp/$bin/$bin"
      oci_layer "$tmp/$bin.tar" "$tmp/$bin"
      # A name of its own: clusters started side by side may write the same image at once.
      oci_image "$tmp/$bin.tar" "linux/$(oci_arch)" --entrypoint="/$bin" --user="$user" \
        -t "$ref" -o "$bins/images/$bin.tar.$$" >/dev/null
      mv "$bins/images/$bin.tar.$$" "$bins/images/$bin.tar"
    done
  )
}

# The images `make images` stored, served on the host end of the node's veth by two read-only
# registries over TLS: the release images anonymously on :5443, the private repository with basic
# authentication on :5444 (user `pull`, password in DIR/registry/private-password). containerd's
# hosts.toml for each upstream host sends its pulls to that host's path in the storage and nowhere
# else, so release manifests run unchanged and a missing image fails as it does for users.
MIRRORED="registry.k8s.io quay.io gcr.io ghcr.io docker.io"
PRIVATE_HOST=registry.capi-provider-operator.local
registries() {
  local cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
  local store reg="$dir/registry" h url
  store="$cache/images"
  mkdir -p "$node/certs.d"
  [[ -d "$store/public" ]] || { log "no images stored (make images): pulls have no registry"; return 0; }
  # shellcheck source=registry.sh
  source "$here/registry.sh"
  registry_cert "$reg" "$REAL_NODE_HOST_IP"
  head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$reg/private-password"
  registry_htpasswd "$reg/htpasswd" pull "$(cat "$reg/private-password")"
  registry_start "$dir/registry-public.pid" "$store/public" "$REAL_NODE_HOST_IP:5443" "$reg" - ro
  registry_start "$dir/registry-private.pid" "$store/private" "$REAL_NODE_HOST_IP:5444" "$reg" "$reg/htpasswd" ro
  for h in $MIRRORED $PRIVATE_HOST; do
    mkdir -p "$node/certs.d/$h"
    url="https://$REAL_NODE_HOST_IP:$([[ $h == "$PRIVATE_HOST" ]] && echo 5444 || echo 5443)/v2/$h"
    # containerd 1.6 wants a [host] table ("invalid `host` tree" without); `server` is the same
    # registry, so that no pull falls back to the upstream host.
    cat >"$node/certs.d/$h/hosts.toml" <<TOML
server = "$url"
override_path = true
ca = "$reg/tls.crt"
[host."$url"]
  capabilities = ["pull", "resolve"]
  override_path = true
  ca = "$reg/tls.crt"
TOML
  done
  cat >>"$dir/ports.env" <<ENV
REAL_NODE_REGISTRY=$REAL_NODE_HOST_IP:5443
REAL_NODE_PRIVATE_REGISTRY=$REAL_NODE_HOST_IP:5444
REAL_NODE_PRIVATE_HOST=$PRIVATE_HOST
ENV
}

start() {
  local kubectl=${1:?kubectl} bins i ready t0=${EPOCHREALTIME/./}
  bins=$("$here/build.sh" --node)
  configs
  images "$bins"
  registries
  local h
  for h in /sys/fs/cgroup/*/; do [[ -e "$h/cgroup.procs" ]] && mkdir -p "$h$ns"; done
  # The `kubernetes` Service's endpoint: the API server at the host end of the node's veth.
  "$kubectl" --kubeconfig "$dir/kubeconfig" apply -f - >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: real-node-up.sh}
addressType: IPv4
endpoints: [{addresses: ["$REAL_NODE_HOST_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $API_PORT, protocol: TCP}]
YAML
  setsid nsenter --net="/run/netns/$ns" unshare --mount --propagation private --pid --fork --kill-child \
    --mount-proc "$0" inside "$dir" "$bins" >"$dir/logs/real-node.log" 2>&1 </dev/null &
  echo $! >"$dir/real-node.pid"
  for i in $(seq 1 400); do
    ready=$("$kubectl" --kubeconfig "$dir/kubeconfig" get node "$name" \
      -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [[ "$ready" == True ]] && break
    if ! kill -0 "$(cat "$dir/real-node.pid")" 2>/dev/null; then
      log "the real node exited; last log lines:"; tail -20 "$dir/logs/real-node.log" "$dir/logs/kubelet.log" >&2; exit 1
    fi
    [[ $i -eq 400 ]] && { log "node $name never became Ready"; tail -20 "$dir/logs/kubelet.log" >&2; exit 1; }
    sleep 0.1
  done
  # The node lifecycle controller that lifts this taint of a new node is off (cluster-up.sh).
  "$kubectl" --kubeconfig "$dir/kubeconfig" taint node "$name" node.kubernetes.io/not-ready:NoSchedule- \
    >/dev/null 2>&1 || true
  log "node $name is Ready in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms (pods in $REAL_NODE_POD_CIDR, taint capi-provider-operator.dev/real-node; logs in $dir/logs)"
}

# inside BINDIR: runs as the first process of the node's PID namespace, in its network and mount
# namespaces; the node's components are its children. Its exit ends every process of the node.
inside() {
  local bins=$1 i
  trap 'exit 0' TERM INT
  # Host paths the components write to regardless of their configuration: shim sockets and runc
  # state (/run/containerd), CNI's result cache (/var/lib/cni), /var/log/containers links.
  for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 tmpfs "$d"; done
  # The kubelet insists on its values of six host-wide sysctls (kernel.panic=10, panic_on_oops=1,
  # vm.overcommit_memory=1, …) and writes them, or fails to start where it cannot: it gets files of
  # its own in their place, so the host keeps its settings.
  local kv f
  mkdir -p "$node/sysctl"
  for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    f="$node/sysctl/$(tr / . <<<"${kv%=*}")"
    echo "${kv#*=}" >"$f"
    mount --bind "$f" "/proc/sys/${kv%=*}"
  done
  containerd --config "$node/containerd.toml" >"$dir/logs/containerd.log" 2>&1 &
  for i in $(seq 1 200); do
    ctr --address "$node/containerd.sock" version >/dev/null 2>&1 && break
    [[ $i -eq 200 ]] && { log "containerd did not start"; exit 1; }
    sleep 0.05
  done
  for image in "$bins"/images/*.tar; do
    ctr --address "$node/containerd.sock" -n k8s.io images import "$image" >/dev/null
  done
  # shellcheck disable=SC1091
  source "$dir/ports.env"
  "$bins/kubelet" --config "$node/kubelet.yaml" --kubeconfig "$node/kubeconfig" --root-dir "$node/kubelet" \
    --node-ip "$REAL_NODE_IP" --hostname-override "$name" \
    --node-labels "capi-provider-operator.dev/real-node=true" >"$dir/logs/kubelet.log" 2>&1 &
  "$bins/kube-proxy" --config "$node/kube-proxy.yaml" >"$dir/logs/kube-proxy.log" 2>&1 &
  wait -n || true
  log "a component of the node exited; stopping the node"
  exit 1
}

case "$mode" in
  net) net ;;
  start) start "${3:-}" ;;
  inside) inside "${3:?bindir}" ;;
  *) echo "unknown mode: $mode" >&2; exit 2 ;;
esac
