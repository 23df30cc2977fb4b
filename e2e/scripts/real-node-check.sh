#!/usr/bin/env bash
# The real node's test (make real-node-check, part of make test; needs root): starts a private
# cluster with `cluster-up.sh --real-node`, runs a pod as a user sets one up (uid 65532, read-only
# root filesystem, a memory limit) and checks from inside it that the node gave it all that and
# a path to the API server through the `kubernetes` Service (kube-proxy), and that the API server
# reaches the pod at its IP over HTTPS: through pods/proxy and as a validating webhook behind a
# Service (with --enable-aggregator-routing, to the endpoint's pod IP). Then
# `cluster-down.sh` must leave nothing behind: the host's network namespaces, links, routes,
# addresses, iptables rules, mounts, cgroups, processes, sysctls and the host paths containerd,
# kubelet and CNI write to by default are compared before, during and after.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "real-node-check: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
# A check that cannot run fails: make test runs as root.
[[ $(id -u) -eq 0 ]] || fail "the real node needs root"
dir=$(realpath -m "$(mktemp -u -t capi-realnode-XXXXXX)")
ns="crn$(printf '%s' "$dir" | sha256sum | cut -c1-8)"
bins=$("$here/build.sh")
kubectl=("$bins/kubectl" --kubeconfig "$dir/kubeconfig")

# What of the host the node could leave behind, one "kind: item" per line.
snapshot() {
  local p
  ip netns list | awk '{print "netns: " $1}'
  ip -o link show | awk -F': ' '{print "link: " $2}' | sed 's/@.*//'
  ip -4 -o addr show | awk '{print "addr: " $2 " " $4}'
  ip -4 route show | sed 's/^/route: /'
  iptables-save | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//; s/^/iptables: /'
  awk '{print "mount: " $5}' /proc/self/mountinfo
  find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -type d | sed 's/^/cgroup: /'
  ps -eo args= | sed 's/^/process: /'
  # The host-wide sysctls a kubelet or kube-proxy would set (the net ones are per namespace).
  for p in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys \
    kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet; do
    echo "sysctl: $p = $(sysctl -n "$p")"
  done
  for p in /run/containerd /var/lib/containerd /opt/containerd /var/lib/cni /etc/cni /opt/cni /var/lib/kubelet \
    /etc/kubernetes /var/log/pods /var/log/containers; do
    [[ -e "$p" ]] && echo "path: $p"
  done
  return 0
}
# Only what this node could have made: other clusters may run beside this one.
# Processes by this cluster's directory (containerd, its shims, kubelet and kube-proxy name it) or
# as the node's images start them, so that other work's command lines are not taken for the node's.
ours() {
  grep -E -e "^process: /(probe|pause)( |\$)" -e "^process: .*$dir" -e "^(path|sysctl): " \
    -e "^(netns|link|addr|route|iptables|mount|cgroup): .*($dir|$ns|${pod_net:-none}|KUBE-|CNI-|cni0|containerd|kubelet)" \
    || true
}

# A pod on the node: NAME, its ANNOTATIONS (a YAML flow map) and the lines of its SPEC.
node_pod() { # name annotations spec
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, annotations: $2}
spec:
  nodeSelector: {capi-provider-operator.dev/real-node: "true"}
  tolerations: [{key: capi-provider-operator.dev/real-node, operator: Exists, effect: NoSchedule}]
