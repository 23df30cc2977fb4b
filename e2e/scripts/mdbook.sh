#!/usr/bin/env bash
# Installs mdBook (pinned) into the cache once and prints its path; docs/ is built with it as a
# book (`make docs-book`, a step of `make test`; `make docs-serve` to read it locally).
set -euo pipefail
exec "$(dirname "$0")/cargo-tool.sh" mdbook 0.5.4
