#!/usr/bin/env bash
# make demo-real: the newcomer's path on the real node (containerd, runc, CNI, kubelet,
# kube-proxy; needs root), where `make demo` (demo.sh) shows the operator on a fake kwok node.
# Step by step, as a user would do it:
#
#   1. the images: the real managers (make images) and the operator's own (make image), pushed to
#      the local registry the real node's containerd mirrors registry.k8s.io, quay.io and ghcr.io to;
#   2. the local control plane with the real node (cluster-up.sh --real-node);
#   3. the operator installed from its Helm chart (manifests/helm/capi-provider-operator), its
#      image pulled unchanged from the chart's default reference;
#   4. cert-manager v1.11.5 from its release manifest, until its webhook answers;
#   5. the Cluster API v1.12.0 releases (core, kubeadm bootstrap, kubeadm control plane, the
#      docker provider's in-memory backend) loaded into ConfigMaps (the air-gapped layout);
#   6. the providers declared (examples/demo-real/providers.yaml) until Ready;
#   7. a workload cluster (examples/demo-real/workload/cluster.yaml) reconciled by them until its
#      control plane is initialized and its machines are Running;
#   8. kubectl get capi-providers -A and kubectl get clusters,machines -A.
#
#   demo-real.sh            runs it; the cluster keeps running (make cluster-down stops it)
#   demo-real.sh --dry-run  no root, no cluster of its own: checks the script's syntax and what
#                           the demo would apply (the chart rendered with the demo's values, the
#                           provider objects against their CRDs on KUBECONFIG's cluster, the
#                           workload cluster's YAML); make docs-check runs it (docs/user-guide.md)
#
# Rerunning it reuses the running cluster and changes nothing that is already there. Each wait
# is bounded (DEMO_TIMEOUT seconds, default 300); a step that fails or times out stops the demo
# with a non-zero status naming the step.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${CAPI_CLUSTER_DIR:-${TMPDIR:-/tmp}/capi-provider-operator-cluster-$(id -u)}
timeout=${DEMO_TIMEOUT:-300}
chart="$root/manifests/helm/capi-provider-operator"
examples="$root/examples/demo-real"
ns=capi-operator-system
release=capi-provider-operator
# The real node's label and taint (real-node-up.sh): what runs there selects and tolerates them.
node_key=capi-provider-operator.dev/real-node
# (namespace, release ConfigMap label, release directory under build-providers.sh's cache, file).
releases=(
  "capi-system cluster-api releases/cluster-api/v1.12.0 core-components.yaml"
  "capi-kubeadm-bootstrap-system bootstrap-kubeadm releases/bootstrap-kubeadm/v1.12.0 bootstrap-components.yaml"
  "capi-kubeadm-control-plane-system control-plane-kubeadm releases/control-plane-kubeadm/v1.12.0 control-plane-components.yaml"
  "capd-system infrastructure-docker capd-v1.12.0/release infrastructure-components.yaml"
)
total=8
step=0
current="start"

case "${1:-}" in
  "" | --dry-run) ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo-real: unknown argument $1 (--dry-run, --help)" >&2; exit 2 ;;
esac

