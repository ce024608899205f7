{{/* Names and labels shared by the templates. */}}

{{- define "fabrik.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fabrik.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fabrik.nodeAgentName" -}}
{{- printf "%s-node-agent" (include "fabrik.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fabrik.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "fabrik.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "fabrik.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fabrik.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: control-plane
{{- end -}}

{{- define "fabrik.nodeAgentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "fabrik.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "fabrik.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Service's in-cluster DNS name. */}}
{{- define "fabrik.serviceHost" -}}
{{- printf "%s.%s.svc" (include "fabrik.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* What tenant kubeconfigs name. */}}
{{- define "fabrik.publicUrl" -}}
{{- if .Values.controlPlane.publicUrl -}}
{{- .Values.controlPlane.publicUrl | trimSuffix "/" -}}
{{- else if eq (int .Values.service.port) 443 -}}
{{- printf "https://%s" (include "fabrik.serviceHost" .) -}}
{{- else -}}
{{- printf "https://%s:%d" (include "fabrik.serviceHost" .) (int .Values.service.port) -}}
{{- end -}}
{{- end -}}

{{- define "fabrik.servingCaSecret" -}}
{{- printf "%s-serving-ca" (include "fabrik.fullname" .) -}}
{{- end -}}

{{- define "fabrik.dataClaim" -}}
{{- default (printf "%s-data" (include "fabrik.fullname" .)) .Values.controlPlane.storage.sled.existingClaim -}}
{{- end -}}
