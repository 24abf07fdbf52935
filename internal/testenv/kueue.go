// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// KueueOptions say how Kueue runs.
type KueueOptions struct {
	// WaitForPodsReady, when set, turns on Kueue's all-or-nothing
	// admission: a workload whose pods are not all ready within it is
	// evicted and queued again.
	WaitForPodsReady time.Duration
}

// kueueIntegrations are the job frameworks Kueue manages here: PyJobs
// become batch/v1 Jobs.
var kueueIntegrations = []string{"batch/job"}

// kueueWebhookGroups are the API groups whose webhooks are kept from
// Kueue's webhook configuration: its own kinds and the integrations above.
// The others are served by no-op handlers a cluster without those
// frameworks does not need in every pod's path.
var kueueWebhookGroups = []string{"kueue.x-k8s.io", "batch"}

// KueueDir is the folder `make testcluster` builds Kueue into:
// $TRAINOPS_KUEUE_DIR, else bin/kueue/current.
func KueueDir() (string, error) {
	return builtDir("TRAINOPS_KUEUE_DIR", []string{"bin", "kueue", "current"}, []string{"kueue", "webhooks.yaml", "crds", "conversion"}, "Kueue's")
}

// StartKueue runs Kueue, built unmodified from its module, against the
// control plane: its CRDs installed from the module, its conversion and
// admission webhooks served on 127.0.0.1 with a certificate the API server
// trusts (the API server's own, for 127.0.0.1, signed by the cluster's CA).
// It returns once Kueue's webhooks answer.
func (e *Env) StartKueue(ctx context.Context, o KueueOptions) error {
	if e.pki == nil {
		return errors.New("no control plane to run Kueue against")
	}
	dir, err := KueueDir()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	health, err := FreeAddr()
	if err != nil {
		return err
	}
	caBundle, err := os.ReadFile(e.pki.CACert)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	crds, err := kueueCRDs(dir, base+"/convert", caBundle)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{CRDs: crds, MaxTime: time.Minute}); err != nil {
		return fmt.Errorf("install kueue's CRDs: %w", err)
	}
	work := filepath.Join(e.Dir, "kueue")
	certDir := filepath.Join(work, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	if err := copyFiles(certDir, map[string]string{e.pki.ServingCert: "tls.crt", e.pki.ServingKey: "tls.key"}); err != nil {
		return err
	}
	if err := copyFiles(filepath.Join(work, "visibility"), map[string]string{e.pki.VisibilityCert: "tls.crt", e.pki.VisibilityKey: "tls.key"}); err != nil {
		return err
	}
	visibility, err := freePort()
	if err != nil {
		return err
	}
	cfg := kueueConfig(port, visibility, health, certDir, o)
	cfgPath := filepath.Join(work, "config.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, cs, kueueNamespace); err != nil {
		return err
	}
	etc := filepath.Join(work, "etc")
	if err := os.MkdirAll(etc, 0o700); err != nil {
		return err
	}
	p, err := startProc("kueue", "unshare", []string{
		"--mount", "--propagation", "private", "--", "sh", "-c", kueueMetricsCerts, "kueue", etc, certDir, work,
		filepath.Join(dir, "kueue"),
		"--config=" + cfgPath,
		"--kubeconfig=" + e.Kubeconfig,
		"--zap-log-level=info",
	}, filepath.Join(e.Dir, "logs"))
	if err != nil {
		return err
	}
	e.procs = append(e.procs, p)
	if err := waitFor(p, "kueue", 90*time.Second, func() error { return httpOK("http://" + health + "/readyz") }); err != nil {
		return err
	}
	if err := e.installKueueWebhooks(ctx, cs, dir, base, caBundle); err != nil {
		return err
	}
	if err := installKueueVisibility(ctx, e.Config, cs, visibility, caBundle); err != nil {
		return err
	}
	// A dry-run ResourceFlavor passes Kueue's own mutating and validating
	// webhooks: they answer.
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": "testenv-probe"},
	}}
	flavors := dyn.Resource(schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"})
	return waitFor(p, "kueue's webhooks", 60*time.Second, func() error {
		_, err := flavors.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// kueueMetricsCerts runs Kueue ("$@" after the first three arguments), in
// the folder $3, where it finds its metrics certificate. Without its own
// certificate management Kueue reads that from /etc/kueue/metrics/certs, a
// path no setting moves (even with metrics off), so it runs in a mount
// namespace of its own whose /etc is an overlay (upper layer on a tmpfs at
// $1) holding the certificate from $2: nothing is written to this
// machine's /etc. Its visibility server's certificate is in $3/visibility
// (see hack/build-controlplane.sh).
const kueueMetricsCerts = `set -e
mount -t tmpfs tmpfs "$1"
mkdir "$1/upper" "$1/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
mkdir -p /etc/kueue/metrics/certs
cp "$2/tls.crt" "$2/tls.key" /etc/kueue/metrics/certs/
cd "$3"
shift 3
exec "$@"`

// kueueNamespace is where Kueue keeps its own objects.
const kueueNamespace = "kueue-system"

// kueueConfig is Kueue's Configuration: every listener on 127.0.0.1
// (webhooks on port, the visibility API on visibility), no leader
// election, certificates from certDir instead of its own.
func kueueConfig(port, visibility int, health, certDir string, o KueueOptions) []byte {
	cfg := map[string]any{
		"apiVersion":             "config.kueue.x-k8s.io/v1beta2",
		"kind":                   "Configuration",
		"namespace":              kueueNamespace,
		"health":                 map[string]any{"healthProbeBindAddress": health},
		"metrics":                map[string]any{"bindAddress": "0"},
		"webhook":                map[string]any{"port": port, "host": "127.0.0.1", "certDir": certDir},
		"leaderElection":         map[string]any{"leaderElect": false},
		"internalCertManagement": map[string]any{"enable": false},
		"integrations":           map[string]any{"frameworks": kueueIntegrations},
		"clientConnection":       map[string]any{"qps": 50, "burst": 100},
		"visibilityServer":       map[string]any{"bindAddress": "127.0.0.1", "bindPort": visibility},
	}
	if o.WaitForPodsReady > 0 {
		cfg["waitForPodsReady"] = map[string]any{
			"timeout":           o.WaitForPodsReady.String(),
			"blockAdmission":    false,
			"requeuingStrategy": map[string]any{"timestamp": "Eviction", "backoffBaseSeconds": 1, "backoffMaxSeconds": 5},
		}
	}
	b, _ := yaml.Marshal(cfg)
	return b
}

// kueueCRDs reads the module's CRDs and points the conversion webhook of
// those its kustomization converts at url.
func kueueCRDs(dir, url string, caBundle []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	converted := map[string]bool{}
	patches, err := filepath.Glob(filepath.Join(dir, "conversion", "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, p := range patches {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := readYAML(p, &crd); err != nil {
			return nil, err
		}
		converted[crd.Name] = true
	}
	files, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := readYAML(f, crd); err != nil {
			return nil, err
		}
		if converted[crd.Name] {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
					ConversionReviewVersions: []string{"v1"},
				},
			}
			delete(converted, crd.Name)
		}
		out = append(out, crd)
	}
	if len(converted) > 0 {
		return nil, fmt.Errorf("kueue converts CRDs that are not in %s: %v", filepath.Join(dir, "crds"), converted)
	}
	return out, nil
}

