// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// Labels and annotations on what trainops applies from Git. They live with
// the GitSync API, below both the sync engine that writes them and the
// reconcilers whose caches read them.
const (
	// LabelSync names the sync an object belongs to by the namespace of
	// its inventory (one trainops per namespace); it lets a re-sync list
	// just this trainops's objects, metadata only, and keeps two trainops
	// instances in one cluster from touching each other's objects.
	LabelSync = "trainops.dev/sync"
	// AnnotationPrune set to "disabled" keeps an object when it leaves Git.
	AnnotationPrune = "trainops.dev/prune"
	// AnnotationAdopt set to "true" on a live object lets a sync take it
	// over. Without it a sync refuses to apply over an object it did not
	// create, so a commit cannot claim (and later prune) what others own.
	// Only someone who can already write the object can set it.
	AnnotationAdopt = "trainops.dev/adopt"
)
