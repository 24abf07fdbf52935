// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/capacity"
	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/render"
)

// capacitySource is where diff reads the queues and nodes a plan needs:
// a saved list of objects, the cluster, or neither (the change's own
// queues only).
type capacitySource struct {
	file    string
	restCfg *rest.Config
}

// neverFits is diff's error when a Job of the change can never run.
func neverFits(p *capacity.Plan) error {
	bad := p.NeverFit()
	if len(bad) == 0 {
		return nil
	}
	msgs := make([]string, len(bad))
	for i, v := range bad {
		msgs[i] = fmt.Sprintf("PyJob %s: %s", v.PyJob, v.Why)
	}
	return &exitError{code: ExitUsage, msg: fmt.Sprintf("Error: %d of the change's PyJobs can never run:\n  - %s", len(bad), strings.Join(msgs, "\n  - "))}
}

// planCapacity adds to r the capacity plan of the Jobs of the PyJobs the
// change creates or updates; none when there is no such Job, or nothing
// to plan them against (no queue in the change, no --capacity, no
// --cluster).
func planCapacity(ctx context.Context, l *offline.Loader, r *diff.Report, head []render.Object, src capacitySource) error {
	jobs, err := changedJobs(l, r, head)
	if err != nil || len(jobs) == 0 {
		return err
	}
	var in capacity.Inputs
	var repo []*unstructured.Unstructured
	policyName := ""
	for _, o := range head {
		if o.GroupVersionKind().Group == "kueue.x-k8s.io" {
			repo = append(repo, o.Unstructured)
		}
		if o.GroupVersionKind().GroupKind() == gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind).GroupKind() {
			var cp gpuv1alpha1.ClusterPolicy
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cp); err != nil {
				return fmt.Errorf("%s: %s: %w", o.File, o.ID(), err)
			}
			// The active ClusterPolicy is the first by name, as the
			// reconciler picks it.
			if in.Policy == nil || o.GetName() < policyName {
				in.Policy, policyName = &cp.Spec, o.GetName()
			}
		}
	}
	var observed []*unstructured.Unstructured
	switch {
	case src.file != "":
		f, err := os.Open(src.file)
		if err != nil {
			return fmt.Errorf("--capacity: %w", err)
		}
		defer f.Close()
		if observed, err = capacity.ReadObjects(f); err != nil {
			return fmt.Errorf("--capacity %s: %w", src.file, err)
		}
		in.Source = "saved objects " + src.file
	case src.restCfg != nil:
		if observed, in.NoKueue, err = clusterCapacity(ctx, src.restCfg); err != nil {
			return err
		}
		in.Source = "the cluster"
	case len(repo) == 0:
		return nil
	default:
		in.Source, in.Partial = "the change's queues (nothing in use known)", true
	}
	if err := in.Objects(capacity.Overlay(repo, observed)); err != nil {
		return err
	}
	plan, err := capacity.New(in, jobs)
	if err != nil {
		return err
	}
	r.Capacity = plan
	return nil
}

// changedJobs builds the Jobs of the PyJobs the change creates or updates,
// with the reconciler's own builder.
func changedJobs(l *offline.Loader, r *diff.Report, head []render.Object) ([]*batchv1.Job, error) {
	changed := map[string]bool{}
	for _, c := range r.Changes {
		if c.Kind == trainingv1alpha1.PyJobKind && c.Owner == "" && c.Action != diff.Delete {
			changed[c.Namespace+"/"+c.Name] = true
		}
	}
	var pyjobs []render.Object
	for _, o := range head {
		if o.GroupVersionKind().GroupKind() == trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind).GroupKind() && changed[o.GetNamespace()+"/"+o.GetName()] {
			pyjobs = append(pyjobs, o)
		}
	}
	if len(pyjobs) == 0 {
		return nil, nil
	}
	items, err := l.Expand(pyjobs)
	if err != nil {
		return nil, err
	}
	var jobs []*batchv1.Job
	for _, it := range items {
		if it.Owner == "" || it.Object.GetKind() != "Job" {
			continue
		}
		j := &batchv1.Job{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it.Object.Object, j); err != nil {
			return nil, fmt.Errorf("%s: %w", it.Owner, err)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// clusterCapacity lists the cluster's ClusterQueues, LocalQueues and
// Nodes; noKueue when it does not serve Kueue's kinds.
func clusterCapacity(ctx context.Context, restCfg *rest.Config) (_ []*unstructured.Unstructured, noKueue bool, err error) {
	c, err := client.New(restCfg, client.Options{})
	if err != nil {
		return nil, false, err
	}
	var out []*unstructured.Unstructured
	for _, kind := range []string{"ClusterQueueList", "LocalQueueList"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
		list.SetKind(kind)
		if err := c.List(ctx, list); err != nil {
			if meta.IsNoMatchError(err) {
				noKueue = true
				break
			}
			return nil, false, fmt.Errorf("list the cluster's %ss: %w", strings.TrimSuffix(kind, "List"), err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, false, fmt.Errorf("list the cluster's Nodes: %w", err)
	}
	for i := range nodes.Items {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&nodes.Items[i])
		if err != nil {
			return nil, false, err
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetAPIVersion("v1")
		obj.SetKind("Node")
		out = append(out, obj)
	}
	return out, noKueue, nil
}
