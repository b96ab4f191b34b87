{{/* The app's name: the chart's, unless nameOverride. */}}
{{- define "nmt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource names: the release name when it already holds the app's name (so a release
named nmt-service gives the kustomize base's names), else <release>-<name>. */}}
{{- define "nmt.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nmt.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "nmt.configName" -}}
{{- printf "%s-config" (include "nmt.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects the API pods: the base's two labels plus the release, so that two releases
in one namespace never select each other's pods. */}}
{{- define "nmt.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nmt.name" . }}
app.kubernetes.io/component: api
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* On every resource. */}}
{{- define "nmt.labels" -}}
app.kubernetes.io/name: {{ include "nmt.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nmt.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
{{- end }}

{{/* The container's port: NMT_PORT of the settings (the service's default 8000 without). */}}
{{- define "nmt.port" -}}
{{- .Values.settings.NMT_PORT | default "8000" | int }}
{{- end }}
