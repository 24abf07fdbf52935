// SPDX-License-Identifier: Apache-2.0

package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/signature"
	"github.com/trainops/trainops/internal/testenv"
)

const (
	gitUser     = "trainops"
	gitPassword = "git-password-never-logged"
	hookSecret  = "webhook-secret-never-logged"
)

func pyjobYAML(name string) string {
	return fmt.Sprintf(`apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata:
  name: %s
  namespace: ml-e2e
spec:
  image: pytorch/pytorch:2.0-cuda11.7-cudnn8-devel
  command: ["python", "train.py"]
  gpu: 1
`, name)
}

// running starts Run and returns a stop function that waits for it.
func running(t *testing.T, cfg config.Run) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, env.Config) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logSink receives everything trainops logs in this package's tests;
// TestMain installs it as the logger once, before any logger is used (a
// later ctrl.SetLogger may come after controller-runtime gave up waiting
// for one and has no effect).
var logSink = &switchWriter{}

// switchWriter writes to the writer a test sets, or nowhere.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// capture sends the logs to w until the test ends.
func (s *switchWriter) capture(t *testing.T, w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		s.w = nil
		s.mu.Unlock()
	})
}

func TestGitOpsEndToEnd(t *testing.T) {
	// Everything trainops logs during the test, searched for secrets at
	// the end.
	logs := &syncBuffer{}
	logSink.capture(t, logs)
	srv, err := gitserver.Start(gitUser, gitPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	repo, err := srv.NewRepo("ml/training-config.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	repo.MustWrite(t, "cluster/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-e2e\n")
	repo.MustWrite(t, "cluster/jobs/bert.yaml", pyjobYAML("bert"))
	repo.MustWrite(t, "cluster/agent.yaml", "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: ops\n  namespace: ml-e2e\nspec:\n  autoRepair: true\n")
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- agent.yaml\n- jobs/bert.yaml\n")
	first, err := repo.CommitAndPush("first")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile, hookFile := filepath.Join(dir, "password"), filepath.Join(dir, "hook")
	_ = os.WriteFile(pwFile, []byte(gitPassword+"\n"), 0o600)
	_ = os.WriteFile(hookFile, []byte(hookSecret), 0o600)
	hookAddr, metricsAddr := freeAddr(t), freeAddr(t)

	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := config.Run{
		Namespace:   "trainops-e2e",
		Controllers: config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"},
		Repo: config.Repo{URL: srv.URL("ml/training-config.git"), Branch: "main", Path: "cluster", Timeout: 20 * time.Second,
			Auth: config.RepoAuth{Username: gitUser, PasswordFile: pwFile}},
		Webhook: config.Webhook{BindAddress: hookAddr, SecretFile: hookFile},
		Sync: config.Sync{ReconcileInterval: time.Hour, Prune: true, PruneBudget: "50%", Force: true, Concurrency: 8,
			AllowedKinds: config.KindNames(check.DefaultAllowedKinds), CacheDir: filepath.Join(dir, "cache")},
		MetricsAddr: metricsAddr, HealthAddr: "0", LogFormat: "console",
	}
	getPJ := func(name string) (*trainingv1alpha1.PyJob, error) {
		pj := &trainingv1alpha1.PyJob{}
		return pj, c.Get(ctx, client.ObjectKey{Namespace: "ml-e2e", Name: name}, pj)
	}

	stop := running(t, cfg)
	t.Run("first sync applies the repo and the reconcilers do the rest", func(t *testing.T) {
		testenv.Eventually(t, 90*time.Second, func() error {
			pj, err := getPJ("bert")
			if err != nil {
				return err
			}
			if pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
				return fmt.Errorf("bert is %s", pj.Status.Phase)
			}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ml-e2e", Name: "bert-job"}, &batchv1.Job{}); err != nil {
				return err
			}
			a := &aiopsv1alpha1.SREAgent{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ml-e2e", Name: "ops"}, a); err != nil {
				return err
			}
			if !conditions.IsReady(a) {
				return fmt.Errorf("agent not ready")
			}
			return nil
		})
		inv, err := gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName)
		if err != nil {
			t.Fatal(err)
		}
		if inv.LastAppliedRevision != "main@sha1:"+first || len(inv.Entries) != 3 {
			t.Fatalf("inventory: revision %s, %d entries", inv.LastAppliedRevision, len(inv.Entries))
		}
		if counts := inv.Counts(); counts["PyJob"] == 0 || counts["SREAgent"] == 0 || inv.LastError != "" {
			t.Errorf("inventory: counts %v, last error %q; want PyJobs and SREAgents, no error", counts, inv.LastError)
		}
	})

	post := func(body string, headers map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+hookAddr+"/hook", strings.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("a signed push webhook syncs within seconds", func(t *testing.T) {
		repo.MustWrite(t, "cluster/jobs/second.yaml", pyjobYAML("second"))
		repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- agent.yaml\n- jobs/bert.yaml\n- jobs/second.yaml\n")
		if _, err := repo.CommitAndPush("second"); err != nil {
			t.Fatal(err)
		}
		body := `{"ref":"refs/heads/main"}`
		start := time.Now()
		if code := post(body, map[string]string{gitops.HeaderGitHubSignature: signature.Sign([]byte(hookSecret), []byte(body)), gitops.HeaderGitHubEvent: "push"}); code != http.StatusAccepted {
			t.Fatalf("signed webhook: %d", code)
		}
		testenv.Eventually(t, 15*time.Second, func() error { _, err := getPJ("second"); return err })
		t.Logf("push -> applied in %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("the settings' repository is a GitSync trainops keeps", func(t *testing.T) {
		key := client.ObjectKey{Namespace: "trainops-e2e", Name: gitops.DefaultName}
		gs := &gitopsv1alpha1.GitSync{}
		testenv.Eventually(t, 15*time.Second, func() error {
			if err := c.Get(ctx, key, gs); err != nil {
				return err
			}
			inv, err := gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName)
			if err != nil {
				return err
			}
			if !conditions.IsReady(gs) || gs.Status.LastAppliedRevision != inv.LastAppliedRevision || gs.Status.ObservedGeneration != gs.Generation {
				return fmt.Errorf("GitSync status %+v, inventory at %s", gs.Status, inv.LastAppliedRevision)
			}
			return nil
		})
		if gs.Annotations[gitsync.AnnotationFromSettings] != "true" || len(gs.Finalizers) != 0 {
			t.Errorf("annotations %v, finalizers %v: want the settings' mark and no finalizer", gs.Annotations, gs.Finalizers)
		}
		r := gs.Spec.Repository
		if r.URL != srv.URL("ml/training-config.git") || r.Branch != "main" || r.Path != "cluster" || gs.Spec.PruneBudget != "50%" || !gs.Spec.Prune {
			t.Errorf("spec %+v does not say what the settings say", gs.Spec)
		}
		if got := fmt.Sprint(gs.Status.Inventory); !strings.Contains(got, "{PyJob 2}") {
			t.Errorf("inventory counts %s, want 2 PyJobs", got)
		}
		// An edit of its spec is put back at the next sync, which the
		// requested-at annotation asks for.
		patch := []byte(`{"metadata":{"annotations":{"` + gitsync.AnnotationRequestedAt + `":"edit-1"}},"spec":{"repository":{"path":"elsewhere"}}}`)
		if err := c.Patch(ctx, gs, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 15*time.Second, func() error {
			if err := c.Get(ctx, key, gs); err != nil {
				return err
			}
			if gs.Spec.Repository.Path != "cluster" || gs.Status.LastHandledReconcileAt != "edit-1" {
				return fmt.Errorf("path %q, last handled %q", gs.Spec.Repository.Path, gs.Status.LastHandledReconcileAt)
			}
			return nil
		})
	})

	t.Run("a badly signed webhook changes nothing", func(t *testing.T) {
		repo.MustWrite(t, "cluster/jobs/third.yaml", pyjobYAML("third"))
		repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- agent.yaml\n- jobs/bert.yaml\n- jobs/second.yaml\n- jobs/third.yaml\n")
		if _, err := repo.CommitAndPush("third"); err != nil {
			t.Fatal(err)
		}
		body := `{"ref":"refs/heads/main"}`
		refused, requested := testenv.Metric(t, webhookCalls, "result", "refused"), testenv.Metric(t, webhookCalls, "result", "requested")
		if code := post(body, map[string]string{gitops.HeaderGitHubSignature: signature.Sign([]byte("guessed"), []byte(body)), gitops.HeaderGitHubEvent: "push"}); code != http.StatusUnauthorized {
			t.Fatalf("badly signed webhook: %d, want 401", code)
		}
		// The webhook counted the call as refused before it answered; a
		// sync is asked for only on the "requested" path.
		testenv.AfterProof(t, 5*time.Second, func() error {
			if got := testenv.Metric(t, webhookCalls, "result", "refused"); got != refused+1 {
				return fmt.Errorf("refused calls %v -> %v, want one more", refused, got)
			}
			return nil
		}, func() error {
			if got := testenv.Metric(t, webhookCalls, "result", "requested"); got != requested {
				return fmt.Errorf("a badly signed call asked for a sync: requested %v -> %v", requested, got)
			}
			if _, err := getPJ("third"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("third applied after an invalid webhook (err %v)", err)
			}
			return nil
		})
	})

	t.Run("metrics report the sync", func(t *testing.T) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		for _, want := range []string{"trainops_sync_revision_info{revision=\"main@sha1:", "trainops_sync_duration_seconds_bucket", "trainops_sync_objects_applied_total"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		if strings.Contains(b.String(), gitPassword) || strings.Contains(b.String(), hookSecret) {
			t.Error("metrics leak a secret")
		}
	})
	// Each PyJob's run finished (kwok completes its pods) and its
	// reconciler said so: nothing is left for the restart to write.
	for _, n := range []string{"bert", "second"} {
		testenv.Eventually(t, 30*time.Second, func() error {
			pj, err := getPJ(n)
			if err != nil {
				return err
			}
			if pj.Status.ObservedGeneration != pj.Generation || pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
				return fmt.Errorf("%s: phase %q at generation %d, not settled yet", n, pj.Status.Phase, pj.Status.ObservedGeneration)
			}
			return nil
		})
	}
	stop()

	before := map[string]string{}
	for _, n := range []string{"bert", "second"} {
		pj, err := getPJ(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = pj.ResourceVersion
	}
	t.Run("after a restart the interval sync applies the pending push and nothing else", func(t *testing.T) {
		cfg.Sync.ReconcileInterval = 2 * time.Second
		cfg.Webhook.BindAddress = "0"
		cfg.MetricsAddr = "0"
		stop := running(t, cfg)
		defer stop()
		testenv.Eventually(t, 30*time.Second, func() error { _, err := getPJ("third"); return err })
		// At least one more sync after the one that applied third.
		syncs := testenv.Metric(t, syncDurations, "result", "success")
		testenv.AfterProof(t, 30*time.Second, func() error {
			if got := testenv.Metric(t, syncDurations, "result", "success"); got < syncs+1 {
				return fmt.Errorf("%v syncs since third was applied, want 1", got-syncs)
			}
			return nil
		}, func() error {
			var errs []error
			for n, rv := range before {
				pj, err := getPJ(n)
				if err != nil {
					return fmt.Errorf("%s gone after restart: %w", n, err)
				}
				if pj.ResourceVersion != rv {
					errs = append(errs, fmt.Errorf("%s rewritten after restart: resourceVersion %s -> %s", n, rv, pj.ResourceVersion))
				}
			}
			return errors.Join(errs...)
		})
	})

	t.Run("events hold no secret", func(t *testing.T) {
		var list eventsv1.EventList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if strings.Contains(e.Note, gitPassword) || strings.Contains(e.Note, hookSecret) {
				t.Fatalf("event %s leaks a secret: %s", e.Name, e.Note)
			}
		}
	})

	t.Run("a wrong password keeps the state and says so without the password", func(t *testing.T) {
		_ = os.WriteFile(pwFile, []byte("wrong-"+gitPassword), 0o600)
		cfg.Sync.ReconcileInterval = time.Hour
		stop := running(t, cfg)
		defer stop()
		var inv *gitops.Inventory
		testenv.Eventually(t, 30*time.Second, func() error {
			var err error
			if inv, err = gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName); err != nil {
				return err
			}
			if !strings.Contains(inv.LastError, "authentication failed") {
				return fmt.Errorf("last error %q", inv.LastError)
			}
			return nil
		})
		if strings.Contains(inv.LastError, gitPassword) {
			t.Fatalf("status leaks the password: %s", inv.LastError)
		}
		for _, n := range []string{"bert", "second", "third"} {
			if _, err := getPJ(n); err != nil {
				t.Errorf("%s lost while Git is failing: %v", n, err)
			}
		}
	})

	t.Run("Git down keeps the state; back up, a force-push is followed", func(t *testing.T) {
		_ = os.WriteFile(pwFile, []byte(gitPassword), 0o600)
		cfg.Sync.ReconcileInterval = 2 * time.Second
		cfg.Controllers.RetryDelay = time.Second
		stop := running(t, cfg)
		defer stop()
		testenv.Eventually(t, 30*time.Second, func() error {
			inv, err := gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName)
			if err != nil || inv.LastError != "" {
				return fmt.Errorf("not recovered: %v %v", err, inv)
			}
			return nil
		})
		srv.SetDown(true)
		testenv.Eventually(t, 30*time.Second, func() error {
			inv, err := gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName)
			if err != nil {
				return err
			}
			if !strings.Contains(inv.LastError, "503") && !strings.Contains(inv.LastError, "unreachable") {
				return fmt.Errorf("last error %q", inv.LastError)
			}
			return nil
		})
		for _, n := range []string{"bert", "second", "third"} {
			if _, err := getPJ(n); err != nil {
				t.Errorf("%s lost while Git is down: %v", n, err)
			}
		}
		// The metrics say so too.
		if testenv.Metric(t, "trainops_sync_failures_total", "", "") == 0 {
			t.Error("trainops_sync_failures_total did not count the outage")
		}
		srv.SetDown(false)
		repo.MustWrite(t, "cluster/jobs/fourth.yaml", pyjobYAML("fourth"))
		repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- agent.yaml\n- jobs/bert.yaml\n- jobs/second.yaml\n- jobs/third.yaml\n- jobs/fourth.yaml\n")
		rewritten, err := repo.AmendAndForcePush("third, rewritten")
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			inv, err := gitops.ReadInventory(ctx, c, "trainops-e2e", gitops.DefaultName)
			if err != nil {
				return err
			}
			if inv.LastError != "" || inv.LastAppliedRevision != "main@sha1:"+rewritten {
				return fmt.Errorf("revision %s, error %q", inv.LastAppliedRevision, inv.LastError)
			}
			_, err = getPJ("fourth")
			return err
		})
	})

	out := logs.String()
	if !strings.Contains(out, "Reconcile finished") || !strings.Contains(out, "authentication failed") {
		t.Fatalf("the log capture missed trainops's lines:\n%s", out)
	}
	for _, secret := range []string{gitPassword, hookSecret} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log leaks a secret")
		}
	}
}

// Metrics of trainops's run in this process.
const (
	webhookCalls  = "trainops_webhook_calls_total"
	syncDurations = "trainops_sync_duration_seconds"
)
