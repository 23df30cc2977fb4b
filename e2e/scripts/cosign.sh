#!/usr/bin/env bash
# Builds cosign from the Go module proxy into the cache (a second run is a no-op) and prints its
# path. `make release` signs with it and `make release-check` verifies with it, both offline with a
# key pair: no transparency log, no OIDC, no Fulcio.
set -euo pipefail
COSIGN_VERSION=v2.6.5
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
bindir="$cache/bin/cosign-${COSIGN_VERSION}"
if [[ ! -x "$bindir/cosign" ]]; then
  # One build at a time: release-check runs beside docs-check in `make test`, and the build takes
  # minutes; a second caller waits for the first, then finds the binary.
  mkdir -p "$cache/bin"
  exec 9>"$cache/bin/.cosign.lock"
  flock 9
fi
if [[ ! -x "$bindir/cosign" ]]; then
  echo "building cosign ${COSIGN_VERSION} into $bindir (first time: many minutes)" >&2
  # Into a directory of its own first, so an interrupted build leaves no binary behind.
  tmp=$(mktemp -d "$cache/bin/.cosign-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # A build cache of its own, removed with it: nothing else reuses cosign's packages, and they
  # take a gigabyte or more.
  GOCACHE="$tmp/go-build" GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS= go install -trimpath -ldflags "-s -w" \
    "github.com/sigstore/cosign/v2/cmd/cosign@${COSIGN_VERSION}" >&2
  mkdir -p "$bindir"
  mv "$tmp/cosign" "$bindir/cosign"
fi
echo "$bindir/cosign"
