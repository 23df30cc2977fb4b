#!/usr/bin/env bash
# Builds helm from the Go module proxy into the cache (a second run is a no-op) and prints its
# path; the chart in manifests/helm is linted and rendered with it in `make test`.
set -euo pipefail
HELM_VERSION=v3.22.0
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
bindir="$cache/bin/helm-${HELM_VERSION}"
if [[ ! -x "$bindir/helm" ]]; then
  echo "building helm ${HELM_VERSION} into $bindir (first time: a few minutes)" >&2
  mkdir -p "$bindir"
  GOBIN="$bindir" CGO_ENABLED=0 GOFLAGS= go install -trimpath -ldflags "-s -w" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2
fi
echo "$bindir/helm"
