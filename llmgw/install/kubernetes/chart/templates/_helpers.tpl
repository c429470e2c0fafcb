{{/* The labels of every resource: include "llmgw.labels" (list . "control-plane") */}}
{{- define "llmgw.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: llmgw
app.kubernetes.io/instance: {{ $root.Values.name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Refuses values that would make pods that cannot work, naming the value; llmgw server kube checks the same. */}}
{{- define "llmgw.validate" -}}
{{- if ne .Release.Namespace .Values.namespace -}}
{{- fail (printf "namespace: the Secrets and the certificate were made for namespace %q: install with --namespace %s, or make them again with llmgw server kube --namespace %s" .Values.namespace .Values.namespace .Release.Namespace) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .Values.name)) -}}
{{- fail (printf "name %q: lower-case letters, digits and '-'" (toString .Values.name)) -}}
{{- end -}}
{{- if not .Values.image -}}
{{- fail "image: the image built from the Dockerfile llmgw server kube wrote (no image is published)" -}}
{{- end -}}
{{- $replicas := int .Values.replicas -}}
{{- if or (lt $replicas 1) (gt $replicas 9) -}}
{{- fail (printf "replicas %v: give 1 to 9 control planes" .Values.replicas) -}}
{{- end -}}
{{- if not (has .Values.store.type (list "statefulset" "external")) -}}
{{- fail (printf "store.type %q: statefulset or external" .Values.store.type) -}}
{{- end -}}
{{- if not (has .Values.agentService.type (list "LoadBalancer" "NodePort")) -}}
{{- fail (printf "agentService.type %q: LoadBalancer or NodePort (agents are outside the cluster)" .Values.agentService.type) -}}
{{- end -}}
{{- if eq .Values.agentService.type "NodePort" -}}
{{- $first := int .Values.agentService.nodePort -}}
{{- if or (lt $first 30000) (gt (add $first $replicas -1) 32767) -}}
{{- fail (printf "agentService.nodePort %v: control plane i gets this plus i, and each must lie in 30000 to 32767" .Values.agentService.nodePort) -}}
{{- end -}}
{{- end -}}
{{- if ne (len .Values.agentAdvertise) $replicas -}}
{{- fail (printf "agentAdvertise: %d addresses for %d replicas; give each control plane's agent Service address as agents outside dial it (HOST:PORT), in pod order" (len .Values.agentAdvertise) $replicas) -}}
{{- end -}}
{{- range .Values.agentAdvertise -}}
{{- if not (regexMatch "^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\\[[0-9A-Fa-f:.]+\\]):[0-9]{1,5}$" (toString .)) -}}
{{- fail (printf "agentAdvertise %q: HOST:PORT agents outside dial, like cp0.example.com:7443 or [2001:db8::1]:30743" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.clientService.type (list "ClusterIP" "LoadBalancer" "NodePort")) -}}
{{- fail (printf "clientService.type %q: ClusterIP, LoadBalancer or NodePort" .Values.clientService.type) -}}
{{- end -}}
{{- end -}}

{{/* The server's command: LLMGW_AGENT_ADVERTISE from agentAdvertise by the pod's name, as llmgw server kube writes it. */}}
{{- define "llmgw.serverCommand" -}}
case "$POD_NAME" in {{ range $i, $address := .Values.agentAdvertise }}{{ $.Values.name }}-{{ $i }}) export LLMGW_AGENT_ADVERTISE='{{ $address }}' ;; {{ end }}*) echo "llmgw: pod $POD_NAME has no agent address in this command; agents are told its name inside the cluster" >&2 ;; esac; exec python3 /opt/llmgw/llmgw.pyz server --config /etc/llmgw/server.yaml
{{- end -}}
