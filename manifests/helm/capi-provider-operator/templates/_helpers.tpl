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
