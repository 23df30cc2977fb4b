#!/usr/bin/env bash
# Builds what a release ships into DIST_DIR (default dist/, gitignored) — `make dist`:
#   kubectl-capi_providers-<version>-<os>-<arch>.tar.gz   the plugin and LICENSE, one archive per platform
#   capi-providers.yaml                                  its krew manifest (written by the plugin itself)
#   charts/capi-provider-operator-<version>.tgz          the Helm chart (helm package)
#   charts/index.yaml                                    a Helm repository index of it (helm repo index)
#   capi-plugin.cdx.json                                 the plugin's SBOM (CycloneDX JSON, cargo-cyclonedx)
#   capi-provider-operator.cdx.json                      the operator's SBOM (the same, for its image's binary)
#   SHA256SUMS                                           the SHA-256 of every file above
# DIST_TARGETS: the Rust targets to build, release profile (default: linux and macOS, amd64 and
#   arm64). `host-debug` instead packages the workspace's own debug build for this machine (the
#   Makefile's one build invocation, so nothing compiles again): `make dist-check` in `make test`
#   runs every step below on it.
# DIST_BASE_URL: where the archives and the chart are published; {version} is replaced.
# macOS is linked with cargo-zigbuild and zig from PyPI, which needs a macOS SDK (SDKROOT, or xcrun
# on a Mac): the plugin links the Security and CoreFoundation frameworks (rustls-native-certs,
# through kube's hyper-rustls), which zig does not ship. Without one the macOS platforms are left
# out, loudly, before compiling anything (docs/development.md, "Releases", has the linker's error).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
target_dir=${CARGO_TARGET_DIR:-$cache/target}
dist=$(mkdir -p "${DIST_DIR:-$root/dist}" && cd "${DIST_DIR:-$root/dist}" && pwd)
targets=${DIST_TARGETS:-x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin}
repository=$(sed -n 's/^repository = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)
base_url=${DIST_BASE_URL:-$repository/releases/download/v{version}}
ZIG_VERSION=0.17.0
ZIGBUILD_VERSION=0.24.1
CYCLONEDX_VERSION=0.5.9
BIN=kubectl-capi_providers

say() { echo "dist: $*" >&2; }

# os/arch of a Rust target, as krew and Go name them.
platform() {
  case $1 in
    x86_64-unknown-linux-gnu) echo linux/amd64 ;;
    aarch64-unknown-linux-gnu) echo linux/arm64 ;;
    x86_64-apple-darwin) echo darwin/amd64 ;;
    aarch64-apple-darwin) echo darwin/arm64 ;;
    host-debug) echo "linux/$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')" ;;
    *) say "unknown target $1"; return 1 ;;
  esac
}

# arm64_toolchain: Debian's cross gcc for linux/arm64.
# shellcheck source=cross.sh
source "$here/cross.sh"

# cargo-zigbuild from crates.io and zig from PyPI (the ziglang wheel), both cached.
zig_toolchain() {
  local zigdir="$cache/bin/ziglang-$ZIG_VERSION"
  if [[ ! -d "$zigdir/ziglang" ]]; then
    say "installing zig $ZIG_VERSION from PyPI into $zigdir"
    python3 -m pip install --quiet --disable-pip-version-check --target "$zigdir" "ziglang==$ZIG_VERSION" >&2 \
      || return 1
  fi
  # cargo-zigbuild runs `python3 -m ziglang` when no zig is on the PATH.
  export PYTHONPATH="$zigdir${PYTHONPATH:+:$PYTHONPATH}"
  local zigbuild
  zigbuild=$("$here/cargo-tool.sh" cargo-zigbuild "$ZIGBUILD_VERSION") || return 1
  export PATH="${zigbuild%/*}:$PATH"
}

