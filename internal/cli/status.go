package cli

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/trainops/trainops/internal/gitops"
)

func newStatusCommand() *cobra.Command {
	var kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what trainops last synced into the cluster",
		Long: `Status reads trainops's inventory from the cluster and prints the repository,
the last applied and last attempted revisions and when, the objects it owns
by kind, and the last error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := kubeClient(kubeconfig)
			if err != nil {
				return err
			}
			inv, err := gitops.ReadInventory(cmd.Context(), c, namespace, gitops.DefaultName)
			if err != nil {
				return err
			}
			return describe(cmd.OutOrStdout(), inv, time.Now())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster; in-cluster or $KUBECONFIG when empty")
	cmd.Flags().StringVar(&namespace, "namespace", defaultNamespace(), "trainops's namespace")
	return cmd
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
