{{- define "archipelago.labels" -}}
app.kubernetes.io/name: archipelago
{{- end }}

{{- define "archipelago.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "archipelago.secretName" -}}
{{ .Values.existingSecret | default "archipelago" }}
{{- end }}
