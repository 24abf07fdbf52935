// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/testenv"
)

// TestGiteaPushWebhookAndCommitStatuses runs trainops against a real
// Gitea: a push reaches trainops through Gitea's own signed webhook (the
// interval is an hour: nothing else syncs), and each revision's outcome
// appears on its commit through Gitea's API; a refused revision gets a
// failure naming the file. With Gitea's API out of reach, the sync still
// happens and the status arrives once it is back.
func TestGiteaPushWebhookAndCommitStatuses(t *testing.T) {
	ctx := context.Background()
	g, err := testenv.StartGitea(ctx, filepath.Join(t.TempDir(), "gitea"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	// Names of this run's own: the package's tests share one cluster.
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	repo, home, ns := "training-config", "trainops-gitea-"+run, "ml-gitea-"+run
	if _, err := g.CreateRepo(ctx, repo); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	configMap := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
	}
	kustomization := func(files ...string) string {
		return "resources:\n- namespace.yaml\n- " + strings.Join(files, "\n- ") + "\n"
	}
	first, err := g.Push(ctx, work, repo, map[string]string{
		"cluster/namespace.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + ns + "\n",
		"cluster/first.yaml":         configMap("first"),
		"cluster/kustomization.yaml": kustomization("first.yaml"),
	})
	if err != nil {
		t.Fatal(err)
	}

	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: home}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "forge-token"}, Data: map[string][]byte{"token": []byte(g.Token)}}); err != nil {
		t.Fatal(err)
	}
	// Gitea's API, as trainops reaches it, through a door the test can
	// close.
	door := openDoor(t, strings.TrimPrefix(g.URL, "http://"))
	defer door.close()
	hookSecretFile := filepath.Join(t.TempDir(), "hook")
	const hookSecret = "gitea-hook-secret-never-logged"
	if err := os.WriteFile(hookSecretFile, []byte(hookSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	hookAddr := freeAddr(t)
	// A generic alert channel on 127.0.0.1, its address and signing key in
	// a Secret.
	channel := &alertChannelServer{key: "alert-signing-key-never-logged"}
	hs := httptest.NewServer(channel)
	defer hs.Close()
	alertAddress := hs.URL + "/hooks/alert-token-never-logged"
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "alert-hook"},
		Data: map[string][]byte{"address": []byte(alertAddress), "key": []byte(channel.key)}}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logSink.capture(t, logs)
	cfg := config.Run{
		Namespace:   home,
		Controllers: config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"},
		Repo:        config.Repo{URL: g.URL + "/" + g.User + "/" + repo + ".git", Branch: "main", Path: "cluster", Timeout: 20 * time.Second},
		Webhook:     config.Webhook{BindAddress: hookAddr, SecretFile: hookSecretFile},
		Sync: config.Sync{ReconcileInterval: time.Hour, Prune: true, PruneBudget: "50%", Force: true, Concurrency: 4,
			AllowedKinds: config.KindNames(check.DefaultAllowedKinds), CacheDir: filepath.Join(t.TempDir(), "cache")},
		CommitStatus: config.CommitStatus{Provider: notify.Gitea, APIURL: "http://" + door.addr, SecretRef: "forge-token"},
		Alert:        config.Alert{Provider: notify.Generic, SecretRef: "alert-hook"},
		MetricsAddr:  "0", HealthAddr: "0", LogFormat: "console",
	}
	if err := g.AddPushHook(ctx, repo, "http://"+hookAddr+"/hook", hookSecret); err != nil {
		t.Fatal(err)
	}
	stop := running(t, cfg)
	defer stop()

	statusContext := gitsync.StatusContext(home, gitops.DefaultName)
	waitStatus := func(sha, state, says string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() error {
			sts, err := g.Statuses(ctx, repo, sha)
			if err != nil {
				return err
			}
			for _, s := range sts {
				if s.Context == statusContext && s.State == state && strings.Contains(s.Description, says) {
					return nil
				}
			}
			return fmt.Errorf("commit %s has statuses %+v, not %s %q", sha[:8], sts, state, says)
		})
	}
	configMapExists := func(name string) bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	waitStatus(first, "success", "applied")
	if !configMapExists("first") {
		t.Fatal("the first revision was not applied")
	}

	// A push: only Gitea's webhook can bring it within the hour.
	second, err := g.Push(ctx, work, repo, map[string]string{"cluster/second.yaml": configMap("second"), "cluster/kustomization.yaml": kustomization("first.yaml", "second.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(second, "success", "applied")
	if !configMapExists("second") {
		t.Fatal("the pushed revision was not applied")
	}
	if !strings.Contains(logs.String(), `"msg":"webhook accepted: sync requested","provider":"gitea"`) {
		t.Error("the log does not say Gitea's signed webhook asked for the sync")
	}

	// A refused revision: a kind not allowed, beside a new ConfigMap.
	bad, err := g.Push(ctx, work, repo, map[string]string{
		"cluster/third.yaml":         configMap("third"),
		"cluster/bad.yaml":           "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: intruder\n  namespace: " + ns + "\n",
		"cluster/kustomization.yaml": kustomization("first.yaml", "second.yaml", "third.yaml", "bad.yaml"),
	})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(bad, "failure", "bad.yaml")
	if configMapExists("third") {
		t.Error("the refused revision's ConfigMap was applied")
	}
	// The channel heard of each revision once, signed: applied, applied,
	// refused naming the file.
	testenv.Eventually(t, 30*time.Second, func() error {
		got := channel.received()
		if len(got) < 3 {
			return fmt.Errorf("alerts %+v", got)
		}
		return nil
	})
	got := channel.received()
	if len(got) != 3 || got[0].Commit != first || got[0].Reason != "Applied" || got[1].Commit != second ||
		got[2].Commit != bad || got[2].State != notify.Failure || !strings.Contains(got[2].Message, "bad.yaml") {
		t.Errorf("alerts %+v", got)
	}
	if n := channel.unsigned(); n != 0 {
		t.Errorf("%d alerts without a valid signature", n)
	}

	// Gitea's API out of reach: the sync goes on; the status follows.
	door.close()
	fourth, err := g.Push(ctx, work, repo, map[string]string{
		"cluster/bad.yaml":           "",
		"cluster/fourth.yaml":        configMap("fourth"),
		"cluster/kustomization.yaml": kustomization("first.yaml", "second.yaml", "third.yaml", "fourth.yaml"),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if !configMapExists("fourth") {
			return fmt.Errorf("the revision pushed while Gitea's API is out of reach is not applied")
		}
		return nil
	})
	if sts, err := g.Statuses(ctx, repo, fourth); err != nil || len(sts) != 0 {
		t.Fatalf("statuses %+v (err %v) while the API is out of reach", sts, err)
	}
	door.reopen(t)
	waitStatus(fourth, "success", "applied")
	for _, secret := range []string{g.Token, hookSecret, "alert-token-never-logged", channel.key} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows the secret %q", secret)
		}
	}
}

