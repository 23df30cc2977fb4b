#!/usr/bin/env bash
# make images: packages every manager binary build-providers.sh builds (the Cluster API managers of
# each CAPI_VERSIONS and CAPI_MANAGER_VERSIONS, the docker/in-memory provider, cert-manager, the Go
# cluster-api-operator; all CGO_ENABLED=0 static, checked here) as a one-layer OCI image (oci.sh:
# crane, with the /tmp, /home/nonroot and HOME of the distroless:nonroot base upstream uses) and
# pushes it with crane to a local registry (docker-registry, TLS, basic auth) under the
# repository and tag its release manifest names, kept as the registry's storage host by host:
# registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0 is the repository
# `registry.k8s.io/cluster-api/cluster-api-controller`.
# The real node's registry serves that storage read-only and containerd's mirror configuration maps
# each upstream host to its path there (real-node-up.sh), so release manifests are applied
# unchanged. One image is also pushed to a second storage, served with authentication only: the
# private repository PRIVATE_REF of the pull-secret test.
#
# Cached by version: an image is pushed again only when its binary (or oci.sh, crane.sh) changed; a
# warm run starts no registry. Prints the storage directory (public/ and private/ in it);
# `images.sh --refs` prints the image references instead, building nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=registry.sh
source "$here/registry.sh"
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
# One build at a time: make runs integration and docs-check side by side, and both (or a docs
# block) may ask for what this builds; the second waits, then finds it built.
mkdir -p "$cache"
exec 9>"$cache/.images.lock"
flock 9
providers="$cache/bin/providers"
store="$cache/images"
PRIVATE_REF=registry.capi-provider-operator.local/private/cluster-api-controller
log() { echo "images: $*" >&2; }

[[ "${1:-}" == --refs ]] || "$here/build-providers.sh" >/dev/null
tools=$(cat "$here/oci.sh" "$here/crane.sh" | sha256sum | cut -c1-16)

# "REF BINARY DEST": the image each release manifest names, the binary in it, and where.
specs() {
  local v c managers capd
  # The lines build-providers.sh builds besides CAPI_VERSIONS (kept there, see its comment).
  managers=$(sed -n 's/^CAPI_MANAGER_VERSIONS="\(.*\)"$/\1/p' "$here/build-providers.sh")
  capd=$(sed -n 's/^CAPD_VERSIONS="\(.*\)"$/\1/p' "$here/build-providers.sh")
  for v in $CAPI_VERSIONS $managers; do
    for c in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
      echo "registry.k8s.io/cluster-api/$c:$v $providers/cluster-api-$v/$c /manager"
    done
  done
  for v in $CAPI_VERSIONS $capd; do
    echo "registry.k8s.io/cluster-api/capd-manager:$v $providers/capd-$v/capd-manager /manager"
  done
  for c in controller cainjector webhook; do
    echo "quay.io/jetstack/cert-manager-$c:$CERT_MANAGER_VERSION" \
      "$providers/cert-manager-$CERT_MANAGER_VERSION/cert-manager-$c /app/cmd/$c/$c"
  done
  local op
  op=$(sed -n 's/^GO_OPERATOR_VERSION=//p' "$here/build-providers.sh")
  echo "registry.k8s.io/capi-operator/cluster-api-operator:$op $providers/cluster-api-operator-$op/cluster-api-operator /manager"
}

if [[ "${1:-}" == --refs ]]; then specs | cut -d' ' -f1; exit 0; fi

# The stamp of an image: its binary's size and time and the tools' hash.
stamp_file() { echo "$store/stamps/$(tr '/:' '__' <<<"$1")"; }
stamp_of() { echo "$(stat -c '%s %Y' "$1") $tools"; }

# Other tools write other blobs: the storage starts anew rather than keep the old ones as garbage.
if [[ "$(cat "$store/tools" 2>/dev/null)" != "$tools" ]]; then
  rm -rf "$store/public" "$store/private" "$store/stamps"
  mkdir -p "$store"
  echo "$tools" >"$store/tools"
