#!/usr/bin/env bash
# Installs a tool from crates.io into the cache, pinned, once (a second run is a no-op), and prints
# the path of its binary:  cargo-tool.sh CRATE VERSION [BINARY]
# The tools the docs and the release packaging use come through here (mdbook.sh, dist.sh).
set -euo pipefail
crate=$1 version=$2 bin=${3:-$1}
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
root="$cache/bin/${crate}-${version}-debug"
if [[ ! -x "$root/bin/$bin" ]]; then
  echo "installing ${crate} ${version} from crates.io into $root (first time: minutes)" >&2
  # A target directory of its own: the project's CARGO_TARGET_DIR holds the workspace's build only.
  # --debug: these tools run for a second per `make test`; an optimised build would add minutes of
  # CPU to a cold run (CI's budget) to save milliseconds.
  CARGO_TARGET_DIR="$cache/tools-target" cargo install --debug --locked --quiet --root "$root" \
    "$crate" --version "=${version}" >&2
fi
echo "$root/bin/$bin"
