// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
)

// FieldManager is the agent's field manager in its SREAgent's status. It
// owns status.findings and status.actions; the SREAgent's reconciler
// writes the other status fields, and never these.
const FieldManager = "trainops-agent"

// statusMessageLen bounds a finding's or action's message in the status,
// as the CRD does.
const statusMessageLen = 1024

// acted records a repair (or a dry run's) of the finding f for the status.
func (a *Agent) acted(f Finding, action, msg string) {
	act := aiopsv1alpha1.SREAgentAction{
		Time: metav1.NewTime(a.Now()), Action: action, Object: f.Object.Kind + "/" + f.Object.Name,
		Message: truncate(oneLine(msg), statusMessageLen), DryRun: a.Opts.DryRun,
	}
	a.actions = append([]aiopsv1alpha1.SREAgentAction{act}, a.actions...)
	if len(a.actions) > aiopsv1alpha1.MaxAgentActions {
		a.actions = a.actions[:aiopsv1alpha1.MaxAgentActions]
	}
}

// agentStatus is the part of an SREAgent's status the agent writes.
type agentStatus struct {
	Findings []aiopsv1alpha1.SREAgentFinding `json:"findings,omitempty"`
	Actions  []aiopsv1alpha1.SREAgentAction  `json:"actions,omitempty"`
}

// statusOf is the agent's status for findings: the first MaxAgentFindings
// of them (already in a stable order), each since it was first seen, and
// the latest actions.
func (a *Agent) statusOf(findings []Finding) agentStatus {
	st := agentStatus{Actions: a.actions}
	for _, f := range findings {
		if len(st.Findings) == aiopsv1alpha1.MaxAgentFindings {
			break
		}
		object := f.Object.Kind + "/" + f.Object.Name
		since := a.announced[f.Key()]
		if earlier, ok := a.earlier[f.Kind+" "+object]; ok && earlier.Before(since) {
			since = earlier
		}
		st.Findings = append(st.Findings, aiopsv1alpha1.SREAgentFinding{
			Kind: f.Kind, Object: object, Message: truncate(oneLine(f.Message), statusMessageLen), Since: metav1.NewTime(since),
		})
	}
	return st
}

// resume picks up, once, what an earlier agent of the SREAgent wrote:
// its actions, and since when its findings stood, so a restarted agent
// neither forgets its repairs nor dates old problems anew.
func (a *Agent) resume(ctx context.Context) error {
	if a.resumed {
		return nil
	}
	sre := &aiopsv1alpha1.SREAgent{}
	err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Opts.Namespace, Name: a.Opts.SREAgent}, sre)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("read SREAgent %s: %w", a.Opts.SREAgent, err)
	}
	a.actions = append(a.actions, sre.Status.Actions...)
	if len(a.actions) > aiopsv1alpha1.MaxAgentActions {
		a.actions = a.actions[:aiopsv1alpha1.MaxAgentActions]
	}
	a.earlier = map[string]time.Time{}
	for _, f := range sre.Status.Findings {
		a.earlier[f.Kind+" "+f.Object] = f.Since.Time
	}
	a.resumed = true
	return nil
}

// writeStatus applies the agent's findings and actions to its SREAgent's
// status (server-side apply of those fields alone) when they changed since
// the last write. A deleted SREAgent is not an error: the agent is about
// to go with it.
func (a *Agent) writeStatus(ctx context.Context, findings []Finding) error {
	if a.Opts.SREAgent == "" {
		return nil
	}
	if err := a.resume(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(a.statusOf(findings))
	if err != nil {
		return err
	}
	if string(b) == a.written {
		return nil
	}
	var status map[string]any
	if err := json.Unmarshal(b, &status); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": aiopsv1alpha1.GroupVersion.String(), "kind": aiopsv1alpha1.SREAgentKind,
		"metadata": map[string]any{"name": a.Opts.SREAgent, "namespace": a.Opts.Namespace},
		"status":   status,
	}}
	err = a.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write the status of SREAgent %s: %w", a.Opts.SREAgent, err)
	}
	a.written = string(b)
	return nil
}
