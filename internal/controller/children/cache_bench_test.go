// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// BenchmarkCachedChild measures what one child compared for drift costs in
// the informer cache, in bytes of heap per child: as the API server
// returns it after trainops applied it ("live"), with its pod template and
// managed fields dropped as trainops cached it before drift repair
// ("stripped"; a Service only lost its managed fields), and as it is
// cached now, whole but for other managers'
// entries of its managed fields ("compared").
func BenchmarkCachedChild(b *testing.B) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	agent := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bench", UID: "11111111-2222-3333-4444-555555555555"}}
	agent.Spec.GPUEnable = true
	cp := &gpuv1alpha1.ClusterPolicy{}
	testenv.LoadCase(b, testenv.Seed("gpu-cluster-config"), cp)
	cp.Name, cp.Spec.Namespace = "bench-"+ns.Name, ns.Name
	// Defaulted by the API server, not stored: no reconciler sees it.
	if err := k8s.Create(ctx, cp, client.DryRunAll); err != nil {
		b.Fatal(err)
	}
	var plugin client.Object
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		if o.GetName() == builder.DevicePluginDaemonSet {
			plugin = o
		}
	}
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(b, testenv.Seed("distributed-training"), pj)
	pj.Namespace, pj.Name, pj.Spec.Workers = ns.Name, "bench", 2
	children := map[string]client.Object{
		"Deployment": builder.AgentDeployment(agent, builder.Options{AgentImage: "ghcr.io/trainops/trainops:test"}),
		"DaemonSet":  plugin,
		"Service":    testenv.PyJobChildren(b, pj).Service,
	}
	for kind, desired := range children {
		desired.SetOwnerReferences(nil) // no owner to collect it in the benchmark
		if _, _, err := (Deps{Client: k8s}).Applier().Apply(ctx, desired, MetadataAnswer); err != nil {
			b.Fatal(err)
		}
		// Read as the cache reads it: a Service as metadata only.
		live := cachedLike(desired, desired.GetObjectKind().GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			b.Fatal(err)
		}
		var cached func(any) (any, error)
		for obj, by := range CacheOptions().ByObject {
			if reflect.TypeOf(obj) == reflect.TypeOf(desired) {
				cached = by.Transform
			}
		}
		variants := map[string]func(client.Object) client.Object{
			"live": func(o client.Object) client.Object { return o },
			"stripped": func(o client.Object) client.Object {
				o.SetManagedFields(nil)
				switch x := o.(type) {
				case *appsv1.Deployment:
					x.Spec.Template = corev1.PodTemplateSpec{}
				case *appsv1.DaemonSet:
					x.Spec.Template = corev1.PodTemplateSpec{}
				}
				return o
			},
			// What the cache keeps of it.
			"compared": func(o client.Object) client.Object {
				x, _ := cached(o)
				return x.(client.Object)
			},
		}
		// The comparison a reconcile makes when the child is unchanged
		// and not yet remembered (see compared).
		b.Run(kind+"/compare", func(b *testing.B) {
			u, err := builder.ToUnstructured(desired)
			if err != nil {
				b.Fatal(err)
			}
			u = withAnnotation(u, builder.AnnotationAppliedHash, live.GetAnnotations()[builder.AnnotationAppliedHash])
			kept, _ := cached(live.DeepCopyObject())
			for b.Loop() {
				if fields, err := drift(u.DeepCopy(), kept.(client.Object)); err != nil || len(fields) > 0 {
					b.Fatalf("drift %v, %v", fields, err)
				}
			}
		})
		for name, transform := range variants {
			b.Run(fmt.Sprintf("%s/%s", kind, name), func(b *testing.B) {
				const n = 2000
				var perChild float64
				for b.Loop() {
					held := make([]client.Object, n)
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					for i := range held {
						held[i] = transform(live.DeepCopyObject().(client.Object))
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					perChild = float64(after.HeapAlloc-before.HeapAlloc) / n
					runtime.KeepAlive(held)
				}
				b.ReportMetric(perChild, "B/child")
			})
		}
	}
}
