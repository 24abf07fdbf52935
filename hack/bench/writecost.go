// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

// WriteCost is what n writes of one kind cost kube-apiserver, made from 16
// goroutines.
type WriteCost struct {
	Write      string  `json:"write"`
	N          int     `json:"n"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"apiserverCPUSeconds"`
}

// writeCosts measures, on a fresh API server, the CPU each kind of write a
// new PyJob's children need costs the API server (BENCH_WRITE_COSTS=N):
// where the children figure's time goes.
func writeCosts(ctx context.Context, n int) ([]WriteCost, error) {
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var pjs []*trainingv1alpha1.PyJob
	for _, o := range benchrepo.Generate(n+n/10+3, "cost") {
		switch o.Kind {
		case "Namespace":
			if err := applyOne(ctx, c, o.U); err != nil {
				return nil, err
			}
		case "PyJob":
			if len(pjs) < n {
				pj := &trainingv1alpha1.PyJob{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.U.Object, pj); err != nil {
					return nil, err
				}
				pjs = append(pjs, pj)
			}
		}
	}
	if len(pjs) < n {
		return nil, fmt.Errorf("generated %d PyJobs, want %d", len(pjs), n)
	}
	var out []WriteCost
	var live []*trainingv1alpha1.PyJob
	measure := func(what string, fn func(i int) error) error {
		// Let the API server settle: 2 s after 1,000 writes.
		time.Sleep(time.Duration(min(n, 1000)) * 2 * time.Millisecond)
		_, cpu0 := usage(env.PID("kube-apiserver"))
		t := time.Now()
		if err := parallel(n, fn); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		secs := time.Since(t).Seconds()
		_, cpu1 := usage(env.PID("kube-apiserver"))
		out = append(out, WriteCost{Write: what, N: n, Seconds: secs, CPUSeconds: cpu1 - cpu0})
		return nil
	}
	steps := []struct {
		what string
		fn   func(i int) error
	}{
		{"PyJob: server-side apply (create)", func(i int) error { return applyOne(ctx, c, pjs[i]) }},
		{"PyJob: the same, as trainops applies it", func(i int) error {
			// With the sync label and the hash annotation.
			obj, err := synced(pjs[i], "-synced")
			if err != nil {
				return err
			}
			return applyOne(ctx, c, obj)
		}},
		{"PyJob: the same, answered with metadata only", func(i int) error {
			obj, err := synced(pjs[i], "-meta")
			if err != nil {
				return err
			}
			raw, err := obj.MarshalJSON()
			if err != nil {
				return err
			}
			_, err = md.Resource(trainingv1alpha1.GroupVersion.WithResource("pyjobs")).Namespace(obj.GetNamespace()).
				Patch(ctx, obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: builder.FieldManager, Force: ptr.To(true)})
			return err
		}},
		{"Job: server-side apply (create)", func(i int) error {
			job, err := jobOf(pjs[i])
			if err != nil {
				return err
			}
			return applyOne(ctx, c, job)
		}},
		{"Job: create (POST, protobuf)", func(i int) error {
			job, err := jobOf(pjs[i])
			if err != nil {
				return err
			}
			job.Name += "-post"
			_, err = cs.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: "floor"})
			return err
		}},
		{"Service: server-side apply (create)", func(i int) error { return applyOne(ctx, c, serviceOf(pjs[i])) }},
		{"PyJob status: merge patch", func(i int) error { return firstStatus(ctx, c, live[i]) }},
		{"Event: create", func(i int) error { return createdEvent(ctx, cs, live[i], "created Service, Job") }},
	}
	for _, s := range steps {
		if s.what == "PyJob status: merge patch" {
			// The PyJobs as the cluster has them (UID, generation).
			if live, err = current(ctx, c, pjs); err != nil {
				return nil, err
			}
		}
		if err := measure(s.what, s.fn); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// synced is pj renamed with suffix and prepared as trainops's sync applies
// it: with the sync label and the hash annotation.
func synced(pj *trainingv1alpha1.PyJob, suffix string) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pj)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetName(obj.GetName() + suffix)
	return gitops.Prepare(obj, gitops.DefaultName)
}

// current reads pjs back from the cluster.
func current(ctx context.Context, c client.Client, pjs []*trainingv1alpha1.PyJob) ([]*trainingv1alpha1.PyJob, error) {
	out := make([]*trainingv1alpha1.PyJob, len(pjs))
	err := parallel(len(pjs), func(i int) error {
		out[i] = &trainingv1alpha1.PyJob{}
		return c.Get(ctx, client.ObjectKeyFromObject(pjs[i]), out[i])
	})
	return out, err
}

// printWriteCosts prints one line per kind of write, with the CPU each
// write cost kube-apiserver.
func printWriteCosts(w io.Writer, cs []WriteCost) {
	fmt.Fprintf(w, "%-38s %6s %9s %22s\n", "write", "n", "time", "kube-apiserver CPU")
	for _, c := range cs {
		fmt.Fprintf(w, "%-38s %6d %8.2fs %10.2fs (%.2f ms each)\n", c.Write, c.N, c.Seconds, c.CPUSeconds, c.CPUSeconds/float64(c.N)*1000)
	}
}
