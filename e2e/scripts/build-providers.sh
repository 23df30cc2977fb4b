#!/usr/bin/env bash
# Builds the real provider managers the real node runs, from the Go module proxy, into a cache
# directory keyed by version (a second run is a no-op):
#   - the Cluster API managers of each version in CAPI_VERSIONS and CAPI_MANAGER_VERSIONS: core
#     (cluster-api-controller), kubeadm bootstrap (kubeadm-bootstrap-controller), kubeadm control plane
#     (kubeadm-control-plane-controller), sharing the Go build cache — and, for CAPI_VERSIONS only,
#     that version's clusterctl (the tests run it against operator-managed providers);
#   - the releases of those versions as Cluster API publishes them (core-components.yaml,
#     bootstrap-components.yaml, control-plane-components.yaml, metadata.yaml), assembled with
#     kustomize from each module's own config/ into releases/<provider>/<version>/ — the layout of
#     ../shared/testdata/providers;
#   - the docker (in-memory) provider of CAPI_VERSIONS and CAPD_VERSIONS, with its release;
#   - cert-manager CERT_MANAGER_VERSION: controller, cainjector, webhook, and its release manifest
#     (cert-manager.yaml: CRDs, RBAC, Deployments, Services, webhook configurations) rendered from the
#     Helm chart inside the same module with the project's helm, as cert-manager's release tooling does;
#   - kubernetes-sigs/cluster-api-operator GO_OPERATOR_VERSION (the operator this one replaces; the
#     handover tests run it), its CRDs as released (config/crd/bases) and a self-signed serving
#     certificate for its webhook server (nothing calls it; it must only start).
# Writes images.yaml (each image → its binary: the tests find the managers through it) and prints
# its path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mods="$here/../providers"
# shellcheck source=versions.env
source "$here/versions.env"
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
# One build at a time: make runs integration and docs-check side by side, and both (or a docs
# block) may ask for what this builds; the second waits, then finds it built.
mkdir -p "$cache"
exec 9>"$cache/.build-providers.lock"
flock 9
root="$cache/bin/providers"
mkdir -p "$root"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
# kustomize renders the docker (in-memory) provider's release from its module's config/, as Cluster
# API's release tooling does (the version its Makefile pins). Kept here, not in versions.env, whose
# every change rebuilds the control plane.
KUSTOMIZE_VERSION=v5.7.0
GO_OPERATOR_VERSION=v0.28.0
# Cluster API lines the tests run besides CAPI_VERSIONS (managers and releases, no clusterctl), kept
# here for the same reason: v1.10, the last line of contract v1beta1, and v1.13 and v1.14, what users
# run. Each is the newest patch of its line whose module zip the proxy serves (v1.13.7+ and v1.14.3
# are refused, v1.10.10 is the line's last).
CAPI_MANAGER_VERSIONS="v1.10.10 v1.13.6 v1.14.2"
# The docker (in-memory) provider of these lines that the tests run (the v1beta1 → v1beta2 upgrade
# starts on v1.10; the test module of v1.14 needs packages the proxy does not serve).
CAPD_VERSIONS="v1.10.10"

