package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/internal/version"
	"github.com/trainops/trainops/render"
)

// offlineFlags are the flags render, validate and diff share.
type offlineFlags struct {
	path              string
	allowedKinds      []string
	allowedNamespaces []string
	agentImage        string
}

func (f *offlineFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "path", ".", "folder of the repository to render")
	cmd.Flags().StringSliceVar(&f.allowedKinds, "allowed-kinds", config.KindNames(check.DefaultAllowedKinds), "kinds the repository may hold")
	cmd.Flags().StringSliceVar(&f.allowedNamespaces, "allowed-namespaces", nil, "namespaces the repository may put objects in (empty: any)")
	cmd.Flags().StringVar(&f.agentImage, "agent-image", config.DefaultControllers(version.Version).AgentImage, "image SREAgents run when they name none (for --expand)")
}

func (f *offlineFlags) loader() (*offline.Loader, error) {
	kinds, err := config.ParseKinds(f.allowedKinds)
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: err.Error()}
	}
	return offline.NewLoader(offline.Options{AllowedKinds: kinds, AllowedNamespaces: f.allowedNamespaces, Builder: builder.Options{AgentImage: f.agentImage}})
}

// load renders and validates the repository named by args (default .);
// invalid input becomes exit code 1 with its problems.
func (f *offlineFlags) load(args []string) (*offline.Loader, []render.Object, error) {
	l, err := f.loader()
	if err != nil {
		return nil, nil, err
	}
	objs, err := l.Load(dirArg(args), f.path)
	if err != nil {
		return nil, nil, invalid(err)
	}
	return l, objs, nil
}

func dirArg(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return "."
}

func newRenderCommand() *cobra.Command {
	var f offlineFlags
	var expand bool
	cmd := &cobra.Command{
		Use:   "render [DIR]",
		Short: "Print the objects a training-config repository renders to (offline)",
		Long: `Render prints the objects DIR (default .) renders to with kustomize, as
multi-document YAML in a stable order, each headed by the file it came from.
With --expand it also prints every child the reconcilers would create for
each PyJob, SREAgent and ClusterPolicy, from the same builders they use.
Invalid input is reported as validate reports it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, objs, err := f.load(args)
			if err != nil {
				return err
			}
			var items []offline.Item
			if expand {
				if items, err = l.Expand(objs); err != nil {
					return err
				}
			} else {
				for _, o := range objs {
					items = append(items, offline.Item{Object: o.Unstructured, File: o.File})
				}
			}
			return writeItems(cmd.OutOrStdout(), items)
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&expand, "expand", false, "also print the children the reconcilers would create")
	return cmd
}

// invalid turns an invalid repository into exit code 1 with its problems.
func invalid(err error) error {
	var ie *offline.InvalidError
	if errors.As(err, &ie) {
		return &exitError{code: ExitChanges, msg: ie.Error()}
	}
	return err
}

// writeItems prints items as YAML documents headed by their source.
func writeItems(w io.Writer, items []offline.Item) error {
	var buf bytes.Buffer
	for _, it := range items {
		fmt.Fprintf(&buf, "---\n# Source: %s\n", it.File)
		if it.Owner != "" {
			fmt.Fprintf(&buf, "# Owner: %s\n", it.Owner)
		}
		b, err := yaml.Marshal(it.Object.Object)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func newValidateCommand() *cobra.Command {
	var f offlineFlags
	cmd := &cobra.Command{
		Use:   "validate [DIR]",
		Short: "Check a training-config repository offline, as the API server would",
		Long: `Validate renders DIR (default .) and checks every object with no cluster:
kind on the allowed list, namespace present for namespaced kinds, no
duplicates, and trainops's kinds against their CRDs' structural schemas,
defaults and CEL rules, with the API server's own validation code. Each
error names the file, the object and the field.

Exit status: 0 valid, 1 invalid, 2 usage or internal error.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, objs, err := f.load(args)
			if err != nil {
				return err
			}
			counts := map[schema.GroupKind]int{}
			for _, o := range objs {
				counts[o.GroupVersionKind().GroupKind()]++
			}
			fmt.Fprintf(cmd.OutOrStdout(), "valid: %d objects", len(objs))
			for _, gk := range sortedKinds(counts) {
				fmt.Fprintf(cmd.OutOrStdout(), ", %d %s", counts[gk], gk.Kind)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			for _, w := range offline.Warnings(objs) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			return nil
		},
	}
	f.bind(cmd)
	return cmd
}

func sortedKinds(m map[schema.GroupKind]int) []schema.GroupKind {
	out := make([]schema.GroupKind, 0, len(m))
	for gk := range m {
		out = append(out, gk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