# Builds the plugin for one target and prints the binary's path; fails when it cannot be built.
build() {
  local t=$1
  if [[ $t == host-debug ]]; then
    (cd "$root" && cargo build -q --locked --workspace --all-targets) >&2 || return 1
    echo "$target_dir/debug/$BIN"
    return
  fi
  rustup target list --installed | grep -qx "$t" || rustup target add "$t" >&2 || return 1
  local cmd=(cargo build --locked --release -p capi-plugin --target "$t")
  case $t in
    aarch64-unknown-linux-gnu) arm64_toolchain ;;
    *-apple-darwin) zig_toolchain || return 1; cmd=(cargo zigbuild --locked --release -p capi-plugin --target "$t") ;;
  esac
  say "${cmd[*]}"
  (cd "$root" && "${cmd[@]}") >&2 || return 1
  echo "$target_dir/$t/release/$BIN"
}

# A reproducible archive of one binary and the licence it is shipped under: fixed order, owner
# and time.
archive() {
  local bin=$1 out=$2 stage
  stage=$(mktemp -d)
  cp "$bin" "$stage/$BIN"
  chmod 0755 "$stage/$BIN"
  cp "$root/LICENSE" "$stage/LICENSE"
  chmod 0644 "$stage/LICENSE"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - LICENSE "$BIN" \
    | gzip -n >"$out"
  rm -rf "$stage"
}

epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
rm -f "$dist"/*.tar.gz "$dist"/capi-providers.yaml "$dist"/*.cdx.json "$dist"/SHA256SUMS
rm -rf "$dist/charts"
krew_args=() host_bin="" version=""
for t in $targets; do
  plat=$(platform "$t")
  if [[ $t == *-apple-darwin && -z ${SDKROOT:-} ]] && ! command -v xcrun >/dev/null; then
    say "SKIPPED $plat: no macOS SDK (set SDKROOT): linking needs its Security and CoreFoundation frameworks"
    continue
  fi
  if ! bin=$(build "$t"); then
    if [[ $t == *-apple-darwin ]]; then
      say "SKIPPED $plat: the build above failed"
      continue
    fi
    say "building $t failed"
    exit 1
  fi
  [[ $plat == "$(platform host-debug)" ]] && host_bin=$bin
  if [[ -z $version ]]; then
    # The version is the one the crate carries, as the binary reports it.
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)
  fi
  name="$BIN-$version-${plat%/*}-${plat#*/}.tar.gz"
  archive "$bin" "$dist/$name"
  krew_args+=(--archive "$plat=$dist/$name")
  say "$name"
done
[[ -n $host_bin ]] || { say "no archive for this machine's platform: the krew manifest is written by its binary"; exit 1; }
url=${base_url//\{version\}/$version}
"$host_bin" krew-manifest --uri-template "$url/$BIN-{version}-{os}-{arch}.tar.gz" "${krew_args[@]}" \
  >"$dist/capi-providers.yaml"

helm=$("$here/helm.sh")
"$helm" package "$root/manifests/helm/capi-provider-operator" -d "$dist/charts" >&2
# helm stamps the archive and the index with the time it runs: set them to the commit's.
for tgz in "$dist"/charts/*.tgz; do python3 "$here/chart-reproducible.py" package "$tgz" "$epoch"; done
"$helm" repo index "$dist/charts" --url "$url" >&2
python3 "$here/chart-reproducible.py" index "$dist/charts/index.yaml" "$epoch"

# The SBOMs of the plugin and of the operator (the image's binary), each with every crate it links
# (build-time dependencies are not shipped). cargo-cyclonedx writes one per workspace member, next
# to its Cargo.toml: keep the one asked for.
cyclonedx=$("$here/cargo-tool.sh" cargo-cyclonedx "$CYCLONEDX_VERSION")
sbom() {
  local dir=$1 name=$2
  SOURCE_DATE_EPOCH=$epoch "$cyclonedx" cyclonedx --manifest-path "$root/crates/$dir/Cargo.toml" --format json \
    --spec-version 1.5 --no-build-deps --override-filename "$name.cdx" -q >&2
  mv "$root/crates/$dir/$name.cdx.json" "$dist/"
  rm -f "$root"/crates/*/"$name.cdx.json"
}
sbom plugin capi-plugin
sbom operator capi-provider-operator

(cd "$dist" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum >SHA256SUMS)
say "$(wc -l <"$dist/SHA256SUMS") files in $dist"
