// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

func getPyJob(t *testing.T, ns, name string) *trainingv1alpha1.PyJob {
	t.Helper()
	pj := &trainingv1alpha1.PyJob{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pj); err != nil {
		t.Fatal(err)
	}
	return pj
}

func waitPhase(t *testing.T, ns, name string, want trainingv1alpha1.PyJobPhase) *trainingv1alpha1.PyJob {
	t.Helper()
	var pj *trainingv1alpha1.PyJob
	testenv.Eventually(t, 90*time.Second, func() error {
		pj = getPyJob(t, ns, name)
		if pj.Status.Phase != want {
			return fmt.Errorf("phase %q (%s), want %s", pj.Status.Phase, pj.Status.Message, want)
		}
		return nil
	})
	return pj
}

func pods(t *testing.T, ns, pyjob string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: pyjob}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func envOf(p corev1.Pod) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range p.Spec.Containers[0].Env {
		m[e.Name] = e
	}
	return m
}

// eventReasons lists the reasons of Events recorded about an object.
func eventReasons(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out[e.Reason] = e.Note
		}
	}
	return out
}

func TestSingleGPUPyJobSucceeds(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace = ns
	if err := k8s.Create(context.Background(), pj); err != nil {
		t.Fatal(err)
	}
	pj = waitPhase(t, ns, "bert-training", trainingv1alpha1.PyJobSucceeded)
	s := pj.Status
	if s.JobName != "bert-training-job" || s.Succeeded != 1 || s.StartTime == nil || s.CompletionTime == nil || s.ObservedGeneration != pj.Generation {
		t.Errorf("status %+v", s)
	}
	if !conditions.IsReady(pj) {
		t.Errorf("Ready condition not True: %+v", s.Conditions)
	}
	if c := meta.FindStatusCondition(s.Conditions, StorageCondition); c != nil {
		t.Errorf("a Storage condition on a PyJob without paths: %+v", c)
	}
	ps := pods(t, ns, "bert-training")
	if len(ps) != 1 {
		t.Fatalf("%d pods labelled pyjob-name=bert-training, want 1", len(ps))
	}
	p := ps[0]
	e := envOf(p)
	for k, v := range map[string]string{"MASTER_ADDR": "localhost", "WORLD_SIZE": "1", "NNODES": "1", "NPROC_PER_NODE": "1", "NODE_RANK": "0"} {
		if e[k].Value != v {
			t.Errorf("pod env %s=%q, want %q", k, e[k].Value, v)
		}
	}
	if q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 1 {
		t.Errorf("gpu limit %s", q.String())
	}
	node := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[testenv.GPUNodeLabel] != "true" {
		t.Errorf("GPU pod ran on %s, which has no GPUs", node.Name)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		r := testenv.EventReasons(t, k8s, ns, "bert-training")
		for _, want := range []string{"Created", "Succeeded"} {
			if _, ok := r[want]; !ok {
				return fmt.Errorf("no %s event; have %v", want, r)
			}
		}
		return nil
	})
}

