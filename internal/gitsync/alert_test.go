// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/testenv"
)

// slackChannel is a Slack-compatible incoming webhook on 127.0.0.1: it
// keeps each message's attachment.
type slackChannel struct {
	mu   sync.Mutex
	msgs []map[string]string
}

func (s *slackChannel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m struct {
		Attachments []map[string]string `json:"attachments"`
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if json.Unmarshal(body, &m) == nil && len(m.Attachments) == 1 {
		s.msgs = append(s.msgs, m.Attachments[0])
	}
}

func (s *slackChannel) messages() []map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]string(nil), s.msgs...)
}

// TestGitSyncAlertsItsTeamsChannel: a GitSync's spec.alert, its address
// read from the team's Secret as the team's ServiceAccount, tells the
// team's Slack channel of each revision once: applied, then refused
// naming the file; a sync of the refused revision again sends nothing.
// A Secret without an address stalls the GitSync naming the field.
func TestGitSyncAlertsItsTeamsChannel(t *testing.T) {
	ctx := context.Background()
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git, r := startGitSyncReconciler(t, home, nil)
	sa := serviceAccountFor(t, team, "alerting-deployer", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}})
	channel := &slackChannel{}
	hs := httptest.NewServer(channel)
	defer hs.Close()
	for name, data := range map[string]map[string][]byte{
		"team-slack": {"address": []byte(hs.URL + "/services/T01/B02/team-hook-token")},
		"no-address": {"url": []byte(hs.URL)},
	} {
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: name}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := git.NewRepo("alerts.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	repo.MustWrite(t, "settings.yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: %s\n", team))
	good, err := repo.CommitAndPush("settings")
	if err != nil {
		t.Fatal(err)
	}
	spec := newGitSyncSpec(git, team, "alerts", "alerts.git", sa)
	spec.Spec.Alert = &gitopsv1alpha1.Alert{Provider: notify.Slack, SecretRef: gitopsv1alpha1.LocalObjectReference{Name: "team-slack"}}
	gs := waitGitSync(t, createGitSync(t, spec), "ready", ready(good))
	source := "GitSync " + team + "/alerts"
	testenv.Eventually(t, 30*time.Second, func() error {
		if m := channel.messages(); len(m) != 1 || m[0]["color"] != "good" || m[0]["title"] != source+": Applied "+notify.ShortRevision(gs.Status.LastAppliedRevision) {
			return fmt.Errorf("messages %v", m)
		}
		return nil
	})

	repo.MustWrite(t, "intruder.yaml", fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: intruder\n  namespace: %s\n", team))
	bad, err := repo.CommitAndPush("a kind not allowed")
	if err != nil {
		t.Fatal(err)
	}
	annotate(t, gs, "bad-1")
	waitGitSync(t, gs, "stalled", stalledOn(bad, gitops.ReasonValidationFailed))
	testenv.Eventually(t, 30*time.Second, func() error {
		if m := channel.messages(); len(m) != 2 || m[1]["color"] != "danger" || !strings.Contains(m[1]["text"], "intruder.yaml") {
			return fmt.Errorf("messages %v", m)
		}
		return nil
	})
	// The same refusal again: the sync ran (it answered the request), and
	// nothing was sent or waits to be.
	annotate(t, gs, "bad-2")
	if m := channel.messages(); len(m) != 2 || r.Notifier.Pending() != 0 {
		t.Errorf("after the same refusal again: messages %v, %d waiting", m, r.Notifier.Pending())
	}

	noAddress := newGitSyncSpec(git, team, "no-address", "alerts.git", sa)
	noAddress.Spec.Alert = &gitopsv1alpha1.Alert{Provider: notify.Slack, SecretRef: gitopsv1alpha1.LocalObjectReference{Name: "no-address"}}
	g := waitGitSync(t, createGitSync(t, noAddress), "stalled", func(g *gitopsv1alpha1.GitSync) bool { return len(g.Status.LastError) > 0 })
	if msg := g.Status.LastError[0].Message; !strings.Contains(msg, "spec.alert.secretRef") || !strings.Contains(msg, "no-address") || strings.Contains(msg, hs.URL) {
		t.Errorf("stalled with %q", msg)
	}
}
