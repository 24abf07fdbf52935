// SPDX-License-Identifier: Apache-2.0

// Package config is trainops's typed configuration. Flags, environment and
// the config file are read into it at the edge (cmd); nothing below reads
// them directly.
package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainops/trainops/internal/notify"
)

// Controllers tunes the PyJob, SREAgent and ClusterPolicy reconcilers, with
// the names GPU operators use for the same knobs.
type Controllers struct {
	// MaxConcurrentReconciles is how many objects of one kind reconcile at
	// once.
	MaxConcurrentReconciles int `json:"maxConcurrentReconciles"`
	// RetryDelay is how long a failed reconcile waits before it is retried.
	RetryDelay time.Duration `json:"retryDelay"`
	// AgentImage is the image SREAgents run when they name none: trainops's
	// own image, whose `agent` subcommand is the agent.
	AgentImage string `json:"agentImage"`
}

// DefaultAgentImage is trainops's published image.
const DefaultAgentImage = "ghcr.io/trainops/trainops"

// DefaultControllers are the controller settings when nothing is configured.
func DefaultControllers(version string) Controllers {
	tag := version
	if tag == "" || tag == "dev" {
		tag = "latest"
	}
	// Reconciles wait on the API server, not the CPU, and API Priority and
	// Fairness protects the server: 16 keeps up with a large repository.
	return Controllers{
		MaxConcurrentReconciles: 16,
		RetryDelay:              10 * time.Second,
		AgentImage:              DefaultAgentImage + ":" + tag,
	}
}

// Validate reports the first setting that cannot work.
func (c Controllers) Validate() error {
	switch {
	case c.MaxConcurrentReconciles < 1:
		return fmt.Errorf("maxConcurrentReconciles must be at least 1, got %d", c.MaxConcurrentReconciles)
	case c.RetryDelay <= 0:
		return fmt.Errorf("retryDelay must be positive, got %s", c.RetryDelay)
	case c.AgentImage == "":
		return fmt.Errorf("agentImage must not be empty")
	}
	return nil
}

// Repo is the training-config repository to sync.
type Repo struct {
	// URL is https://, http:// or ssh://; empty runs the reconcilers only.
	URL string
	// Branch, Tag or Commit (one of them; default branch main).
	Branch, Tag, Commit string
	// Path is the folder to render (default the root).
	Path string
	// Timeout bounds one fetch.
	Timeout time.Duration
	Auth    RepoAuth
}

// RepoAuth says where the Git credentials are: files, or a Secret with the
// keys username, password, identity (SSH private key), identity.passphrase
// and known_hosts. Credentials never come from the command line.
type RepoAuth struct {
	Username                        string
	PasswordFile                    string
	SSHKeyFile                      string
	SSHPassphraseFile               string
	KnownHostsFile                  string
	SecretRef                       string
	InsecureSkipHostKeyVerification bool
}

// Webhook is the push endpoint.
type Webhook struct {
	// BindAddress of the endpoint ("0" turns it off).
	BindAddress string
	// SecretFile or SecretRef (key "token") holds the shared secret.
	SecretFile string
	SecretRef  string
}

// Decryption says how SOPS-encrypted objects of a repository are
// decrypted.
type Decryption struct {
	// SecretRef names the Secret, in trainops's namespace, whose entries
	// ending in .agekey hold the age identities that decrypt the settings'
	// repository (a GitSync names its own).
	SecretRef string
	// Kinds are the kinds whose encrypted objects are decrypted, in the
	// settings' repository and every GitSync's (empty: Secret); an
	// encrypted object of another kind is refused.
	Kinds []string
}

// CommitStatus says where the settings' repository's commit statuses go.
type CommitStatus struct {
	// Provider is github, gitlab or gitea (empty: no statuses).
	Provider string
	// APIURL is the forge's address (empty: from repo.url).
	APIURL string
	// SecretRef names the Secret, in trainops's namespace, whose key
	// token may set commit statuses.
	SecretRef string
}

// Alert says where the settings' repository's alerts go.
type Alert struct {
	// Provider is slack or generic (empty: no alerts).
	Provider string
	// SecretRef names the Secret, in trainops's namespace, whose key
	// address holds the webhook's URL and, for generic, whose optional key
	// key signs each body.
	SecretRef string
}

