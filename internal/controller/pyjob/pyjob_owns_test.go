// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// TestPyJobNeverChangesAJobItDidNotCreate: a Job of the PyJob's Job name
// that trainops did not create stalls the PyJob and is left as it was.
func TestPyJobNeverChangesAJobItDidNotCreate(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace = ns
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.JobName(pj)},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "someone/else"}},
		}}},
	}
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	msg := ctrltest.WaitStalledNotOwned(t, k8s, pj)
	if !strings.Contains(msg, "Job "+ns+"/"+job.Name+" exists") {
		t.Errorf("stalled message %q does not name the Job", msg)
	}
	// The Job controller writes the Job's status; trainops writes nothing.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil || job.Generation != 1 || len(job.OwnerReferences) != 0 || job.Labels[builder.LabelManagedBy] != "" || job.Labels[builder.LabelPyJob] != "" || job.Spec.Template.Spec.Containers[0].Image != "someone/else" {
		t.Errorf("the Job changed: %v generation %d owners %v labels %v", err, job.Generation, job.OwnerReferences, job.Labels)
	}
	for _, m := range job.ManagedFields {
		if m.Manager == builder.FieldManager {
			t.Errorf("trainops wrote the Job: %+v", m)
		}
	}
}
