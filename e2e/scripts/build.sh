#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)
# from the Go module proxy, plus kwok, into a cache directory keyed by version. A second run is a no-op.
# Prints the binary directory on stdout.
#
#   build.sh [--node]
#
# --node  builds the real node's programs instead, into their own directory: kubelet and kube-proxy
#         from the same module graph (../controlplane, so the Go build cache is shared), and the
#         static pause and probe programs of ../node (the sandbox image and the test image).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/../controlplane"
# shellcheck source=versions.env
source "$here/versions.env"
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
sources=("$mod/go.sum" "$0" "$here/versions.env")
if [[ "${1:-}" == --node ]]; then
  bindir="$cache/bin/node-k8s-${KUBE_VERSION}"
  mapfile -t -O ${#sources[@]} sources < <(find "$here/../node" -type f -name '*.go' -o -name go.mod | sort)
else
  bindir="$cache/bin/k8s-${KUBE_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}"
fi
stamp="$bindir/.complete-$(cat "${sources[@]}" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" ]]; then echo "$bindir"; exit 0; fi
mkdir -p "$bindir"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
if [[ "${1:-}" == --node ]]; then
  echo "building the real node (kubelet, kube-proxy ${KUBE_VERSION}) into $bindir (first time: ~10 min on 2 cores)" >&2
  (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$bindir/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy) >&2
  (cd "$here/../node" && go build -trimpath -ldflags "-s -w" -o "$bindir/" ./pause ./probe) >&2
  touch "$stamp"
  echo "$bindir"
  exit 0
fi
echo "building Kubernetes ${KUBE_VERSION} control plane into $bindir (first time: ~15 min on 2 cores)" >&2
(cd "$mod" && go build -trimpath -ldflags "$ld" -o "$bindir/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl) >&2
(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$bindir/etcd" go.etcd.io/etcd/server/v3) >&2
GOBIN="$bindir" GOFLAGS="" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" >&2
touch "$stamp"
echo "$bindir"
