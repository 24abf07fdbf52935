// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/version"
)

func newInstallCommand() *cobra.Command {
	var opts install.Options
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Print trainops's installation manifests for kubectl apply -f -",
		Long: `Install prints the CRDs, RBAC, configuration, leader-elected Deployment and
admission policy for PyJobs, from the manifests embedded in this binary
(what config/default builds with kustomize):

  trainops install --repo https://git.example.com/ml/training-config.git --path clusters/prod | kubectl apply -f -

Credentials are not part of it: create a Secret in the namespace and name it
in the trainops-config ConfigMap (repo.auth.secretRef).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Repo != "" {
				u, err := url.Parse(opts.Repo)
				if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "ssh") {
					return &exitError{code: ExitUsage, msg: fmt.Sprintf("Error: --repo %q is not an https://, http:// or ssh:// repository URL", gitsource.Redact(opts.Repo))}
				}
				if _, hasPassword := u.User.Password(); hasPassword {
					return &exitError{code: ExitUsage, msg: "Error: --repo carries a password: put credentials in a Secret named by repo.auth.secretRef"}
				}
			}
			out, err := install.Manifests(opts)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", out)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.Namespace, "namespace", "trainops-system", "namespace to install into")
	cmd.Flags().StringVar(&opts.Repo, "repo", "", "training-config repository to sync")
	cmd.Flags().StringVar(&opts.Branch, "branch", "", "branch to follow (default main)")
	cmd.Flags().StringVar(&opts.Path, "path", "", "folder of the repository to render")
	cmd.Flags().StringVar(&opts.Image, "image", install.ImageOf(version.Version), "image the Deployment runs (make image writes this build's)")
	return cmd
}
