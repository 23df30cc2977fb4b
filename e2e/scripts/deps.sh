#!/usr/bin/env bash
# Installs what `make test` needs on a fresh machine: rustfmt and clippy for the pinned toolchain,
# openssl and curl (Debian packages) for the control-plane scripts, the real node's packages, then
# builds the control plane and the real node (kubelet, kube-proxy).
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
# The real node (cluster-up.sh --real-node, make real-node-check): containerd 1.6 with its CRI
# plugin, runc, the CNI plugins (bridge, host-local, loopback), iptables and conntrack for
# kube-proxy; kubelet and kube-proxy are built from the control plane's module graph.
need_node=()
for pkg in containerd:/usr/bin/containerd runc:/usr/sbin/runc containernetworking-plugins:/usr/lib/cni/bridge \
  iptables:/usr/sbin/iptables conntrack:/usr/sbin/conntrack; do
  [[ -x "${pkg#*:}" ]] || need_node+=("${pkg%%:*}")
done
if [[ ${#need_node[@]} -gt 0 ]]; then
  echo "deps: installing ${need_node[*]}" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_node[@]}" >/dev/null
  # The package starts a system-wide containerd where systemd runs; the real node starts its own.
  if [[ " ${need_node[*]} " == *" containerd "* ]] && command -v systemctl >/dev/null; then
    systemctl disable --now containerd.service >/dev/null 2>&1 || true
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
"$here/build.sh" --node >/dev/null
