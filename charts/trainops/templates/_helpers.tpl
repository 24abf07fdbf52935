{{/* The labels every object of the chart carries, as trainops install's;
a shard's pods are told apart, so the main release's Deployment and
Service never select them. */}}
{{- define "trainops.selector" -}}
{{- if .Values.shard -}}
app.kubernetes.io/name: trainops-shard
app.kubernetes.io/instance: {{ .Values.shard }}
{{- else -}}
app.kubernetes.io/name: trainops
{{- end -}}
{{- end -}}

{{/* The name of the Deployment and its configuration: trainops, or
trainops-<shard> for a shard's release. */}}
{{- define "trainops.name" -}}
{{- if .Values.shard }}trainops-{{ .Values.shard }}{{ else }}trainops{{ end -}}
{{- end -}}

{{/* trainops run's configuration file, from the values. */}}
{{- define "trainops.config" -}}
{{- $c := dict "reconcileInterval" .Values.reconcileInterval "prune" .Values.prune "pruneBudget" .Values.pruneBudget "allowedNamespaces" .Values.allowedNamespaces -}}
{{- with .Values.allowedKinds }}{{ $_ := set $c "allowedKinds" . }}{{ end -}}
{{- if not .Values.leaderElection }}{{ $_ := set $c "leaderElection" false }}{{ end -}}
{{- with .Values.repo.url -}}
{{- $r := dict "url" . -}}
{{- range $k := list "branch" "tag" "commit" "path" }}{{ with index $.Values.repo $k }}{{ $_ := set $r $k . }}{{ end }}{{ end -}}
{{- with $.Values.repo.secretName }}{{ $_ := set $r "auth" (dict "secretRef" .) }}{{ end -}}
{{- $_ := set $c "repo" $r -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- if not .Values.webhook.secretName }}{{ fail "webhook.enabled needs webhook.secretName: a Secret whose key token is the shared secret" }}{{ end -}}
{{- $_ := set $c "webhook" (dict "bindAddress" ":9292" "secretRef" .Values.webhook.secretName) -}}
{{- end -}}
{{- if .Values.shard -}}
{{- if or .Values.repo.url .Values.webhook.enabled }}{{ fail "shard: a shard's release syncs GitSyncs only; leave repo and webhook to the main release" }}{{ end -}}
{{- $_ := set $c "shard" .Values.shard -}}
{{- end -}}
{{- toYaml (mergeOverwrite $c .Values.config) -}}
{{- end -}}
