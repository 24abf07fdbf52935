// SPDX-License-Identifier: Apache-2.0

// Package workloadtest holds the PyJobs the workload policy must refuse,
// one table for every path a PyJob arrives by: the policy itself, the
// PyJob reconciler (kubectl, the API), a GitSync and `trainops validate`.
package workloadtest

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/workload"
)

// Case is one PyJob the policy refuses.
type Case struct {
	Name string
	// Spec is YAML added to a CPU PyJob's spec (image and command set).
	Spec string
	// Field and Setting are what the refusal must name.
	Field, Setting string
	// Under, when set, is the setting under which the case is refused
	// (refuseSecretRefs); without it the case is refused by default.
	Under func(*workload.Policy)
	// Allow is the setting that lets the case through (added to what
	// the policy allows already); nil when none does.
	Allow func(*workload.Policy)
}

// Sidecar is a template with one more container, whose YAML body
// (indented under the container) is c.
func Sidecar(c string) string {
	return "template:\n  spec:\n    containers:\n    - name: sidecar\n      image: busybox\n" + c
}

// Pod is a template whose pod spec (indented under spec:) is s.
func Pod(s string) string { return "template:\n  spec:\n" + s }

func privileged(p *workload.Policy) { p.PodSecurityLevel = config.PodSecurityPrivileged }

func volume(t, body string) Case {
	return Case{Name: "volume " + t, Spec: Pod("    volumes:\n    - name: v\n      " + t + ":\n" + body),
		Field: "spec.template.spec.volumes[name=v]." + t, Setting: "allowedVolumeTypes",
		Allow: func(p *workload.Policy) { p.AllowedVolumeTypes = append(p.AllowedVolumeTypes, t) }}
}