func TestDistributedPyJobSucceeds(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("distributed-training"), pj)
	pj.Namespace, pj.Spec.Workers = ns, 2
	if err := k8s.Create(context.Background(), pj); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "distributed-training", trainingv1alpha1.PyJobSucceeded)
	svc := &corev1.Service{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "distributed-training-job"}, svc); err != nil {
		t.Fatalf("headless Service: %v", err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service is not headless: %q", svc.Spec.ClusterIP)
	}
	ps := pods(t, ns, "distributed-training")
	if len(ps) != 2 {
		t.Fatalf("%d pods, want 2", len(ps))
	}
	indexes := map[string]bool{}
	for _, p := range ps {
		e := envOf(p)
		for k, v := range map[string]string{"MASTER_ADDR": "distributed-training-job-0.distributed-training-job", "MASTER_PORT": "29500", "WORLD_SIZE": "8", "NNODES": "2", "NPROC_PER_NODE": "4", "PET_NNODES": "2", "DATASET_PATH": "/mnt/dataset", "OUTPUT_PATH": "/mnt/output"} {
			if e[k].Value != v {
				t.Errorf("pod %s env %s=%q, want %q", p.Name, k, e[k].Value, v)
			}
		}
		if ref := e["NODE_RANK"].ValueFrom; ref == nil || !strings.Contains(ref.FieldRef.FieldPath, "job-completion-index") {
			t.Errorf("NODE_RANK does not come from the completion index: %+v", e["NODE_RANK"])
		}
		if p.Spec.Subdomain != "distributed-training-job" {
			t.Errorf("pod %s subdomain %q", p.Name, p.Spec.Subdomain)
		}
		indexes[p.Annotations["batch.kubernetes.io/job-completion-index"]] = true
	}
	if !indexes["0"] || !indexes["1"] {
		t.Errorf("completion indexes %v, want 0 and 1", indexes)
	}
	// Its datasetPath and outputPath have no storage behind them: the
	// condition and one Warning Event say so.
	got := getPyJob(t, ns, "distributed-training")
	c := meta.FindStatusCondition(got.Status.Conditions, StorageCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNoStorage ||
		!strings.Contains(c.Message, "spec.datasetPath: no spec.storage.dataset") || !strings.Contains(c.Message, "spec.outputPath: no spec.storage.output") {
		t.Errorf("Storage condition %+v", c)
	}
	if note, ok := testenv.EventReasons(t, k8s, ns, "distributed-training")[ReasonNoStorage]; !ok || !strings.Contains(note, "spec.outputPath") {
		t.Errorf("no NoStorage Event (note %q)", note)
	}
}

// TestFailingPyJobRestartsThenFails: a worker's failure restarts the
// whole run as a new attempt of the Job, with the next
// TRAINOPS_RESTART_ATTEMPT, until backoffLimit (failurePolicy.maxRestarts's
// older name) restarts are spent; then the PyJob fails naming the last
// cause.
func TestFailingPyJobRestartsThenFails(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace, pj.Name = ns, "crashes"
	pj.Spec.Image, pj.Spec.BackoffLimit = crashImage, ptr.To(int32(1))
	if err := k8s.Create(context.Background(), pj); err != nil {
		t.Fatal(err)
	}
	pj = waitPhase(t, ns, "crashes", trainingv1alpha1.PyJobFailed)
	if pj.Status.Restarts != 1 || pj.Status.Attempt != 1 || pj.Status.Runs != 1 {
		t.Errorf("restarts %d attempt %d runs %d, want 1, 1, 1", pj.Status.Restarts, pj.Status.Attempt, pj.Status.Runs)
	}
	if !strings.Contains(pj.Status.Message, "failed after 1 restarts (maxRestarts 1)") || !strings.Contains(pj.Status.Message, "exited with code") {
		t.Errorf("message %q does not give the reason", pj.Status.Message)
	}
	if !conditions.IsStalled(pj) || conditions.IsReady(pj) || conditions.GetReason(pj, status.StalledCondition) != ReasonMaxRestarts {
		t.Errorf("a failed PyJob must be Stalled (%s) and not Ready: %+v", ReasonMaxRestarts, pj.Status.Conditions)
	}
	if c := conditions.Get(pj, RestartingCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonRestarted {
		t.Errorf("Restarting condition %+v, want False, %s", c, ReasonRestarted)
	}
	var job batchv1.Job
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, &job); err != nil {
		t.Fatal(err)
	}
	if job.Annotations[builder.AttemptAnnotation] != "1.1" {
		t.Errorf("the Job left is of attempt %q, want 1.1", job.Annotations[builder.AttemptAnnotation])
	}
	for _, p := range pods(t, ns, "crashes") {
		if a := envOf(p)["TRAINOPS_RESTART_ATTEMPT"].Value; a != "1" {
			t.Errorf("pod %s of attempt %s left after the restart", p.Name, a)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		ev := testenv.EventReasons(t, k8s, ns, "crashes")
		if _, ok := ev["Failed"]; !ok {
			return fmt.Errorf("no Failed event")
		}
		if note := ev[ReasonRestart]; !strings.Contains(note, "restart 1 of 1") || !strings.Contains(note, "worker 0 (pod crashes-job-") {
			return fmt.Errorf("%s Event %q does not name the worker", ReasonRestart, note)
		}
		return nil
	})
}

func TestDeletingPyJobKeepsOutputClaim(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("distributed-training"), pj)
	pj.Namespace, pj.Name, pj.Spec.Workers = ns, "keeps-output", 2
	pj.Spec.Storage = &trainingv1alpha1.PyJobStorage{Output: &trainingv1alpha1.OutputVolume{Size: ptr.To(resource.MustParse("10Gi"))}}
	ctx := context.Background()
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, o := range []client.Object{&batchv1.Job{}, &corev1.Service{}} {
			if err := k8s.Get(ctx, key("keeps-output-job"), o); err != nil {
				return err
			}
		}
		return k8s.Get(ctx, key("keeps-output-output"), &corev1.PersistentVolumeClaim{})
	})
	if err := k8s.Delete(ctx, pj); err != nil {
		t.Fatal(err)
	}
	// The garbage collector (kube-controller-manager) removes owned children.
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, o := range []client.Object{&batchv1.Job{}, &corev1.Service{}} {
			if err := k8s.Get(ctx, key("keeps-output-job"), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there (err %v)", o, err)
			}
		}
		return nil
	})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctx, key("keeps-output-output"), pvc); err != nil || !pvc.DeletionTimestamp.IsZero() {
		t.Fatalf("output claim not kept: %v %v", err, pvc.DeletionTimestamp)
	}
}

