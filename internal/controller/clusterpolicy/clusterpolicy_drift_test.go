// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
)

// daemonSetPutBack: `kubectl set image` on the device plugin DaemonSet is
// put back, with an Event on the ClusterPolicy and the metric.
func daemonSetPutBack(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: builder.DevicePluginDaemonSet}
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(ctx, key, ds); err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	before := testenv.Metric(t, "trainops_children_drift_corrected_total", "kind", "DaemonSet")
	testenv.PatchAs(t, k8s, ds, "kubectl-set", types.StrategicMergePatchType, fmt.Sprintf(
		`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"registry.example.com/device-plugin:evil"}]}}}}`, ds.Spec.Template.Spec.Containers[0].Name))
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, key, ds); err != nil {
			return err
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("image %s, want %s", got, image)
		}
		return nil
	})
	if got := testenv.Metric(t, "trainops_children_drift_corrected_total", "kind", "DaemonSet"); got < before+1 {
		t.Errorf("trainops_children_drift_corrected_total{kind=DaemonSet} did not rise")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, n := range testenv.EventNotes(t, k8s, "", cp.Name, children.ReasonDriftCorrected) {
			if strings.Contains(n, "DaemonSet "+ns+"/"+builder.DevicePluginDaemonSet) && strings.Contains(n, "spec.template.spec.containers") {
				return nil
			}
		}
		return fmt.Errorf("no DriftCorrected Event on the ClusterPolicy names the DaemonSet's containers")
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// stackPutBack edits, as kubectl would, one field trainops manages in the
// GPU stack's ConfigMap and Service, and checks
// each is put back with its own DriftCorrected Event, while a label added
// beside trainops's stays.
func stackPutBack(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	cases := []struct {
		kind  string
		obj   client.Object
		patch string
		// field reads the edited field back.
		field []string
	}{
		{"ConfigMap", &corev1.ConfigMap{}, `{"metadata":{"labels":{"team.example.com/owner":"ml"}},"data":{"config.yaml":"version: v1\n"}}`, []string{"data", "config.yaml"}},
		{"Service", &corev1.Service{}, `{"metadata":{"labels":{"team.example.com/owner":"ml"}},"spec":{"selector":{"app":"something-else"}}}`, []string{"spec", "selector", "app"}},
	}
	names := map[string]string{"ConfigMap": builder.DevicePluginConfigMap, "Service": builder.DCGMExporterService}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			key := client.ObjectKey{Namespace: ns, Name: names[tc.kind]}
			read := func() map[string]any {
				if err := k8s.Get(ctx, key, tc.obj); err != nil {
					t.Fatal(err)
				}
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.obj)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			before, _, _ := unstructured.NestedFieldNoCopy(read(), tc.field...)
			testenv.PatchAs(t, k8s, tc.obj, "kubectl-patch", types.MergePatchType, tc.patch)
			testenv.Eventually(t, 20*time.Second, func() error {
				now, _, _ := unstructured.NestedFieldNoCopy(read(), tc.field...)
				if !reflect.DeepEqual(now, before) {
					return fmt.Errorf("%s not put back: %v, want %v", strings.Join(tc.field, "."), now, before)
				}
				return nil
			})
			if got := tc.obj.GetLabels()["team.example.com/owner"]; got != "ml" {
				t.Errorf("a label trainops does not manage was removed (%q)", got)
			}
			testenv.Eventually(t, 10*time.Second, func() error {
				for _, n := range testenv.EventNotes(t, k8s, "", cp.Name, children.ReasonDriftCorrected) {
					if strings.Contains(n, tc.kind+" "+ns+"/"+names[tc.kind]) {
						return nil
					}
				}
				return fmt.Errorf("no DriftCorrected Event names %s %s", tc.kind, names[tc.kind])
			})
		})
	}
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}
