// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// TestGitSyncDecryptsWithItsOwnKeys: a GitSync acting as its team's
// ServiceAccount decrypts its repository's SOPS-encrypted Secret with the
// age key of its spec.decryption.secretRef, in its own namespace; a
// GitSync of the same team without decryption refuses its encrypted
// Secret, naming the file and what to set, and applies nothing of that
// revision.
func TestGitSyncDecryptsWithItsOwnKeys(t *testing.T) {
	ctx := context.Background()
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, func(s *GitSyncSettings) {
		s.AllowedKinds = append(slices.Clone(check.DefaultAllowedKinds), check.DefaultDecryptKinds...)
	})
	sa := serviceAccountFor(t, team, "secrets-deployer", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}})
	id, _ := age.GenerateX25519Identity()
	const token = "team-token-9c3e51d0"
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "sops-age"},
		Data: map[string][]byte{"team.agekey": []byte(id.String())}}); err != nil {
		t.Fatal(err)
	}
	secretRepo := func(repoName, name string) string {
		repo, err := git.NewRepo(repoName, "main", "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(repo.Close)
		plain := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\nstringData:\n  token: %s\n", name, team, token)
		enc, err := decrypt.EncryptYAML([]byte(plain), decrypt.SecretFields, id.Recipient().String())
		if err != nil {
			t.Fatal(err)
		}
		repo.MustWrite(t, "secrets/"+name+".sops.yaml", string(enc))
		repo.MustWrite(t, "configmap.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-settings\n  namespace: %s\n", name, team))
		rev, err := repo.CommitAndPush("encrypted " + name)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	secretRepo("with-keys.git", "tokens")
	withKeys := newGitSyncSpec(git, team, "with-keys", "with-keys.git", sa)
	withKeys.Spec.Decryption = &gitopsv1alpha1.Decryption{SecretRef: gitopsv1alpha1.LocalObjectReference{Name: "sops-age"}}
	gs := waitGitSync(t, createGitSync(t, withKeys), "ready", ready(""))
	live := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: team, Name: "tokens"}, live); err != nil {
		t.Fatal(err)
	}
	if string(live.Data["token"]) != token {
		t.Fatalf("the Secret holds %d bytes, not the decrypted token", len(live.Data["token"]))
	}
	if strings.Contains(fmt.Sprint(gs.Status), token) {
		t.Error("the GitSync's status shows the token")
	}

	rev := secretRepo("without-keys.git", "other")
	without := newGitSyncSpec(git, team, "without-keys", "without-keys.git", sa)
	g := waitGitSync(t, createGitSync(t, without), "stalled", stalledOn(rev, gitops.ReasonValidationFailed))
	msg := fmt.Sprint(g.Status.LastError) + conditions.GetMessage(g, status.StalledCondition)
	for _, want := range []string{"secrets/other.sops.yaml", "Secret " + team + "/other", "no decryption keys", "decryption.secretRef"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: team, Name: "other"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused revision's Secret exists (err %v)", err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: team, Name: "other-settings"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused revision's ConfigMap was applied (err %v)", err)
	}
}
