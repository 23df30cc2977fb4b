#!/usr/bin/env bash
# Builds crane (go-containerregistry) from the Go module proxy into the cache (a second run is a
# no-op) and prints its path. The images of `make images`, `make image` and the real node are
# written and pushed with it (e2e/scripts/oci.sh), and `make release-check` pushes the release's.
set -euo pipefail
exec "$(dirname "$0")/go-tool.sh" crane v0.22.1 github.com/google/go-containerregistry/cmd/crane
