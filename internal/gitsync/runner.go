// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/notify"
)

// gitSyncRunner is what syncs one GitSync: its engine (its own inventory,
// sync label and identity) and what its fetches ask the pool for. Kept
// between reconciles (one GitSync is reconciled by one worker at a time);
// made again when the spec changes, its source also when the credentials
// do.
type gitSyncRunner struct {
	spec        string // fingerprint of the spec the engine was made from
	authVersion string // resourceVersion of the Secret the source uses
	keysVersion string // resourceVersion of the Secret the keys came from
	// status is where commit statuses go (nil: nowhere), its token from
	// the Secret of resourceVersion statusVersion.
	status        *notify.Target
	statusVersion string
	// alert is where alerts go (nil: nowhere), from the Secret of
	// resourceVersion alertVersion.
	alert        *notify.Channel
	alertVersion string
	engine       *gitops.Engine
	source       *gitsource.Options
}

// runner is the GitSync's runner as its spec and credentials now say. Its
// error says why the spec cannot be synced.
func (r *GitSyncReconciler) runner(ctx context.Context, gs *gitopsv1alpha1.GitSync) (*gitSyncRunner, error) {
	raw, _ := json.Marshal(gs.Spec)
	h := fnv.New64a()
	_, _ = h.Write(raw)
	spec := fmt.Sprintf("%016x", h.Sum64())
	key := client.ObjectKeyFromObject(gs)
	r.mu.Lock()
	run := r.syncs[key]
	r.mu.Unlock()
	if run == nil || run.spec != spec {
		eng, err := r.engine(gs)
		if err != nil {
			return nil, err
		}
		run = &gitSyncRunner{spec: spec, engine: eng}
	}
	if err := r.bindImpersonation(ctx, gs); err != nil {
		return nil, err
	}
	auth, version, err := r.auth(ctx, gs, run.engine)
	if err != nil {
		return nil, err
	}
	if err := r.keys(ctx, gs, run); err != nil {
		return nil, err
	}
	if err := r.commitStatusTarget(ctx, gs, run); err != nil {
		return nil, err
	}
	if err := r.alertChannel(ctx, gs, run); err != nil {
		return nil, err
	}
	if run.source == nil || run.authVersion != version {
		repo := gs.Spec.Repository
		opts := gitsource.Options{
			URL:      repo.URL,
			Ref:      gitsource.Ref{Branch: repo.Branch, Tag: repo.Tag, Commit: repo.Commit},
			Auth:     auth,
			Timeout:  r.Settings.timeout(gs.Spec.Timeout),
			MaxBytes: r.Settings.Render.MaxBytes,
			// Checked here; the pool keeps its own folder per source.
			CacheDir: r.Settings.CacheDir,
		}
		if _, err := gitsource.New(opts); err != nil {
			return nil, fmt.Errorf("spec.repository: %w", err)
		}
		run.source, run.authVersion = &opts, version
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.syncs == nil {
		r.syncs = map[types.NamespacedName]*gitSyncRunner{}
	}
	r.syncs[key] = run
	return run, nil
}

// engine makes the sync engine of gs: its inventory in gs's namespace,
// owned by gs; its own sync label; and its identity. With a
// serviceAccountName it writes as that ServiceAccount, and the API
// server's RBAC decides what it may apply. Without one, a GitSync in
// trainops's own namespace acts as trainops, and any other may write only
// namespaced objects into its own namespace.
func (r *GitSyncReconciler) engine(gs *gitopsv1alpha1.GitSync) (*gitops.Engine, error) {
	s := r.Settings
	budget, err := config.ParseBudget(gs.Spec.PruneBudget)
	if err != nil {
		return nil, fmt.Errorf("spec.pruneBudget: %w", err)
	}
	kinds, err := narrowKinds(s.AllowedKinds, gs.Spec.AllowedKinds)
	if err != nil {
		return nil, err
	}
	schemas, err := r.Schemas()
	if err != nil {
		return nil, err
	}
	ownerRef := metav1.NewControllerRef(gs, gitopsv1alpha1.GroupVersion.WithKind("GitSync"))
	opts := gitops.Options{
		Name:      gitSyncName(gs.Name),
		Namespace: gs.Namespace,
		Home:      s.Home,
		Path:      cmp.Or(gs.Spec.Repository.Path, "."),
		Repo:      gitsource.Redact(gs.Spec.Repository.URL),
		SyncLabel: GitSyncLabel(gs.Namespace, gs.Name),
		OwnerName: ownerName,
		// The inventory goes with its GitSync.
		InventoryOwner:      ownerRef,
		AllowedKinds:        kinds,
		ProtectedNamespaces: s.ProtectedNamespaces,
		Workload:            s.Workload,
		Prune:               gs.Spec.Prune,
		PruneBudget:         budget,
		AllowEmpty:          gs.Spec.AllowEmpty,
		Force:               gs.Spec.Force,
		Concurrency:         s.Concurrency,
		Render:              s.Render,
		DecryptKinds:        s.DecryptKinds,
	}
	sa := gs.Spec.ServiceAccountName
	if err := s.checkServiceAccountNamespace(gs); err != nil {
		return nil, err
	}
	switch {
	case sa == "" && gs.Namespace != s.Home && s.RequireServiceAccount:
		return nil, fmt.Errorf("spec.serviceAccountName is required: trainops is set to sync a GitSync outside its namespace %s only as a ServiceAccount of the GitSync's namespace", s.Home)
	case sa == "" && gs.Namespace != s.Home && gs.Spec.WebhookSecretRef != nil:
		return nil, fmt.Errorf("spec.webhookSecretRef: a GitSync outside trainops's namespace %s reads its Secret as its spec.serviceAccountName, and names none", s.Home)
	case sa == "" && gs.Namespace != s.Home:
		opts.AllowedNamespaces = []string{gs.Namespace}
		opts.NamespacedOnly = true
	}
	eng := &gitops.Engine{Client: r.Live, Mapper: r.Mapper, Schemas: schemas, Opts: opts, Yield: r.Yield,
		Log: ctrl.Log.WithName("gitsync").WithValues("gitsync", gs.Namespace+"/"+gs.Name)}
	if sa != "" {
		err = eng.ConnectAs(r.RestConfig, "system:serviceaccount:"+gs.Namespace+":"+sa)
	} else {
		err = eng.Connect(r.RestConfig, r.HTTPClient)
	}
	return eng, err
}

// gitSyncName is the sync engine's name for GitSync name: its inventory is
// gitSyncInventory(name).
func gitSyncName(name string) string { return name + "-gitsync" }

// gitSyncInventory is the inventory ConfigMap of GitSync name, in its
// namespace.
func gitSyncInventory(name string) string { return gitops.InventoryName(gitSyncName(name)) }

// narrowKinds is the kinds a GitSync may apply: those its spec names, each
// of which trainops's settings must allow, or all the settings allow.
func narrowKinds(allowed []schema.GroupKind, spec []string) ([]schema.GroupKind, error) {
	if len(spec) == 0 {
		return allowed, nil
	}
	kinds, err := config.ParseKinds(spec)
	if err != nil {
		return nil, fmt.Errorf("spec.allowedKinds: %w", err)
	}
	for _, k := range kinds {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("spec.allowedKinds: %s is not among the kinds trainops's settings allow (%s)", k, strings.Join(config.KindNames(allowed), ", "))
		}
	}
	return kinds, nil
}

