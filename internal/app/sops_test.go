// SPDX-License-Identifier: Apache-2.0

package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/testenv"
)

// The values of the encrypted Secret: none may appear anywhere but in the
// Secret itself.
const (
	sopsToken = "hf_plaintext_token_4f1c9a"
	sopsWandb = "wandb-plaintext-key-77d2"
)

func sopsSecretYAML(ns string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Secret
metadata:
  name: tokens
  namespace: %s
type: Opaque
data:
  hf: %s
stringData:
  wandb: %s
`, ns, base64.StdEncoding.EncodeToString([]byte(sopsToken)), sopsWandb)
}

// leaks are the forms a value could take in text: as written, and base64.
func leaks(text string) []string {
	var out []string
	for _, v := range []string{sopsToken, sopsWandb} {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(text, form) {
				out = append(out, form)
			}
		}
	}
	return out
}

// TestSOPSSecretsAreAppliedDecryptedAndNeverShown: a SOPS-encrypted Secret
// of the settings' repository is applied decrypted with the age key of
// decryption.secretRef, and its values appear nowhere else: not in
// trainops's log, Events, the GitSync's status, the inventory or the
// metrics. A revision encrypted for another key is refused whole, naming
// the file and the key it lacks: nothing of it is applied, the Secret
// keeps its values.
func TestSOPSSecretsAreAppliedDecryptedAndNeverShown(t *testing.T) {
	logs := &syncBuffer{}
	logSink.capture(t, logs)
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	const home, ns = "trainops-sops", "ml-sops"
	owner, _ := age.GenerateX25519Identity()
	stranger, _ := age.GenerateX25519Identity()

	srv, err := gitserver.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	repo, err := srv.NewRepo("ml/secrets.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	encryptFor := func(id *age.X25519Identity) string {
		enc, err := decrypt.EncryptYAML(sopsSecretYAML(ns), decrypt.SecretFields, id.Recipient().String())
		if err != nil {
			t.Fatal(err)
		}
		return string(enc)
	}
	repo.MustWrite(t, "cluster/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n")
	repo.MustWrite(t, "cluster/tokens.sops.yaml", encryptFor(owner))
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- tokens.sops.yaml\n")
	first, err := repo.CommitAndPush("encrypted tokens")
	if err != nil {
		t.Fatal(err)
	}

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: home}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "sops-age"},
		Data: map[string][]byte{"identity.agekey": []byte(owner.String() + "\n")}}
	if err := c.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	cfg := config.Run{
		Namespace:   home,
		Controllers: config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"},
		Repo:        config.Repo{URL: srv.URL("ml/secrets.git"), Branch: "main", Path: "cluster", Timeout: 20 * time.Second},
		Sync: config.Sync{ReconcileInterval: time.Hour, Prune: true, PruneBudget: "50%", Force: true, Concurrency: 4,
			AllowedKinds: append(config.KindNames(check.DefaultAllowedKinds), "Secret"), CacheDir: filepath.Join(t.TempDir(), "cache")},
		Decryption:  config.Decryption{SecretRef: "sops-age"},
		MetricsAddr: metricsAddr, HealthAddr: "0", LogFormat: "console",
	}
	stop := running(t, cfg)
	defer stop()

	live := &corev1.Secret{}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tokens"}, live); err != nil {
			return err
		}
		if string(live.Data["hf"]) != sopsToken || string(live.Data["wandb"]) != sopsWandb {
			return fmt.Errorf("the Secret holds %d values, not the decrypted ones", len(live.Data))
		}
		return nil
	})
	for k, v := range live.Annotations {
		if len(leaks(v)) > 0 || strings.Contains(k, "sops") {
			t.Errorf("the live Secret's annotation %s shows a value or SOPS metadata", k)
		}
	}

	gs := &gitopsv1alpha1.GitSync{}
	key := client.ObjectKey{Namespace: home, Name: gitops.DefaultName}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, key, gs); err != nil {
			return err
		}
		if !conditions.IsReady(gs) || !strings.HasSuffix(gs.Status.LastAppliedRevision, first) {
			return fmt.Errorf("GitSync status %+v", gs.Status)
		}
		return nil
	})

	// A revision encrypted for a key trainops lacks, with a new
	// ConfigMap beside it.
	repo.MustWrite(t, "cluster/tokens.sops.yaml", encryptFor(stranger))
	repo.MustWrite(t, "cluster/second.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: second\n  namespace: "+ns+"\n")
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- tokens.sops.yaml\n- second.yaml\n")
	bad, err := repo.CommitAndPush("tokens for another key")
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + gitsync.AnnotationRequestedAt + `":"wrong-key"}}}`)
	if err := c.Patch(ctx, gs, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, key, gs); err != nil {
			return err
		}
		if !strings.HasSuffix(gs.Status.LastAttemptedRevision, bad) || conditions.IsReady(gs) {
			return fmt.Errorf("the refusal of %s is not in the status yet: %+v", bad, gs.Status)
		}
		return nil
	})
	msg := fmt.Sprint(gs.Status.LastError)
	for _, want := range []string{"tokens.sops.yaml", "Secret " + ns + "/tokens", stranger.Recipient().String(), owner.Recipient().String(), "Secret " + home + "/sops-age"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not name %s: %s", want, msg)
		}
	}
	// The status says the revision was seen and refused: nothing of it
	// reached the cluster.
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused revision's ConfigMap was applied (err %v)", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tokens"}, live); err != nil || string(live.Data["hf"]) != sopsToken {
		t.Errorf("the Secret lost its values: err %v", err)
	}

	// Nowhere else: status, inventory, Events, metrics, log.
	shown := map[string]string{"the GitSync": jsonOf(t, gs)}
	inv := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: home, Name: gitops.InventoryName(gitops.DefaultName)}, inv); err != nil {
		t.Fatal(err)
	}
	shown["the inventory"] = jsonOf(t, inv)
	for _, n := range []string{home, ns} {
		events := &eventsv1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(n)); err != nil {
			t.Fatal(err)
		}
		shown["the Events of "+n] = jsonOf(t, events)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	shown["the metrics"] = string(metrics)
	shown["the log"] = logs.String()
	for where, text := range shown {
		if l := leaks(text); len(l) > 0 {
			t.Errorf("%s shows a secret value (%d forms)", where, len(l))
		}
	}
	if !bytes.Contains([]byte(shown["the log"]), []byte(stranger.Recipient().String())) {
		t.Errorf("the log does not say why the revision was refused")
	}
	if strings.Contains(shown["the log"], owner.String()) || strings.Contains(shown["the GitSync"], owner.String()) {
		t.Error("the age identity was shown")
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
