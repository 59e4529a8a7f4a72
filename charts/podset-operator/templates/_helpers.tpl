{{/* The chart name. */}}
{{- define "podset-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name prefix. */}}
{{- define "podset-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "podset-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "podset-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podset-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The operator's pods: what its Deployment, disruption budget, Service, topology spread
and NetworkPolicy select. */}}
{{- define "podset-operator.managerSelectorLabels" -}}
{{ include "podset-operator.selectorLabels" . }}
app.kubernetes.io/component: manager
{{- end }}

{{- define "podset-operator.labels" -}}
helm.sh/chart: {{ include "podset-operator.chart" . }}
{{ include "podset-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "podset-operator.serviceAccountName" -}}
{{- include "podset-operator.fullname" . }}
{{- end }}

{{- define "podset-operator.leaseName" -}}
{{- default (printf "%s-leader" (include "podset-operator.fullname" .)) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
The RBAC rules, generated from the Rust code by `make manifests` into files/: never retyped
here. A missing file fails the render rather than granting nothing silently.
*/}}
{{- define "podset-operator.generatedRules" -}}
{{- $rules := .context.Files.Get .file }}
{{- if not (contains "verbs" $rules) }}
{{- fail (printf "%s is missing or empty: run `make manifests`" .file) }}
{{- end }}
{{- $rules }}
{{- end }}

{{/* A map of labels as a label selector string: `a=b,c=d`, sorted by key. */}}
{{- define "podset-operator.selector" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
The webhook's values, defaults filled in: an upgrade with --reuse-values keeps the old
release's values, which may lack them.
*/}}
{{- define "podset-operator.webhook" -}}
{{- $defaults := dict "enabled" true "port" 9443 "certManager" (dict "enabled" false "issuerRef" dict) }}
{{- toYaml (mergeOverwrite $defaults (deepCopy (.Values.webhook | default dict))) }}
{{- end }}