func TestSuspendAndResume(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace, pj.Name, pj.Spec.Suspend = ns, "paused", ptr.To(true)
	ctx := context.Background()
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "paused", trainingv1alpha1.PyJobSuspended)
	if n := len(pods(t, ns, "paused")); n != 0 {
		t.Fatalf("%d pods ran while suspended", n)
	}
	testenv.Update(t, k8s, pj, func(pj *trainingv1alpha1.PyJob) { pj.Spec.Suspend = ptr.To(false) })
	waitPhase(t, ns, "paused", trainingv1alpha1.PyJobSucceeded)
}

func TestUnchangedPyJobReconcileWritesNothing(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("distributed-training"), pj)
	pj.Namespace, pj.Name, pj.Spec.Workers = ns, "steady", 2
	ctx := context.Background()
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "steady", trainingv1alpha1.PyJobSucceeded)
	versions := func() map[string]string {
		out := map[string]string{}
		for name, o := range map[string]client.Object{"pyjob": &trainingv1alpha1.PyJob{}, "job": &batchv1.Job{}, "service": &corev1.Service{}} {
			n := "steady"
			if name != "pyjob" {
				n = "steady-job"
			}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, o); err != nil {
				t.Fatal(err)
			}
			out[name] = o.GetResourceVersion()
		}
		return out
	}
	// Let the cache catch up with the final status, then reconcile by hand.
	r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	testenv.Eventually(t, 10*time.Second, func() error {
		cached := &trainingv1alpha1.PyJob{}
		if err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: "steady"}, cached); err != nil {
			return err
		}
		if cached.ResourceVersion != getPyJob(t, ns, "steady").ResourceVersion {
			return fmt.Errorf("cache behind")
		}
		return nil
	})
	before := versions()
	drifted := testenv.Metric(t, "trainops_children_drift_corrected_total", "", "")
	for i := 0; i < 3; i++ {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "steady"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := testenv.Metric(t, "trainops_children_drift_corrected_total", "", "") - drifted; n != 0 {
		t.Errorf("%v settled children counted as drifted and applied again", n)
	}
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("reconciling an unchanged PyJob wrote: resourceVersions %v -> %v", before, after)
	}
}
