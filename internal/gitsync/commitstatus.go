// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"errors"
	"fmt"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/notify"
)

// StatusContext names the commit statuses of the GitSync namespace/name
// among a commit's others.
func StatusContext(namespace, name string) string { return "trainops/" + namespace + "/" + name }

// commitStatusTarget gives run the target of spec.commitStatus, its token
// read as the GitSync's identity, made again only when the Secret or the
// spec changed.
func (r *GitSyncReconciler) commitStatusTarget(ctx context.Context, gs *gitopsv1alpha1.GitSync, run *gitSyncRunner) error {
	cs := gs.Spec.CommitStatus
	if cs == nil || r.Notifier == nil {
		run.status, run.statusVersion = nil, ""
		return nil
	}
	const field = "spec.commitStatus.secretRef"
	sec, err := r.secretOf(ctx, gs, run.engine.Writer, field, cs.SecretRef.Name)
	if err != nil {
		return err
	}
	if run.status != nil && run.statusVersion == sec.ResourceVersion {
		return nil
	}
	t, err := notify.TargetFromSecret(cs.Provider, cs.APIURL, gs.Spec.Repository.URL, StatusContext(gs.Namespace, gs.Name), sec.Data)
	if errors.Is(err, notify.ErrNoToken) {
		return fmt.Errorf("%s: Secret %s/%s: %w", field, gs.Namespace, sec.Name, err)
	}
	if err != nil {
		return fmt.Errorf("spec.commitStatus: %w", err)
	}
	run.status, run.statusVersion = &t, sec.ResourceVersion
	return nil
}

// alertChannel gives run the channel of spec.alert, its address read as
// the GitSync's identity, made again only when the Secret or the spec
// changed.
func (r *GitSyncReconciler) alertChannel(ctx context.Context, gs *gitopsv1alpha1.GitSync, run *gitSyncRunner) error {
	a := gs.Spec.Alert
	if a == nil || r.Notifier == nil {
		run.alert, run.alertVersion = nil, ""
		return nil
	}
	const field = "spec.alert.secretRef"
	sec, err := r.secretOf(ctx, gs, run.engine.Writer, field, a.SecretRef.Name)
	if err != nil {
		return err
	}
	if run.alert != nil && run.alertVersion == sec.ResourceVersion {
		return nil
	}
	c, err := notify.ChannelFromSecret(a.Provider, sec.Data)
	if err != nil {
		return fmt.Errorf("%s: Secret %s/%s: %w", field, gs.Namespace, sec.Name, err)
	}
	run.alert, run.alertVersion = &c, sec.ResourceVersion
	return nil
}

// postStatus tells the forge and the alert channel what became of
// revision, when there is news.
func (r *GitSyncReconciler) postStatus(run *gitSyncRunner, gs *gitopsv1alpha1.GitSync, revision, appliedBefore string, res gitops.Result, err error) {
	if run.status != nil {
		if st, ok := gitops.CommitStatus(revision, appliedBefore, res, err); ok {
			r.Notifier.Post(*run.status, st)
		}
	}
	if run.alert != nil {
		if a, ok := gitops.SyncNews(revision, appliedBefore, res, err); ok {
			a.Source = "GitSync " + gs.Namespace + "/" + gs.Name
			r.Notifier.Alert(*run.alert, a)
		}
	}
}
