package cli

import (
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/controller"
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
			restCfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			c, err := client.New(restCfg, client.Options{Scheme: controller.NewScheme()})
			if err != nil {
				return err
			}
			inv, err := gitops.ReadInventory(cmd.Context(), c, namespace, app.SyncName)
			if err != nil {
				return err
			}
			return inv.Describe(cmd.OutOrStdout(), time.Now())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster; in-cluster or $KUBECONFIG when empty")
	cmd.Flags().StringVar(&namespace, "namespace", defaultNamespace(), "trainops's namespace")
	return cmd
}