// Cases are every case of the workload policy, those refused by name and
// those of the Pod Security Standards.
var Cases = []Case{
	{Name: "privileged container", Spec: Sidecar("      securityContext: {privileged: true}\n"), Field: "spec.template.spec.containers[name=sidecar].securityContext.privileged", Setting: "allowPrivileged",
		Allow: func(p *workload.Policy) { p.AllowPrivileged = true }},
	{Name: "privileged init container", Spec: Pod("    initContainers:\n    - name: init\n      image: busybox\n      securityContext: {privileged: true}\n"), Field: "spec.template.spec.initContainers[name=init].securityContext.privileged", Setting: "allowPrivileged",
		Allow: func(p *workload.Policy) { p.AllowPrivileged = true }},
	{Name: "sidecar adding SYS_ADMIN", Spec: Sidecar("      securityContext: {capabilities: {add: [SYS_ADMIN]}}\n"), Field: "spec.template.spec.containers[name=sidecar].securityContext.capabilities.add", Setting: "allowAddedCapabilities",
		Allow: func(p *workload.Policy) { p.AllowAddedCapabilities = true }},
	{Name: "init container mounting the node's root", Spec: Pod("    volumes:\n    - name: root\n      hostPath: {path: /}\n    initContainers:\n    - name: init\n      image: busybox\n      volumeMounts: [{name: root, mountPath: /host}]\n"), Field: "spec.template.spec.volumes[name=root].hostPath", Setting: "allowHostPath",
		Allow: func(p *workload.Policy) { p.AllowHostPath = true }},
	{Name: "hostNetwork", Spec: Pod("    hostNetwork: true\n"), Field: "spec.template.spec.hostNetwork", Setting: "allowHostNamespaces", Allow: func(p *workload.Policy) { p.AllowHostNamespaces = true }},
	{Name: "hostPID", Spec: Pod("    hostPID: true\n"), Field: "spec.template.spec.hostPID", Setting: "allowHostNamespaces", Allow: func(p *workload.Policy) { p.AllowHostNamespaces = true }},
	{Name: "hostIPC", Spec: Pod("    hostIPC: true\n"), Field: "spec.template.spec.hostIPC", Setting: "allowHostNamespaces", Allow: func(p *workload.Policy) { p.AllowHostNamespaces = true }},
	{Name: "system priority class", Spec: "priorityClassName: system-node-critical\n", Field: "spec.priorityClassName", Setting: "allowedPriorityClasses",
		Allow: func(p *workload.Policy) {
			p.AllowedPriorityClasses = append(p.AllowedPriorityClasses, "system-node-critical")
		}},
	{Name: "system priority class in the template", Spec: Pod("    priorityClassName: system-cluster-critical\n"), Field: "spec.template.spec.priorityClassName", Setting: "allowedPriorityClasses",
		Allow: func(p *workload.Policy) {
			p.AllowedPriorityClasses = append(p.AllowedPriorityClasses, "system-cluster-critical")
		}},
	{Name: "tolerate every taint", Spec: Pod("    tolerations: [{operator: Exists}]\n"), Field: "spec.template.spec.tolerations[0]", Setting: "allowTolerateAllTaints",
		Allow: func(p *workload.Policy) { p.AllowTolerateAll = true }},
	{Name: "Secret volume", Spec: Pod("    volumes:\n    - name: creds\n      secret: {secretName: creds}\n"), Field: "spec.template.spec.volumes[name=creds]", Setting: "refuseSecretRefs",
		Under: func(p *workload.Policy) { p.RefuseSecretRefs = true }},
	{Name: "nodeName", Spec: Pod("    nodeName: control-plane\n"), Field: "spec.template.spec.nodeName", Setting: "allowNodeName", Allow: func(p *workload.Policy) { p.AllowNodeName = true }},
	{Name: "control-plane toleration", Spec: "tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]\n", Field: "spec.tolerations[0].key", Setting: "allowReservedTolerations",
		Allow: func(p *workload.Policy) { p.AllowReservedTolerations = true }},
	{Name: "remediation taint toleration", Spec: Pod("    tolerations: [{key: trainops.dev/gpu-unhealthy, operator: Exists, effect: NoSchedule}]\n"), Field: "spec.template.spec.tolerations[0].key", Setting: "allowReservedTolerations",
		Allow: func(p *workload.Policy) { p.AllowReservedTolerations = true }},
	{Name: "unschedulable toleration", Spec: "tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists}]\n", Field: "spec.tolerations[0].key", Setting: "allowReservedTolerations",
		Allow: func(p *workload.Policy) { p.AllowReservedTolerations = true }},
	{Name: "hostPort 22", Spec: Sidecar("      ports: [{containerPort: 22, hostPort: 22}]\n"), Field: "spec.template.spec", Setting: "hostPort", Allow: privileged},
	{Name: "seccomp Unconfined", Spec: Sidecar("      securityContext: {seccompProfile: {type: Unconfined}}\n"), Field: "spec.template.spec", Setting: "seccompProfile", Allow: privileged},
	{Name: "AppArmor Unconfined", Spec: Sidecar("      securityContext: {appArmorProfile: {type: Unconfined}}\n"), Field: "spec.template.spec", Setting: "AppArmor profile", Allow: privileged},
	{Name: "SELinux spc_t", Spec: Sidecar("      securityContext: {seLinuxOptions: {type: spc_t}}\n"), Field: "spec.template.spec", Setting: "seLinuxOptions", Allow: privileged},
	{Name: "unsafe sysctl", Spec: Pod("    securityContext: {sysctls: [{name: kernel.msgmax, value: '65536'}]}\n"), Field: "spec.template.spec", Setting: "forbidden sysctls", Allow: privileged},
	{Name: "procMount Unmasked", Spec: Sidecar("      securityContext: {procMount: Unmasked}\n"), Field: "spec.template.spec", Setting: "procMount"},
	// (The API server itself refuses Unmasked without hostUsers: false,
	// at any level, so no setting lets this case through.)
	volume("nfs", "        server: 10.0.0.1\n        path: /exports\n"),
	volume("iscsi", "        targetPortal: 10.0.0.1:3260\n        iqn: iqn.2001-04.com.example:storage\n        lun: 0\n"),
	volume("rbd", "        monitors: [10.0.0.1:6789]\n        image: foo\n"),
	volume("flexVolume", "        driver: example.com/driver\n"),
	volume("csi", "        driver: csi.example.com\n"),
	volume("image", "        reference: registry.example/data:1\n"),
	volume("ephemeral", "        volumeClaimTemplate:\n          spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n"),
	{Name: "token for another audience", Spec: Pod("    volumes:\n    - name: tok\n      projected:\n        sources: [{serviceAccountToken: {path: t, audience: vault}}]\n"), Field: "spec.template.spec.volumes[name=tok].projected.sources[0].serviceAccountToken.audience", Setting: "allowedTokenAudiences",
		Allow: func(p *workload.Policy) { p.AllowedTokenAudiences = append(p.AllowedTokenAudiences, "vault") }},
	{Name: "an agent's ServiceAccount", Spec: Pod("    serviceAccountName: sreagent-ops\n"), Field: "spec.template.spec.serviceAccountName", Setting: "allowAgentServiceAccounts",
		Allow: func(p *workload.Policy) { p.AllowAgentServiceAccounts = true }},
	{Name: "an agent's ServiceAccount by its deprecated field", Spec: Pod("    serviceAccount: sreagent-ops\n"), Field: "spec.template.spec.serviceAccount", Setting: "allowAgentServiceAccounts",
		Allow: func(p *workload.Policy) { p.AllowAgentServiceAccounts = true }},
	{Name: "NVIDIA_VISIBLE_DEVICES in env", Spec: "env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n", Field: "spec.env[0].name", Setting: "spec.gpu"},
	{Name: "NVIDIA_DRIVER_CAPABILITIES in the template", Spec: Sidecar("      env: [{name: NVIDIA_DRIVER_CAPABILITIES, value: all}]\n"), Field: "spec.template.spec.containers[name=sidecar].env[name=NVIDIA_DRIVER_CAPABILITIES]", Setting: "spec.gpu"},
	{Name: "envFrom without a prefix", Spec: Sidecar("      envFrom: [{configMapRef: {name: settings}}]\n"), Field: "spec.template.spec.containers[name=sidecar].envFrom[0].prefix", Setting: "prefix"},
	{Name: "runtimeClassName", Spec: Pod("    runtimeClassName: nvidia\n"), Field: "spec.template.spec.runtimeClassName", Setting: "remove it"},
	{Name: "sidecar asking for 8 GPUs", Spec: Sidecar("      resources: {limits: {nvidia.com/gpu: '8'}}\n"), Field: "spec.template.spec.containers[name=sidecar].resources.limits[nvidia.com/gpu]", Setting: "spec.gpu"},
	{Name: "trainer asking for a MIG device", Spec: Pod("    containers:\n    - name: trainer\n      resources: {limits: {nvidia.com/mig-1g.5gb: '1'}}\n"), Field: "spec.template.spec.containers[name=trainer].resources.limits[nvidia.com/mig-1g.5gb]", Setting: "spec.gpu"},
	{Name: "resourceClaims", Spec: Pod("    resourceClaims: [{name: gpu, resourceClaimName: gpus}]\n"), Field: "spec.template.spec.resourceClaims", Setting: "allowResourceClaims",
		Allow: func(p *workload.Policy) { p.AllowResourceClaims = true }},
}

