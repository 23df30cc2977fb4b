{{/* Labels every object of the release carries (Helm's and Kubernetes' recommended set). */}}
{{- define "capi-provider-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "capi-provider-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ include "capi-provider-operator.tag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cluster-api
app.kubernetes.io/component: operator
{{- end }}

{{/* The labels the Deployment selects its pods by; they never change across upgrades. */}}
{{- define "capi-provider-operator.selectorLabels" -}}
app.kubernetes.io/name: capi-provider-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image tag: image.tag (or cluster-api-operator's image.manager.tag), else the chart's appVersion. */}}
{{- define "capi-provider-operator.tag" -}}
{{- .Values.image.tag | default (default dict .Values.image.manager).tag | default .Chart.AppVersion -}}
{{- end }}

{{/* The Argo CD sync-wave annotation of the operator's objects, when argocd.syncWaves is set. */}}
{{- define "capi-provider-operator.annotations" -}}
{{- if .Values.argocd.syncWaves }}
argocd.argoproj.io/sync-wave: {{ .Values.argocd.operatorWave | quote }}
{{- end }}
{{- end }}

{{/* metadata.annotations of an operator object: nothing when there is none to set. */}}
{{- define "capi-provider-operator.metadataAnnotations" -}}
{{- with include "capi-provider-operator.annotations" . }}
annotations:
  {{- . | trim | nindent 2 }}
{{- end }}
{{- end }}

{{/* Annotations of provider objects and the namespaces created for them. */}}
{{- define "capi-provider-operator.providerAnnotations" -}}
{{- if .Values.keepProviders }}
helm.sh/resource-policy: keep
{{- end }}
{{- if .Values.argocd.syncWaves }}
argocd.argoproj.io/sync-wave: {{ .Values.argocd.providerWave | quote }}
argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true
{{- end }}
{{- end }}

{{/*
Every provider object the values declare, as JSON {"items": [{kind, name, namespace,
createNamespace, spec}], "implied": [...]}: the `providers` list, then the per-kind values (a map
keyed by name, or a string "[namespace:]name[:version];..." as `--set infrastructure=docker:v1.12.0`
gives). cluster-api-operator's chart's forms are read too: `enabled: false` drops a provider, and
the global manager.featureGates, fetchConfig and additionalDeployments reach the providers it gave
them to. "implied" lists the providers that chart adds by itself; they are declared only with
impliedProviders, so that nothing appears that the values do not ask for.
*/}}
{{- define "capi-provider-operator.providers" -}}
{{- $items := list }}
{{- range .Values.providers }}
{{- $items = append $items (dict "kind" .kind "name" .name "namespace" .namespace "createNamespace" (default false .createNamespace) "spec" (default dict .spec)) }}
{{- end }}
{{- $kinds := list
  (list "core" "CoreProvider" "")
  (list "bootstrap" "BootstrapProvider" "bootstrap")
  (list "controlPlane" "ControlPlaneProvider" "control-plane")
  (list "infrastructure" "InfrastructureProvider" "infrastructure")
  (list "addon" "AddonProvider" "addon")
  (list "ipam" "IPAMProvider" "ipam")
  (list "runtimeExtension" "RuntimeExtensionProvider" "runtime-extension") }}
{{- $sets := dict }}
{{- range $k := $kinds }}
{{- $sets = set $sets (index $k 0) (include "capi-provider-operator.providerSet" (get $.Values (index $k 0)) | fromJson) }}
{{- end }}
{{- $named := dict }}
{{- range $k := $kinds }}{{ if get $.Values (index $k 0) }}{{ $_ := set $named (index $k 0) true }}{{ end }}{{ end }}
{{- $implied := include "capi-provider-operator.implied" (dict "sets" $sets "named" $named "items" $items) | fromJson }}
{{- if .Values.impliedProviders }}
{{- range $implied.items }}{{ $_ := set (get $sets .key) .name (dict "namespace" .namespace) }}{{ end }}
{{- end }}
{{- $fields := list "version" "fetchConfig" "manager" "deployment" "manifestPatches" "patches" "additionalManifests" "additionalDeployments" "paused" }}
{{- range $k := $kinds }}
{{- range $name, $p := get $sets (index $k 0) }}
{{- $ns := $p.namespace | default (ternary "capi-system" (printf "%s-%s-system" $name (index $k 2)) (eq (index $k 0) "core")) }}
{{- $spec := deepCopy (default dict $p.spec) }}
{{- range $fields }}{{ if hasKey $p . }}{{ $_ := set $spec . (deepCopy (get $p .)) }}{{ end }}{{ end }}
{{- if not $spec.version }}{{ $_ := unset $spec "version" }}{{ end }}
{{- $spec = include "capi-provider-operator.upstreamGlobals" (dict "Values" $.Values "key" (index $k 0) "name" $name "spec" $spec) | fromJson }}
{{- /* The global configSecret applies to providers naming no Secret in any way. */}}
{{- $secret := $p.configSecret | default (ternary dict $.Values.configSecret (hasKey $spec "secretName")) }}
{{- with $secret.name }}{{ $_ := set $spec "secretName" . }}{{ end }}
{{- with $secret.namespace }}{{ $_ := set $spec "secretNamespace" . }}{{ end }}
{{- $create := ternary true $p.createNamespace (not (hasKey $p "createNamespace")) }}
{{- $item := dict "kind" (index $k 1) "name" $name "namespace" $ns "createNamespace" $create "spec" $spec }}
{{- /* cluster-api-operator's chart's form: the manifests written out, in a ConfigMap the chart creates. */}}
{{- with $spec.additionalManifests }}{{ if hasKey . "manifests" }}
{{- $_ := set $item "configMap" (dict "name" .name "namespace" (default $ns .namespace) "manifests" .manifests) }}
{{- $_ := set $spec "additionalManifests" (omit . "manifests") }}
{{- end }}{{ end }}
{{- $items = append $items $item }}
{{- end }}
{{- end }}
{{- $seen := dict }}
{{- range $items }}
{{- $key := printf "%s %s/%s" .kind .namespace .name }}
{{- if hasKey $seen $key }}{{ fail (printf "the values declare the %s twice" $key) }}{{ end }}
{{- $_ := set $seen $key true }}
{{- end }}
{{- dict "items" $items "implied" $implied.items | toJson }}
{{- end }}

{{/*
One per-kind value as a JSON map of name to entry: a map as written, or a string
"[namespace:]name[:version];..." parsed (cluster-api-operator's chart took the namespace first
until its 0.19). Entries with `enabled: false` are dropped.
*/}}
{{- define "capi-provider-operator.providerSet" -}}
{{- $set := . }}
{{- if kindIs "string" $set }}
{{- $parsed := dict }}
{{- range splitList ";" $set }}
{{- $parts := splitList ":" (trim .) }}
{{- if eq (len $parts) 3 }}
{{- $_ := set $parsed (index $parts 1) (dict "namespace" (index $parts 0) "version" (index $parts 2)) }}
{{- else if first $parts }}
{{- $_ := set $parsed (first $parts) (dict "version" (default "" (index (append $parts "") 1))) }}
{{- end }}
{{- end }}
{{- $set = $parsed }}
{{- end }}
{{- $out := dict }}
{{- range $name, $p := $set }}
{{- $p = default dict $p }}
{{- if ne (toString $p.enabled) "false" }}{{ $_ := set $out $name (omit $p "enabled") }}{{ end }}
{{- end }}
{{- $out | toJson }}
{{- end }}

{{/*
The providers cluster-api-operator's chart adds by itself, as JSON {"items": [{key, name,
namespace}]}: a core provider cluster-api in capi-system when any other kind but
runtimeExtension is declared and no core provider is, and kubeadm bootstrap and control plane
providers, in capi-kubeadm-bootstrap-system and capi-kubeadm-control-plane-system, when an
infrastructure provider is declared and no provider of that kind is. A provider named with
`enabled: false` declares nothing, yet its kind counts as given: none is implied in its place.
*/}}
{{- define "capi-provider-operator.implied" -}}
{{- $has := dict }}
{{- range $key, $set := .sets }}{{ if $set }}{{ $_ := set $has $key true }}{{ end }}{{ end }}
{{- $byKind := dict "CoreProvider" "core" "BootstrapProvider" "bootstrap" "ControlPlaneProvider" "controlPlane" "InfrastructureProvider" "infrastructure" "AddonProvider" "addon" "IPAMProvider" "ipam" }}
{{- range .items }}{{ with get $byKind .kind }}{{ $_ := set $has . true }}{{ end }}{{ end }}
{{- $given := merge (dict) .named $has }}
{{- $implied := list }}
{{- if and (not $given.core) (or $has.bootstrap $has.controlPlane $has.infrastructure $has.addon $has.ipam) }}
{{- $implied = append $implied (dict "key" "core" "kind" "CoreProvider" "name" "cluster-api" "namespace" "capi-system") }}
{{- end }}
{{- if and $has.infrastructure (not $given.bootstrap) }}
{{- $implied = append $implied (dict "key" "bootstrap" "kind" "BootstrapProvider" "name" "kubeadm" "namespace" "capi-kubeadm-bootstrap-system") }}
{{- end }}
{{- if and $has.infrastructure (not $given.controlPlane) }}
{{- $implied = append $implied (dict "key" "controlPlane" "kind" "ControlPlaneProvider" "name" "kubeadm" "namespace" "capi-kubeadm-control-plane-system") }}
{{- end }}
{{- dict "items" $implied | toJson }}
{{- end }}

{{/*
The spec of provider `name` of kind `key` with cluster-api-operator's chart's global values
applied where that chart applied them: manager.featureGates.<name> to control plane,
infrastructure and IPAM providers (and manager.featureGates.core to core ones), fetchConfig.<name>
and additionalDeployments to infrastructure and IPAM providers. A value the provider's own entry
sets otherwise fails.
*/}}
{{- define "capi-provider-operator.upstreamGlobals" -}}
{{- $spec := .spec }}
{{- $gatesKey := ternary "core" .name (eq .key "core") }}
{{- $gates := get (default dict (default dict .Values.manager).featureGates) $gatesKey }}
{{- if and $gates (has .key (list "core" "controlPlane" "infrastructure" "ipam")) }}
{{- $manager := default dict $spec.manager }}
{{- $own := default dict $manager.featureGates }}
{{- range $gate, $on := $gates }}
{{- if and (hasKey $own $gate) (ne (toString (get $own $gate)) (toString $on)) }}
{{- fail (printf "manager.featureGates.%s.%s (%v) and the provider's own manager.featureGates.%s (%v) disagree: set one of them" $gatesKey $gate $on $gate (get $own $gate)) }}
{{- end }}
{{- $_ := set $own $gate $on }}
{{- end }}
{{- $_ := set $manager "featureGates" $own }}
{{- $_ := set $spec "manager" $manager }}
{{- end }}
{{- if has .key (list "infrastructure" "ipam") }}
{{- $globals := dict "fetchConfig" (get (default dict .Values.fetchConfig) .name) "additionalDeployments" .Values.additionalDeployments }}
{{- range $field, $v := $globals }}
{{- if $v }}
{{- if and (hasKey $spec $field) (ne (toJson (get $spec $field)) (toJson $v)) }}
{{- fail (printf "the global %s for %s and the provider's own %s disagree: set one of them" $field $.name $field) }}
{{- end }}
{{- $_ := set $spec $field $v }}
{{- end }}
{{- end }}
{{- end }}
{{- $spec | toJson }}
{{- end }}

{{/* The ConfigMap the operator watches for the image mirror setting. */}}
{{- define "capi-provider-operator.imageMirrorConfigMap" -}}
{{- default (printf "%s-image-mirror" .Release.Name) .Values.imageMirror.configMap -}}
{{- end }}

{{/*
`(list ours default theirs ourKey theirKey)`: the value of a setting this chart and
cluster-api-operator's chart both name, as JSON {"v": value}. Theirs is taken where ours is at its
default (Helm cannot tell a default from the same value written); where both are set they must
agree.
*/}}
{{- define "capi-provider-operator.pick" -}}
{{- $ours := index . 0 }}
{{- $theirs := index . 2 }}
{{- $v := $ours }}
{{- if not (kindIs "invalid" $theirs) }}
{{- if eq (toJson $ours) (toJson (index . 1)) }}
{{- $v = $theirs }}
{{- else if ne (toJson $ours) (toJson $theirs) }}
{{- fail (printf "%s (%s) and cluster-api-operator's %s (%s) disagree: set one of them" (index . 3) (toJson $ours) (index . 4) (toJson $theirs)) }}
{{- end }}
{{- end }}
{{- dict "v" $v | toJson }}
{{- end }}

{{/*
`(list ours default theirs ourKey theirKey)` for securityContexts: their keys over ours; a key
set in both, to different values, fails unless ours is at its default.
*/}}
{{- define "capi-provider-operator.mergeKeys" -}}
{{- $ours := index . 0 }}
{{- $default := index . 1 }}
{{- $out := deepCopy $ours }}
{{- range $k, $v := default dict (index . 2) }}
{{- if and (hasKey $ours $k) (ne (toJson (get $ours $k)) (toJson $v)) (ne (toJson (get $ours $k)) (toJson (get $default $k))) }}
{{- fail (printf "%s.%s and cluster-api-operator's %s.%s disagree: set one of them" (index $ 3) $k (index $ 4) $k) }}
{{- end }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- $out | toJson }}
{{- end }}

