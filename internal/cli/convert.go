// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/convert"
	"github.com/trainops/trainops/internal/crdschema"
)

func newConvertCommand() *cobra.Command {
	var (
		write             bool
		namespace, values string
		name              string
	)
	cmd := &cobra.Command{
		Use:   "convert [FILE|DIR]...",
		Short: "Rewrite the seed operators' resources and GPU Operator values into trainops's kinds",
		Long: `Convert rewrites the resources of the operators trainops replaces into
trainops's kinds, keeping comments and every other document as they are:

  PyJob (training.example.com/v1)   -> training.trainops.dev/v1alpha1
  SREAgent (aiops.local/v1)         -> aiops.trainops.dev/v1alpha1
  ClusterPolicy (nvidia.com/v1)     -> gpu.trainops.dev/v1alpha1, its
                                       NVIDIA GPU Operator ` + builder.GPUOperatorRelease + ` fields mapped

With --from-helm-values it turns the GPU Operator Helm chart's values.yaml
into a ClusterPolicy instead.

The result goes to stdout, each file headed by its name, or with -w back
into each file that changed. A file that is not Kubernetes YAML is
reported and the others are still converted (exit status 2). For every
object, stderr lists each field mapped, defaulted (the namespace: from
--namespace, or the namespace: of the kustomization.yaml beside the file)
or not mapped, with the reason.
Folders are read recursively (.yaml and .yml files).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			schemas, err := crdschema.Load()
			if err != nil {
				return err
			}
			if values != "" {
				return convertValues(cmd.OutOrStdout(), cmd.ErrOrStderr(), values, name, schemas)
			}
			if len(args) == 0 {
				return &exitError{code: ExitUsage, msg: "Error: name the files or folders to convert (or --from-helm-values FILE)"}
			}
			files, err := yamlFiles(args)
			if err != nil {
				return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
			}
			failed := 0
			for _, f := range files {
				if err := convertFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), f, convert.Options{Namespace: namespace, KustomizationNamespace: kustomizationNamespace(filepath.Dir(f)), Schemas: schemas}, write); err != nil {
					// One file that cannot be read stops no other.
					fmt.Fprintf(cmd.ErrOrStderr(), "Error: %v\n", err)
					failed++
				}
			}
			if failed > 0 {
				return &exitError{code: ExitUsage, msg: fmt.Sprintf("Error: %d of %d files could not be converted (above); the others were", failed, len(files))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&write, "write", "w", false, "write the result back into each file that changed")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace for PyJobs and SREAgents without one")
	cmd.Flags().StringVar(&values, "from-helm-values", "", "the GPU Operator Helm chart's values.yaml to turn into a ClusterPolicy")
	cmd.Flags().StringVar(&name, "name", "cluster-policy", "the ClusterPolicy's name (--from-helm-values)")
	return cmd
}

func convertFile(stdout, stderr io.Writer, path string, opts convert.Options, write bool) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, notes, changed, err := convert.Stream(in, opts)
	for _, n := range notes {
		fmt.Fprintf(stderr, "%s: %s\n", path, n)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	if write {
		return os.WriteFile(path, out, 0o644)
	}
	_, err = fmt.Fprintf(stdout, "---\n# Source: %s\n%s", path, bytes.TrimPrefix(out, []byte("---\n")))
	return err
}

func convertValues(stdout, stderr io.Writer, path, name string, schemas *crdschema.Schemas) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
	}
	out, notes, err := convert.HelmValues(in, name, schemas)
	for _, n := range notes {
		fmt.Fprintf(stderr, "%s: %s\n", path, n)
	}
	if err != nil {
		return &exitError{code: ExitUsage, msg: fmt.Sprintf("Error: %s: %v", path, err)}
	}
	_, err = stdout.Write(out)
	return err
}

// yamlFiles lists the YAML files args name: files as given, folders
// walked, in a stable order.
func yamlFiles(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != a {
				return filepath.SkipDir
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// kustomizationNamespace is the namespace: the kustomization in dir sets
// ("" when none does).
func kustomizationNamespace(dir string) string {
	for _, name := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var k struct {
			Namespace string `json:"namespace"`
		}
		if sigsyaml.Unmarshal(b, &k) == nil {
			return k.Namespace
		}
	}
	return ""
}
