// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/render"
)

func newDiffCommand() *cobra.Command {
	var (
		f                       offlineFlags
		repoDir, base, head     string
		output, budget          string
		noColor                 bool
		namespace, capacityFile string
		comment                 commentFlags
	)
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Show what merging a change to the training-config repository would do",
		Long: `Diff renders two revisions of the repository and shows every object that
would be created, updated or deleted: the custom resources and the Jobs,
Services, Deployments and DaemonSets their reconcilers would make, each
child naming its owner. It needs no cluster: --base (default the upstream
branch, else main) and --head (default the work tree, uncommitted changes
included) are read from the local repository without touching its work tree.

With --cluster it compares the work tree with the cluster instead, the way
a sync would see it: the sync's own planning picks the objects that differ
from what trainops last applied, each is compared by server-side dry-run
apply (defaults and admission included), and what the prune would delete
from trainops's inventory is shown.

A change the API server would refuse (a PyJob's spec) is flagged with the
fix; deletions past the prune budget are flagged.

With --comment-pr it also posts the markdown report as one comment on that
pull (merge) request of --comment-repo on GitHub, GitLab or Gitea
(--comment-provider), and updates that comment on each later run instead of
adding another. The token comes from $TRAINOPS_FORGE_TOKEN, never a flag.

Exit status, as kubectl diff: 0 no changes, 1 changes, 2 error (invalid input
included: it is reported as validate reports it, never diffed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := config.ParseBudget(budget)
			if err != nil {
				return &exitError{code: ExitUsage, msg: err.Error()}
			}
			l, err := f.loader()
			if err != nil {
				return err
			}
			var report *diff.Report
			var headObjs []render.Object
			src := capacitySource{file: capacityFile}
			if f.cluster {
				report, headObjs, src.restCfg, err = liveDiff(cmd.Context(), l, f, repoDir, f.kubeconfig, namespace, b)
			} else {
				report, headObjs, err = offlineDiff(l, repoDir, base, head, f.path, b)
			}
			if err == nil {
				err = planCapacity(cmd.Context(), l, report, headObjs, src)
			}
			if err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
			}
			if err := writeReport(cmd.OutOrStdout(), report, output, !noColor && isTerminal(cmd.OutOrStdout())); err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
			}
			if err := comment.post(cmd.Context(), cmd.ErrOrStderr(), report); err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
			}
			if report.Capacity != nil {
				if err := neverFits(report.Capacity); err != nil {
					return err
				}
			}
			if !report.Empty() {
				return &exitError{code: ExitChanges}
			}
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&repoDir, "repo", ".", "the local repository (any folder in it)")
	cmd.Flags().StringVar(&base, "base", "", "base revision (default the upstream branch, else main)")
	cmd.Flags().StringVar(&head, "head", "", "head revision (default the work tree, uncommitted changes included)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, json or markdown")
	cmd.Flags().BoolVar(&noColor, "no-color", false, "never colour the text output")
	cmd.Flags().StringVar(&budget, "prune-budget", "50%", "prune budget to flag deletions against")
	cmd.Flags().BoolVar(&f.cluster, "cluster", false, "compare the head with the cluster instead of the base (other projects' kinds validated against the CRDs it serves)")
	cmd.Flags().StringVar(&capacityFile, "capacity", "", "a saved list of the cluster's queues and nodes (kubectl get clusterqueues,localqueues,nodes -A -o yaml) to plan the change's PyJobs against, as --cluster does live")
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --cluster; in-cluster or $KUBECONFIG when empty")
	cmd.Flags().StringVar(&namespace, "namespace", defaultNamespace(), "trainops's namespace, where its inventory is (--cluster)")
	comment.bind(cmd)
	return cmd
}

func writeReport(w io.Writer, r *diff.Report, output string, color bool) error {
	switch output {
	case "text":
		return r.WriteText(w, color)
	case "json":
		return r.WriteJSON(w)
	case "markdown", "md":
		return r.WriteMarkdown(w)
	}
	return fmt.Errorf("--output %q: use text, json or markdown", output)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// renderRevisions renders the base revision, then the head: the work tree
// when head is empty, else the head extracted where the base was, only its
// changed files written.
func renderRevisions(l *offline.Loader, repo *gitsource.Local, base, head, path string) (baseObjs, headObjs []render.Object, err error) {
	dir, err := os.MkdirTemp(gitsource.ScratchDir(), "trainops-diff-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := repo.Extract(base, dir); err != nil {
		return nil, nil, err
	}
	if baseObjs, err = l.Render(dir, path); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", revisionLabel(base), err)
	}
	root := repo.Root
	if head != "" {
		if _, err := repo.Advance(head, dir); err != nil {
			return nil, nil, err
		}
		root = dir
	}
	if headObjs, err = l.Render(root, path); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", revisionLabel(head), err)
	}
	return baseObjs, headObjs, nil
}

func revisionLabel(rev string) string {
	if rev == "" {
		return "the work tree"
	}
	return rev
}

func offlineDiff(l *offline.Loader, repoDir, base, head, path string, b config.Budget) (*diff.Report, []render.Object, error) {
	repo, err := gitsource.OpenLocal(repoDir)
	if err != nil {
		return nil, nil, err
	}
	if base == "" {
		if base, err = repo.DefaultBase(); err != nil {
			return nil, nil, err
		}
	}
	// --path is relative to the repository root, wherever --repo points.
	// The head's files that the base holds too are parsed once.
	l.KeepParsed()
	baseObjs, headObjs, err := renderRevisions(l, repo, base, head, path)
	if err != nil {
		return nil, nil, err
	}
	// An object both render alike is one object from here on: the head's
	// check fills in its CRD defaults for both.
	unchanged := offline.Unchanged(baseObjs, headObjs)
	same := func(o render.Object) bool { return unchanged[o.Unstructured] }
	if err := l.Check(headObjs, nil); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", revisionLabel(head), err)
	}
	if err := l.Check(baseObjs, same); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", revisionLabel(base), err)
	}
	baseItems, err := l.ExpandChanged(baseObjs, same)
	if err != nil {
		return nil, nil, err
	}
	headItems, err := l.ExpandChanged(headObjs, same)
	if err != nil {
		return nil, nil, err
	}
	r := diff.Compare(baseItems, headItems, l.CheckUpdate, budgetFunc(b))
	// Only what the change creates or updates is warned about.
	changed := slices.DeleteFunc(slices.Clone(headObjs), same)
	r.Warn(offline.Warnings(changed))
	return r, headObjs, nil
}

func budgetFunc(b config.Budget) diff.Budget {
	return func(n, total int) bool {
		return b.Allows(n, total)
	}
}

// liveDiff shows what syncing the work tree at dir would do to the
// cluster: the sync engine previews it (render, check, plan, prune set, as
// a sync would) and diff.Live compares that with the live objects.
func liveDiff(ctx context.Context, l *offline.Loader, f offlineFlags, dir, kubeconfig, namespace string, b config.Budget) (*diff.Report, []render.Object, *rest.Config, error) {
	// Report invalid input as validate does, before asking the cluster.
	objs, err := l.Load(dir, f.path)
	if err != nil {
		return nil, nil, nil, err
	}
	kinds, err := config.ParseKinds(f.allowedKinds)
	if err != nil {
		return nil, nil, nil, err
	}
	restCfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := clientFor(restCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	e := &gitops.Engine{Client: c, Mapper: c.RESTMapper(), Log: logr.Discard(), Opts: gitops.Options{
		Namespace: namespace, Path: f.path, AllowedKinds: kinds, AllowedNamespaces: f.allowedNamespaces,
		Prune: true, PruneBudget: b, DecryptKinds: l.DecryptKinds(),
	}}
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := e.Connect(restCfg, hc); err != nil {
		return nil, nil, nil, err
	}
	p, err := e.Preview(ctx, dir)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := diff.Live(ctx, c, p)
	if err != nil {
		return nil, nil, nil, err
	}
	r.Warn(offline.Warnings(objs))
	return r, objs, restCfg, nil
}
