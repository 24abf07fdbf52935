// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/internal/version"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

// offlineFlags are the flags render, validate and diff share.
type offlineFlags struct {
	path              string
	allowedKinds      []string
	allowedNamespaces []string
	agentImage        string
	gpuNodeOS         []string
	// config is `trainops run`'s configuration file, whose workload
	// policy settings the checks enforce.
	config string
	// crdDirs hold other projects' CRDs to validate their kinds with;
	// cluster adds the cluster's (kubeconfig's).
	crdDirs    []string
	cluster    bool
	kubeconfig string
	// loadRestrictor is kustomize's (empty: --config's render.loadRestrictor).
	loadRestrictor string
}

func (f *offlineFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "path", ".", "folder of the repository to render")
	cmd.Flags().StringSliceVar(&f.allowedKinds, "allowed-kinds", config.KindNames(check.DefaultAllowedKinds), "kinds the repository may hold")
	cmd.Flags().StringSliceVar(&f.allowedNamespaces, "allowed-namespaces", nil, "namespaces the repository may put objects in (empty: any)")
	cmd.Flags().StringVar(&f.agentImage, "agent-image", config.DefaultControllers(version.Version).AgentImage, "image SREAgents run when they name none (for --expand)")
	cmd.Flags().StringVar(&f.config, "config", "", "trainops run's configuration file (YAML): its workload policy (podSecurityLevel, the allow* settings, refuseSecretRefs, allowedPriorityClasses, allowedImageRegistries), and TRAINOPS_* variables of the same keys, are enforced as the sync enforces them")
	cmd.Flags().StringSliceVar(&f.crdDirs, "crds", nil, "folders of other projects' CRDs (Kueue's, the Prometheus Operator's): objects of their kinds are validated against them as trainops's own are, instead of refused as unknown")
	cmd.Flags().StringVar(&f.loadRestrictor, "load-restrictor", "", "kustomize's load restrictor, as the sync's render.loadRestrictor (default that of --config, else LoadRestrictionsRootOnly): LoadRestrictionsNone lets a kustomization read files outside its folder, inside the repository")
	cmd.Flags().StringSliceVar(&f.gpuNodeOS, "gpu-node-os", []string{builder.OfflineGPUNodes.OS[0].String()}, "operating systems of the GPU nodes, as ID=VERSION_ID of their /etc/os-release (NFD's system-os_release labels): a ClusterPolicy gets a driver DaemonSet for each (for --expand)")
}

// oneShotGCPercent is the collector's setting for render, validate and
// diff: a process that renders a repository once and exits collects less
// often, and is faster for it (see docs/design.md), for a larger peak.
// GOGC, when set, decides.
const oneShotGCPercent = 300

func (f *offlineFlags) loader() (*offline.Loader, error) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(oneShotGCPercent)
	}
	kinds, err := config.ParseKinds(f.allowedKinds)
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: err.Error()}
	}
	var nodes builder.GPUNodes
	for _, s := range f.gpuNodeOS {
		o, err := builder.ParseNodeOS(s)
		if err != nil {
			return nil, &exitError{code: ExitUsage, msg: "--gpu-node-os: " + err.Error()}
		}
		if !slices.Contains(nodes.OS, o) {
			nodes.OS = append(nodes.OS, o)
		}
	}
	cfg, err := f.runConfig()
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: err.Error()}
	}
	restrictor := cmp.Or(f.loadRestrictor, cfg.Render.LoadRestrictor)
	if err := config.CheckLoadRestrictor(restrictor); err != nil {
		return nil, &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
	}
	crds, err := f.crds()
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
	}
	decryptKinds, err := config.DecryptKinds(cfg.Decryption.Kinds)
	if err != nil {
		return nil, &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
	}
	return offline.NewLoader(offline.Options{AllowedKinds: kinds, AllowedNamespaces: f.allowedNamespaces, Builder: builder.Options{AgentImage: f.agentImage}, GPUNodes: nodes, Workload: workload.Of(cfg.Sync), CRDs: crds,
		Render: render.Limits{LoadRestrictionsNone: restrictor == config.LoadRestrictionsNone}, DecryptKinds: decryptKinds})
}

// bindCluster adds --cluster and --kubeconfig, for the CRDs of a cluster.
func (f *offlineFlags) bindCluster(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.cluster, "cluster", false, "also validate other projects' kinds against the CRDs the cluster serves (read-only: lists CustomResourceDefinitions)")
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --cluster; in-cluster or $KUBECONFIG when empty")
}

