package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/pkg/ssa"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/render"
)

func newDiffCommand() *cobra.Command {
	var (
		f                     offlineFlags
		repoDir, base, head   string
		output, budget        string
		noColor, live         bool
		kubeconfig, namespace string
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

With --cluster it compares the head with the cluster instead, by
server-side dry-run apply (defaults and admission included), and shows what
the prune would delete from trainops's inventory.

A change the API server would refuse (a PyJob's spec) is flagged with the
fix; deletions past the prune budget are flagged.

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
			if live {
				report, err = liveDiff(cmd.Context(), l, repoDir, f.path, kubeconfig, namespace, b)
			} else {
				report, err = offlineDiff(l, repoDir, base, head, f.path, b)
			}
			if err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
			}
			if err := writeReport(cmd.OutOrStdout(), report, output, !noColor && isTerminal(cmd.OutOrStdout())); err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
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
	cmd.Flags().BoolVar(&live, "cluster", false, "compare the head with the cluster instead of the base")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --cluster; in-cluster or $KUBECONFIG when empty")
	cmd.Flags().StringVar(&namespace, "namespace", defaultNamespace(), "trainops's namespace, where its inventory is (--cluster)")
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

// loadRevision renders and expands one revision: the work tree when rev is
// empty, else the revision extracted into a temporary folder.
func loadRevision(l *offline.Loader, repo *gitsource.Local, rev, path string) ([]offline.Item, error) {
	root := repo.Root
	if rev != "" {
		dir, err := os.MkdirTemp(gitsource.ScratchDir(), "trainops-diff-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if _, err := repo.Extract(rev, dir); err != nil {
			return nil, err
		}
		root = dir
	}
	objs, err := l.Load(root, path)
	if err != nil {
		label := rev
		if label == "" {
			label = "the work tree"
		}
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	return l.Expand(objs)
}

func offlineDiff(l *offline.Loader, repoDir, base, head, path string, b config.Budget) (*diff.Report, error) {
	repo, err := gitsource.OpenLocal(repoDir)
	if err != nil {
		return nil, err
	}
	if base == "" {
		if base, err = repo.DefaultBase(); err != nil {
			return nil, err
		}
	}
	// --path is relative to the repository root, wherever --repo points.
	baseItems, err := loadRevision(l, repo, base, path)
	if err != nil {
		return nil, err
	}
	headItems, err := loadRevision(l, repo, head, path)
	if err != nil {
		return nil, err
	}
	return diff.Compare(baseItems, headItems, l.CheckUpdate, budgetFunc(b)), nil
}

func budgetFunc(b config.Budget) diff.Budget {
	return func(n, total int) bool {
		return b.Allows(n, total)
	}
}

// liveDiff compares the head's objects with the cluster by server-side
// dry-run apply, and the inventory with the head for what would be pruned.
func liveDiff(ctx context.Context, l *offline.Loader, dir, path, kubeconfig, namespace string, b config.Budget) (*diff.Report, error) {
	if _, err := l.Load(dir, path); err != nil {
		return nil, err
	}
	// Compare what a sync sends: the rendered objects as they are, not
	// with the defaults offline validation filled in.
	objs, err := render.Render(dir, path)
	if err != nil {
		return nil, err
	}
	c, err := kubeClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	rm := ssa.NewResourceManager(c, nil, ssa.Owner{Field: builder.FieldManager, Group: "trainops.dev"})
	var base, head []offline.Item
	type refusal struct {
		obj  *unstructured.Unstructured
		file string
		msg  string
	}
	var refused []refusal
	for _, o := range objs {
		u, err := gitops.Prepare(o.Unstructured, namespace)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.File, o.ID(), err)
		}
		o.Unstructured = u
		entry, existing, dryRun, err := rm.Diff(ctx, u.DeepCopy(), ssa.DefaultDiffOptions())
		if err != nil {
			// The API server refuses it (an immutable spec, a conflict):
			// show the change and say so.
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(o.GroupVersionKind())
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(o.Unstructured), live); gerr != nil {
				return nil, fmt.Errorf("%s: %s: %w", o.File, o.ID(), err)
			}
			base = append(base, offline.Item{Object: clean(live), File: o.File})
			head = append(head, offline.Item{Object: o.Unstructured, File: o.File})
			refused = append(refused, refusal{o.Unstructured, o.File, apierr.Message(err)})
			continue
		}
		switch entry.Action {
		case ssa.CreatedAction:
			head = append(head, offline.Item{Object: o.Unstructured, File: o.File})
		case ssa.ConfiguredAction:
			base = append(base, offline.Item{Object: clean(existing), File: o.File})
			head = append(head, offline.Item{Object: clean(dryRun), File: o.File})
		}
	}
	// What the last sync applied and the head no longer holds would be
	// pruned; before any sync there is nothing to prune.
	inv, err := gitops.ReadInventory(ctx, c, namespace, app.SyncName)
	switch {
	case errors.Is(err, gitops.ErrNoInventory):
	case err != nil:
		return nil, err
	default:
		inHead := map[string]bool{}
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			inHead[gitops.Entry{Group: gvk.Group, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}.Key()] = true
		}
		for k, e := range inv.Entries {
			if inHead[k] {
				continue
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(e.GVK())
			u.SetNamespace(e.Namespace)
			u.SetName(e.Name)
			if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); apierrors.IsNotFound(err) {
				continue // already gone
			} else if err != nil {
				return nil, fmt.Errorf("read %s, which the head would prune: %w", e.ID(), err)
			}
			base = append(base, offline.Item{Object: clean(u)})
		}
	}
	r := diff.Compare(base, head, nil, budgetFunc(b))
	for _, x := range refused {
		r.MarkRefused(x.obj, x.file, x.msg)
	}
	return r, nil
}

// clean drops what the server sets, so only configuration is compared.
func clean(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	for _, f := range [][]string{{"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "creationTimestamp"}, {"metadata", "generation"}, {"status"}} {
		unstructured.RemoveNestedField(u.Object, f...)
	}
	return u
}
