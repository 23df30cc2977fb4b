#!/usr/bin/env bash
# Builds e2e/kstatus (sigs.k8s.io/cli-utils' kstatus, the health rules of Flux and other
# kstatus-based tools) from the Go module proxy into the cache, keyed by its go.sum and source;
# a second run is a no-op. Prints the binary's path. Its k8s.io modules are the control plane's
# versions, so the build reuses that compilation (seconds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/../kstatus"
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
bindir="$cache/bin/kstatus-$(cat "$mod/go.mod" "$mod/go.sum" "$mod/main.go" | sha256sum | cut -c1-16)"
if [[ ! -x "$bindir/kstatus" ]]; then
  mkdir -p "$bindir"
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bindir/kstatus.tmp" .) >&2
  mv "$bindir/kstatus.tmp" "$bindir/kstatus"
fi
echo "$bindir/kstatus"