// crds are the CRDs of --crds and, with --cluster, of the cluster.
func (f *offlineFlags) crds() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, dir := range f.crdDirs {
		crds, err := crdschema.ReadCRDs(dir)
		if err != nil {
			return nil, fmt.Errorf("--crds: %w", err)
		}
		out = append(out, crds...)
	}
	if !f.cluster {
		return out, nil
	}
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: crdScheme})
	if err != nil {
		return nil, err
	}
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(context.Background(), &list); err != nil {
		return nil, fmt.Errorf("list the cluster's CRDs: %w", err)
	}
	for i := range list.Items {
		if !dirCRD(out, list.Items[i].Name) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// crdScheme reads CustomResourceDefinitions.
var crdScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// dirCRD reports whether crds has one named name: a folder's CRD is
// preferred to the cluster's, as the change under review may bring it.
func dirCRD(crds []*apiextensionsv1.CustomResourceDefinition, name string) bool {
	return slices.ContainsFunc(crds, func(c *apiextensionsv1.CustomResourceDefinition) bool { return c.Name == name })
}

// runConfig is `trainops run`'s configuration with the settings of
// --config and the environment: its workload policy and render settings
// give the same answer offline as the sync gives.
func (f *offlineFlags) runConfig() (config.Run, error) {
	s := newSettings(&cobra.Command{}, runSettings())
	s.file = f.config
	return loadRunConfig(s)
}

func newRenderCommand() *cobra.Command {
	var f offlineFlags
	var expand, all bool
	cmd := &cobra.Command{
		Use:   "render [DIR|FILE]",
		Short: "Print the objects a training-config repository renders to (offline)",
		Long: `Render prints the objects DIR (default .) renders to with kustomize, as
multi-document YAML in a stable order, each headed by the file it came from.
DIR is read as part of the repository it is in, as validate reads it. A FILE
is read alone. A folder with no kustomization.yaml of its own but
kustomizations below it renders each of those (each document headed by its
root too), as validate reads it; --all renders every kustomization root
under DIR.
With --expand it also prints every child the reconcilers would create for
each PyJob, SREAgent and ClusterPolicy, from the same builders they use.
Invalid input is reported as validate reports it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, ts, err := f.open(args, all)
			if err != nil {
				return err
			}
			for _, t := range ts {
				objs, err := l.Load(t.root, t.path)
				if err != nil {
					return invalid(labelled(t.label, err))
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
				if err := writeItems(cmd.OutOrStdout(), items, t.label); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f.bind(cmd)
	f.bindCluster(cmd)
	cmd.Flags().BoolVar(&expand, "expand", false, "also print the children the reconcilers would create")
	cmd.Flags().BoolVar(&all, "all", false, "render every kustomization root under DIR")
	return cmd
}

// labelled prefixes an invalid root's problems with its label.
func labelled(label string, err error) error {
	var ie *offline.InvalidError
	if label == "" || !errors.As(err, &ie) {
		return err
	}
	return &exitError{code: ExitChanges, msg: label + ": " + ie.Error()}
}

// invalid turns an invalid repository into exit code 1 with its problems.
func invalid(err error) error {
	var ie *offline.InvalidError
	if errors.As(err, &ie) {
		return &exitError{code: ExitChanges, msg: ie.Error()}
	}
	return err
}

// writeItems prints items as YAML documents headed by their source (and
// their kustomization root, when not the only one).
func writeItems(w io.Writer, items []offline.Item, root string) error {
	var buf bytes.Buffer
	for _, it := range items {
		buf.WriteString("---\n")
		if root != "" {
			fmt.Fprintf(&buf, "# Root: %s\n", root)
		}
		fmt.Fprintf(&buf, "# Source: %s\n", it.File)
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
	var all bool
	cmd := &cobra.Command{
		Use:   "validate [DIR|FILE]",
		Short: "Check a training-config repository offline, as the API server would",
		Long: `Validate renders DIR (default .) and checks every object with no cluster:
kind on the allowed list, namespace present for namespaced kinds, no
duplicates, and trainops's kinds against their CRDs' structural schemas,
defaults and CEL rules, with the API server's own validation code. Each
error names the file, the object and the field. Fields that are valid but
will not do what they seem to (a PyJob's outputPath with no storage) are
warned about on stderr.

DIR is read as part of the repository it is in (the Git work tree, else the
current folder), as kustomize build reads it: an overlay such as
examples/clusters/dev reaches its ../../base, and files are named from the
repository's root, as a sync names them. A FILE is checked alone. A folder
with no kustomization.yaml of its own but kustomizations below it is each of
those on its own (as Flux reads such a folder): examples/ is its base and
both overlays. --all checks every kustomization root under DIR, each on its
own and reported by name: run at the repository's root, the one command a
training-config repository's CI needs.

Exit status: 0 valid, 1 invalid, 2 usage or internal error.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, ts, err := f.open(args, all)
			if err != nil {
				return err
			}
			var failed []string
			for _, t := range ts {
				prefix := ""
				if t.label != "" {
					prefix = t.label + ": "
				}
				objs, err := l.Load(t.root, t.path)
				var ie *offline.InvalidError
				if errors.As(err, &ie) {
					failed = append(failed, prefix+ie.Error())
					continue
				}
				if err != nil {
					return err
				}
				counts := map[schema.GroupKind]int{}
				for _, o := range objs {
					counts[o.GroupVersionKind().GroupKind()]++
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%svalid: %d objects", prefix, len(objs))
				for _, gk := range sortedKinds(counts) {
					fmt.Fprintf(cmd.OutOrStdout(), ", %d %s", counts[gk], gk.Kind)
				}
				fmt.Fprintln(cmd.OutOrStdout())
				for _, w := range offline.Warnings(objs) {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s%s\n", prefix, w)
				}
			}
			if len(failed) > 0 {
				return &exitError{code: ExitChanges, msg: strings.Join(failed, "\n")}
			}
			return nil
		},
	}
	f.bind(cmd)
	f.bindCluster(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "check every kustomization root under DIR, each on its own")
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