// Restricted are cases only the restricted level refuses.
var Restricted = []Case{
	{Name: "root with privilege escalation", Spec: Sidecar("      securityContext: {runAsUser: 0, allowPrivilegeEscalation: true}\n"), Field: "spec.template.spec", Setting: "allowPrivilegeEscalation != false"},
}

// PyJob is the case's PyJob, named name in namespace ns.
func (c Case) PyJob(ns, name string) (*trainingv1alpha1.PyJob, error) {
	spec := "image: registry.trainops.test/trainer:ok\ncommand: [python, train.py]\n" + c.Spec
	pj := &trainingv1alpha1.PyJob{}
	if err := yaml.UnmarshalStrict([]byte(spec), &pj.Spec); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	pj.APIVersion, pj.Kind = trainingv1alpha1.GroupVersion.String(), trainingv1alpha1.PyJobKind
	pj.Namespace, pj.Name = ns, name
	return pj, nil
}

// YAML is the case's PyJob as a file of a repository.
func (c Case) YAML(ns, name string) ([]byte, error) {
	pj, err := c.PyJob(ns, name)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(pj)
}

// Settings are the keys of trainops's configuration file that make p
// (its unset fields left out), for the paths configured by settings.
func Settings(p workload.Policy) (map[string]any, error) {
	b, err := json.Marshal(p.PodPowers)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	out["allowTolerateAllTaints"] = p.AllowTolerateAll
	out["refuseSecretRefs"] = p.RefuseSecretRefs
	if len(p.AllowedPriorityClasses) > 0 {
		out["allowedPriorityClasses"] = p.AllowedPriorityClasses
	}
	for k, v := range out {
		if v == nil || v == "" {
			delete(out, k)
		}
	}
	return out, nil
}
