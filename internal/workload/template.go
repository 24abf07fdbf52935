// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainops/trainops/internal/builder"
)

// tpl is the prefix of a field of a PyJob's pod template.
const tpl = builder.TemplateField + ".spec."

// nvidiaResourcePrefix starts every resource the NVIDIA device plugin and
// the GPU stack advertise: whole GPUs, shared (time-sliced) GPUs and MIG
// devices.
const nvidiaResourcePrefix = "nvidia.com/"

// safeVolumeTypes are the volume types that reach neither the node nor
// the network by themselves: the pod's own, its namespace's objects, and
// its claims.
var safeVolumeTypes = []string{"emptyDir", "configMap", "secret", "persistentVolumeClaim", "downwardAPI", "projected"}

// checkTemplate applies the policy to what a PyJob's spec.template adds to
// the pod trainops builds. The Pod Security Standards are applied to the
// merged pod apart (podSecurity); here are the powers the standards leave
// out, or that a setting allows beyond them.
func (p Policy) checkTemplate(user *corev1.PodTemplateSpec) []string {
	s := &user.Spec
	var out []string
	refuse := func(field, format string, args ...any) {
		out = append(out, tpl+field+": "+fmt.Sprintf(format, args...))
	}
	if pc := s.PriorityClassName; pc != "" {
		if m := p.priorityClass(pc); m != "" {
			refuse("priorityClassName", "%s", m)
		}
	}
	out = append(out, p.tolerations(tpl+"tolerations", s.Tolerations)...)
	if s.NodeName != "" && !p.AllowNodeName {
		refuse("nodeName", "naming the node bypasses the scheduler, cordons and taints (a control-plane node, a node taken out of service): refused (allowNodeName)")
	}
	if s.RuntimeClassName != nil {
		refuse("runtimeClassName", "the container runtime handler is trainops's to choose: a runtime class can hand the pod every GPU of its node outside its GPU limit: remove it")
	}
	if len(s.ResourceClaims) > 0 && !p.AllowResourceClaims {
		refuse("resourceClaims", "claiming devices through dynamic resource allocation puts GPUs outside the PyJob's gpu: refused (allowResourceClaims)")
	}
	// serviceAccount is the deprecated alias the API server takes when
	// serviceAccountName is empty.
	for _, f := range []struct{ name, sa string }{{"serviceAccountName", s.ServiceAccountName}, {"serviceAccount", s.DeprecatedServiceAccount}} {
		if strings.HasPrefix(f.sa, builder.AgentChildPrefix) && !p.AllowAgentServiceAccounts {
			refuse(f.name, "%s is an SREAgent's ServiceAccount: a training pod running as it gets the agent's powers: refused (allowAgentServiceAccounts)", f.sa)
		}
	}
	for _, f := range []struct {
		name string
		on   bool
	}{{"hostNetwork", s.HostNetwork}, {"hostPID", s.HostPID}, {"hostIPC", s.HostIPC}} {
		if f.on && !p.AllowHostNamespaces {
			refuse(f.name, "sharing the node's namespaces reaches every process and port of the node: refused here (allowHostNamespaces)")
		}
	}
	for _, v := range s.Volumes {
		out = append(out, p.checkVolume(v)...)
	}
	for _, g := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}, {"ephemeralContainers", ephemeral(s.EphemeralContainers)}} {
		for _, c := range g.list {
			out = append(out, p.checkContainer(fmt.Sprintf("%s%s[name=%s]", tpl, g.field, c.Name), c)...)
		}
	}
	return out
}

// ephemeral is the containers of a list of ephemeral containers.
func ephemeral(list []corev1.EphemeralContainer) []corev1.Container {
	out := make([]corev1.Container, len(list))
	for i, e := range list {
		out[i] = corev1.Container(e.EphemeralContainerCommon)
	}
	return out
}

