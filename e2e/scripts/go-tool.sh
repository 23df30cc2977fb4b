#!/usr/bin/env bash
# Builds a Go program from the Go module proxy into the cache, pinned, once (a second run is a
# no-op), and prints the path of its binary:  go-tool.sh NAME VERSION PACKAGE
# The release and image tools come through here (cosign.sh, crane.sh).
set -euo pipefail
name=$1 version=$2 pkg=$3
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
bindir="$cache/bin/${name}-${version}"
if [[ ! -x "$bindir/$name" ]]; then
  # One build at a time: `make test` runs release-check beside docs-check and the integration
  # tests, which may all ask for the tool; a second caller waits for the first, then finds it.
  mkdir -p "$cache/bin"
  exec 8>"$cache/bin/.${name}.lock"
  flock 8
fi
if [[ ! -x "$bindir/$name" ]]; then
  echo "building ${name} ${version} into $bindir (first time: a minute or more)" >&2
  # Into a directory of its own first, so an interrupted build leaves no binary behind.
  tmp=$(mktemp -d "$cache/bin/.${name}-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # A build cache of its own, removed with it: nothing else reuses these packages, and cosign's
  # take a gigabyte or more.
  GOCACHE="$tmp/go-build" GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS= go install -trimpath -ldflags "-s -w" \
    "${pkg}@${version}" >&2
  mkdir -p "$bindir"
  mv "$tmp/$name" "$bindir/$name"
fi
echo "$bindir/$name"