// Sync tunes the GitOps loop.
type Sync struct {
	ReconcileInterval time.Duration
	Prune             bool
	PruneBudget       string
	AllowEmpty        bool
	Force             bool
	AllowedKinds      []string
	AllowedNamespaces []string
	// ProtectedNamespaces are added to the namespaces a sync never
	// writes: kube-system, kube-public, kube-node-lease and trainops's own.
	ProtectedNamespaces []string
	// AllowedPriorityClasses, AllowTolerateAllTaints, RefuseSecretRefs and
	// AllowedImageRegistries bound what PyJobs and ClusterPolicies may ask
	// for (workload.Policy).
	AllowedPriorityClasses []string
	AllowTolerateAllTaints bool
	RefuseSecretRefs       bool
	AllowedImageRegistries []string
	// PodPowers bound what a PyJob's pod template may ask of its node.
	PodPowers
	CacheDir        string
	Concurrency     int
	ServerDryRunAll bool
	// RequireServiceAccount refuses a GitSync outside trainops's
	// namespace that names no serviceAccountName to act as.
	RequireServiceAccount bool
	// MaxConcurrentGitSyncs is how many GitSyncs sync at once (0:
	// DefaultMaxConcurrentGitSyncs).
	MaxConcurrentGitSyncs int
	// MaxConcurrentGitSyncsPerNamespace is how many GitSyncs of one
	// namespace sync at once (0: half of MaxConcurrentGitSyncs, at least
	// one).
	MaxConcurrentGitSyncsPerNamespace int
	// MaxGitSyncTimeout bounds every GitSync's spec.timeout: its fetch and
	// its sync (0: DefaultMaxGitSyncTimeout).
	MaxGitSyncTimeout time.Duration
	// NoHold lets a sync's own new PyJobs, SREAgents and ClusterPolicies
	// be reconciled while it is still applying their revision
	// (holdNewObjects: false).
	NoHold bool
	// NoYield lets the reconcilers write beside the syncs rather than
	// give way to them while any sync writes (yieldToSyncs: false).
	NoYield bool
}

// DefaultMaxGitSyncTimeout bounds a GitSync's spec.timeout by default: a
// sync holds one of the shared workers for at most this long, whatever a
// team's Git server does.
const DefaultMaxGitSyncTimeout = 5 * time.Minute

// DefaultMaxConcurrentGitSyncs is how many GitSyncs sync at once by
// default: enough that one GitSync's serial steps (fetch, render, checks,
// status) overlap the others' applies (docs/design.md).
const DefaultMaxConcurrentGitSyncs = 8

// Render bounds one render of a revision, whatever the repository holds.
// Zero fields take render's defaults.
type Render struct {
	// Timeout bounds a kustomize build.
	Timeout time.Duration
	// MemoryLimit caps the memory of a kustomize build, in bytes.
	MemoryLimit int64
	// MaxBytes bounds a revision's files added up, what a render reads,
	// and the rendered output, in bytes.
	MaxBytes int64
	// NoFastPath builds every kustomization with krusty, in its confined
	// child process (render.fastPath: false).
	NoFastPath bool
	// FreshChild starts a child process for each kustomize build instead
	// of reusing a warm one (render.reuseChild: false).
	FreshChild bool
	// LoadRestrictor is kustomize's load restrictor: LoadRestrictionsRootOnly
	// (empty: the default, a kustomization reads files only in or below its
	// folder) or LoadRestrictionsNone (any file inside the repository).
	LoadRestrictor string
}

// Kustomize's load restrictors (its --load-restrictor flag).
const (
	LoadRestrictionsRootOnly = "LoadRestrictionsRootOnly"
	LoadRestrictionsNone     = "LoadRestrictionsNone"
)

// CheckLoadRestrictor refuses a value that is not one of kustomize's load
// restrictors, naming the setting.
func CheckLoadRestrictor(v string) error {
	if v != "" && v != LoadRestrictionsRootOnly && v != LoadRestrictionsNone {
		return fmt.Errorf("render.loadRestrictor: %q is not %s or %s", v, LoadRestrictionsRootOnly, LoadRestrictionsNone)
	}
	return nil
}