{{/*
The operator's Deployment settings as JSON, with cluster-api-operator's chart's names read too
(docs/migration-from-cluster-api-operator.md has the table). The defaults named here are
values.yaml's: a value of that chart replaces ours only while ours is at its default.
*/}}
{{- define "capi-provider-operator.operator" -}}
{{- $v := .Values }}
{{- $pick := "capi-provider-operator.pick" }}
{{- $up := default dict $v.image.manager }}
{{- $repo := $up.repository }}
{{- if and $repo $up.registry }}{{ $repo = printf "%s/%s" $up.registry $repo }}{{ end }}
{{- if and $repo (eq (base $repo) "cluster-api-operator") }}
{{- fail (printf "image.manager.repository %s is cluster-api-operator's image; this chart runs capi-provider-operator: drop it, or name a mirror of this operator's image" $repo) }}
{{- end }}
{{- $out := dict }}
{{- $_ := set $out "replicas" (include $pick (list $v.replicas 2 $v.replicaCount "replicas" "replicaCount") | fromJson).v }}
{{- $repo = (include $pick (list $v.image.repository "ghcr.io/capi-provider-operator/capi-provider-operator" $repo "image.repository" "image.manager.repository") | fromJson).v }}
{{- $tag := (include $pick (list $v.image.tag "" $up.tag "image.tag" "image.manager.tag") | fromJson).v | default .Chart.AppVersion }}
{{- $_ = set $out "image" (ternary (printf "%s@%s" $repo $up.digest) (printf "%s:%s" $repo $tag) (not (empty $up.digest))) }}
{{- $_ = set $out "pullPolicy" (include $pick (list $v.image.pullPolicy "IfNotPresent" $up.pullPolicy "image.pullPolicy" "image.manager.pullPolicy") | fromJson).v }}
{{- $leader := $v.leaderElection }}
{{- if kindIs "map" $leader }}{{ $leader = ternary $leader.enabled true (hasKey $leader "enabled") }}{{ end }}
{{- $_ = set $out "leaderElection" $leader }}
{{- $healthAddr := $v.healthAddr }}
{{- with $healthAddr }}{{ $healthAddr = int (last (splitList ":" (toString .))) }}{{ end }}
{{- $_ = set $out "healthPort" (include $pick (list $v.healthPort 8081 $healthAddr "healthPort" "healthAddr") | fromJson).v }}
{{- $env := $v.env }}
{{- if kindIs "map" $env }}{{ $env = default list $env.manager }}{{ end }}
{{- if not (kindIs "invalid" $v.logLevel) }}
{{- range $env }}{{ if eq .name "RUST_LOG" }}{{ fail "logLevel and an env RUST_LOG are both set: set one of them" }}{{ end }}{{ end }}
{{- $level := ternary "info" (ternary "debug" "trace" (le (int $v.logLevel) 4)) (le (int $v.logLevel) 2) }}
{{- $env = append $env (dict "name" "RUST_LOG" "value" $level) }}
{{- end }}
{{- $_ = set $out "env" $env }}
{{- $resourcesDefault := dict "requests" (dict "cpu" "50m" "memory" "64Mi") "limits" (dict "cpu" "1" "memory" "256Mi") }}
{{- $_ = set $out "resources" (include $pick (list (omit $v.resources "manager") $resourcesDefault $v.resources.manager "resources" "resources.manager") | fromJson).v }}
{{- $containerDefault := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "capabilities" (dict "drop" (list "ALL")) }}
{{- $_ = set $out "containerSecurityContext" (include "capi-provider-operator.mergeKeys" (list (omit $v.containerSecurityContext "manager") $containerDefault $v.containerSecurityContext.manager "containerSecurityContext" "containerSecurityContext.manager") | fromJson) }}
{{- $podDefault := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") }}
{{- $_ = set $out "podSecurityContext" (include "capi-provider-operator.mergeKeys" (list $v.podSecurityContext $podDefault $v.securityContext "podSecurityContext" "securityContext") | fromJson) }}
{{- $_ = set $out "volumes" (concat (default list $v.extraVolumes) (default list $v.volumes)) }}
{{- $_ = set $out "volumeMounts" (concat (default list $v.extraVolumeMounts) (default list (default dict $v.volumeMounts).manager)) }}
{{- $_ = set $out "imagePullSecrets" (ternary $v.imagePullSecrets list (kindIs "slice" $v.imagePullSecrets)) }}
{{- $ignored := list }}
{{- range list "diagnosticsAddress" "insecureDiagnostics" "profilerAddress" "contentionProfiling" "enableHelmHook" "watchConfigSecret" "watchConfigMap" }}
{{- if not (kindIs "invalid" (get $v .)) }}{{ $ignored = append $ignored . }}{{ end }}
{{- end }}
{{- $_ = set $out "ignored" $ignored }}
{{- $out | toJson }}
{{- end }}
