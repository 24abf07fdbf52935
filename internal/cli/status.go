// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/textsafe"
)

func newStatusCommand() *cobra.Command {
	var kubeconfig, namespace, gitsync string
	var all bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what trainops last synced into the cluster",
		Long: `Status reads trainops's inventory from the cluster and prints the repository,
the last applied and last attempted revisions and when, the objects it owns
by kind, and the last error. With --all-namespaces it lists every GitSync
instead, and with --gitsync it describes one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			// Names, revisions and messages come from teams' repositories:
			// no escape sequence of theirs reaches the terminal.
			w := textsafe.NewWriter(cmd.OutOrStdout())
			switch {
			case all:
				list := &gitopsv1alpha1.GitSyncList{}
				if err := c.List(cmd.Context(), list); err != nil {
					return fmt.Errorf("list GitSyncs: %w", err)
				}
				return listGitSyncs(w, list.Items)
			case gitsync != "":
				gs := &gitopsv1alpha1.GitSync{}
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: namespace, Name: gitsync}, gs); err != nil {
					return fmt.Errorf("GitSync %s/%s: %w", namespace, gitsync, err)
				}
				return describeGitSync(w, gs)
			}
			inv, err := gitops.ReadInventory(cmd.Context(), c, namespace, gitops.DefaultName)
			if err != nil {
				return err
			}
			return describe(w, inv, time.Now())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster; in-cluster or $KUBECONFIG when empty")
	cmd.Flags().StringVar(&namespace, "namespace", defaultNamespace(), "trainops's namespace, or the GitSync's with --gitsync")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list every GitSync in the cluster")
	cmd.Flags().StringVar(&gitsync, "gitsync", "", "describe the GitSync of this name in --namespace")
	return cmd
}

// listGitSyncs writes one line per GitSync: where it is, whether it is
// ready, the revision it applied and the message of its Ready condition.
func listGitSyncs(w io.Writer, items []gitopsv1alpha1.GitSync) error {
	sort.Slice(items, func(i, j int) bool {
		return items[i].Namespace+"/"+items[i].Name < items[j].Namespace+"/"+items[j].Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tREVISION\tMESSAGE")
	for _, gs := range items {
		ready := "Unknown"
		msg := ""
		if c := conditions.Get(&gs, "Ready"); c != nil {
			ready, msg = string(c.Status), textsafe.Line(c.Message)
		}
		if gs.Spec.Suspend {
			ready += " (suspended)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", gs.Namespace, gs.Name, ready, orNone(gs.Status.LastAppliedRevision), msg)
	}
	return tw.Flush()
}

// describeGitSync writes one GitSync's state for a person.
func describeGitSync(w io.Writer, gs *gitopsv1alpha1.GitSync) error {
	r := gs.Spec.Repository
	fmt.Fprintf(w, "GitSync:            %s/%s\n", gs.Namespace, gs.Name)
	fmt.Fprintf(w, "Repository:         %s (%s, path %s)\n", gitsource.Redact(r.URL), gitsource.Ref{Branch: r.Branch, Tag: r.Tag, Commit: r.Commit}, r.Path)
	fmt.Fprintf(w, "Acts as:            %s\n", orNone(gs.Spec.ServiceAccountName))
	for _, t := range []string{"Ready", "Reconciling", "Stalled"} {
		if c := conditions.Get(gs, t); c != nil {
			fmt.Fprintf(w, "%-19s %s (%s) %s\n", t+":", c.Status, c.Reason, c.Message)
		}
	}
	fmt.Fprintf(w, "Applied revision:   %s\n", orNone(gs.Status.LastAppliedRevision))
	fmt.Fprintf(w, "Attempted revision: %s\n", orNone(gs.Status.LastAttemptedRevision))
	total := 0
	for _, k := range gs.Status.Inventory {
		total += int(k.Count)
	}
	fmt.Fprintf(w, "Objects:            %d\n", total)
	for _, k := range gs.Status.Inventory {
		fmt.Fprintf(w, "  %-22s %d\n", k.Kind, k.Count)
	}
	if len(gs.Status.LastError) > 0 {
		fmt.Fprintln(w, "Last error:")
		for _, p := range gs.Status.LastError {
			fmt.Fprintf(w, "  - %s\n", gitops.Problem{File: p.File, Object: p.Object, Message: p.Message})
		}
	}
	if len(gs.Status.Contested) > 0 {
		fmt.Fprintln(w, "Contested (another GitSync's repository holds them too; its sync is refused):")
		for _, c := range gs.Status.Contested {
			fmt.Fprintf(w, "  - %s, by GitSync %s\n", c.Object, c.ClaimedBy)
		}
	}
	return nil
}

// describe writes a sync's inventory for a person: repository, revisions
// and when, objects by kind, last error.
func describe(w io.Writer, inv *gitops.Inventory, now time.Time) error {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
	}
	state := "in sync"
	if inv.LastError != "" {
		state = "failing"
	}
	fmt.Fprintf(w, "Repository:         %s\n", inv.Repo)
	fmt.Fprintf(w, "State:              %s\n", state)
	fmt.Fprintf(w, "Applied revision:   %s\n", orNone(inv.LastAppliedRevision))
	fmt.Fprintf(w, "Applied at:         %s\n", ago(inv.LastAppliedTime))
	fmt.Fprintf(w, "Attempted revision: %s\n", orNone(inv.LastAttemptedRevision))
	fmt.Fprintf(w, "Attempted at:       %s\n", ago(inv.LastAttemptedTime))
	counts := inv.Counts()
	kinds := make([]string, 0, len(counts))
	total := 0
	for k, n := range counts {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "Objects:            %d\n", total)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-22s %d\n", k, counts[k])
	}
	if inv.LastError != "" {
		fmt.Fprintf(w, "Last error:\n  %s\n", inv.LastError)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