// Run is the configuration of `trainops run`.
type Run struct {
	// Kubeconfig is the cluster to manage; empty means in-cluster or the
	// usual KUBECONFIG / ~/.kube/config.
	Kubeconfig string
	// Namespace is trainops's own namespace: the inventory, the leader
	// lease and secrets named by *.secretRef live there.
	Namespace string
	// Controllers tunes the reconcilers.
	Controllers Controllers
	Repo        Repo
	Webhook     Webhook
	Sync        Sync
	Render      Render
	Decryption  Decryption
	// CommitStatus posts the settings' repository's outcomes to its forge.
	CommitStatus CommitStatus
	// Alert sends the settings' repository's outcomes to a channel.
	Alert Alert
	// MetricsAddr serves Prometheus metrics ("0" turns it off).
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz ("0" turns it off).
	HealthAddr string
	// LeaderElection makes only one replica act at a time.
	LeaderElection bool
	// Shard makes this process a shard: it syncs only the GitSyncs this
	// label selector picks (ShardSelector), with a leader election of its
	// own, and runs neither the reconcilers nor the settings' repository.
	Shard string
	// ShardPolicy is what a shard enforces: the stricter of its own
	// settings and the main Deployment's policy ("" or "main"), or its own
	// alone ("own", on purpose).
	ShardPolicy string
	// LogFormat is json or console.
	LogFormat string
	// Profiling serves Go's profiler on the metrics address.
	Profiling bool
}

// Validate reports the first setting that cannot work, naming its key.
func (r Run) Validate() error {
	if err := r.Controllers.Validate(); err != nil {
		return err
	}
	if r.Namespace == "" {
		return fmt.Errorf("namespace must not be empty")
	}
	if r.LogFormat != "json" && r.LogFormat != "console" {
		return fmt.Errorf("logFormat: %q is not json or console", r.LogFormat)
	}
	if _, err := ShardSelector(r.Shard); err != nil {
		return err
	}
	if !validPodSecurityLevel(r.Sync.PodSecurityLevel) {
		return fmt.Errorf("podSecurityLevel: %q is not %s, %s or %s", r.Sync.PodSecurityLevel, PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted)
	}
	if r.ShardPolicy != "" && r.ShardPolicy != "main" && r.ShardPolicy != ShardPolicyOwn {
		return fmt.Errorf("shardPolicy: %q is not main or %s", r.ShardPolicy, ShardPolicyOwn)
	}
	if err := CheckLoadRestrictor(r.Render.LoadRestrictor); err != nil {
		return err
	}
	if r.Shard != "" && r.Repo.URL != "" {
		return fmt.Errorf("shard %q and repo.url: a shard syncs GitSyncs only; leave repo.url to the main Deployment", r.Shard)
	}
	if r.Repo.URL == "" {
		return nil
	}
	set := 0
	for _, v := range []string{r.Repo.Branch, r.Repo.Tag, r.Repo.Commit} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return fmt.Errorf("repo.branch, repo.tag and repo.commit: set only one (got branch %q, tag %q, commit %q)", r.Repo.Branch, r.Repo.Tag, r.Repo.Commit)
	}
	if r.Sync.ReconcileInterval < time.Second {
		return fmt.Errorf("reconcileInterval: %s is too short (at least 1s)", r.Sync.ReconcileInterval)
	}
	if _, err := ParseBudget(r.Sync.PruneBudget); err != nil {
		return err
	}
	if _, err := ParseKinds(r.Sync.AllowedKinds); err != nil {
		return err
	}
	if _, err := DecryptKinds(r.Decryption.Kinds); err != nil {
		return err
	}
	if cs := r.CommitStatus; cs.Provider != "" && cs.SecretRef == "" {
		return fmt.Errorf("commitStatus.provider %q is set but not commitStatus.secretRef: name the Secret whose key token may set commit statuses", cs.Provider)
	}
	switch a := r.Alert; {
	case a.Provider != "" && !slices.Contains(notify.AlertProviders, a.Provider):
		return fmt.Errorf("alert.provider %q is not one of %s", a.Provider, strings.Join(notify.AlertProviders, ", "))
	case a.Provider != "" && a.SecretRef == "":
		return fmt.Errorf("alert.provider %q is set but not alert.secretRef: name the Secret whose key address holds the webhook's URL", a.Provider)
	}
	switch {
	case r.Render.Timeout != 0 && r.Render.Timeout < time.Second:
		return fmt.Errorf("render.timeout: %s is too short (at least 1s)", r.Render.Timeout)
	case r.Render.MemoryLimit != 0 && r.Render.MemoryLimit < 64<<20:
		return fmt.Errorf("render.memoryLimit: %d MiB is too small (at least 64Mi)", r.Render.MemoryLimit>>20)
	case r.Render.MaxBytes != 0 && r.Render.MaxBytes < 1<<20:
		return fmt.Errorf("render.maxBytes: %d bytes is too small (at least 1Mi)", r.Render.MaxBytes)
	}
	if r.Sync.MaxConcurrentGitSyncsPerNamespace < 0 {
		return fmt.Errorf("maxConcurrentGitSyncsPerNamespace must be at least 1 (or 0 for half of maxConcurrentGitSyncs), got %d", r.Sync.MaxConcurrentGitSyncsPerNamespace)
	}
	if r.Sync.MaxGitSyncTimeout != 0 && r.Sync.MaxGitSyncTimeout < 10*time.Second {
		return fmt.Errorf("maxGitSyncTimeout: %s is too short (at least 10s)", r.Sync.MaxGitSyncTimeout)
	}
	if r.Sync.MaxConcurrentGitSyncs < 0 {
		return fmt.Errorf("maxConcurrentGitSyncs must be at least 1, got %d", r.Sync.MaxConcurrentGitSyncs)
	}
	if r.Sync.Concurrency < 1 {
		return fmt.Errorf("syncConcurrency must be at least 1, got %d", r.Sync.Concurrency)
	}
	if r.Webhook.BindAddress != "0" && r.Webhook.BindAddress != "" && r.Webhook.SecretFile == "" && r.Webhook.SecretRef == "" {
		return fmt.Errorf("webhook.bindAddress %q is set but neither webhook.secretFile nor webhook.secretRef: an unauthenticated webhook is refused (set webhook.bindAddress to 0 to turn it off)", r.Webhook.BindAddress)
	}
	return nil
}