// checkVolume is what the policy refuses of one volume of a pod template.
func (p Policy) checkVolume(v corev1.Volume) []string {
	at := fmt.Sprintf("%svolumes[name=%s]", tpl, v.Name)
	var out []string
	if v.HostPath != nil {
		if !p.AllowHostPath {
			out = append(out, fmt.Sprintf("%s.hostPath: mounting the node's %s exposes the node's files: refused here (allowHostPath)", at, v.HostPath.Path))
		}
	} else if t := volumeType(v); t != "" && !slices.Contains(safeVolumeTypes, t) && !slices.Contains(p.AllowedVolumeTypes, t) {
		out = append(out, fmt.Sprintf("%s.%s: a %s volume reaches the node or the network beyond the pod's own storage: refused (allowedVolumeTypes)", at, t, t))
	}
	if p.RefuseSecretRefs && readsSecret(v) {
		out = append(out, at+": "+refusedSecret)
	}
	if v.Projected != nil {
		for i, src := range v.Projected.Sources {
			if tok := src.ServiceAccountToken; tok != nil && tok.Audience != "" && !slices.Contains(p.AllowedTokenAudiences, tok.Audience) {
				out = append(out, fmt.Sprintf("%s.projected.sources[%d].serviceAccountToken.audience: a token for %q lets the pod act as its ServiceAccount outside the cluster: refused (allowedTokenAudiences)", at, i, tok.Audience))
			}
		}
	}
	return out
}

// volumeType is the JSON name of the source a volume sets ("" when
// none): read from the API's own field names, so a volume type added to
// the API is not safe until listed.
func volumeType(v corev1.Volume) string {
	b, err := json.Marshal(v.VolumeSource)
	if err != nil {
		return ""
	}
	var set map[string]json.RawMessage
	if json.Unmarshal(b, &set) != nil || len(set) == 0 {
		return ""
	}
	return slices.Sorted(maps.Keys(set))[0]
}

// checkContainer is what the policy refuses of one container of a pod
// template, each message starting with at.
func (p Policy) checkContainer(at string, c corev1.Container) []string {
	var out []string
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged && !p.AllowPrivileged {
			out = append(out, at+".securityContext.privileged: a privileged container is root on the node: refused here (allowPrivileged)")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 && !p.AllowAddedCapabilities {
			caps := make([]string, len(sc.Capabilities.Add))
			for i, c := range sc.Capabilities.Add {
				caps[i] = string(c)
			}
			out = append(out, fmt.Sprintf("%s.securityContext.capabilities.add: adding %s is refused here (allowAddedCapabilities)", at, strings.Join(caps, ", ")))
		}
	}
	out = append(out, gpuResources(at, c)...)
	if len(c.Resources.Claims) > 0 && !p.AllowResourceClaims {
		out = append(out, at+".resources.claims: claiming devices through dynamic resource allocation puts GPUs outside the PyJob's gpu: refused (allowResourceClaims)")
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, nvidiaEnvPrefix) {
			out = append(out, fmt.Sprintf("%s.env[name=%s]: "+nvidiaEnvMessage, at, e.Name, e.Name))
		}
		if p.RefuseSecretRefs && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, fmt.Sprintf("%s.env[name=%s].valueFrom.secretKeyRef: %s", at, e.Name, refusedSecret))
		}
	}
	for i, e := range c.EnvFrom {
		if e.Prefix == "" || strings.HasPrefix(e.Prefix, nvidiaEnvPrefix) {
			out = append(out, fmt.Sprintf("%s.envFrom[%d].prefix: without a prefix (or with %s), a key of the source named %s* reaches the NVIDIA container runtime, which hands out GPUs outside the GPU limit: set a prefix", at, i, nvidiaEnvPrefix, nvidiaEnvPrefix))
		}
		if p.RefuseSecretRefs && e.SecretRef != nil {
			out = append(out, fmt.Sprintf("%s.envFrom[%d].secretRef: %s", at, i, refusedSecret))
		}
	}
	return out
}

// gpuResources refuses NVIDIA resources a template's container asks for:
// a PyJob's GPUs are its spec.gpu, which trainops sets on the trainer
// (the trainer's own nvidia.com/gpu is overwritten by it).
func gpuResources(at string, c corev1.Container) []string {
	var out []string
	for _, l := range []struct {
		field string
		list  corev1.ResourceList
	}{{"limits", c.Resources.Limits}, {"requests", c.Resources.Requests}} {
		var names []string
		for name := range l.list {
			n := string(name)
			if strings.HasPrefix(n, nvidiaResourcePrefix) && (c.Name != builder.TrainerContainer || name != builder.GPUResource) {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, fmt.Sprintf("%s.resources.%s[%s]: a PyJob's GPUs are its spec.gpu, set on the trainer by trainops: a container of the template asking for %s gets GPUs the PyJob does not show: refused", at, l.field, n, n))
		}
	}
	return out
}

// readsSecret reports whether a volume mounts a Secret, directly or
// projected.
func readsSecret(v corev1.Volume) bool {
	if v.Secret != nil {
		return true
	}
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				return true
			}
		}
	}
	return false
}