fi
todo=()
while read -r ref bin dest; do
  [[ "$(cat "$(stamp_file "$ref")" 2>/dev/null)" == "$(stamp_of "$bin")" ]] && continue
  # The node runs images as they are: a dynamically linked manager would not start in them.
  file -b "$bin" | grep -q 'statically linked' || { log "$bin is not statically linked (CGO_ENABLED=0)"; exit 1; }
  todo+=("$ref $bin $dest")
done < <(specs)
if [[ ${#todo[@]} -eq 0 ]]; then echo "$store"; exit 0; fi

# The release manifests name every image pushed, so a renamed one fails here, not on the node.
manifests=("$providers"/*/release/*.yaml "$providers"/*/*.yaml "$providers/releases" "${CAPI_SHARED_DIR:-/work/shared}/testdata")
for spec in "${todo[@]}"; do
  ref=${spec%% *}
  grep -rqF "$ref" "${manifests[@]}" 2>/dev/null || { log "no release manifest names $ref"; exit 1; }
done

t0=${EPOCHREALTIME/./}
work=$(mktemp -d "$store.XXXXXX")
pids=()
cleanup() { local p; for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$store/stamps"
CRANE=$("$here/crane.sh")
# shellcheck source=oci.sh
source "$here/oci.sh"
registry_cert "$work" 127.0.0.1
password=$(head -c 18 /dev/urandom | base64)
registry_htpasswd "$work/htpasswd" push "$password"
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pub="127.0.0.1:$(port)"
registry_start "$work/public.pid" "$store/public" "$pub" "$work" "$work/htpasswd" rw
pids+=("$(cat "$work/public.pid")")
priv="127.0.0.1:$(port)"
registry_start "$work/private.pid" "$store/private" "$priv" "$work" "$work/htpasswd" rw
pids+=("$(cat "$work/private.pid")")
oci_scratch "$work/scratch"
pids+=("$(cat "$work/scratch/scratch.pid")")
# crane's credentials and the registries' CA, for this run only.
export DOCKER_CONFIG="$work/docker" SSL_CERT_FILE="$work/tls.crt"
for r in "$pub" "$priv"; do oci_crane auth login "$r" -u push --password-stdin <<<"$password" >/dev/null; done
arch=$(oci_arch)
# Packing and compressing yield to the tests running beside (the registries keep their priority).
renice -n 19 $$ >/dev/null
for spec in "${todo[@]}"; do
  read -r ref bin dest <<<"$spec"
  log "packaging $ref"
  # What distroless/static:nonroot, upstream's base, has: a sticky /tmp and the home of user
  # 65532, which HOME names. Programs that write under $HOME (cluster-api-operator's clusterctl
  # library creates $HOME/.config) fail without it, as they would on an image that lacks it.
  fs="$work/fs"
  rm -rf "$fs"
  mkdir -p "$fs/tmp" "$fs/home/nonroot" "$fs$(dirname "$dest")"
  find "$fs" -type d -exec chmod 0755 {} +
  chmod 1777 "$fs/tmp"
  chmod 0700 "$fs/home/nonroot"
  install -m 0755 "$bin" "$fs$dest"
  oci_layer "$work/layer.tar" "$fs" 65532:home/nonroot
  oci_image "$work/layer.tar" "linux/$arch" --entrypoint="$dest" --user=65532 \
    --env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env=HOME=/home/nonroot \
    -t "$pub/$ref" >/dev/null
  [[ "$ref" == "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0" ]] \
    && oci_crane copy "$pub/$ref" "$priv/$PRIVATE_REF:v1.12.0"
  rm -rf "$fs" "$work/layer.tar"
  stamp_of "$bin" >"$(stamp_file "$ref")"
done
log "${#todo[@]} images pushed in $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms ($(du -sh "$store" | cut -f1) stored)"
echo "$store"