// Budget bounds how much one sync may prune: a count, or a percentage of
// the inventory.
type Budget struct {
	Count   int
	Percent int
}

// String is "N" or "N%".
func (b Budget) String() string {
	if b.Percent > 0 {
		return fmt.Sprintf("%d%%", b.Percent)
	}
	return fmt.Sprint(b.Count)
}

// Allows reports whether pruning n of total objects fits the budget.
func (b Budget) Allows(n, total int) bool {
	if b.Percent > 0 {
		return total == 0 || n*100 <= b.Percent*total
	}
	return n <= b.Count
}

// ParseBudget reads "N" or "N%".
func ParseBudget(s string) (Budget, error) {
	var b Budget
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return b, fmt.Errorf("pruneBudget: %q is not a percentage from 1%% to 100%%", s)
		}
		b.Percent = n
		return b, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return b, fmt.Errorf("pruneBudget: %q is not a number of objects (e.g. 20) or a percentage (e.g. 50%%)", s)
	}
	b.Count = n
	return b, nil
}

// ParseKinds reads kinds written as kubectl does: "Kind.group" or "Kind"
// for the core group (PyJob.training.trainops.dev, ConfigMap).
func ParseKinds(kinds []string) ([]schema.GroupKind, error) {
	var out []schema.GroupKind
	for _, k := range kinds {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		gk := schema.ParseGroupKind(k)
		if gk.Kind == "" || strings.ToUpper(gk.Kind[:1]) != gk.Kind[:1] {
			return nil, fmt.Errorf("allowedKinds: %q is not a kind such as PyJob.training.trainops.dev or ConfigMap", k)
		}
		out = append(out, gk)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("allowedKinds: empty: nothing could ever be applied")
	}
	return out, nil
}

// DecryptKinds parses the decryption.kinds setting (nil when empty: the
// default).
func DecryptKinds(names []string) ([]schema.GroupKind, error) {
	if len(names) == 0 {
		return nil, nil
	}
	kinds, err := ParseKinds(names)
	if err != nil {
		return nil, errors.New("decryption.kinds: " + strings.TrimPrefix(err.Error(), "allowedKinds: "))
	}
	return kinds, nil
}

// KindNames writes kinds as ParseKinds reads them.
func KindNames(gks []schema.GroupKind) []string {
	var out []string
	for _, gk := range gks {
		if gk.Group == "" {
			out = append(out, gk.Kind)
		} else {
			out = append(out, gk.Kind+"."+gk.Group)
		}
	}
	return out
}
