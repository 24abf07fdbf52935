// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kjson "sigs.k8s.io/json"
)

// TemplateField is where a PyJob's pod template sits in the PyJob, the
// prefix of every error about it.
const TemplateField = "spec.template"

// DecodeTemplate reads a PyJob's spec.template as a PodTemplateSpec,
// refusing unknown and duplicate fields, which the API server does not
// check (the field is stored as given). nil when there is none.
func DecodeTemplate(raw *runtime.RawExtension) (*corev1.PodTemplateSpec, error) {
	if raw == nil || len(raw.Raw) == 0 || string(raw.Raw) == "null" {
		return nil, nil
	}
	var t corev1.PodTemplateSpec
	strict, err := kjson.UnmarshalStrict(raw.Raw, &t)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", TemplateField, strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = strings.TrimPrefix(e.Error(), "json: ")
		}
		return nil, fmt.Errorf("%s: %s", TemplateField, strings.Join(msgs, "; "))
	}
	return &t, nil
}

// mergeTemplate merges the user's template over the pod trainops built,
// strategic-merge style, then puts back what trainops owns (see
// PyJobSpec.Template) and checks the result as the API server would.
func mergeTemplate(built corev1.PodTemplateSpec, user *corev1.PodTemplateSpec) (corev1.PodTemplateSpec, error) {
	if err := ownedPaths(built, user); err != nil {
		return built, err
	}
	orig, err := json.Marshal(built)
	if err != nil {
		return built, err
	}
	patch, err := json.Marshal(user)
	if err != nil {
		return built, err
	}
	// A typed template marshals its unset non-omitempty fields as null,
	// which a strategic merge patch reads as "delete": drop them.
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return built, err
	}
	if patch, err = json.Marshal(dropNulls(m)); err != nil {
		return built, err
	}
	out, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.PodTemplateSpec{})
	if err != nil {
		return built, fmt.Errorf("%s: %w", TemplateField, err)
	}
	var merged corev1.PodTemplateSpec
	if err := json.Unmarshal(out, &merged); err != nil {
		return built, fmt.Errorf("%s: %w", TemplateField, err)
	}
	keepOwned(&merged, built, user)
	return merged, validatePod(&merged.Spec)
}

// dropNulls removes every null value from v, recursively.
func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = dropNulls(e)
		}
	case []any:
		for i, e := range t {
			t[i] = dropNulls(e)
		}
	}
	return v
}

// keepOwned puts back in merged what trainops owns of built.
func keepOwned(merged *corev1.PodTemplateSpec, built corev1.PodTemplateSpec, user *corev1.PodTemplateSpec) {
	if merged.Labels == nil {
		merged.Labels = map[string]string{}
	}
	for k, v := range built.Labels {
		merged.Labels[k] = v
	}
	s, b := &merged.Spec, &built.Spec
	s.RestartPolicy, s.Subdomain = b.RestartPolicy, b.Subdomain
	// Tolerations have no merge key: a list would replace trainops's GPU
	// toleration, so the template's are added instead.
	s.Tolerations = append([]corev1.Toleration(nil), b.Tolerations...)
	for _, t := range user.Spec.Tolerations {
		if !slices.ContainsFunc(s.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&t) }) {
			s.Tolerations = append(s.Tolerations, t)
		}
	}
	s.Volumes = slices.DeleteFunc(s.Volumes, func(x corev1.Volume) bool {
		return slices.ContainsFunc(b.Volumes, func(v corev1.Volume) bool { return v.Name == x.Name })
	})
	s.Volumes = append(s.Volumes, b.Volumes...)
	i := slices.IndexFunc(s.Containers, func(c corev1.Container) bool { return c.Name == TrainerContainer })
	if i < 0 {
		return // the template cannot remove it: strategic merge keeps it
	}
	c, bc := &s.Containers[i], &b.Containers[0]
	c.Image, c.Command, c.Args = bc.Image, bc.Command, bc.Args
	// trainops's variables (spec.env among them) first and as built; the
	// template adds only names they do not set.
	env := append([]corev1.EnvVar(nil), bc.Env...)
	for _, e := range c.Env {
		if !slices.ContainsFunc(bc.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			env = append(env, e)
		}
	}
	c.Env = env
	for _, res := range []*corev1.ResourceList{&c.Resources.Limits, &c.Resources.Requests} {
		delete(*res, GPUResource)
	}
	if q, ok := bc.Resources.Limits[GPUResource]; ok {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[GPUResource] = q
	}
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(x corev1.VolumeMount) bool {
		return slices.ContainsFunc(bc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == x.Name || m.MountPath == x.MountPath })
	})
	c.VolumeMounts = append(c.VolumeMounts, bc.VolumeMounts...)
}

// ownedPaths refuses a template that mounts, in the trainer, something
// else where trainops mounts its volumes (the dataset, the output,
// /dev/shm): a strategic merge would silently put one in the other's
// place.
func ownedPaths(built corev1.PodTemplateSpec, user *corev1.PodTemplateSpec) error {
	var errs []error
	for _, c := range user.Spec.Containers {
		if c.Name != TrainerContainer {
			continue
		}
		for _, m := range c.VolumeMounts {
			for _, own := range built.Spec.Containers[0].VolumeMounts {
				if m.MountPath == own.MountPath && m.Name != own.Name {
					errs = append(errs, fmt.Errorf("%s.spec.containers[name=%s].volumeMounts[name=%s].mountPath: trainops mounts its %s volume at %s",
						TemplateField, c.Name, m.Name, own.Name, own.MountPath))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// validatePod refuses, naming the field, what the API server would refuse
// of a merged pod that trainops's own pod never has: containers without a
// name or image or with a name twice, volumes named twice, mounts of
// volumes that do not exist or of one path twice.
func validatePod(s *corev1.PodSpec) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.spec.%s: %s", TemplateField, field, fmt.Sprintf(format, args...)))
	}
	volumes := map[string]bool{}
	for i, v := range s.Volumes {
		if volumes[v.Name] {
			bad(fmt.Sprintf("volumes[%d].name", i), "%q is used twice", v.Name)
		}
		volumes[v.Name] = true
	}
	names := map[string]bool{}
	groups := []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}}
	for _, g := range groups {
		for i, c := range g.list {
			at := fmt.Sprintf("%s[%d]", g.field, i)
			if c.Name != "" {
				at = fmt.Sprintf("%s[name=%s]", g.field, c.Name)
			}
			switch {
			case c.Name == "":
				bad(at+".name", "required")
			case names[c.Name]:
				bad(at+".name", "%q is used twice", c.Name)
			}
			names[c.Name] = true
			if c.Image == "" {
				bad(at+".image", "required")
			}
			paths := map[string]bool{}
			for _, vm := range c.VolumeMounts {
				if !volumes[vm.Name] {
					bad(at+".volumeMounts[name="+vm.Name+"]", "no volume %q in the pod", vm.Name)
				}
				if paths[vm.MountPath] {
					bad(at+".volumeMounts[name="+vm.Name+"].mountPath", "%s is mounted twice", vm.MountPath)
				}
				paths[vm.MountPath] = true
			}
		}
	}
	return errors.Join(errs...)
}
