// SPDX-License-Identifier: Apache-2.0

// Package install builds trainops's installation manifests (CRDs, RBAC,
// configuration and Deployment) from the kustomizations embedded in the
// binary, exactly as `kustomize build config/default` would, with optional
// namespace and repository settings.
package install

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"

	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/config"
)

// Options change the default installation.
type Options struct {
	// Namespace to install into (default trainops-system).
	Namespace string
	// Repo, Branch and Path fill the trainops-config settings.
	Repo, Branch, Path string
	// Image is the image the Deployment runs, in place of the manifests'
	// DefaultImage (ImageOf gives the one `make image` wrote for a build).
	Image string
}

// DefaultImage is the image config/manager names.
const DefaultImage = "ghcr.io/trainops/trainops:latest"

// ImageOf is the image `make image` writes for a build of version:
// ghcr.io/trainops/trainops:<version>, or DefaultImage for a build
// without one ("dev").
func ImageOf(version string) string {
	if version == "" || version == "dev" {
		return DefaultImage
	}
	return "ghcr.io/trainops/trainops:" + version
}

// Manifests renders the installation as multi-document YAML.
func Manifests(opts Options) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(config.Manifests, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(config.Manifests, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/config", p), b)
	})
	if err != nil {
		return nil, err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../default\n"
	if opts.Namespace != "" && opts.Namespace != "trainops-system" {
		k += "namespace: " + opts.Namespace + "\n"
		k += "patches:\n- target:\n    kind: Namespace\n    name: trainops-system\n  patch: |\n    - op: replace\n      path: /metadata/name\n      value: " + opts.Namespace + "\n"
		// The admission policy reads its settings where trainops publishes
		// them: a cluster-scoped binding's field the namespace leaves alone.
		k += "- target:\n    kind: ValidatingAdmissionPolicyBinding\n  patch: |\n    - op: replace\n      path: /spec/paramRef/namespace\n      value: " + opts.Namespace + "\n"
	}
	if opts.Image != "" && opts.Image != DefaultImage {
		i := strings.LastIndex(opts.Image, ":")
		if i < 0 || strings.Contains(opts.Image[i+1:], "/") {
			return nil, fmt.Errorf("image %q: want repository:tag", opts.Image)
		}
		name, tag := opts.Image[:i], opts.Image[i+1:]
		k += fmt.Sprintf("images:\n- name: %s\n  newName: %s\n  newTag: %q\n", strings.TrimSuffix(DefaultImage, ":latest"), name, tag)
	}
	if opts.Repo != "" {
		settings, err := settingsYAML(opts)
		if err != nil {
			return nil, err
		}
		cm := map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "trainops-config", "namespace": "trainops-system"},
			"data":     map[string]any{"config.yaml": settings},
		}
		b, err := yaml.Marshal(cm)
		if err != nil {
			return nil, err
		}
		if err := mem.WriteFile("/config/install/config-patch.yaml", b); err != nil {
			return nil, err
		}
		if !strings.Contains(k, "patches:") {
			k += "patches:\n"
		}
		k += "- path: config-patch.yaml\n"
	}
	if err := mem.WriteFile("/config/install/kustomization.yaml", []byte(k)); err != nil {
		return nil, err
	}
	res, err := fluxkustomize.Build(mem, "/config/install")
	if err != nil {
		return nil, fmt.Errorf("build the installation: %w", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(out), nil
}

// settingsYAML is trainops's config file for the given repository.
// QuickStartNamespaces are the namespaces a new installation lets its
// repository write into: the examples' team namespace and the GPU stack's.
// An empty list lets a repository write anywhere but the protected
// namespaces, so it is never the default: widen the list on purpose.
var QuickStartNamespaces = []string{"ml-team", "gpu-operator"}

func settingsYAML(opts Options) (string, error) {
	repo := map[string]any{"url": opts.Repo}
	if opts.Branch != "" {
		repo["branch"] = opts.Branch
	}
	if opts.Path != "" {
		repo["path"] = opts.Path
	}
	b, err := yaml.Marshal(map[string]any{
		"repo":              repo,
		"reconcileInterval": "10m",
		"prune":             true,
		"pruneBudget":       "50%",
		"allowedNamespaces": QuickStartNamespaces,
	})
	return string(b), err
}

// ClusterRole is the ClusterRole of that name in the default installation,
// as `trainops install` prints it.
func ClusterRole(name string) (*rbacv1.ClusterRole, error) {
	out, err := Manifests(Options{})
	if err != nil {
		return nil, err
	}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		role := &rbacv1.ClusterRole{}
		if err := yaml.Unmarshal(doc, role); err != nil {
			return nil, err
		}
		if role.Kind == "ClusterRole" && role.Name == name {
			return role, nil
		}
	}
	return nil, fmt.Errorf("the installation has no ClusterRole %s", name)
}
