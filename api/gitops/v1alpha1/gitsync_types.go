// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitRepository says where a GitSync's objects are kept.
//
// +kubebuilder:validation:XValidation:rule="[has(self.branch), has(self.tag), has(self.commit)].filter(x, x).size() <= 1",message="set at most one of branch, tag and commit"
type GitRepository struct {
	// URL of the repository: https://, http:// (for a server on the
	// cluster's own network), ssh:// or git@host:path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://') || self.startsWith('ssh://') || self.matches('^[^@/:]+@[^:/]+:.+$')",message="url must be https://, http://, ssh:// or user@host:path"
	URL string `json:"url"`

	// Branch to follow (default: main).
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag to sync.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Tag string `json:"tag,omitempty"`

	// Commit to sync: a full hexadecimal SHA-1.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{40}$`
	// +optional
	Commit string `json:"commit,omitempty"`

	// Path of the folder to render, relative to the repository's root.
	// +kubebuilder:default="."
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="path must be relative to the repository's root and stay inside it"
	// +optional
	Path string `json:"path,omitempty"`

	// SecretRef names a Secret in the GitSync's own namespace holding the
	// credentials: username and password (a token), or identity (an SSH
	// private key), identity.passphrase and known_hosts.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// LocalObjectReference names an object in the GitSync's namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// GitSyncSpec is what a GitSync keeps in the cluster and how.
type GitSyncSpec struct {
	// Repository is where the objects are kept.
	Repository GitRepository `json:"repository"`

	// Interval between syncs; each also puts back what drifted.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="interval must be at least 10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Timeout bounds one fetch and one sync. trainops's maxGitSyncTimeout
	// setting (default 5m) bounds it in turn: a longer timeout is cut to it.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="timeout must be at least 5s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Prune deletes what this GitSync applied once it leaves the
	// repository, and everything it applied when the GitSync is deleted.
	// +kubebuilder:default=true
	// +optional
	Prune bool `json:"prune"`

	// PruneBudget is the most objects one sync may delete: a number ("20")
	// or a share of what the GitSync holds ("50%"). A revision past it is
	// refused whole.
	// +kubebuilder:default="50%"
	// +kubebuilder:validation:Pattern=`^[0-9]+%?$`
	// +optional
	PruneBudget string `json:"pruneBudget,omitempty"`

	// AllowEmpty lets a revision that renders nothing prune everything.
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`

	// Force takes over fields another writer changed, putting them back
	// as the repository has them; without it such a conflict refuses the
	// revision.
	// +optional
	Force bool `json:"force,omitempty"`

	// AllowedKinds are the only kinds the repository may hold, as Kind or
	// Kind.group (default: the kinds of trainops's settings).
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	AllowedKinds []string `json:"allowedKinds,omitempty"`

	// ServiceAccountName is the ServiceAccount, in the GitSync's
	// namespace, that the sync acts as: the API server's RBAC decides
	// what the repository may create. Without one, a GitSync outside
	// trainops's own namespace may write only into its own namespace.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// WebhookSecretRef names a Secret in the GitSync's own namespace whose
	// key token authenticates pushes for this GitSync alone, at trainops's
	// webhook path /hook/gitsync/<namespace>/<name> (GitHub's or
	// trainops's HMAC signature, or GitLab's token). Read as
	// serviceAccountName (or as trainops in its own namespace). A GitSync
	// with one is not synced by pushes to the shared webhook secret.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// Decryption decrypts the repository's SOPS-encrypted objects (of the
	// kinds trainops's decryption.kinds setting names, Secret by default)
	// as they are applied. Without it, an encrypted object refuses the
	// revision.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`

	// CommitStatus posts each revision's outcome (applied, refused with
	// the reason, drift put back) as a commit status on the forge that
	// hosts the repository. Posted in the background with retries: a sync
	// never waits for the forge.
	// +optional
	CommitStatus *CommitStatus `json:"commitStatus,omitempty"`

	// Alert sends each revision's outcome (applied, refused with the
	// reason and the first problem, drift put back) to a chat or webhook
	// channel, in the background: repeats are not sent again, and a burst
	// is rate limited rather than dropped.
	// +optional
	Alert *Alert `json:"alert,omitempty"`

	// Suspend stops syncing; what was applied stays as it is.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// CommitStatus says where a GitSync posts its commit statuses.
type CommitStatus struct {
	// Provider is the forge's API: github, gitlab or gitea.
	// +kubebuilder:validation:Enum=github;gitlab;gitea
	Provider string `json:"provider"`

	// APIURL is the forge's address (default: from the repository's URL;
	// https://api.github.com for github.com).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="apiURL must be https:// or http://"
	// +optional
	APIURL string `json:"apiURL,omitempty"`

	// SecretRef names a Secret in the GitSync's own namespace whose key
	// token is allowed to set commit statuses, read as serviceAccountName
	// (or as trainops in its own namespace). Never logged.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// Alert says where a GitSync sends its alerts.
type Alert struct {
	// Provider is the channel's kind: slack (an incoming webhook taking
	// Slack's payload: Slack, Mattermost, Rocket.Chat, Discord's /slack)
	// or generic (the alert as JSON, signed with the Secret's key when it
	// has one).
	// +kubebuilder:validation:Enum=slack;generic
	Provider string `json:"provider"`

	// SecretRef names a Secret in the GitSync's own namespace whose key
	// address holds the webhook's URL (a secret: a Slack webhook's holds
	// its token) and, for generic, whose optional key key signs each body
	// (HMAC-SHA256 in X-Trainops-Signature), read as serviceAccountName
	// (or as trainops in its own namespace). Never logged.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// Decryption says how a GitSync decrypts SOPS-encrypted objects.
type Decryption struct {
	// Provider of the encryption: sops (age keys).
	// +kubebuilder:validation:Enum=sops
	// +kubebuilder:default=sops
	// +optional
	Provider string `json:"provider,omitempty"`

	// SecretRef names a Secret in the GitSync's own namespace whose
	// entries ending in .agekey hold age identities (AGE-SECRET-KEY-1…),
	// read as serviceAccountName (or as trainops in its own namespace).
	// Decrypted values go to the API server only: never to logs, Events,
	// status or the inventory.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// KindCount is how many objects of one kind a GitSync holds.
type KindCount struct {
	// Kind of the objects.
	Kind string `json:"kind"`
	// Count of objects of the kind.
	Count int32 `json:"count"`
}

// SyncProblem is why the last attempted revision was refused.
type SyncProblem struct {
	// File of the repository the problem is in, when known.
	// +optional
	File string `json:"file,omitempty"`
	// Object the problem is about (Kind/namespace/name), when known.
	// +optional
	Object string `json:"object,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// GitSyncStatus is what trainops observed of the GitSync's last syncs.
type GitSyncStatus struct {
	// Conditions are the kstatus-compatible conditions (Ready,
	// Reconciling, Stalled).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastAppliedRevision is the last revision applied in full.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`

	// LastAttemptedRevision is the last revision a sync was tried on.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// LastHandledReconcileAt is the value of the reconcile.trainops.dev/requestedAt
	// annotation the last sync answered.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// Inventory counts what the GitSync holds, by kind.
	// +listType=map
	// +listMapKey=kind
	// +optional
	Inventory []KindCount `json:"inventory,omitempty"`

	// LastError is why the last attempted revision was refused, with the
	// file and object when known; empty after a clean sync.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	LastError []SyncProblem `json:"lastError,omitempty"`

	// Contested lists objects of this GitSync that another GitSync's
	// repository also holds. The other GitSync's sync is refused
	// (TakeoverRefused) until one of the two repositories lets go of
	// the object; this one's objects stay as it applied them.
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Contested []ContestedObject `json:"contested,omitempty"`
}

// ContestedObject is an object of one GitSync that another GitSync's
// repository also holds.
type ContestedObject struct {
	// Object is the contested object (Kind namespace/name).
	Object string `json:"object"`
	// ClaimedBy is the GitSync (namespace/name) whose repository also
	// holds it, and whose sync is refused for it.
	ClaimedBy string `json:"claimedBy"`
}

// GitSync keeps the cluster in step with one training-config repository:
// it renders the repository's folder, applies it with server-side apply as
// its ServiceAccount, and prunes what left it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gs,categories=trainops
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.lastAppliedRevision`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: it names the GitSync's inventory ConfigMap"
type GitSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitSyncSpec   `json:"spec"`
	Status GitSyncStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *GitSync) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the status conditions.
func (in *GitSync) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// ObserveGeneration records, in status.observedGeneration, that the status
// describes the current spec.
func (in *GitSync) ObserveGeneration() { in.Status.ObservedGeneration = in.Generation }

// +kubebuilder:object:root=true

// GitSyncList is a list of GitSyncs.
type GitSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitSync `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GitSync{}, &GitSyncList{})
}
