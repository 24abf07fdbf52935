// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

func node(name string, labels ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	return n
}

// TestGPUNodesOf: the OSes are those of the GPU nodes the ClusterPolicy
// selects, each once; GPU nodes without NFD's OS labels are named.
func TestGPUNodesOf(t *testing.T) {
	gpu, id, ver := builder.LabelGPUPresent, builder.LabelOSReleaseID, builder.LabelOSVersionID
	nodes := []corev1.Node{
		node("u1", gpu, "true", id, "ubuntu", ver, "22.04", "pool", "a"),
		node("u2", gpu, "true", id, "ubuntu", ver, "22.04", "pool", "a"),
		node("r1", gpu, "true", id, "rhel", ver, "9.4", "pool", "a"),
		node("cpu", id, "debian", ver, "12", "pool", "a"),
		node("other-pool", gpu, "true", id, "sles", ver, "15.5", "pool", "b"),
		node("bare", gpu, "true", "pool", "a"),
		node("half", gpu, "true", id, "ubuntu", "pool", "a"),
	}
	cp := &gpuv1alpha1.ClusterPolicy{Spec: gpuv1alpha1.ClusterPolicySpec{NodeSelector: map[string]string{"pool": "a"}}}
	got := builder.GPUNodesOf(cp, nodes)
	want := builder.GPUNodes{OS: []builder.NodeOS{{ID: "rhel", VersionID: "9.4"}, {ID: "ubuntu", VersionID: "22.04"}}, WithoutOS: []string{"bare", "half"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GPU nodes (-want +got):\n%s", d)
	}
}

// TestDriverDaemonSetNames: a driver DaemonSet's name is a valid
// DaemonSet name and label value for any OS labels NFD can set, and two
// OSes never share one.
func TestDriverDaemonSetNames(t *testing.T) {
	long := strings.Repeat("a", 63)
	seen := map[string]builder.NodeOS{}
	for _, o := range []builder.NodeOS{
		{ID: "ubuntu", VersionID: "22.04"}, {ID: "rhel", VersionID: "9.4"}, {ID: "Ubuntu", VersionID: "22_04"},
		{ID: long, VersionID: "1"}, {ID: long, VersionID: "2"}, {ID: "x", VersionID: long},
	} {
		name := builder.DriverDaemonSetFor(o)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%v: name %q: %v", o, name, errs)
		}
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
			t.Errorf("%v: name %q is no label value: %v", o, name, errs)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("%v and %v share the DaemonSet %s", prev, o, name)
		}
		seen[name] = o
	}
	if got := builder.DriverDaemonSetFor(builder.NodeOS{ID: "ubuntu", VersionID: "22.04"}); got != "nvidia-driver-daemonset-ubuntu22.04" {
		t.Errorf("Ubuntu 22.04's driver DaemonSet is %s", got)
	}
}

// TestParseNodeOS: ID=VERSION_ID, both valid label values.
func TestParseNodeOS(t *testing.T) {
	if o, err := builder.ParseNodeOS("rhel=9.4"); err != nil || o != (builder.NodeOS{ID: "rhel", VersionID: "9.4"}) {
		t.Errorf("rhel=9.4: %v, %v", o, err)
	}
	for _, bad := range []string{"ubuntu22.04", "=22.04", "ubuntu=", "ubuntu=22 04", "ubu/ntu=22.04"} {
		if _, err := builder.ParseNodeOS(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want an error naming it", bad, err)
		}
	}
}
