// SPDX-License-Identifier: Apache-2.0

package builder

import (
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// Warning is a field that is valid but will not do what it seems to.
type Warning struct {
	Field   string // "spec.datasetPath"
	Message string
}

func (w Warning) String() string { return w.Field + ": " + w.Message }

// StorageWarnings are the PyJob's paths with no storage behind them: a
// datasetPath without storage.dataset mounts an empty folder, and an
// outputPath without storage.output keeps nothing once the pod is gone
// (both are emptyDir volumes).
func StorageWarnings(pj *trainingv1alpha1.PyJob) []Warning {
	var out []Warning
	st := pj.Spec.Storage
	if pj.Spec.DatasetPath != "" && (st == nil || st.Dataset == nil) {
		out = append(out, Warning{Field: "spec.datasetPath", Message: "no spec.storage.dataset: the folder is an empty emptyDir, so training finds no data; name the claim that holds it in spec.storage.dataset"})
	}
	if pj.Spec.OutputPath != "" && (st == nil || st.Output == nil) {
		out = append(out, Warning{Field: "spec.outputPath", Message: "no spec.storage.output: checkpoints go to an emptyDir and are lost with the pod; set spec.storage.output to keep them"})
	}
	return out
}
