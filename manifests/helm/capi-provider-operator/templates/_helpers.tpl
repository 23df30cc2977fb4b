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

{{/* The image tag: image.tag, else the chart's appVersion. */}}
{{- define "capi-provider-operator.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
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
createNamespace, spec}]}: the `providers` list, then the per-kind values (a map keyed by name,
or a string "name[:version];..." as `--set infrastructure=docker:v1.12.0` gives).
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
{{- $fields := list "version" "fetchConfig" "manager" "deployment" "manifestPatches" "patches" "additionalManifests" "additionalDeployments" "paused" }}
{{- range $k := $kinds }}
{{- $set := get $.Values (index $k 0) }}
{{- if kindIs "string" $set }}
{{- $parsed := dict }}
{{- range splitList ";" $set }}
{{- $parts := splitList ":" (trim .) }}
{{- if first $parts }}
{{- $_ := set $parsed (first $parts) (dict "version" (default "" (index (append $parts "") 1))) }}
{{- end }}
{{- end }}
{{- $set = $parsed }}
{{- end }}
{{- range $name, $p := $set }}
{{- $p = default dict $p }}
{{- $ns := $p.namespace | default (ternary "capi-system" (printf "%s-%s-system" $name (index $k 2)) (eq (index $k 0) "core")) }}
{{- $spec := deepCopy (default dict $p.spec) }}
{{- range $fields }}{{ if hasKey $p . }}{{ $_ := set $spec . (deepCopy (get $p .)) }}{{ end }}{{ end }}
{{- if not $spec.version }}{{ $_ := unset $spec "version" }}{{ end }}
{{- /* The global configSecret applies to providers naming no Secret in any way. */}}
{{- $secret := $p.configSecret | default (ternary dict $.Values.configSecret (hasKey $spec "secretName")) }}
{{- with $secret.name }}{{ $_ := set $spec "secretName" . }}{{ end }}
{{- with $secret.namespace }}{{ $_ := set $spec "secretNamespace" . }}{{ end }}
{{- $create := ternary true $p.createNamespace (not (hasKey $p "createNamespace")) }}
{{- $items = append $items (dict "kind" (index $k 1) "name" $name "namespace" $ns "createNamespace" $create "spec" $spec) }}
{{- end }}
{{- end }}
{{- $seen := dict }}
{{- range $items }}
{{- $key := printf "%s %s/%s" .kind .namespace .name }}
{{- if hasKey $seen $key }}{{ fail (printf "the values declare the %s twice" $key) }}{{ end }}
{{- $_ := set $seen $key true }}
{{- end }}
{{- dict "items" $items | toJson }}
{{- end }}

{{/* The ConfigMap the operator watches for the image mirror setting. */}}
{{- define "capi-provider-operator.imageMirrorConfigMap" -}}
{{- default (printf "%s-image-mirror" .Release.Name) .Values.imageMirror.configMap -}}
{{- end }}
