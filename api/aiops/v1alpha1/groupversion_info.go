// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds the aiops.trainops.dev/v1alpha1 API: SREAgent, an
// automated operations agent with namespace-scoped RBAC.
//
// +kubebuilder:object:generate=true
// +groupName=aiops.trainops.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "aiops.trainops.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