module_dir() { # wrapper module dir, module path → where the module's source is (downloaded first)
  # `go list -m` names a directory only once the module is in the module cache: on a fresh
  # machine it prints nothing until something downloads it.
  local dir
  dir=$(cd "$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
  [[ -n "$dir" && -d "$dir" ]] || { echo "build-providers: no source of $2 for $1" >&2; return 1; }
  echo "$dir"
}

stamp_of() { # module dir → stamp name covering its go.sum and this script
  cat "$1/go.sum" "$1/go.mod" "$0" | sha256sum | cut -c1-16
}

capi_ldflags() { # version → linker flags stamping Cluster API's version package as its releases do
  local v=$1 minor=${1#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  ld+=" -X sigs.k8s.io/cluster-api/version.gitVersion=$v -X sigs.k8s.io/cluster-api/version.gitMajor=1"
  ld+=" -X sigs.k8s.io/cluster-api/version.gitMinor=$minor -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
  ld+=" -X sigs.k8s.io/cluster-api/version.buildDate=1970-01-01T00:00:00Z"
  echo "$ld"
}

build_capi() { # version, "clusterctl" to build it too
  local v=$1 mod="$mods/cluster-api-$1" out="$root/cluster-api-$1"
  local stamp; stamp="$out/.complete-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && return 0
  mkdir -p "$out"
  local ld; ld=$(capi_ldflags "$v")
  # v1.14 moved the core manager's main package from the module root to core/.
  local core=sigs.k8s.io/cluster-api src
  src=$(module_dir "$mod" sigs.k8s.io/cluster-api)
  [[ -f "$src/core/main.go" ]] && core=sigs.k8s.io/cluster-api/core
  echo "build-providers: building Cluster API $v managers into $out (first time: several minutes)" >&2
  (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$out/cluster-api-controller" "$core" \
    && go build -trimpath -ldflags "$ld" -o "$out/kubeadm-bootstrap-controller" sigs.k8s.io/cluster-api/bootstrap/kubeadm \
    && go build -trimpath -ldflags "$ld" -o "$out/kubeadm-control-plane-controller" sigs.k8s.io/cluster-api/controlplane/kubeadm) >&2
  if [[ "${2:-}" == clusterctl ]]; then
    (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$out/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl) >&2
  fi
  touch "$stamp"
}

# The release as Cluster API's `make release` makes it: `manifest-modification` sets each manager's
# image (registry.k8s.io/cluster-api/NAME:VERSION) and pull policy (IfNotPresent) in its
# config/default patches, `release-manifests` runs kustomize over config/default of the core (the
# module root's config/, core/config/ from v1.14 on), bootstrap/kubeadm and controlplane/kubeadm,
# and copies the repository's metadata.yaml.
assemble_capi() { # version
  local v=$1 mod="$mods/cluster-api-$1" dest="$root/releases"
  local stamp; stamp="$dest/.complete-$v-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && return 0
  local kustomize src cfg core provider dir file image
  kustomize=$(build_kustomize)
  src=$(module_dir "$mod" sigs.k8s.io/cluster-api)
  core=config; [[ -d "$src/core/config" ]] && core=core/config
  cfg=$(mktemp -d)
  while read -r provider dir file image; do
    mkdir -p "$cfg/$dir"
    cp -r "$src/$dir/." "$cfg/$dir/"
    chmod -R u+w "$cfg/$dir"
    sed -i "s@image: .*@image: registry.k8s.io/cluster-api/$image:$v@" "$cfg/$dir/default/manager_image_patch.yaml"
    sed -i "s@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@" "$cfg/$dir/default/manager_pull_policy.yaml"
    mkdir -p "$dest/$provider/$v"
    "$kustomize" build "$cfg/$dir/default" > "$dest/$provider/$v/$file"
    grep -q "image: registry.k8s.io/cluster-api/$image:$v" "$dest/$provider/$v/$file" \
      || { echo "build-providers: the assembled $provider $v release lacks its image" >&2; return 1; }
    # The module cache's files are read-only; the copy must not be (a rebuild overwrites it).
    rm -f "$dest/$provider/$v/metadata.yaml"
    cp "$src/metadata.yaml" "$dest/$provider/$v/metadata.yaml"
    chmod u+w "$dest/$provider/$v/metadata.yaml"
  done <<EOF
cluster-api $core core-components.yaml cluster-api-controller
bootstrap-kubeadm bootstrap/kubeadm/config bootstrap-components.yaml kubeadm-bootstrap-controller
control-plane-kubeadm controlplane/kubeadm/config control-plane-components.yaml kubeadm-control-plane-controller
EOF
  rm -rf "$cfg"
  touch "$stamp"
}

build_kustomize() {
  local mod="$mods/kustomize-$KUSTOMIZE_VERSION" out="$root/kustomize-$KUSTOMIZE_VERSION"
  local stamp; stamp="$out/.complete-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && { echo "$out/kustomize"; return 0; }
  mkdir -p "$out"
  (cd "$mod" && go build -trimpath -o "$out/kustomize" sigs.k8s.io/kustomize/kustomize/v5) >&2
  touch "$stamp"
  echo "$out/kustomize"
}

build_capd() { # version
  local v=$1 mod="$mods/cluster-api-test-$1" out="$root/capd-$1"
  local stamp; stamp="$out/.complete-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && return 0
  mkdir -p "$out"
  local ld; ld=$(capi_ldflags "$v")
  echo "build-providers: building Cluster API $v docker/in-memory provider into $out (first time: minutes)" >&2
  (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$out/capd-manager" \
    sigs.k8s.io/cluster-api/test/infrastructure/docker) >&2
  render_capd "$v" "$out"
  touch "$stamp"
}

# The provider's release as Cluster API's `make release-manifests` makes it: kustomize over the
# module's config/default with the manager image set to the release's, and the repository's
# metadata.yaml (the docker provider is released with Cluster API and shares its release series).
render_capd() { # version, out
  local v=$1 out=$2 src core cfg kustomize
  kustomize=$(build_kustomize)
  src=$(module_dir "$mods/cluster-api-test-$v" sigs.k8s.io/cluster-api/test)
  core=$(module_dir "$mods/cluster-api-test-$v" sigs.k8s.io/cluster-api)
  cfg=$(mktemp -d)
  cp -r "$src/infrastructure/docker/config" "$cfg/"
  chmod -R u+w "$cfg"
  sed -i -e "s|image: .*capd-manager:.*|image: registry.k8s.io/cluster-api/capd-manager:$v|" \
    -e "s|imagePullPolicy: Always|imagePullPolicy: IfNotPresent|" \
    "$cfg/config/default/manager_image_patch.yaml" "$cfg/config/default/manager_pull_policy.yaml"
  mkdir -p "$out/release"
  "$kustomize" build "$cfg/config/default" > "$out/release/infrastructure-components.yaml"
  # The module cache's files are read-only; the copy must not be (a rebuild overwrites it).
  rm -f "$out/release/metadata.yaml"
  cp "$core/metadata.yaml" "$out/release/metadata.yaml"
  chmod u+w "$out/release/metadata.yaml"
  rm -rf "$cfg"
  grep -q "capd-manager:$v" "$out/release/infrastructure-components.yaml" \
    || { echo "build-providers: the rendered docker provider release lacks its image" >&2; return 1; }
}

build_cert_manager() { # version
  local v=$1 mod="$mods/cert-manager-$1" out="$root/cert-manager-$1"
  local stamp; stamp="$out/.complete-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && return 0
  mkdir -p "$out"
  local ld="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v"
  ld+=" -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=release-$v"
  echo "build-providers: building cert-manager $v into $out (first time: several minutes)" >&2
  local c
  for c in controller cainjector webhook; do
    (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$out/cert-manager-$c" \
      "github.com/cert-manager/cert-manager/cmd/$c") >&2
  done
  render_cert_manager "$v" "$out" >&2
  touch "$stamp"
}

# The label and taint of the real node (e2e/scripts/real-node-up.sh) cert-manager is placed by.
cert_manager_node=capi-provider-operator.dev/real-node

# cert-manager's release manifest is its Helm chart rendered with installCRDs=true; the chart in the
# module is a template (Chart.template.yaml, CRDs in deploy/crds), assembled here as its release
# tooling assembles it.
render_cert_manager() { # version, out
  local v=$1 out=$2 src chart
  src=$(module_dir "$mods/cert-manager-$v" github.com/cert-manager/cert-manager)
  chart=$(mktemp -d)
  cp -r "$src/deploy/charts/cert-manager" "$chart/"
  chmod -R u+w "$chart"
  sed -e "s/^version: .*/version: $v/" -e "s/^appVersion: .*/appVersion: $v/" \
    "$chart/cert-manager/Chart.template.yaml" > "$chart/cert-manager/Chart.yaml"
  {
    echo '{{- if .Values.installCRDs }}'
    local f
    for f in "$src"/deploy/crds/crd-*.yaml; do echo '---'; cat "$f"; done
    echo '{{- end }}'
  } > "$chart/cert-manager/templates/crds.yaml"
  # Scheduled onto the real node (its label and taint), where the release images run.
  cat > "$chart/values.yaml" <<VALUES
installCRDs: true
startupapicheck: {enabled: false}
nodeSelector: &node {$cert_manager_node: "true"}
tolerations: &tolerate [{key: $cert_manager_node, operator: Exists, effect: NoSchedule}]
webhook: {nodeSelector: *node, tolerations: *tolerate}
cainjector: {nodeSelector: *node, tolerations: *tolerate}
VALUES
  local helm; helm=$("$here/helm.sh")
  {
    cat "$src/deploy/manifests/namespace.yaml"
    "$helm" template cert-manager "$chart/cert-manager" --namespace cert-manager -f "$chart/values.yaml" \
      --kube-version "$KUBE_VERSION"
  } > "$out/cert-manager.yaml.tmp"
  mv "$out/cert-manager.yaml.tmp" "$out/cert-manager.yaml"
  rm -rf "$chart"
}

build_go_operator() { # version
  local v=$1 mod="$mods/cluster-api-operator-$1" out="$root/cluster-api-operator-$1"
  local stamp; stamp="$out/.complete-$(stamp_of "$mod")"
  [[ -f "$stamp" ]] && return 0
  mkdir -p "$out/crds" "$out/webhook-certs"
  echo "build-providers: building cluster-api-operator $v into $out (first time: minutes)" >&2
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/cluster-api-operator" \
    sigs.k8s.io/cluster-api-operator/cmd) >&2
  local src; src=$(module_dir "$mod" sigs.k8s.io/cluster-api-operator)
  rm -f "$out"/crds/*.yaml
  cp "$src"/config/crd/bases/*.yaml "$out/crds/"
  chmod u+w "$out"/crds/*.yaml
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=capi-operator-webhook" \
    -keyout "$out/webhook-certs/tls.key" -out "$out/webhook-certs/tls.crt" 2>/dev/null
  render_go_operator "$v" "$out" "$src"
  touch "$stamp"
}

# Its release manifest (operator-components.yaml) as its release tooling makes it: kustomize over
# the module's config/default with the manager image set to the release's.
render_go_operator() { # version, out, module dir
  local v=$1 out=$2 src=$3 cfg kustomize
  kustomize=$(build_kustomize)
  cfg=$(mktemp -d)
  cp -r "$src/config" "$cfg/"
  chmod -R u+w "$cfg"
  sed -i "s|image: .*cluster-api-operator:dev|image: registry.k8s.io/capi-operator/cluster-api-operator:$v|" \
    "$cfg/config/default/manager_image_patch.yaml"
  "$kustomize" build "$cfg/config/default" > "$out/operator-components.yaml"
  rm -rf "$cfg"
  grep -q "cluster-api-operator:$v" "$out/operator-components.yaml" \
    || { echo "build-providers: the rendered cluster-api-operator release lacks its image" >&2; return 1; }
}

for v in $CAPI_VERSIONS; do build_capi "$v" clusterctl; build_capd "$v"; assemble_capi "$v"; done
for v in $CAPI_MANAGER_VERSIONS; do build_capi "$v"; assemble_capi "$v"; done
for v in $CAPD_VERSIONS; do build_capd "$v"; done
build_go_operator "$GO_OPERATOR_VERSION"
build_cert_manager "$CERT_MANAGER_VERSION"

images="$root/images.yaml"
{
  echo "# Generated by e2e/scripts/build-providers.sh: image repository (last path segment) and tag → binary."
  echo "images:"
  for v in $CAPI_VERSIONS $CAPI_MANAGER_VERSIONS; do
    for b in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
      printf -- '- repository: %s\n  tag: %s\n  binary: %s\n' "$b" "$v" "$root/cluster-api-$v/$b"
    done
  done
  for v in $CAPI_VERSIONS $CAPD_VERSIONS; do
    printf -- '- repository: capd-manager\n  tag: %s\n  binary: %s\n' "$v" "$root/capd-$v/capd-manager"
  done
  for c in controller cainjector webhook; do
    printf -- '- repository: cert-manager-%s\n  tag: %s\n  binary: %s\n' "$c" "$CERT_MANAGER_VERSION" \
      "$root/cert-manager-$CERT_MANAGER_VERSION/cert-manager-$c"
  done
  printf -- '- repository: cluster-api-operator\n  tag: %s\n  binary: %s\n' "$GO_OPERATOR_VERSION" \
    "$root/cluster-api-operator-$GO_OPERATOR_VERSION/cluster-api-operator"
} > "$images.tmp"
mv "$images.tmp" "$images"
echo "$images"
