#!/usr/bin/env bash
# Builds promtool from the Go module proxy into the cache (a second run is a no-op) and prints its
# path; the alerting rules in manifests/monitoring are checked and unit-tested with it in `make test`.
set -euo pipefail
PROMETHEUS_VERSION=v0.316.0
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
bindir="$cache/bin/promtool-${PROMETHEUS_VERSION}"
if [[ ! -x "$bindir/promtool" ]]; then
  echo "building promtool ${PROMETHEUS_VERSION} into $bindir (first time: a few minutes)" >&2
  mkdir -p "$bindir"
  # remove_all_sd leaves out Prometheus' service discovery plugins (cloud SDKs), which rule
  # checks and tests do not use: half the compile time.
  GOBIN="$bindir" CGO_ENABLED=0 GOFLAGS= go install -trimpath -tags remove_all_sd -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION}" >&2
fi
echo "$bindir/promtool"
