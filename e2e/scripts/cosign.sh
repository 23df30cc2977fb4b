#!/usr/bin/env bash
# Builds cosign from the Go module proxy into the cache (a second run is a no-op) and prints its
# path. `make release` signs with it and `make release-check` verifies with it, both offline with a
# key pair: no transparency log, no OIDC, no Fulcio.
set -euo pipefail
exec "$(dirname "$0")/go-tool.sh" cosign v2.6.5 github.com/sigstore/cosign/v2/cmd/cosign
