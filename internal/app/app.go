// SPDX-License-Identifier: Apache-2.0

// Package app assembles `trainops run`: one controller-runtime manager that
// hosts the three reconcilers and, when a repository is configured, the
// GitOps loop and its webhook, with metrics, health probes and leader
// election.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

// LeaderElectionID names the lease replicas compete for.
const LeaderElectionID = "trainops-leader.trainops.dev"

// Run runs trainops until ctx is cancelled.
func Run(ctx context.Context, cfg config.Run, restCfg *rest.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if !cfg.Profiling {
		// Nothing serves a heap profile: Go's sampling of allocations
		// would only grow a table of stacks.
		runtime.MemProfileRate = 0
	}
	// API Priority and Fairness protects the server: client-side throttling
	// would only slow trainops down.
	restCfg = rest.CopyConfig(restCfg)
	restCfg.QPS, restCfg.Burst = -1, 0
	restCfg.UserAgent = "trainops"
	log := ctrl.Log.WithName("trainops")

	shard, err := config.ShardSelector(cfg.Shard)
	if err != nil {
		return err
	}
	cacheOpts := controller.CacheOptions()
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        controller.NewScheme(),
		Metrics:                       metricsOptions(cfg),
		HealthProbeBindAddress:        cfg.HealthAddr,
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              config.LeaderElectionID(LeaderElectionID, cfg.Shard),
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOpts,
		// Run may be called more than once in a process (an embedding
		// program restarting it): controller names need not be unique
		// process-wide.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// The reconcilers' writes and the Events give way while any sync
	// writes (gitops.Yield).
	var yield *gitops.Yield
	if !cfg.Sync.NoYield {
		yield = gitops.NewYield(gitops.YieldWrites)
	}
	writes := gitops.Yielding(mgr.GetClient(), yield)
	ev, err := eventrec.Attach(mgr, writes)
	if err != nil {
		return err
	}
	if cfg.Shard == "" {
		// A sync's own new PyJobs, SREAgents and ClusterPolicies wait
		// while it applies them: those of every GitSync, and of the
		// settings' sync.
		var hold children.SyncHold
		if !cfg.Sync.NoHold {
			hold = &gitsync.Hold{Client: mgr.GetClient(), Settings: client.ObjectKey{Namespace: cfg.Namespace, Name: gitops.DefaultName}}
		}
		if err := controller.Setup(mgr, writes, cfg.Controllers, workload.Of(cfg.Sync), ev, hold); err != nil {
			return fmt.Errorf("set up controllers: %w", err)
		}
	} else {
		log.Info("shard: syncing the GitSyncs it selects only", "shard", shard.String())
	}
	live, err := liveClient(mgr, restCfg)
	if err != nil {
		return err
	}
	id, err := serviceAccountIdentity(ctx, live)
	if err != nil {
		return err
	}
	if cfg, err = sharePolicy(ctx, live, cfg); err != nil {
		return err
	}
	gitsyncs, err := setupGitSyncs(mgr, cfg, restCfg, live, shard, ev, id, yield)
	if err != nil {
		return fmt.Errorf("set up GitSyncs: %w", err)
	}
	if cfg.Shard == "" {
		// The main process keeps the GitSync of the settings' repository
		// (or removes it when the settings name none).
		gitsyncs.SettingsSync = &gitsync.SettingsGitSync{Client: mgr.GetClient(), Live: live, Cache: mgr.GetCache(), Key: client.ObjectKey{Namespace: cfg.Namespace, Name: gitops.DefaultName}}
		if err := mgr.Add(gitsyncs.SettingsSync); err != nil {
			return err
		}
	}
	var settings func(context.Context, bool) error
	if cfg.Repo.URL != "" {
		if settings, err = setupSync(ctx, mgr, cfg, restCfg, live, gitsyncs, ev); err != nil {
			return err
		}
	} else if cfg.Shard == "" {
		log.Info("no repo.url: running the reconcilers and GitSyncs only")
	}
	if err := setupWebhook(ctx, mgr, cfg, live, settings, gitsyncs); err != nil {
		return err
	}
	if cfg.HealthAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(r.Context()) {
				return fmt.Errorf("informer caches not synced")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// metricsOptions serve /metrics, and Go's profiler under /debug/pprof when
// asked for (to find where time goes in a large cluster).
func metricsOptions(cfg config.Run) metricsserver.Options {
	o := metricsserver.Options{BindAddress: cfg.MetricsAddr}
	if cfg.Profiling {
		o.ExtraHandlers = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/heap":    pprof.Handler("heap"),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	return o
}

// setupSync adds the sync of the settings' repository. It returns how a
// push asks for that sync: on the leader, at once; on a follower, through
// the inventory, which the leader watches.
func setupSync(ctx context.Context, mgr ctrl.Manager, cfg config.Run, restCfg *rest.Config, live client.Client, gitsyncs *gitsync.GitSyncReconciler, ev *eventrec.Writer) (func(context.Context, bool) error, error) {
	gs := gitsyncs.SettingsSync
	log := ctrl.Log.WithName("sync")
	if err := ensureNamespace(ctx, live, cfg.Namespace); err != nil {
		return nil, err
	}
	auth, err := loadAuth(ctx, live, cfg.Namespace, cfg.Repo.Auth)
	if err != nil {
		return nil, err
	}
	src, err := gitsource.New(gitsource.Options{
		URL:      cfg.Repo.URL,
		Ref:      gitsource.Ref{Branch: cfg.Repo.Branch, Tag: cfg.Repo.Tag, Commit: cfg.Repo.Commit},
		Auth:     auth,
		CacheDir: cacheDir(cfg),
		Timeout:  cfg.Repo.Timeout,
		MaxBytes: cfg.Render.MaxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("repo: %w", err)
	}
	budget, err := config.ParseBudget(cfg.Sync.PruneBudget)
	if err != nil {
		return nil, err
	}
	kinds, err := config.ParseKinds(cfg.Sync.AllowedKinds)
	if err != nil {
		return nil, err
	}
	decryptKinds, err := config.DecryptKinds(cfg.Decryption.Kinds)
	if err != nil {
		return nil, err
	}
	path := cfg.Repo.Path
	if path == "" {
		path = "."
	}
	schemas, err := loadSchemas()
	if err != nil {
		return nil, err
	}
	eng := &gitops.Engine{Client: live, Mapper: mgr.GetRESTMapper(), Log: log, Schemas: schemas, Yield: gitsyncs.Yield, Opts: gitops.Options{
		Name: gitops.DefaultName, Namespace: cfg.Namespace, Path: path, Repo: gitsource.Redact(cfg.Repo.URL),
		AllowedKinds: kinds, AllowedNamespaces: cfg.Sync.AllowedNamespaces, ProtectedNamespaces: cfg.Sync.ProtectedNamespaces,
		Workload: workload.Of(cfg.Sync),
		Prune:    cfg.Sync.Prune, PruneBudget: budget,
		AllowEmpty: cfg.Sync.AllowEmpty, Force: cfg.Sync.Force, Concurrency: cfg.Sync.Concurrency,
		ServerDryRunAll: cfg.Sync.ServerDryRunAll,
		Render:          renderLimits(cfg),
		DecryptKinds:    decryptKinds,
	}}
	if err := eng.Connect(restCfg, mgr.GetHTTPClient()); err != nil {
		return nil, err
	}
	loop := gitops.NewLoop(src, eng, cfg.Sync.ReconcileInterval, cfg.Controllers.RetryDelay, ev.For("trainops-sync"), log)
	if ref := cfg.Decryption.SecretRef; ref != "" {
		loop.Keys = func(ctx context.Context) (*decrypt.Keys, error) {
			sec, err := getSecret(ctx, live, cfg.Namespace, ref)
			if err != nil {
				return nil, fmt.Errorf("decryption.secretRef: %w", err)
			}
			return decrypt.FromSecret("Secret "+cfg.Namespace+"/"+ref, sec.Data)
		}
	}
	if err := mgr.Add(loop); err != nil {
		return nil, err
	}
	if err := loop.SetupTrigger(mgr); err != nil {
		return nil, err
	}
	gs.Spec = gitsync.SettingsSpec(cfg)
	gs.Request, loop.Observe, loop.Applying = loop.Request, gs.Observe, gs.Applying
	if cfg.CommitStatus.Provider != "" || cfg.Alert.Provider != "" {
		loop.Observe = postingNews(loop.Observe, live, cfg, gitsyncs.Notifier, log)
	}
	log.Info("syncing", "repo", gitsource.Redact(cfg.Repo.URL), "ref", src.String(), "path", path, "interval", cfg.Sync.ReconcileInterval.String())
	forward := gitops.InventoryRequester(live, eng)
	return func(ctx context.Context, leader bool) error {
		if leader {
			loop.Request()
			return nil
		}
		return forward(ctx)
	}, nil
}

// postingNews is observe, which then posts the outcome of each sync of
// the settings' repository as a commit status and an alert, where
// configured, with the Secrets of commitStatus.secretRef and
// alert.secretRef as they are at the time.
func postingNews(observe func(context.Context, string, gitops.Result, error), live client.Reader, cfg config.Run, n *notify.Notifier, log logr.Logger) func(context.Context, string, gitops.Result, error) {
	lastApplied := ""
	return func(ctx context.Context, revision string, res gitops.Result, err error) {
		observe(ctx, revision, res, err)
		before := lastApplied
		if err == nil && revision != "" {
			lastApplied = revision
		}
		if cs := cfg.CommitStatus; cs.Provider != "" {
			if st, ok := gitops.CommitStatus(revision, before, res, err); ok {
				t, terr := statusTarget(ctx, live, cfg)
				if terr != nil {
					log.Error(terr, "commit status not posted")
				} else {
					n.Post(t, st)
				}
			}
		}
		if cfg.Alert.Provider != "" {
			if a, ok := gitops.SyncNews(revision, before, res, err); ok {
				a.Source = "trainops " + cfg.Namespace + "/" + gitops.DefaultName
				c, cerr := alertChannel(ctx, live, cfg)
				if cerr != nil {
					log.Error(cerr, "alert not sent")
				} else {
					n.Alert(c, a)
				}
			}
		}
	}
}

// statusTarget is commitStatus's target, its token read now.
func statusTarget(ctx context.Context, live client.Reader, cfg config.Run) (notify.Target, error) {
	cs := cfg.CommitStatus
	sec, err := getSecret(ctx, live, cfg.Namespace, cs.SecretRef)
	if err != nil {
		return notify.Target{}, fmt.Errorf("commitStatus.secretRef: %w", err)
	}
	t, err := notify.TargetFromSecret(cs.Provider, cs.APIURL, cfg.Repo.URL, gitsync.StatusContext(cfg.Namespace, gitops.DefaultName), sec.Data)
	if errors.Is(err, notify.ErrNoToken) {
		return t, fmt.Errorf("commitStatus.secretRef: Secret %s/%s: %w", cfg.Namespace, cs.SecretRef, err)
	}
	if err != nil {
		return t, fmt.Errorf("commitStatus: %w", err)
	}
	return t, nil
}

// alertChannel is alert's channel, its address read now.
func alertChannel(ctx context.Context, live client.Reader, cfg config.Run) (notify.Channel, error) {
	sec, err := getSecret(ctx, live, cfg.Namespace, cfg.Alert.SecretRef)
	if err != nil {
		return notify.Channel{}, fmt.Errorf("alert.secretRef: %w", err)
	}
	c, err := notify.ChannelFromSecret(cfg.Alert.Provider, sec.Data)
	if err != nil {
		return c, fmt.Errorf("alert.secretRef: Secret %s/%s: %w", cfg.Namespace, cfg.Alert.SecretRef, err)
	}
	return c, nil
}

// setupWebhook serves the push webhook, when configured: a verified push
// asks for a sync of the settings' repository (when it names it, or names
// none) and of every GitSync following the pushed repository and ref.
func setupWebhook(ctx context.Context, mgr ctrl.Manager, cfg config.Run, live client.Client, settings func(context.Context, bool) error, gitsyncs *gitsync.GitSyncReconciler) error {
	addr := cfg.Webhook.BindAddress
	if addr == "" || addr == "0" {
		return nil
	}
	secret, err := loadSecret(ctx, live, cfg.Namespace, cfg.Webhook.SecretFile, cfg.Webhook.SecretRef, "token")
	if err != nil {
		return fmt.Errorf("webhook secret: %w", err)
	}
	log := ctrl.Log.WithName("webhook")
	ref := gitsource.Ref{Branch: cfg.Repo.Branch, Tag: cfg.Repo.Tag, Commit: cfg.Repo.Commit}
	request := func(ctx context.Context, push gitops.Push) error {
		leader := elected(mgr)
		var errs []error
		if settings != nil && push.Follows(cfg.Repo.URL, ref, true) {
			errs = append(errs, settings(ctx, leader))
		}
		n, err := gitsyncs.Push(ctx, push, leader)
		if n > 0 {
			log.Info("push: GitSyncs asked to sync", "count", n, "repository", push.Repository(), "ref", push.Ref)
		}
		return errors.Join(append(errs, err)...)
	}
	one := func(ctx context.Context, namespace, name string, push gitops.Push) error {
		return gitsyncs.PushGitSync(ctx, namespace, name, push, elected(mgr))
	}
	return mgr.Add(&gitops.Webhook{Secret: secret, Addr: addr, Log: log, Request: request,
		GitSyncSecret: gitsyncs.WebhookSecret, RequestGitSync: one})
}

// elected reports whether this replica leads.
func elected(mgr ctrl.Manager) bool {
	select {
	case <-mgr.Elected():
		return true
	default:
		return false
	}
}

// liveClient reads from the API server, not the cache (the sync engines
// must see what is there now); it shares the manager's REST mapper and
// connections.
func liveClient(mgr ctrl.Manager, restCfg *rest.Config) (client.Client, error) {
	return client.New(restCfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient()})
}

// cacheDir is where repositories are cloned.
func cacheDir(cfg config.Run) string {
	return cmp.Or(cfg.Sync.CacheDir, filepath.Join(os.TempDir(), "trainops-git"))
}

// renderLimits bound every render.
func renderLimits(cfg config.Run) render.Limits {
	return render.Limits{Timeout: cfg.Render.Timeout, MemoryBytes: cfg.Render.MemoryLimit, MaxBytes: cfg.Render.MaxBytes, NoFastPath: cfg.Render.NoFastPath,
		FreshChild: cfg.Render.FreshChild, LoadRestrictionsNone: cfg.Render.LoadRestrictor == config.LoadRestrictionsNone}
}

// loadSchemas loads the CRDs' validators once, on first use: the sync of
// the settings' repository and every GitSync share them.
var loadSchemas = sync.OnceValues(crdschema.Load)

// serviceAccountIdentity is the ServiceAccount trainops runs as, as the
// API server authenticates it (a SelfSubjectReview); nil when it runs as
// a user, whose own RBAC then decides whom it may impersonate.
func serviceAccountIdentity(ctx context.Context, c client.Client) (*rbacv1.Subject, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("who am I (SelfSubjectReview): %w", err)
	}
	s := gitsync.SubjectOf(review.Status.UserInfo.Username)
	if s.Kind != rbacv1.ServiceAccountKind {
		return nil, nil
	}
	return &s, nil
}

// setupGitSyncs registers the GitSync reconciler, which syncs each
// GitSync the shard selects within trainops's own settings.
func setupGitSyncs(mgr ctrl.Manager, cfg config.Run, restCfg *rest.Config, live client.Client, shard labels.Selector, ev *eventrec.Writer, id *rbacv1.Subject, yield *gitops.Yield) (*gitsync.GitSyncReconciler, error) {
	kinds := check.DefaultAllowedKinds
	if len(cfg.Sync.AllowedKinds) > 0 {
		var err error
		if kinds, err = config.ParseKinds(cfg.Sync.AllowedKinds); err != nil {
			return nil, err
		}
	}
	decryptKinds, err := config.DecryptKinds(cfg.Decryption.Kinds)
	if err != nil {
		return nil, err
	}
	notifier := &notify.Notifier{Log: ctrl.Log.WithName("commit-status")}
	if err := mgr.Add(notifier); err != nil {
		return nil, err
	}
	r := &gitsync.GitSyncReconciler{
		Client: mgr.GetClient(), Live: live, RestConfig: restCfg, HTTPClient: mgr.GetHTTPClient(), Mapper: mgr.GetRESTMapper(),
		Schemas: loadSchemas, Recorder: ev.For("trainops-gitsync"), Notifier: notifier,
		Settings: gitsync.GitSyncSettings{
			Home: cfg.Namespace, CacheDir: cacheDir(cfg), AllowedKinds: kinds, ProtectedNamespaces: cfg.Sync.ProtectedNamespaces,
			Workload: workload.Of(cfg.Sync), Concurrency: cfg.Sync.Concurrency, Render: renderLimits(cfg), DecryptKinds: decryptKinds,
			RequireServiceAccount:     cfg.Sync.RequireServiceAccount,
			MaxConcurrent:             cmp.Or(cfg.Sync.MaxConcurrentGitSyncs, config.DefaultMaxConcurrentGitSyncs),
			MaxConcurrentPerNamespace: cfg.Sync.MaxConcurrentGitSyncsPerNamespace,
			MaxTimeout:                cmp.Or(cfg.Sync.MaxGitSyncTimeout, config.DefaultMaxGitSyncTimeout),
			Selector:                  shard,
			Identity:                  id,
		},
		Pool:  &gitsource.Pool{CacheDir: filepath.Join(cacheDir(cfg), "gitsync")},
		Yield: yield,
	}
	return r, r.SetupWithManager(mgr)
}

func ensureNamespace(ctx context.Context, c client.Client, ns string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) {
		return nil // in-cluster the namespace exists and trainops may not create namespaces
	}
	return fmt.Errorf("namespace %s: %w", ns, err)
}

// loadAuth reads the Git credentials from files and/or a Secret.
func loadAuth(ctx context.Context, c client.Reader, ns string, a config.RepoAuth) (gitsource.Auth, error) {
	out := gitsource.Auth{Username: a.Username, InsecureSkipHostKeyVerification: a.InsecureSkipHostKeyVerification}
	if a.SecretRef != "" {
		sec, err := getSecret(ctx, c, ns, a.SecretRef)
		if err != nil {
			return out, fmt.Errorf("repo.auth.secretRef: %w", err)
		}
		from := gitsource.AuthFromSecret(sec.Data)
		if from.Username == "" {
			from.Username = out.Username
		}
		from.InsecureSkipHostKeyVerification = out.InsecureSkipHostKeyVerification
		out = from
	}
	read := func(key, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		return b, nil
	}
	for _, f := range []struct {
		key, path string
		set       func([]byte)
	}{
		{"repo.auth.passwordFile", a.PasswordFile, func(b []byte) { out.Password = strings.TrimRight(string(b), "\r\n") }},
		{"repo.auth.sshKeyFile", a.SSHKeyFile, func(b []byte) { out.SSHPrivateKey = b }},
		{"repo.auth.sshPassphraseFile", a.SSHPassphraseFile, func(b []byte) { out.SSHPassphrase = strings.TrimRight(string(b), "\r\n") }},
		{"repo.auth.knownHostsFile", a.KnownHostsFile, func(b []byte) { out.KnownHosts = b }},
	} {
		b, err := read(f.key, f.path)
		if err != nil {
			return out, err
		}
		if b != nil {
			f.set(b)
		}
	}
	return out, nil
}

// loadSecret reads one secret value from a file or a Secret's key.
func loadSecret(ctx context.Context, c client.Reader, ns, file, ref, key string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		return []byte(strings.TrimRight(string(b), "\r\n")), nil
	}
	sec, err := getSecret(ctx, c, ns, ref)
	if err != nil {
		return nil, err
	}
	v := sec.Data[key]
	if len(v) == 0 {
		return nil, fmt.Errorf("secret %s has no key %q", ref, key)
	}
	return v, nil
}

// getSecret reads a Secret in trainops's own namespace, the only one it may
// read Secrets in.
func getSecret(ctx context.Context, c client.Reader, ns, name string) (*corev1.Secret, error) {
	if strings.Contains(name, "/") {
		return nil, fmt.Errorf("%q: name a Secret in trainops's namespace %s, without a namespace", name, ns)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
		return nil, fmt.Errorf("read secret %s/%s: %w", ns, name, err)
	}
	return sec, nil
}
