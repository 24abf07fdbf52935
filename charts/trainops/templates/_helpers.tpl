{{/* The labels every object of the chart carries, as trainops install's. */}}
{{- define "trainops.selector" -}}
app.kubernetes.io/name: trainops
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
{{- toYaml (mergeOverwrite $c .Values.config) -}}
{{- end -}}