$3
YAML
}
# A pod of IMAGE on the node running `--help` (every manager prints its flags and exits), with
# the pull secret SECRET if given.
help_pod() { # name image [secret]
  local secrets="[]"
  [[ -n "${3:-}" ]] && secrets="[{name: $3}]"
  node_pod "$1" "{}" "  restartPolicy: Never
  imagePullSecrets: $secrets
  containers: [{name: manager, image: \"$2\", args: [--help], resources: {limits: {memory: 64Mi}}}]"
}
# The pod ran the image's manager to its end: its --help output.
ran() { # pod
  "${kubectl[@]}" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$1" --timeout=60s >/dev/null \
    || { "${kubectl[@]}" describe pod "$1" >&2; fail "pod $1 did not run its image to the end"; }
  [[ "$("${kubectl[@]}" logs "$1" | head -1)" == "Usage of /manager:" ]] || fail "pod $1 did not run the manager"
}
# The pod's pull failed as it fails for users, the kubelet's Failed event saying WANT.
pull_fails() { # pod want
  local reason msg
  for _ in $(seq 1 600); do
    reason=$("${kubectl[@]}" get pod "$1" -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason}')
    [[ "$reason" == ErrImagePull || "$reason" == ImagePullBackOff ]] && break
    sleep 0.1
  done
  [[ "$reason" == ErrImagePull || "$reason" == ImagePullBackOff ]] || fail "pod $1 is waiting for '$reason', not a pull"
  msg=$("${kubectl[@]}" get events --field-selector "involvedObject.name=$1,reason=Failed" -o 'jsonpath={.items[*].message}')
  [[ "$msg" == *"$2"* ]] || fail "pod $1's pull failed for another reason than '$2': $msg"
  log "pod $1: $reason ($2)"
}
# The images of `make images` through containerd's mirror configuration: an unchanged release
# reference runs the image that was pushed (its digest), a wrong tag and a private repository
# without its pull secret fail to pull, the private one with the secret runs.
images_check() {
  [[ -n "${REAL_NODE_REGISTRY:-}" ]] || fail "the node has no registry: run make images first"
  local core=registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0
  local private="$REAL_NODE_PRIVATE_HOST/private/cluster-api-controller:v1.12.0" cache pushed got
  local t0=${EPOCHREALTIME/./}
  "${kubectl[@]}" create secret docker-registry private-pull --docker-server="$REAL_NODE_PRIVATE_HOST" \
    --docker-username=pull --docker-password="$(cat "$dir/registry/private-password")" >/dev/null
  # The private image is pulled with the secret only after the pull without it failed: an image
  # present on the node runs for any pod (IfNotPresent), whatever its secrets.
  { help_pod release "$core"; help_pod wrong-tag "${core%:*}:v0.0.0-missing"; help_pod no-secret "$private"; } \
    | "${kubectl[@]}" apply -f - >/dev/null
  ran release
  cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
  pushed=$(cat "$cache/images/public/docker/registry/v2/repositories/${core%:*}/_manifests/tags/v1.12.0/current/link")
  got=$("${kubectl[@]}" get pod release -o 'jsonpath={.status.containerStatuses[0].imageID}')
  # (By digest alone: containerd names the one image by any reference pulled with that digest.)
  [[ "${got##*@}" == "$pushed" ]] || fail "pod release runs $got, not the pushed ${core%:*}@$pushed"
  log "$core pulled through the mirror ($pushed) and ran"
  # Every release image make images pushed, at the path the mirror asks for it.
  local ref n=0
  for ref in $("$here/images.sh" --refs); do
    n=$((n + 1))
    curl -sf -o /dev/null --cacert "$dir/registry/tls.crt" -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      "https://$REAL_NODE_REGISTRY/v2/${ref%:*}/manifests/${ref##*:}" || fail "the mirror does not serve $ref"
  done
  log "the mirror serves all $n release images"
  pull_fails wrong-tag "not found"
  pull_fails no-secret "401 Unauthorized"
  help_pod with-secret "$private" private-pull | "${kubectl[@]}" apply -f - >/dev/null
  ran with-secret
  log "$private pulled with its imagePullSecrets and ran"
  log "images checked in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
}

# A pause pod on the node, annotated to pin ADDR if given.
pause_pod() { # name [addr]
  local ann="{}"
  [[ -n "${2:-}" ]] && ann="{cni.projectcalico.org/ipAddrs: '[\"$2\"]'}"
  node_pod "$1" "$ann" '  containers: [{name: pause, image: "registry.k8s.io/pause:3.10", imagePullPolicy: Never}]'
}
pod_ip() { "${kubectl[@]}" get pod "$1" -o 'jsonpath={.status.podIP}'; }
# Pinned addresses (cni-pinned-ip.py): a pod annotated with cni.projectcalico.org/ipAddrs gets
# that address, again after it is deleted and created anew (as the in-memory provider's pod is on
# every restart and upgrade); a pod without it gets one of the pool (.2-.99); an address outside
# the pinned range (.100-.126; .50 is the pool's) or one another pod holds leaves the pod without
# a sandbox, the kubelet's event saying why.
# pin_start creates the pods, so that they start beside the probe pod; pin_check checks them.
pin_start() {
  local p=${REAL_NODE_POD_CIDR%.0/25}
  pin_t0=${EPOCHREALTIME/./}
  { pause_pod pinned "$p.100"; pause_pod pool; pause_pod pinned-outside "$p.50"; } | "${kubectl[@]}" apply -f - >/dev/null
}
pin_check() {
  local p=${REAL_NODE_POD_CIDR%.0/25} ip i
  local want="$p.100" outside=$p.50
  for i in 1 2; do
    "${kubectl[@]}" wait --for=condition=Ready pod/pinned pod/pool --timeout=60s >/dev/null \
      || { "${kubectl[@]}" describe pod pinned pool >&2; fail "the pinned and pool pods never became Ready"; }
    ip=$(pod_ip pinned)
    [[ "$ip" == "$want" ]] || fail "pod pinned got $ip (round $i), not its annotation's $want"
    [[ $i -eq 2 ]] && break
    # Deleted as a Deployment's Recreate strategy deletes it: gracefully, so the kubelet has
    # released the address when the pod is gone.
    "${kubectl[@]}" delete pod pinned --wait >/dev/null
    pause_pod pinned "$want" | "${kubectl[@]}" apply -f - >/dev/null
  done
  ip=$(pod_ip pool)
  # The pool is .2-.99: the pinned range is no pod's but those that pin an address in it.
  if ! grep -qE "^$pod_net" <<<"$ip" || (( ${ip##*.} < 2 || ${ip##*.} > 99 )); then
    fail "pod pool got $ip, not an address of the pool $p.2-$p.99"
  fi
  pause_pod pinned-taken "$want" | "${kubectl[@]}" apply -f - >/dev/null
  sandbox_fails pinned-outside \
    "pinned address $outside (annotation cni.projectcalico.org/ipAddrs) is outside this node's range for pinned addresses $p.100-$p.126"
  sandbox_fails pinned-taken "pinned address $want (annotation cni.projectcalico.org/ipAddrs): failed to allocate"
  "${kubectl[@]}" delete pod pinned pool pinned-outside pinned-taken --wait=false >/dev/null
  log "pinned $want kept by a new pod, pool pod at $ip, $outside and a second $want refused; $(( (${EPOCHREALTIME/./} - pin_t0) / 1000 )) ms from their creation"
}
# The pod has no sandbox (so no address), the kubelet's FailedCreatePodSandBox event saying WANT.
sandbox_fails() { # pod want
  local msg
  for _ in $(seq 1 300); do
    msg=$("${kubectl[@]}" get events --field-selector "involvedObject.name=$1,reason=FailedCreatePodSandBox" \
      -o 'jsonpath={.items[*].message}')
    [[ -n "$msg" ]] && break
    sleep 0.1
  done
  [[ "$msg" == *"pod default/$1: $2"* ]] || fail "pod $1: no FailedCreatePodSandBox event saying '$2': '$msg'"
  [[ -z "$(pod_ip "$1")" ]] || fail "pod $1 got an address"
}

cleanup() { "$here/cluster-down.sh" --dir "$dir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
before=$(snapshot)
t0=$(date +%s%N)
up_log=$(mktemp)
"$here/cluster-up.sh" --dir "$dir" --real-node --watch-pid $$ >/dev/null 2>"$up_log" || { cat "$up_log" >&2; fail "cluster-up.sh --real-node"; }
grep 'is Ready in' "$up_log" >&2 || true
rm -f "$up_log"
log "cluster with a real node up in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
# shellcheck disable=SC1091
source "$dir/ports.env"
pod_net="10\.213\.$(cut -d. -f3 <<<"$REAL_NODE_IP")\."
# The webhook's serving pair: its caBundle is the certificate itself.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=probe.default.svc \
  -addext subjectAltName=DNS:probe.default.svc -keyout "$dir/probe.key" -out "$dir/probe.crt" 2>/dev/null
pin_start
"${kubectl[@]}" create secret tls probe-tls --cert "$dir/probe.crt" --key "$dir/probe.key" >/dev/null
"${kubectl[@]}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: probe, namespace: default}
spec:
  selector: {app: probe}
  ports: [{port: 443, targetPort: 8443}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: probe.real-node.check}
webhooks:
- name: probe.real-node.check
  clientConfig:
    service: {name: probe, namespace: default, path: /validate, port: 443}
    caBundle: $(base64 -w0 "$dir/probe.crt")
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  objectSelector: {matchLabels: {real-node-check: webhook}}
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
---
apiVersion: v1
kind: Pod
metadata: {name: probe, namespace: default, labels: {app: probe}}
spec:
  nodeSelector: {capi-provider-operator.dev/real-node: "true"}
  tolerations: [{key: capi-provider-operator.dev/real-node, operator: Exists, effect: NoSchedule}]
  containers:
  - name: probe
    image: capi-provider-operator.local/probe:v1
    imagePullPolicy: Never
    readinessProbe: {httpGet: {scheme: HTTPS, port: 8443, path: /report}, periodSeconds: 1}
    securityContext:
      runAsUser: 65532
      runAsNonRoot: true
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    resources: {limits: {memory: 64Mi}, requests: {memory: 32Mi}}
    volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
  volumes: [{name: tls, secret: {secretName: probe-tls}}]
YAML
"${kubectl[@]}" wait --for=condition=Ready pod/probe --timeout=60s >/dev/null \
  || { "${kubectl[@]}" describe pod probe >&2; fail "the probe pod never became Ready"; }
log "pod Ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms from the start"
want="uid=65532 rootfs=read-only memory-limit=67108864 apiserver=10.0.0.1:443 apiserver-user=system:serviceaccount:default:default"
ip=$("${kubectl[@]}" get pod probe -o 'jsonpath={.status.podIP}')
grep -qE "^$pod_net" <<<"$ip" || fail "pod IP $ip is not in $REAL_NODE_POD_CIDR"
logs=$("${kubectl[@]}" logs probe)
[[ "$logs" == "probe: $want" ]] || fail "the pod reports (kubectl logs): '$logs', want 'probe: $want'"
report=$("${kubectl[@]}" get --raw "/api/v1/namespaces/default/pods/https:probe:8443/proxy/report")
[[ "$report" == "$want" ]] || fail "the pod reports (API server to $ip:8443): '$report', want '$want'"
log "the pod at $ip reports: $report"
# A webhook behind a Service: the API server calls the pod's IP (aggregator routing), verifying
# its certificate against the caBundle. The probe denies, so its message proves the call.
# The endpoints controller publishes the Ready pod's address a moment after Ready, and the API
# server's own informer a moment after that: until then the call fails with "no endpoints
# available", which is timing, not a fault, so only that answer is retried (for up to 30 s).
for _ in $(seq 60); do
  denied=$("${kubectl[@]}" create -f - 2>&1 <<'YAML' || true
apiVersion: v1
kind: ConfigMap
metadata: {name: webhook-probe, namespace: default, labels: {real-node-check: webhook}}
YAML
)
  [[ "$denied" == *'no endpoints available for service "probe"'* ]] || break
  sleep 0.5
done
[[ "$denied" == *'admission webhook "probe.real-node.check" denied the request: probe webhook: denied'* ]] \
  || fail "the API server did not reach the webhook at the pod's IP: $denied"
log "the API server called the pod's webhook through its Service"
pin_check
images_check


# While it runs: the node's parts are where the checks below look for them, so they can fail.
# (Taken whole before filtering: ps would see the filter's own command line.)
during=$(snapshot)
during=$(ours <<<"$during")
for kind in netns link route cgroup process; do
  new=$(comm -13 <(ours <<<"$before" | sort) <(sort <<<"$during") | grep -c "^$kind: " || true)
  [[ $new -gt 0 ]] || fail "nothing of kind '$kind' seen while the node runs: the leftover check would be blind"
done
chains=$(ip netns exec "$ns" iptables-save -t nat | grep -c '^:KUBE-' || true)
[[ $chains -gt 0 ]] || fail "no kube-proxy chain in the node's network namespace"
# The node's network namespace is the one mount of its own the host has (ip netns add).
host_leaks=$(comm -13 <(ours <<<"$before" | sort) <(sort <<<"$during") | grep -E '^(iptables|mount|path|sysctl): ' \
  | grep -vx "mount: /run/netns/$ns" || true)
[[ -z "$host_leaks" ]] || fail "the running node changed the host's iptables, mounts, paths or sysctls:"$'\n'"$host_leaks"

t1=$(date +%s%N)
"$here/cluster-down.sh" --dir "$dir" 2>/dev/null
log "cluster-down in $(( ($(date +%s%N) - t1) / 1000000 )) ms"
after=$(snapshot)
left=$(comm -13 <(ours <<<"$before" | sort) <(ours <<<"$after" | sort))
[[ -z "$left" ]] || fail "cluster-down left behind:"$'\n'"$left"
log "PASS: nothing left behind"
