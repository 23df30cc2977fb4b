#!/usr/bin/env bash
# Installs what `make test` needs on a fresh machine: rustfmt and clippy for the pinned toolchain,
# openssl and curl (Debian packages) for the control-plane scripts, then builds the control plane.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
need_apt=()
for tool in openssl curl python3; do command -v "$tool" >/dev/null || need_apt+=("$tool"); done
# The Argo CD health check is tested in Lua 5.1, the language level of Argo CD's gopher-lua.
command -v lua5.1 >/dev/null || need_apt+=(lua5.1)
if [[ ${#need_apt[@]} -gt 0 ]]; then
  echo "deps: installing ${need_apt[*]}" >&2
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The OCI source tests run a real registry (distribution v2.8) from Debian's package.
if [[ ! -x /usr/bin/docker-registry ]]; then
  echo "deps: installing docker-registry" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
  # The package enables a system-wide registry on :5000; the tests start their own.
  if command -v systemctl >/dev/null; then
    systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  fi
fi
command -v go >/dev/null || { echo "deps: Go is required (https://go.dev/dl); none found" >&2; exit 1; }
command -v cargo >/dev/null || { echo "deps: Rust (cargo) is required; none found" >&2; exit 1; }
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "deps: installing $c" >&2
    rustup component add "$c" >&2
  fi
done
"$here/build.sh" >/dev/null
