// SPDX-License-Identifier: Apache-2.0

package children

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// canon holds one copy of the strings every cached object repeats: the
// keys of trainops's labels and annotations, its label value, its owners'
// API versions and kinds, and the fields of a managed-fields entry. A
// decoded object holds a copy of each of its own, for each
// of the thousands of PyJobs, Jobs and Services a cache holds; the cache
// transforms (ShareStrings) make them all point at these.
var canon = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		builder.LabelManagedBy, builder.LabelPartOf, builder.ManagedBy, builder.LabelPyJob, builder.LabelSREAgent,
		builder.LabelClusterPolicy, builder.LabelKueueQueue, builder.AnnotationAppliedHash, builder.AnnotationRetain,
		builder.AnnotationConfigHash, gitopsv1alpha1.LabelSync, gitopsv1alpha1.AnnotationPrune, gitopsv1alpha1.AnnotationAdopt,
		trainingv1alpha1.GroupVersion.String(), aiopsv1alpha1.GroupVersion.String(), gpuv1alpha1.GroupVersion.String(),
		gitopsv1alpha1.GroupVersion.String(), trainingv1alpha1.PyJobKind, aiopsv1alpha1.SREAgentKind, gpuv1alpha1.ClusterPolicyKind,
		builder.FieldManager, string(metav1.ManagedFieldsOperationApply), string(metav1.ManagedFieldsOperationUpdate),
		"FieldsV1", "v1", "batch/v1", "apps/v1", "status", "kube-controller-manager", "kubectl-client-side-apply",
	} {
		m[s] = s
	}
	return m
}()

// canonical is canon's copy of s, or s.
func canonical(s string) string {
	if c, ok := canon[s]; ok {
		return c
	}
	return s
}

// ShareStrings makes the strings of o's metadata that canon holds point at
// canon's copy (see canon).
func ShareStrings(o metav1.Object) {
	o.SetLabels(sharedMap(o.GetLabels()))
	o.SetAnnotations(sharedMap(o.GetAnnotations()))
	refs := o.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = canonical(refs[i].APIVersion), canonical(refs[i].Kind)
	}
	mf := o.GetManagedFields()
	for i := range mf {
		e := &mf[i]
		e.Manager, e.Operation, e.APIVersion = canonical(e.Manager), metav1.ManagedFieldsOperationType(canonical(string(e.Operation))), canonical(e.APIVersion)
		e.FieldsType, e.Subresource = canonical(e.FieldsType), canonical(e.Subresource)
	}
}

// sharedMap is m with the keys and values canon holds as canon's copies.
func sharedMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[canonical(k)] = canonical(v)
	}
	return out
}
