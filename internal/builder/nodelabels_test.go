// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

func TestPlanNodeLabels(t *testing.T) {
	var cp gpuv1alpha1.ClusterPolicy
	load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
	all := "nvidia.com/gpu.deploy.container-toolkit,nvidia.com/gpu.deploy.dcgm-exporter,nvidia.com/gpu.deploy.device-plugin,nvidia.com/gpu.deploy.driver,nvidia.com/gpu.deploy.gpu-feature-discovery,nvidia.com/gpu.deploy.operator-validator,nvidia.com/gpu.present"
	node := func(labels, ann map[string]string, gpus string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}}
		if gpus != "" {
			n.Status.Capacity = corev1.ResourceList{builder.GPUResource: resource.MustParse(gpus)}
		}
		return n
	}
	for _, tc := range []struct {
		name               string
		n                  *corev1.Node
		cp                 *gpuv1alpha1.ClusterPolicy
		set, remove, owned string
	}{
		{"NFD's label makes a GPU node", node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true"}, nil, ""), &cp, all, "", all},
		{"the class-qualified NFD label too", node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true"}, nil, ""), &cp, all, "", all},
		{"so does advertised GPU capacity", node(nil, nil, "8"), &cp, all, "", all},
		{"no GPU, no labels", node(map[string]string{"feature.node.kubernetes.io/pci-8086.present": "true"}, nil, "0"), &cp, "", "", ""},
		{"an admin's opt-out and an existing gpu.present stay theirs",
			node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true", "nvidia.com/gpu.deploy.driver": "false", "nvidia.com/gpu.present": "true"}, nil, ""), &cp,
			strings.NewReplacer("nvidia.com/gpu.deploy.driver,", "", ",nvidia.com/gpu.present", "").Replace(all), "",
			strings.NewReplacer("nvidia.com/gpu.deploy.driver,", "", ",nvidia.com/gpu.present", "").Replace(all)},
		{"no active ClusterPolicy: trainops's labels go, the admin's stay",
			node(map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "false", "nvidia.com/gpu.deploy.device-plugin": "true"},
				map[string]string{builder.AnnotationNodeLabels: "nvidia.com/gpu.deploy.device-plugin,nvidia.com/gpu.deploy.driver,nvidia.com/gpu.present"}, "8"), nil,
			"", "nvidia.com/gpu.deploy.device-plugin,nvidia.com/gpu.present", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := builder.PlanNodeLabels(tc.n, tc.cp)
			if got := strings.Join(p.Set, ","); got != tc.set {
				t.Errorf("set %s, want %s", got, tc.set)
			}
			if got := strings.Join(p.Remove, ","); got != tc.remove {
				t.Errorf("remove %s, want %s", got, tc.remove)
			}
			if p.Owned != tc.owned {
				t.Errorf("owned %s, want %s", p.Owned, tc.owned)
			}
		})
	}
	t.Run("a label the MIG manager paused stays trainops's", func(t *testing.T) {
		n := node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true", "nvidia.com/gpu.deploy.device-plugin": builder.PausedForMIGChange},
			map[string]string{builder.AnnotationNodeLabels: "nvidia.com/gpu.deploy.device-plugin"}, "")
		p := builder.PlanNodeLabels(n, &cp)
		if !strings.Contains(p.Owned, "nvidia.com/gpu.deploy.device-plugin") || strings.Contains(strings.Join(p.Set, ","), "device-plugin") {
			t.Errorf("plan %+v", p)
		}
		if p := builder.PlanNodeLabels(n, nil); strings.Join(p.Remove, ",") != "nvidia.com/gpu.deploy.device-plugin" {
			t.Errorf("without a ClusterPolicy the paused label stays: %+v", p)
		}
	})
	t.Run("a disabled component's label goes", func(t *testing.T) {
		off := cp.DeepCopy()
		f := false
		off.Spec.DCGM.Exporter.Enabled = &f
		n := node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true"}, nil, "")
		p := builder.PlanNodeLabels(n, &cp)
		for _, l := range p.Set {
			n.Labels[l] = "true"
		}
		n.Annotations = map[string]string{builder.AnnotationNodeLabels: p.Owned}
		if p := builder.PlanNodeLabels(n, &cp); p.Changes(n.Annotations[builder.AnnotationNodeLabels]) {
			t.Errorf("a labelled node changes again: %+v", p)
		}
		p = builder.PlanNodeLabels(n, off)
		if strings.Join(p.Remove, ",") != "nvidia.com/gpu.deploy.dcgm-exporter" || strings.Contains(p.Owned, "dcgm") {
			t.Errorf("plan %+v", p)
		}
	})
}

// keysOf is m's keys, sorted, joined by commas.
func keysOf(m map[string]string) string { return strings.Join(keys(m), ",") }