say() { printf '\n\033[1m== [%s/%s] %s\033[0m\n' "$step" "$total" "$*" >&2; }
note() { printf '   %s\n' "$@" >&2; }
begin() { step=$((step + 1)); current=$1; say "$1"; shift; [[ $# -eq 0 ]] || note "$@"; }
finish() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    printf '\n\033[1mdemo-real: FAILED at step %s/%s (%s), exit status %s\033[0m\n' "$step" "$total" "$current" "$rc" >&2
    [[ -f "$dir/kubeconfig" ]] && note "the cluster is left as it is: export KUBECONFIG=$dir/kubeconfig" \
      "what runs where: kubectl get pods -A -o wide" \
      "operator log: kubectl logs -n $ns deploy/$release" \
      "stop it: make cluster-down"
  fi
  exit "$rc"
}
trap finish EXIT

# The Helm values placing the operator on the real node.
values() {
  printf 'nodeSelector: {%s: "true"}\ntolerations: [{key: %s, operator: Exists, effect: NoSchedule}]\n' \
    "$node_key" "$node_key"
}

# Polls `command...` every 2 s until it succeeds, for at most DEMO_TIMEOUT seconds.
within() {
  local what=$1 deadline=$((SECONDS + timeout)); shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "demo-real: timed out after ${timeout}s waiting for $what" >&2
      "$@" >&2 || true
      return 1
    fi
    sleep 2
  done
}

# Each release into a ConfigMap of its provider's namespace, labelled for the providers'
# fetchConfig.selector; gzipped (binaryData, annotated so), as the core components exceed the
# 1 MiB a ConfigMap holds as text.
load_releases() {
  local line n label rel file tmp
  tmp=$(mktemp -d)
  for line in "${releases[@]}"; do
    read -r n label rel file <<<"$line"
    "$kubectl" create namespace "$n" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
    gzip -9cn "$providers/$rel/$file" >"$tmp/components"
    "$kubectl" create configmap "$label-v1.12.0" -n "$n" --dry-run=client -o yaml \
      --from-file=metadata="$providers/$rel/metadata.yaml" --from-file=components="$tmp/components" \
      | "$kubectl" label --local -f - -o yaml provider.cluster.x-k8s.io/name="$label" \
        provider.cluster.x-k8s.io/version=v1.12.0 \
      | "$kubectl" annotate --local -f - -o yaml provider.cluster.x-k8s.io/compressed=true \
      | "$kubectl" apply --server-side -f - >/dev/null
    note "$n/$label-v1.12.0 ($file, $(wc -c <"$tmp/components") bytes gzipped)"
  done
  rm -rf "$tmp"
}

# --dry-run: what the demo applies, checked without root or a real node of its own.
dry_run() {
  local helm kubectl
  begin "checking what the demo applies (dry run: no root, no real node)" \
    "the steps of the demo: $0 --help"
  # bash reads a script as it runs it: the steps after this dry run are parsed here.
  bash -n "$0"
  helm=$("$here/helm.sh")
  kubectl="$("$here/build.sh")/kubectl"
  local rendered err
  err=$(mktemp)
  rendered=$("$helm" template "$release" "$chart" -n "$ns" -f <(values) 2>"$err") \
    || { grep -v 'found symbolic link' "$err" >&2; rm -f "$err"; return 1; }
  rm -f "$err"
  grep -q "$node_key" <<<"$rendered" || { echo "the chart ignored the demo's nodeSelector" >&2; return 1; }
  note "the chart renders with the demo's values (values.schema.json accepts them)"
  sed -n 's/^  namespace: //p' "$examples/providers.yaml" | while read -r n; do
    "$kubectl" create namespace "$n" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  done
  "$kubectl" apply --server-side --dry-run=server -f "$examples/providers.yaml" >&2
  python3 - "$examples/workload/cluster.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
want = ["Cluster", "DevCluster", "DevMachineTemplate", "DevMachineTemplate", "KubeadmConfigTemplate",
        "KubeadmControlPlane", "MachineDeployment", "Namespace"]
if kinds != want:
    sys.exit(f"workload cluster kinds {kinds}, want {want}")
PY
  note "the provider objects are accepted by their CRDs; the workload cluster's YAML holds its 8 objects"
  echo "demo-real: dry run ok"
}

if [[ "${1:-}" == --dry-run ]]; then
  total=1
  dry_run
  exit 0
fi

current="root check"
if [[ $(id -u) -ne 0 ]]; then
  echo "demo-real: needs root (the real node: containerd, kubelet, network namespaces, cgroups)." >&2
  echo "           Run it as root, e.g. 'sudo -E make demo-real'; 'make demo' needs no root." >&2
  exit 1
fi

begin "images: the real managers (make images) and the operator's own (make image)" \
  "pushed to the local registry the real node's containerd mirrors registry.k8s.io, quay.io and ghcr.io to," \
  "so release manifests and the Helm chart are applied unchanged (first run: minutes; then cached)"
providers=$(dirname "$("$here/build-providers.sh")")
"$here/images.sh" >/dev/null
image=$("$here/operator-image.sh")
note "operator image: $image"
helm=$("$here/helm.sh")

begin "the local control plane with the real node (cluster-up.sh --real-node)" \
  "etcd, kube-apiserver, controller-manager, scheduler; Node real-node: containerd + runc + CNI + kubelet + kube-proxy"
kc=$("$here/cluster-up.sh" --dir "$dir" --real-node)
export KUBECONFIG=$kc
kubectl="$("$here/build.sh")/kubectl"
"$kubectl" get nodes -o wide >&2

begin "the operator from its Helm chart (helm upgrade --install $release $chart)" \
  "two replicas with leader election on the real node, non-root, read-only root filesystem, memory limit"
"$helm" upgrade --install "$release" "$chart" -n "$ns" --create-namespace -f <(values) \
  --wait --timeout "${timeout}s" 2> >(grep -v 'found symbolic link' >&2) | sed '/^NOTES:/,$d' >&2
"$kubectl" get pods -n "$ns" -o wide >&2

begin "cert-manager v1.11.5 (the Cluster API providers' webhooks need its certificates)" \
  "its release manifest, scheduled onto the real node; ready once its webhook admits an Issuer"
"$kubectl" apply --server-side --force-conflicts -f "$providers/cert-manager-v1.11.5/cert-manager.yaml" >/dev/null
"$kubectl" wait --for condition=Available --timeout "${timeout}s" -n cert-manager deployment --all >&2
issuer='{"apiVersion":"cert-manager.io/v1","kind":"Issuer","metadata":{"name":"probe","namespace":"cert-manager"},"spec":{"selfSigned":{}}}'
within "cert-manager's webhook" "$kubectl" create --dry-run=server -f - <<<"$issuer"
note "cert-manager's webhook answers"

begin "the Cluster API v1.12.0 releases into ConfigMaps (air-gapped: no download)" \
  "core, kubeadm bootstrap, kubeadm control plane and the docker provider (in-memory backend), as make providers assembled them"
load_releases
"$kubectl" get configmaps -A -l provider.cluster.x-k8s.io/version=v1.12.0 >&2

begin "the providers (kubectl apply -f examples/demo-real/providers.yaml) until Ready" \
  "the operator reads each release from its ConfigMap, installs it and waits for its manager"
"$kubectl" apply --server-side -f "$examples/providers.yaml" >&2
for p in capi-system/coreprovider/cluster-api capi-kubeadm-bootstrap-system/bootstrapprovider/kubeadm \
  capi-kubeadm-control-plane-system/controlplaneprovider/kubeadm capd-system/infrastructureprovider/docker; do
  "$kubectl" wait --for condition=Ready --timeout "${timeout}s" -n "${p%%/*}" "${p#*/}" >&2
done

begin "a workload cluster on the in-memory provider (kubectl apply -f examples/demo-real/workload/cluster.yaml)" \
  "a Cluster, a KubeadmControlPlane of 1 and a MachineDeployment of 1, reconciled by the real controllers"
# Right after Ready the webhooks' Services can still be publishing their endpoints.
within "the Cluster API webhooks to admit the workload cluster" \
  "$kubectl" apply --server-side -f "$examples/workload/cluster.yaml"
"$kubectl" wait --for condition=ControlPlaneInitialized --timeout "${timeout}s" -n workload cluster/w1 >&2
"$kubectl" wait --for jsonpath='{.status.readyReplicas}'=1 --timeout "${timeout}s" -n workload machinedeployment/w1-md-0 >&2
"$kubectl" wait --for jsonpath='{.status.phase}'=Running --timeout "${timeout}s" -n workload machines --all >&2

begin "what a user sees"
printf '\n$ kubectl get capi-providers -A\n' >&2
"$kubectl" get capi-providers -A
printf '\n$ kubectl get clusters,machines -A\n' >&2
"$kubectl" get clusters,machines -A
cat >&2 <<MSG

Done in ${SECONDS} s. The cluster, its real node, the operator and the providers keep running:
  export KUBECONFIG=$kc
  kubectl get capi-providers -A
  kubectl get clusters,machines -A
  kubectl logs -n $ns deploy/$release
Run 'make demo-real' again to reuse them; stop everything with 'make cluster-down'
(or: $here/cluster-down.sh --dir $dir).
MSG
