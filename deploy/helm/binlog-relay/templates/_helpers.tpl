{{/* Names and labels. */}}
{{- define "binlog-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "binlog-relay.fullname" -}}
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

{{/*
The name of one relay's objects (ConfigMap, Deployment, PodDisruptionBudget, Service): the
fullname, and with shards the fullname-<shard name>. The release-wide objects (Secret,
ServiceAccount, ServiceMonitor, PrometheusRule) keep the fullname.
*/}}
{{- define "binlog-relay.relayFullname" -}}
{{- $shard := get . "shard" -}}
{{- if $shard -}}
{{- printf "%s-%s" (include "binlog-relay.fullname" .) $shard -}}
{{- else -}}
{{- include "binlog-relay.fullname" . -}}
{{- end -}}
{{- end -}}

{{/*
With shards, a shard's pods carry its name in binlog-relay/shard, which keeps the selectors of
one shard's Deployment, PodDisruptionBudget, Service and anti-affinity off the others' pods.
Without shards the selector is the one every existing install has (a Deployment's selector
cannot change on upgrade).
*/}}
{{- define "binlog-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "binlog-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with get . "shard" }}
binlog-relay/shard: {{ . }}
{{- end }}
{{- end -}}

{{- define "binlog-relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "binlog-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "binlog-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "binlog-relay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "binlog-relay.secretName" -}}
{{- if .Values.secret.create -}}
{{- include "binlog-relay.fullname" . -}}
{{- else -}}
{{- required "secret.name: the existing Secret to mount (secret.create is false)" .Values.secret.name -}}
{{- end -}}
{{- end -}}

{{/*
The config file, as the ConfigMap holds it and the checksum annotation hashes it; of one relay
(binlog-relay.relays).
*/}}
{{- define "binlog-relay.config" -}}
{{- include "binlog-relay.validate" . -}}
{{- toYaml .Values.config -}}
{{- end -}}

{{/*
The port of config.http.addr. The address must listen on every interface: the kubelet's
probes and Prometheus reach the pod from outside it.
*/}}
{{- define "binlog-relay.httpPort" -}}
{{- $http := .Values.config.http | default dict -}}
{{- $addr := toString ($http.addr | default "") -}}
{{- if not (regexMatch "^(0\\.0\\.0\\.0|\\[::\\])?:[0-9]+$" $addr) -}}
{{- fail (printf "%sconfig.http.addr: %q must listen on all interfaces (e.g. 0.0.0.0:9464): the probes and Prometheus reach the relay from outside the pod" .where $addr) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $addr -}}
{{- end -}}

{{/*
Whole seconds (rounded up) in a Go duration such as "30s", "1m30s" or "500ms".
*/}}
{{- define "binlog-relay.durationSeconds" -}}
{{- $d := toString .value -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$" $d) -}}
{{- fail (printf "%s: %q is not a duration such as 30s, 2m or 1m30s" .field $d) -}}
{{- end -}}
{{- $unit := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" $d -1 -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) -}}
{{- end -}}
{{- ceil $total | int -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: config.relay.drain_timeout (the relay's default, 30s, when
unset) plus extraGracePeriodSeconds, so the kubelet never kills a relay that is draining.
*/}}
{{- define "binlog-relay.gracePeriod" -}}
{{- $relay := .Values.config.relay | default dict -}}
{{- $drain := include "binlog-relay.durationSeconds" (dict "field" (printf "%sconfig.relay.drain_timeout" .where) "value" ($relay.drain_timeout | default "30s")) | int -}}
{{- $extra := int .Values.extraGracePeriodSeconds -}}
{{- if lt $extra 1 -}}
{{- fail "extraGracePeriodSeconds: must be at least 1 (time to save the checkpoint after the drain)" -}}
{{- end -}}
{{- add $drain $extra -}}
{{- end -}}

{{/*
Refuses a config whose password_file (or http.console_token_file) names a key of the chart's
Secret that is not set, and
more than one relay without the HA lease. Called with one relay's context (binlog-relay.relays):
with shards, that is the shard's merged config and replicaCount, and .where names the shard in
the message.
*/}}
{{- define "binlog-relay.validate" -}}
{{- $prefix := printf "%s/" (trimSuffix "/" .Values.secret.mountPath) -}}
{{- range $section := list "source" "primary" "broker" "redis" -}}
{{- $s := index $.Values.config $section | default dict -}}
{{- if and $s.password_file $.Values.secret.create (hasPrefix $prefix $s.password_file) -}}
{{- $key := trimPrefix $prefix $s.password_file -}}
{{- if not (index ($.Values.secret.data | default dict) $key) -}}
{{- fail (printf "%ssecret.data.%s: config.%s.password_file reads it; set it (--set-file secret.data.%s=FILE) or use an existing Secret (secret.create=false, secret.name)" $.where $key $section $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $h := .Values.config.http | default dict -}}
{{- if and $h.console_token_file $.Values.secret.create (hasPrefix $prefix $h.console_token_file) -}}
{{- $key := trimPrefix $prefix $h.console_token_file -}}
{{- if not (index ($.Values.secret.data | default dict) $key) -}}
{{- fail (printf "%ssecret.data.%s: config.http.console_token_file reads it; set it (--set-file secret.data.%s=FILE) or use an existing Secret (secret.create=false, secret.name)" $.where $key $key) -}}
{{- end -}}
{{- end -}}
{{- $ha := .Values.config.ha | default dict -}}
{{- if and (gt (int .Values.replicaCount) 1) (not $ha.enabled) -}}
{{- fail (printf "%sreplicaCount: more than one relay needs config.ha.enabled: true (relays sharing a name refuse to run side by side without the leader lease)" .where) -}}
{{- end -}}
{{- end -}}