// alertChannelServer records the generic alerts posted to it and counts
// those whose signature is not key's.
type alertChannelServer struct {
	key    string
	mu     sync.Mutex
	alerts []notify.Alert
	bad    int
}

func (s *alertChannelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mac := hmac.New(sha256.New, []byte(s.key))
	mac.Write(body)
	var a notify.Alert
	err := json.Unmarshal(body, &a)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || r.Header.Get(notify.SignatureHeader) != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		s.bad++
		return
	}
	s.alerts = append(s.alerts, a)
}

func (s *alertChannelServer) received() []notify.Alert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.alerts)
}

func (s *alertChannelServer) unsigned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// door forwards TCP connections from addr to a target, until closed.
type door struct {
	addr, target string
	mu           sync.Mutex
	l            net.Listener
	conns        []net.Conn
}

func openDoor(t *testing.T, target string) *door {
	d := &door{addr: freeAddr(t), target: target}
	d.reopen(t)
	return d
}

func (d *door) reopen(t *testing.T) {
	l, err := net.Listen("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.l = l
	d.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.conns = append(d.conns, in)
			d.mu.Unlock()
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", d.target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}

func (d *door) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.l != nil {
		_ = d.l.Close()
		d.l = nil
	}
	// Connections kept alive are cut too: nothing gets through.
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}
