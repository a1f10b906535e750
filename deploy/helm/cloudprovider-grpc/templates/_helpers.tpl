{{/* Names and labels. */}}
{{- define "cloudprovider-grpc.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{/* The release's object name: the chart's name when the release is named after it. */}}
{{- define "cloudprovider-grpc.fullname" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cloudprovider-grpc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cloudprovider-grpc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cloudprovider-grpc.labels" -}}
{{ include "cloudprovider-grpc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The backend's Secret wiring (values `backends.<provider>`). */}}
{{- define "cloudprovider-grpc.backend" -}}
{{- $backend := index .Values.backends .Values.provider -}}
{{- if not $backend -}}
{{- fail (printf "backends.%s: no Secret wiring for provider %q" .Values.provider .Values.provider) -}}
{{- end -}}
{{- toYaml $backend -}}
{{- end -}}

{{/* The leader-election Lease's name. */}}
{{- define "cloudprovider-grpc.leaseName" -}}
{{- .Values.leaderElection.resourceName | default (include "cloudprovider-grpc.fullname" .) -}}
{{- end -}}

{{/* The DNS name CA dials: its TLS ServerName, so it must be a SAN of the server certificate. */}}
{{- define "cloudprovider-grpc.serviceHost" -}}
{{- printf "%s.%s.svc" (include "cloudprovider-grpc.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Where the server's TLS files come from. */}}
{{- define "cloudprovider-grpc.serverSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{- required "tls.secret.name is required when tls.mode is secret" .Values.tls.secret.name -}}
{{- else -}}
{{- printf "%s-server-tls" (include "cloudprovider-grpc.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The issuer of the leaf certificates: the user's, or the chart's private CA. */}}
{{- define "cloudprovider-grpc.issuerRef" -}}
{{- if .Values.tls.certManager.issuerRef -}}
{{- toYaml .Values.tls.certManager.issuerRef -}}
{{- else -}}
name: {{ include "cloudprovider-grpc.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end -}}
{{- end -}}

{{/* Volume name and directory of one `backends.<provider>.files` entry: its flag or variable. */}}
{{- define "cloudprovider-grpc.fileName" -}}
{{- default .env .flag | trimPrefix "--" | lower | replace "_" "-" -}}
{{- end -}}

{{/* The server's config file (config.yaml): what the values give that has no `serve` flag. */}}
{{- define "cloudprovider-grpc.configFile" -}}
{{- if .Values.groupOptions }}
{{- dict "group_options" .Values.groupOptions | toYaml }}
{{- end }}
{{- end }}
