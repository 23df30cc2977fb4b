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
# the binary's path are read from the Dockerfile, the one definition of them. crane (oci.sh)
# writes each platform's image and the index in a scratch registry, then the OCI layout.
#
# Cached: cargo's own incremental build, then the image is written and pushed again only when
# a binary, the Dockerfile or the tools changed and the tag is still stored. Prints the reference.
#
#   operator-image.sh [--archive PATH]
#
# --archive also writes the image's OCI layout archive (reproducible) to PATH, and prints its
# index digest (sha256:...) after the reference: `make release` ships it. The archive of the last
# build is kept beside its stamp, so a cached run copies it instead of packing again.
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
  cat "$root/Dockerfile" "$here"/oci.sh "$here"/crane.sh "$0" /etc/ssl/certs/ca-certificates.crt
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
pids=()
cleanup() { local p; for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# The Dockerfile's last stage as crane mutate's arguments: its ENV over what the base
# (distroless/cc) sets, its USER, its ENTRYPOINT and CMD (the exec form, JSON arrays).
dockerfile_config() {
  local word rest pair key
  local -a keys=(PATH SSL_CERT_FILE) words
  local -A env=([PATH]=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    [SSL_CERT_FILE]=/etc/ssl/certs/ca-certificates.crt)
  # Comments dropped, continuations joined, then the instructions from the last FROM on.
  while read -r word rest; do
    case ${word^^} in
      ENV)
        read -ra words <<<"$rest"
        for pair in "${words[@]}"; do
          [[ $pair == *=* && $pair != *[\"\'\\]* ]] || { say "Dockerfile: ENV $rest: only KEY=VALUE words"; return 1; }
          key=${pair%%=*}
          [[ -n ${env[$key]+set} ]] || keys+=("$key")
          env[$key]=${pair#*=}
        done ;;
      USER) echo "--user=$rest" ;;
      ENTRYPOINT | CMD)
        mapfile -t words < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$rest" ||
          echo "not the exec form")
        [[ ${words[-1]} != "not the exec form" ]] || { say "Dockerfile: $word $rest: not the exec form"; return 1; }
        printf -- "--${word,,}=%s\n" "${words[@]}" ;;
    esac
  done < <(sed -e '/^[[:space:]]*#/d' -e ':a' -e '/\\$/{N;s/\\\n/ /;ba}' "$root/Dockerfile" |
    awk 'toupper($1) == "FROM" { n = 0 } NF { line[n++] = $0 } END { for (i = 0; i < n; i++) print line[i] }')
  for key in "${keys[@]}"; do echo "--env=$key=${env[$key]}"; done
}
config_text=$(dockerfile_config)
mapfile -t config <<<"$config_text"
[[ ${#config[@]} -gt 0 && ${config[*]} == *--entrypoint=* ]] || { say "no ENTRYPOINT in the Dockerfile's last stage"; exit 1; }

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

CRANE=$("$here/crane.sh")
# shellcheck source=oci.sh
source "$here/oci.sh"
oci_scratch "$work/scratch"
pids+=("$(cat "$work/scratch/scratch.pid")")
manifests=()
for arch in amd64 arm64; do
  oci_layer "$work/$arch.tar" "$work/$arch"
  manifest=$(oci_image "$work/$arch.tar" "linux/$arch" "${config[@]}" -t "$OCI_SCRATCH/operator:$arch")
  manifests+=(-m "$manifest")
done
index=$(oci_crane index append "${manifests[@]}" -t "$OCI_SCRATCH/operator:index")
oci_crane pull --format=oci "$index" "$work/layout"
# The image's name in index.json, as `ctr images import` and other OCI layout readers take it
# (crane's --annotate-ref would record the scratch registry's address instead). The index blob,
# and so the digest the release pins, stays as crane wrote it.
python3 - "$work/layout/index.json" "$ref" <<'PY'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
with open(path) as f:
    layout = json.load(f)
for m in layout["manifests"]:
    m.setdefault("annotations", {}).update({
        "io.containerd.image.name": ref,
        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
    })
with open(path, "w") as f:
    json.dump(layout, f, separators=(",", ":"), sort_keys=True)
PY
# The archive as tar writes it from the layout: sorted, time 0, owner root, modes fixed (crane
# writes some files with the umask's execute bits).
find "$work/layout" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
tar -C "$work/layout" -cf "$work/image.tar" --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 \
  --numeric-owner oci-layout index.json blobs
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
pids+=("$(cat "$work/public.pid")")
export DOCKER_CONFIG="$work/docker"
oci_crane auth login "$addr" -u push --password-stdin <<<"$password" >/dev/null
# The layout pushed is the one archived: its index, under the tag, with the same digest.
pushed=$(SSL_CERT_FILE="$work/tls.crt" oci_crane push "$work/layout" "$addr/$ref")
digest=${pushed##*@}
mkdir -p "$store/stamps"
echo "$stamp" >"$stamp_file"
say "$ref ($digest, amd64 and arm64) pushed in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
done_ "$digest"
