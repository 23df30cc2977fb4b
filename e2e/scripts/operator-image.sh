#!/usr/bin/env bash
# make image: the operator's image, built offline from this checkout, for linux/amd64 and
# linux/arm64 (cross-built as dist.sh builds the plugin, Debian's cross gcc) in one OCI index,
# pushed to the registry storage of `make images` under the reference the Helm chart and
# manifests/ name by default (ghcr.io/...:<appVersion>), so the real node (whose containerd
# mirrors ghcr.io to that storage) runs them unchanged.
#
# What the image holds is what the Dockerfile's image holds, without its base image to pull: the
# release build (glibc, so the GLIBC_TUNABLES the memory budget relies on apply), the glibc
# libraries it needs (this machine's for amd64, libc6-dev-arm64-cross's for arm64), Debian's
# CA certificates and /etc/passwd with the nonroot user 65532. Its ENV, USER, ENTRYPOINT, CMD and
# the binary's path are read from the Dockerfile (oci-index.py), the one definition of them.
#
# Cached: cargo's own incremental build, then the image is written and pushed again only when
# a binary, the Dockerfile or the tools changed and the tag is still stored. Prints the reference.
#
#   operator-image.sh [--archive PATH]
#
# --archive also writes the image's OCI layout archive (oci-index.py build) to PATH, and prints
# its index digest (sha256:...) after the reference: `make release` ships it. The archive of the
# last build is kept beside its stamp, so a cached run copies it instead of packing again.
set -euo pipefail
archive_out=""
case ${1:-} in
  --archive) archive_out=${2:?--archive needs a path} ;;
  "") ;;
  *) echo "usage: operator-image.sh [--archive PATH]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
# One build at a time: make runs integration and docs-check side by side, and both (or a docs
# block) may ask for what this builds; the second waits, then finds it built.
mkdir -p "$cache"
exec 9>"$cache/.operator-image.lock"
flock 9
target_dir=${CARGO_TARGET_DIR:-$cache/target}
store="$cache/images"
say() { echo "image: $*" >&2; }
# shellcheck source=cross.sh
source "$here/cross.sh"
# shellcheck source=registry.sh
source "$here/registry.sh"

chart="$root/manifests/helm/capi-provider-operator"
repo=$(sed -n 's/^  repository: //p' "$chart/values.yaml" | head -1)
tag=$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")
ref=${OPERATOR_IMAGE:-$repo:$tag}
# The binary's path in the image: the destination of the Dockerfile's COPY --from=build.
dest=$(sed -n 's/^COPY --from=build [^ ]* //p' "$root/Dockerfile")
[[ $dest == /* ]] || { say "no 'COPY --from=build SRC DEST' in the Dockerfile"; exit 1; }

targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
arm64_toolchain
for t in "${targets[@]}"; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t" >&2
done
t0=${EPOCHREALTIME/./}
(cd "$root" && nice -n 19 cargo build -q --locked --release -p capi-provider-operator \
  --bin capi-provider-operator "${targets[@]/#/--target=}") >&2
say "release build for amd64 and arm64 in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"

stamp_file="$store/stamps/operator-$(tr '/:' '__' <<<"$ref")"
kept="$store/archives/operator-$(tr '/:' '__' <<<"$ref").tar"
link="$store/public/docker/registry/v2/repositories/${ref%:*}/_manifests/tags/${ref##*:}/current/link"
stamp=$({
  for t in "${targets[@]}"; do sha256sum <"$target_dir/$t/release/capi-provider-operator"; done
  cat "$root/Dockerfile" "$here"/oci-{index,image,push}.py "$0" /etc/ssl/certs/ca-certificates.crt
} | sha256sum | cut -c1-32)
# done DIGEST: the archive where --archive asked for it, then what this script prints.
done_() {
  if [[ -n $archive_out ]]; then
    cp "$kept" "$archive_out"
    say "$archive_out ($1)"
  fi
  echo "$ref"
  [[ -z $archive_out ]] || echo "$1"
}
if [[ -f $link && "$(cat "$stamp_file" 2>/dev/null)" == "$stamp" && -f $kept ]]; then
  say "$ref unchanged ($(cat "$link"))"
  done_ "$(cat "$link")"
  exit 0
fi

work=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill -- "-$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# stage ARCH BINARY LIBDIR: the root filesystem of one platform.
stage() {
  local arch=$1 bin=$2 libdir=$3 fs="$work/$1" lib interp triplet
  triplet=$(basename "$libdir")
  [[ $triplet == lib ]] && triplet=$(basename "$(dirname "$libdir")")
  mkdir -p "$fs/$(dirname "$dest")" "$fs/lib/$triplet" "$fs/etc/ssl/certs" "$fs/tmp"
  install -m 0755 "$bin" "$fs$dest"
  # The libraries the binary names, from the platform's glibc, and its program interpreter.
  for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ -e "$libdir/$lib" ]] || { say "$arch: $lib not found in $libdir"; return 1; }
    install -m 0755 "$(readlink -f "$libdir/$lib")" "$fs/lib/$triplet/$lib"
  done
  interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
  mkdir -p "$fs$(dirname "$interp")"
  install -m 0755 "$(readlink -f "$libdir/$(basename "$interp")")" "$fs$interp"
  install -m 0644 /etc/ssl/certs/ca-certificates.crt "$fs/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$fs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$fs/etc/group"
  chmod 0644 "$fs/etc/passwd" "$fs/etc/group"
  chmod 1777 "$fs/tmp"
}
stage amd64 "$target_dir/x86_64-unknown-linux-gnu/release/capi-provider-operator" /lib/x86_64-linux-gnu
stage arm64 "$target_dir/aarch64-unknown-linux-gnu/release/capi-provider-operator" /usr/aarch64-linux-gnu/lib
python3 "$here/oci-index.py" build --name "$ref" --dockerfile "$root/Dockerfile" \
  --rootfs "amd64=$work/amd64" --rootfs "arm64=$work/arm64" "$work/image.tar" >/dev/null
mkdir -p "$store/archives"
# The stamp is written after the push: a kept archive without it is not trusted.
rm -f "$stamp_file"
mv "$work/image.tar" "$kept"

# Pushed as images.sh pushes: a registry of our own on the storage, for this push only.
registry_cert "$work" 127.0.0.1
password=$(head -c 18 /dev/urandom | base64)
registry_htpasswd "$work/htpasswd" push "$password"
addr="127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
registry_start "$work/public.pid" "$store/public" "$addr" "$work" "$work/htpasswd" rw
pid=$(cat "$work/public.pid")
digest=$(python3 "$here/oci-index.py" push --registry "$addr" --ca "$work/tls.crt" --user "push:$password" \
  "$kept" "$ref")
mkdir -p "$store/stamps"
echo "$stamp" >"$stamp_file"
say "$ref ($digest, amd64 and arm64) pushed in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
done_ "$digest"
