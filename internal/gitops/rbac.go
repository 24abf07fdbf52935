// SPDX-License-Identifier: Apache-2.0

package gitops

// The sync applies and prunes the default allowed kinds, keeps its
// inventory in a ConfigMap, and reads the Secrets named in its settings.
// Allowing more kinds (allowedKinds) needs matching rules added to the
// ClusterRole.
//
// +kubebuilder:rbac:groups=training.trainops.dev,resources=pyjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=aiops.trainops.dev,resources=sreagents,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gpu.trainops.dev,resources=clusterpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces;configmaps;persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=trainops-system,resources=secrets,verbs=get
