#!/usr/bin/env bash
# `make release VERSION=vX.Y.Z`: everything a release publishes, built offline into DIST_DIR
# (default dist/) and signed with a cosign key; `make release-check` (release-check.py) verifies it.
#
#   everything `make dist` writes (dist.sh): the plugin archives, their krew manifest, the chart
#     (charts/*.tgz, charts/index.yaml), the SBOMs of the plugin and the operator
#   capi-provider-operator-image.oci.tar   the operator image for linux/amd64 and linux/arm64, one
#                                          OCI image index, as an OCI layout archive (operator-image.sh)
#   capi-provider-operator-image.digest    that index's digest (sha256:...)
#   capi-provider-operator.yaml            manifests/ rendered (kubectl kustomize): CRDs, RBAC, the
#                                          Deployment, the admission policy; the image pinned by that digest
#   capi-provider-operator-image.index.sig cosign's signature over the image index (the blob whose
#                                          digest is the pinned one)
#   charts/capi-provider-operator-<version>.tgz.sig   cosign's signature over the chart package
#   SHA256SUMS                             the SHA-256 of every file above
#   SHA256SUMS.sig                         cosign's signature over SHA256SUMS
#
# VERSION must be the version the tree carries: the workspace's (Cargo.toml, without the v), the
# chart's version (without) and appVersion (with it). The binaries report the version they were
# compiled with, so the script refuses a mismatch rather than relabelling them: a release bumps
# those three first (docs/development.md, "Releases").
# COSIGN_KEY: the cosign private key file (COSIGN_PASSWORD its password). Signing is offline: no
# transparency log (--tlog-upload=false), no OIDC.
# The artifacts are reproducible (dist.sh's archives, operator-image.sh's layout, kustomize's output);
# the signatures are not (ECDSA signs with a random nonce), but each verifies.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
say() { echo "release: $*" >&2; }
fail() { say "$*"; exit 1; }

version=${VERSION:?VERSION=vX.Y.Z: the version to release}
key=${COSIGN_KEY:?COSIGN_KEY: the cosign private key to sign with (COSIGN_PASSWORD its password)}
[[ -f $key ]] || fail "COSIGN_KEY=$key: no such file"
[[ -n ${COSIGN_PASSWORD+set} ]] || fail "COSIGN_PASSWORD is not set (cosign would prompt for it)"
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "VERSION=$version is not vX.Y.Z"
chart="$root/manifests/helm/capi-provider-operator"
crate=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)
chart_version=$(sed -n 's/^version: //p' "$chart/Chart.yaml")
app_version=$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")
[[ "v$crate" == "$version" && "v$chart_version" == "$version" && "$app_version" == "$version" ]] ||
  fail "VERSION=$version, but the tree carries $crate (Cargo.toml), chart version $chart_version and appVersion $app_version: bump them first"

dist=$(mkdir -p "${DIST_DIR:-$root/dist}" && cd "${DIST_DIR:-$root/dist}" && pwd)
cosign=$("$here/cosign.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# cosign offline: its TUF cache in the work directory, and any request that would leave the
# machine refused (a proxy nobody listens on), so a signature that needed the network fails here.
offline=(env TUF_ROOT="$work/tuf" HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1)

rm -f "$dist"/capi-provider-operator* "$dist"/SHA256SUMS.sig
DIST_DIR=$dist "$here/dist.sh"

image="$dist/capi-provider-operator-image.oci.tar"
out=$("$here/operator-image.sh" --archive "$image")
digest=$(tail -1 <<<"$out")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || fail "operator-image.sh printed $out, not a reference and a digest"
echo "$digest" >"$dist/capi-provider-operator-image.digest"

# The manifests with the image pinned by digest: kustomize's own image transformer, on a copy.
kubectl="$("$here/build.sh")/kubectl"
mkdir -p "$work/manifests"
cp -r "$root/manifests/." "$work/manifests/"
repo=$(sed -n 's/^  repository: //p' "$chart/values.yaml" | head -1)
printf 'images:\n- name: %s\n  digest: %s\n' "$repo" "$digest" >>"$work/manifests/kustomization.yaml"
"$kubectl" kustomize "$work/manifests" >"$dist/capi-provider-operator.yaml"
# Every image the manifest names is pinned: no other reference of the operator's image by tag.
if grep -nE "^\s*(- )?image: " "$dist/capi-provider-operator.yaml" | grep -v "@sha256:[0-9a-f]\{64\}$" >&2 ||
  grep -n "$repo[:\"' ]" "$dist/capi-provider-operator.yaml" >&2; then
  fail "capi-provider-operator.yaml names an image by tag (above)"
fi
grep -q "image: $repo@$digest$" "$dist/capi-provider-operator.yaml" || fail "the Deployment's image is not $repo@$digest"

# sign FILE SIGNATURE: an offline signature with the key, no transparency log.
sign() {
  "${offline[@]}" "$cosign" sign-blob --yes --key "$key" --tlog-upload=false --output-signature "$2" "$1" >/dev/null 2>"$work/sign.log" ||
    { cat "$work/sign.log" >&2; fail "cosign sign-blob $1 failed"; }
}
tar -xOf "$image" "blobs/sha256/${digest#sha256:}" >"$work/index.json"
[[ "sha256:$(sha256sum <"$work/index.json" | cut -c1-64)" == "$digest" ]] || fail "the archive's index is not $digest"
sign "$work/index.json" "$dist/capi-provider-operator-image.index.sig"
for tgz in "$dist"/charts/*.tgz; do sign "$tgz" "$tgz.sig"; done

(cd "$dist" && find . -type f ! -name 'SHA256SUMS*' | sed 's|^\./||' | sort | xargs sha256sum >SHA256SUMS)
sign "$dist/SHA256SUMS" "$dist/SHA256SUMS.sig"
say "$version in $dist: $(wc -l <"$dist/SHA256SUMS") files, the image $repo@$digest; signed"
