#!/usr/bin/env bash
# The operator demo on the bundled local control plane: starts the cluster, installs the CRDs,
# serves the project's sample releases (examples/sample-providers) from a local
# GitHub-compatible server and from ConfigMaps, runs the operator, applies
# examples/demo/providers.yaml and waits until every provider is Ready.
#
# The cluster, the operator and the release server keep running (their pids live in the
# cluster directory); `make cluster-down` stops them all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${CAPI_CLUSTER_DIR:-${TMPDIR:-/tmp}/capi-provider-operator-cluster-$(id -u)}
target=${CARGO_TARGET_DIR:-$HOME/.cache/capi-provider-operator/target}

say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

say "building the operator and the local release server"
# One invocation: the test-support crate gets its Kubernetes API version from the operator's.
cargo build -q --locked --workspace --all-targets
bin=$target/debug

say "starting the local control plane"
kc=$("$here/cluster-up.sh" --dir "$dir")
kubectl="$("$here/build.sh")/kubectl --kubeconfig $kc"
export KUBECONFIG=$kc

say "installing the provider CRDs"
$kubectl apply --server-side -f "$root/manifests/crds" >/dev/null
$kubectl wait --for condition=Established --timeout 60s -f "$root/manifests/crds" >/dev/null

for f in operator github; do
  if [[ -f "$dir/demo-$f.pid" ]]; then
    kill -TERM -- "-$(cat "$dir/demo-$f.pid")" 2>/dev/null || true
    rm -f "$dir/demo-$f.pid"
  fi
done

say "serving sample releases through a local GitHub-compatible API"
setsid "$bin/capi-fake-github" --dir "$root/examples/sample-providers" \
  --repo capi-provider-operator/sample-core=sample-core \
  --repo capi-provider-operator/sample-bootstrap=sample-bootstrap \
  >"$dir/demo-github.url" 2>"$dir/demo-github.log" &
echo $! >"$dir/demo-github.pid"
for _ in $(seq 1 50); do [[ -s "$dir/demo-github.url" ]] && break; sleep 0.1; done
github=$(head -1 "$dir/demo-github.url")
echo "release server: $github" >&2

say "loading the infrastructure release into ConfigMaps (air-gapped layout)"
$kubectl create namespace sample-infra-system --dry-run=client -o yaml | $kubectl apply -f - >/dev/null
for v in v0.1.0 v0.2.0; do
  rel="$root/examples/sample-providers/sample-infrastructure/$v"
  $kubectl -n sample-infra-system create configmap "sample-infrastructure-$v" \
    --from-file=metadata="$rel/metadata.yaml" --from-file=components="$rel/infrastructure-components.yaml" \
    --dry-run=client -o yaml | $kubectl apply --server-side -f - >/dev/null
  $kubectl -n sample-infra-system label --overwrite configmap "sample-infrastructure-$v" \
    provider.cluster.x-k8s.io/name=sample provider.cluster.x-k8s.io/type=infrastructure \
    provider.cluster.x-k8s.io/version=$v >/dev/null
done

say "starting the operator (log: $dir/demo-operator.log)"
setsid "$bin/capi-provider-operator" run --github-api-url "$github" >"$dir/demo-operator.log" 2>&1 &
echo $! >"$dir/demo-operator.pid"

say "kubectl apply -f examples/demo/providers.yaml"
$kubectl apply --server-side -f "$root/examples/demo/providers.yaml"

say "waiting until every provider is Ready"
$kubectl wait --for=condition=Ready --timeout=180s -n sample-core-system coreprovider/cluster-api
$kubectl wait --for=condition=Ready --timeout=180s -n sample-bootstrap-system bootstrapprovider/sample
$kubectl wait --for=condition=Ready --timeout=180s -n sample-infra-system infrastructureprovider/sample

say "kubectl get capi-providers -A"
$kubectl get capi-providers -A
cat >&2 <<MSG

The cluster, the operator and the release server keep running:
  export KUBECONFIG=$kc
  kubectl get capi-providers -A
  kubectl describe coreprovider -n sample-core-system cluster-api
Stop everything with 'make cluster-down'.
MSG