// auth reads the credentials of spec.repository.secretRef, and a version
// of them (the Secret's resourceVersion) that says when they changed. The
// Secret is read as the GitSync's identity: a GitSync with a
// serviceAccountName reads it as that ServiceAccount, so trainops never
// reads Secrets of other namespaces as itself.
func (r *GitSyncReconciler) auth(ctx context.Context, gs *gitopsv1alpha1.GitSync, eng *gitops.Engine) (gitsource.Auth, string, error) {
	ref := gs.Spec.Repository.SecretRef
	if ref == nil {
		return gitsource.Auth{}, "", nil
	}
	sec, err := r.secretOf(ctx, gs, eng.Writer, "spec.repository.secretRef", ref.Name)
	if err != nil {
		return gitsource.Auth{}, "", err
	}
	return gitsource.AuthFromSecret(sec.Data), sec.ResourceVersion, nil
}

// keys gives run's engine the age identities of spec.decryption.secretRef,
// read as the GitSync's identity, parsed again only when the Secret
// changed.
func (r *GitSyncReconciler) keys(ctx context.Context, gs *gitopsv1alpha1.GitSync, run *gitSyncRunner) error {
	d := gs.Spec.Decryption
	if d == nil {
		run.engine.Keys, run.keysVersion = nil, ""
		return nil
	}
	const field = "spec.decryption.secretRef"
	sec, err := r.secretOf(ctx, gs, run.engine.Writer, field, d.SecretRef.Name)
	if err != nil {
		return err
	}
	if run.engine.Keys != nil && run.keysVersion == sec.ResourceVersion {
		return nil
	}
	keys, err := decrypt.FromSecret(fmt.Sprintf("Secret %s/%s", gs.Namespace, sec.Name), sec.Data)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	run.engine.Keys, run.keysVersion = keys, sec.ResourceVersion
	return nil
}

// secretOf reads the Secret name of gs's namespace, which field names, as
// gs's identity: its ServiceAccount (through as, the engine's client acting
// as it, when there is one; else a client made to), or trainops in
// trainops's own namespace. A GitSync elsewhere without a ServiceAccount
// reads no Secret: trainops never reads another namespace's Secrets as
// itself.
func (r *GitSyncReconciler) secretOf(ctx context.Context, gs *gitopsv1alpha1.GitSync, as client.Reader, field, name string) (*corev1.Secret, error) {
	reader := as
	switch sa := gs.Spec.ServiceAccountName; {
	case reader != nil:
	case sa != "":
		cfg := rest.CopyConfig(r.RestConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + gs.Namespace + ":" + sa}
		c, err := client.New(cfg, client.Options{Scheme: r.Scheme(), Mapper: r.Mapper})
		if err != nil {
			return nil, err
		}
		reader = c
	case gs.Namespace == r.Settings.Home:
		reader = r.Live
	default:
		return nil, fmt.Errorf("%s: a GitSync outside trainops's namespace %s reads its Secret as its spec.serviceAccountName, and names none", field, r.Settings.Home)
	}
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: gs.Namespace, Name: name}, sec); err != nil {
		return nil, fmt.Errorf("%s: read Secret %s/%s: %w", field, gs.Namespace, name, err)
	}
	return sec, nil
}

// GitSyncLabel is the sync label value (gitops.LabelSync) of the GitSync
// name in namespace: unique to it, and within a label value's 63
// characters.
func GitSyncLabel(namespace, name string) string {
	v := "gs." + namespace + "." + name
	if len(v) <= 63 {
		return v
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace + "/" + name))
	return fmt.Sprintf("gs-%016x", h.Sum64())
}