// installKueueWebhooks creates Kueue's webhook configurations, pointed at
// base, with the webhooks of kueueWebhookGroups.
func (e *Env) installKueueWebhooks(ctx context.Context, cs kubernetes.Interface, dir, base string, caBundle []byte) error {
	raw, err := os.ReadFile(filepath.Join(dir, "webhooks.yaml"))
	if err != nil {
		return err
	}
	kept := func(rules []admissionv1.RuleWithOperations) bool {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				if slices.Contains(kueueWebhookGroups, g) {
					return true
				}
			}
		}
		return false
	}
	client := func(c admissionv1.WebhookClientConfig) admissionv1.WebhookClientConfig {
		url := base + *c.Service.Path
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc unstructured.Unstructured
		if err := dec.Decode(&doc.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("kueue's webhooks.yaml: %w", err)
		}
		b, err := doc.MarshalJSON()
		if err != nil {
			return err
		}
		switch doc.GetKind() {
		case "MutatingWebhookConfiguration":
			var m admissionv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal(b, &m); err != nil {
				return err
			}
			m.ObjectMeta = metav1.ObjectMeta{Name: "kueue-mutating"}
			m.Webhooks = slices.DeleteFunc(m.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !kept(w.Rules) })
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig = client(m.Webhooks[i].ClientConfig)
			}
			_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &m, metav1.CreateOptions{})
		case "ValidatingWebhookConfiguration":
			var v admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(b, &v); err != nil {
				return err
			}
			v.ObjectMeta = metav1.ObjectMeta{Name: "kueue-validating"}
			v.Webhooks = slices.DeleteFunc(v.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !kept(w.Rules) })
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig = client(v.Webhooks[i].ClientConfig)
			}
			_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &v, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("kueue's webhooks.yaml: unexpected kind %q", doc.GetKind())
		}
		if err != nil {
			return fmt.Errorf("install kueue's %s: %w", strings.ToLower(doc.GetKind()), err)
		}
	}
}

// readYAML decodes the one YAML document in path into out.
func readYAML(path string, out any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
