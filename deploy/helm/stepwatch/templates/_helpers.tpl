{{/* Names and labels shared by every template. */}}
{{- define "stepwatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "stepwatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stepwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "stepwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "stepwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stepwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stepwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "stepwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stepwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "stepwatch.saslSecretName" -}}
{{- default (printf "%s-kafka-sasl" (include "stepwatch.fullname" .)) .Values.kafka.security.sasl.existingSecret -}}
{{- end -}}

{{- define "stepwatch.usesSasl" -}}
{{- if hasPrefix "SASL" .Values.kafka.security.protocol -}}true{{- end -}}
{{- end -}}

{{/* The Kafka secret files (SASL password, TLS) as volumeMounts / volumes, for the worker and the agent. */}}
{{- define "stepwatch.kafkaVolumeMounts" -}}
{{- if include "stepwatch.usesSasl" . }}
- name: kafka-sasl
  mountPath: /etc/stepwatch/kafka-sasl
  readOnly: true
{{- end }}
{{- if .Values.kafka.security.tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/stepwatch/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "stepwatch.kafkaVolumes" -}}
{{- if include "stepwatch.usesSasl" . }}
- name: kafka-sasl
  secret:
    secretName: {{ include "stepwatch.saslSecretName" . }}
    items:
      - key: {{ .Values.kafka.security.sasl.passwordKey }}
        path: password
{{- end }}
{{- if .Values.kafka.security.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.security.tls.existingSecret }}
{{- end }}
{{- end -}}

{{/* The Secret the chart makes for the worker's web token and peer key (when either is not an existing one). */}}
{{- define "stepwatch.workerAuthSecretName" -}}
{{- printf "%s-worker-auth" (include "stepwatch.fullname" .) -}}
{{- end -}}

{{- define "stepwatch.webTokenSecretName" -}}
{{- default (include "stepwatch.workerAuthSecretName" .) .Values.worker.web.token.existingSecret -}}
{{- end -}}

{{- define "stepwatch.peerKeySecretName" -}}
{{- default (include "stepwatch.workerAuthSecretName" .) .Values.worker.peerKey.existingSecret -}}
{{- end -}}
