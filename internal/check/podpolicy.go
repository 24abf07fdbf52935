// SPDX-License-Identifier: Apache-2.0

package check

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// refusedSecret ends the message refusing a Secret under refuseSecretRefs.
const refusedSecret = "reading a Secret is refused here (refuseSecretRefs)"

// tpl is the prefix of a field of a PyJob's pod template.
const tpl = builder.TemplateField + ".spec."

// checkTemplate applies the policy to the pod a PyJob's spec.template
// makes: the merged pod must build (the template is well-formed and names
// its fields), and what the template adds to it must be allowed. What the
// PyJob's other fields give the pod checkPyJob has checked already.
func (p WorkloadPolicy) checkTemplate(u *unstructured.Unstructured) []string {
	pj := &trainingv1alpha1.PyJob{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pj); err != nil {
		return []string{err.Error()}
	}
	user, err := builder.DecodeTemplate(pj.Spec.Template)
	if err == nil && user != nil {
		_, err = builder.JobFor(pj)
	}
	if err != nil {
		return []string{err.Error()}
	}
	if user == nil {
		return nil
	}
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
	for i, t := range s.Tolerations {
		if t.Operator == corev1.TolerationOpExists && t.Key == "" && !p.AllowTolerateAll {
			refuse(fmt.Sprintf("tolerations[%d]", i), "%s", tolerateAllMessage)
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
		at := fmt.Sprintf("volumes[name=%s]", v.Name)
		if v.HostPath != nil && !p.AllowHostPath {
			refuse(at+".hostPath", "mounting the node's %s exposes the node's files: refused here (allowHostPath)", v.HostPath.Path)
		}
		if p.RefuseSecretRefs && readsSecret(v) {
			refuse(at, "%s", refusedSecret)
		}
	}
	for _, g := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}} {
		for _, c := range g.list {
			out = append(out, p.checkContainer(fmt.Sprintf("%s%s[name=%s]", tpl, g.field, c.Name), c)...)
		}
	}
	return out
}

// checkContainer is what the policy refuses of one container of a pod
// template, each message starting with at.
func (p WorkloadPolicy) checkContainer(at string, c corev1.Container) []string {
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
	if !p.RefuseSecretRefs {
		return out
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, fmt.Sprintf("%s.env[name=%s].valueFrom.secretKeyRef: %s", at, e.Name, refusedSecret))
		}
	}
	for i, e := range c.EnvFrom {
		if e.SecretRef != nil {
			out = append(out, fmt.Sprintf("%s.envFrom[%d].secretRef: %s", at, i, refusedSecret))
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
