// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/render"
)

// TestFastPathMatchesKrusty builds every case with the fast path and with
// krusty, and wants the same objects, in the same order, from the same
// files, or an error from both. Cases that use only what the fast path
// builds must take it.
func TestFastPathMatchesKrusty(t *testing.T) {
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name, root, path string
		fast             bool
	}
	cases := []tc{
		{"examples/base", examples, "base", true},
		{"examples/clusters/dev", examples, "clusters/dev", true},
		{"examples/clusters/prod", examples, "clusters/prod", true},
	}
	for _, l := range []benchrepo.Layout{benchrepo.Kustomization, benchrepo.Overlays} {
		dir := t.TempDir()
		if err := benchrepo.Write(dir, benchrepo.Generate(240, "b"), l); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{"bench " + string(l), dir, l.Path(), true})
		if l == benchrepo.Overlays {
			cases = append(cases, tc{"bench overlays dev", dir, "clusters/dev", true})
		}
	}
	// A namespace set below and a JSON patch above, on annotations that
	// are not strings in YAML: the patch's JSON round trip makes a: 1.0
	// "1" and b: ~ "null", as `kustomize build` does; the fast path gives
	// it to krusty (random trees from seed 6081 found it, when krusty ran
	// with origin tracking, which writes annotations back as strings
	// after every transformer: kustomize itself does not, without
	// buildMetadata).
	notStrings := tree(t, map[string]string{
		"kustomization.yaml":      "resources:\n- team\npatches:\n- target:\n    kind: ConfigMap\n  patch: |\n    - op: add\n      path: /data/patched\n      value: \"yes\"\n",
		"team/kustomization.yaml": "resources:\n- cm.yaml\n- other.yaml\nnamespace: ns-2\n",
		"team/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: o9\n  annotations:\n    a: 1.0\n    b: ~\n    c: 0x10\ndata:\n  k: v\n",
		"team/other.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  annotations:\n    a: \"1.0\"\ndata:\n  k: v\n",
	})
	cases = append(cases, tc{"annotations not strings, through a namespace and a JSON patch", notStrings, ".", false})
	// Random trees from fixed seeds, the same every run (6081 once found a
	// difference); RANDOM_TREES_SEED adds the trees of another seed.
	seeds := []uint64{1, 2, 3, 6081}
	if v, err := strconv.ParseUint(os.Getenv("RANDOM_TREES_SEED"), 10, 64); err == nil {
		seeds = append(seeds, v)
	}
	for _, seed := range seeds {
		t.Logf("random trees from seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 7))
		for i := range 15 {
			dir := t.TempDir()
			fast := randomTree(t, rng, dir)
			cases = append(cases, tc{fmt.Sprintf("seed %d, random %d", seed, i), dir, ".", fast})
		}
	}
	var tookFast, refused int
	for _, c := range cases {
		switch compareBuilds(t, c.name, c.root, c.path, c.fast) {
		case builtFast:
			tookFast++
		case refusedByKrusty:
			refused++
		}
	}
	t.Logf("%d cases: %d built by the fast path, %d refused by krusty", len(cases), tookFast, refused)
	if tookFast < 9 || refused == 0 {
		t.Errorf("the fast path built %d of %d cases, and krusty refused %d: the random trees no longer cover both", tookFast, len(cases), refused)
	}
}

// randomTree writes a random kustomization tree under dir and reports
// whether it uses only what the fast path builds.
func randomTree(t *testing.T, rng *rand.Rand, dir string) (fast bool) {
	g := &treeGen{t: t, rng: rng, kinds: map[string]bool{}}
	g.kustomization(dir, 0)
	// A Deployment refers to ConfigMaps, ServiceAccounts and claims by
	// name, a ClusterRole to ConfigMaps (kustomize's nameReference): the
	// fast path gives way to krusty, which rewrites such references.
	if g.kinds["Deployment"] && (g.kinds["ConfigMap"] || g.kinds["ServiceAccount"] || g.kinds["PersistentVolumeClaim"]) ||
		g.kinds["ClusterRole"] && g.kinds["ConfigMap"] {
		return false
	}
	// A JSON patch over annotations that are not strings in YAML gives
	// way to krusty, unless a namespace made them strings before.
	return !g.unsupported && !(g.jsonPatch && g.annotated)
}

type treeGen struct {
	t           *testing.T
	rng         *rand.Rand
	n           int
	kinds       map[string]bool
	names       []string // "Kind name" of every object written
	unsupported bool
	// annotated: an object has annotations; jsonPatch: a kustomization
	// has a JSON patch.
	annotated, jsonPatch bool
}

func (g *treeGen) write(p, s string) {
	g.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// object is a random document.
func (g *treeGen) object() string {
	g.n++
	name := fmt.Sprintf("o%d", g.n)
	if g.rng.IntN(30) == 0 && len(g.names) > 0 {
		// A duplicate: both builds must refuse it.
		kind, dup, _ := strings.Cut(g.names[g.rng.IntN(len(g.names))], " ")
		if kind == "PyJob" {
			name = dup
		}
	}
	ns := ""
	if g.rng.IntN(2) == 0 {
		ns = "  namespace: team-" + fmt.Sprint(g.rng.IntN(3)) + "\n"
	}
	labels := ""
	if g.rng.IntN(2) == 0 {
		labels = "  labels:\n    app: " + name + "\n"
	}
	if g.rng.IntN(3) == 0 {
		// Annotations that are not all strings in YAML: krusty writes
		// each back as a string.
		g.annotated = true
		labels += "  annotations:\n    a: " + g.pick(append([]string{""}, scalars...)) + "\n"
		if g.rng.IntN(2) == 0 {
			labels += "    b: " + g.pick(scalars) + "\n"
		}
	}
	kinds := []string{"PyJob", "PyJob", "PyJob", "SREAgent", "ConfigMap", "Namespace", "ServiceAccount", "Deployment",
		"Service", "PersistentVolumeClaim", "ClusterRole", "ClusterPolicy"}
	kind := kinds[g.rng.IntN(len(kinds))]
	g.kinds[kind] = true
	g.names = append(g.names, kind+" "+name)
	switch kind {
	case "PyJob":
		extra := g.pick(numbers)
		if g.rng.IntN(40) == 0 {
			// No JSON holds these: both builds refuse them.
			extra = g.pick([]string{".inf", ".nan"})
		}
		return fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: %s\n%s%sspec:\n  image: pytorch/pytorch:2.0\n  command: [\"torchrun\", \"train.py\"]\n  gpu: %d\n  extra: [%s, %s]\n", name, ns, labels, 1+g.rng.IntN(4), extra, g.pick(scalars))
	case "SREAgent":
		return fmt.Sprintf("apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: %s\n%s%sspec:\n  autoRepair: true\n", name, ns, labels)
	case "ConfigMap":
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n%s%sdata:\n  k: \"v\"\n  n: \"1.50\"\n", name, ns, labels)
	case "Namespace":
		return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n%s", name, labels)
	case "ServiceAccount":
		return fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: %s\n%s%s", name, ns, labels)
	case "Service":
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n%s%sspec:\n  clusterIP: None\n  selector:\n    app: %s\n  ports:\n  - port: 29500\n", name, ns, labels, name)
	case "PersistentVolumeClaim":
		return fmt.Sprintf("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: %s\n%s%sspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 10Gi\n", name, ns, labels)
	case "ClusterRole":
		// Cluster-scoped: no namespace, whatever the kustomization says.
		return fmt.Sprintf("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: %s\n%srules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n", name, labels)
	case "ClusterPolicy":
		// Cluster-scoped, of a kind kustomize's own schema does not know.
		return fmt.Sprintf("apiVersion: gpu.trainops.dev/v1alpha1\nkind: ClusterPolicy\nmetadata:\n  name: %s\n%sspec:\n  driver:\n    version: \"580.82.07\"\n", name, labels)
	default:
		return fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: %s\n%s%sspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: %s\n  template:\n    metadata:\n      labels:\n        app: %s\n    spec:\n      serviceAccountName: sa\n      containers:\n      - name: c\n        image: busybox\n        envFrom:\n        - configMapRef:\n            name: cm\n", name, ns, labels, name, name)
	}
}

// numbers are YAML numbers whose JSON differs from their text, and
// scalars YAML values that may or may not be strings.
var (
	numbers = []string{"1", "-7", "1.0", "1.5", "-0.0", "2.5e3", "1e21", "1e20", "1e-7", "0.000001", "12345678901234567890", "9223372036854775807", "0x1F", "0o17", "1_000", "0"}
	scalars = []string{"x", "1", "true", "yes", "on", "1.0", "~", "null", "'7'", "\"q\"", "0x10", "2024-01-01", "2024-01-01T10:00:00.5+02:00", "1e3"}
)

func (g *treeGen) pick(from []string) string { return from[g.rng.IntN(len(from))] }

// kustomization writes a random kustomization in dir, with files and, at
// depth below 2, sub-folders.
func (g *treeGen) kustomization(dir string, depth int) {
	var res []string
	for i := range 1 + g.rng.IntN(4) {
		var docs []string
		for range 1 + g.rng.IntN(3) {
			docs = append(docs, g.object())
		}
		f := fmt.Sprintf("f%d-%d.yaml", depth, i)
		g.write(filepath.Join(dir, f), strings.Join(docs, "---\n"))
		res = append(res, f)
	}
	if depth < 2 {
		for i := range g.rng.IntN(3) {
			sub := fmt.Sprintf("sub%d", i)
			g.kustomization(filepath.Join(dir, sub), depth+1)
			res = append(res, sub)
		}
	}
	g.rng.Shuffle(len(res), func(i, j int) { res[i], res[j] = res[j], res[i] })
	var k strings.Builder
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, r := range res {
		fmt.Fprintf(&k, "- %s\n", r)
	}
	if g.rng.IntN(3) == 0 {
		fmt.Fprintf(&k, "namespace: ns-%d\n", g.rng.IntN(3))
	}
	if g.rng.IntN(3) == 0 {
		fmt.Fprintf(&k, "commonLabels:\n  tier: t%d\n  level: %q\n", g.rng.IntN(3), g.pick(scalars))
	}
	if g.rng.IntN(3) == 0 {
		fmt.Fprintf(&k, "labels:\n- pairs:\n    team: x%d\n  includeSelectors: %v\n  includeTemplates: %v\n", g.rng.IntN(3), g.rng.IntN(2) == 0, g.rng.IntN(2) == 0)
	}
	if g.rng.IntN(3) == 0 {
		fmt.Fprintf(&k, "commonAnnotations:\n  owner: o%d\n  note: %q\n", g.rng.IntN(3), g.pick(scalars))
	}
	if g.rng.IntN(2) == 0 {
		k.WriteString("patches:\n")
		switch g.rng.IntN(7) {
		case 5:
			// A field removed, one replaced, on every PyJob.
			k.WriteString("- target:\n    kind: PyJob\n  patch: |\n    apiVersion: training.trainops.dev/v1alpha1\n    kind: PyJob\n    metadata:\n      name: any\n      labels:\n        patched: \"true\"\n    spec:\n      extra: null\n      command: [\"python\"]\n")
		case 6:
			// A PyJob deleted by its patch.
			_, name, _ := strings.Cut(g.names[g.rng.IntN(len(g.names))], " ")
			fmt.Fprintf(&k, "- patch: |\n    apiVersion: training.trainops.dev/v1alpha1\n    kind: PyJob\n    metadata:\n      name: %s\n    $patch: delete\n", name)
		case 0, 3:
			k.WriteString("- target:\n    kind: PyJob\n  patch: |\n    apiVersion: training.trainops.dev/v1alpha1\n    kind: PyJob\n    metadata:\n      name: any\n    spec:\n      gpu: 8\n")
		case 1, 2:
			g.jsonPatch = true
			k.WriteString("- target:\n    kind: ConfigMap\n  patch: |\n    - op: add\n      path: /data/patched\n      value: \"yes\"\n")
		default:
			// By the patch's own name: krusty refuses it when it matches
			// nothing, and so must the fast path.
			_, name, _ := strings.Cut(g.names[g.rng.IntN(len(g.names))], " ")
			fmt.Fprintf(&k, "- patch: |\n    apiVersion: training.trainops.dev/v1alpha1\n    kind: PyJob\n    metadata:\n      name: %s\n    spec:\n      workers: 3\n", name)
		}
	}
	if g.rng.IntN(12) == 0 {
		g.unsupported = true
		k.WriteString("namePrefix: p-\n")
	}
	g.write(filepath.Join(dir, "kustomization.yaml"), k.String())
}

// What compareBuilds found.
const (
	builtFast = iota
	refusedByKrusty
	gaveWay
)

// compareBuilds builds path under root with the fast path and with krusty
// and fails t where they differ: an object, its order or its file, or one
// refusing what the other builds. fast says the tree uses only what the
// fast path builds, so it must not give way.
func compareBuilds(t *testing.T, name, root, path string, fast bool) int {
	t.Helper()
	objs, fastErr, krusty, err := render.BuildBoth(root, path)
	if err != nil {
		if fastErr == nil {
			t.Errorf("%s: krusty fails (%v) but the fast path built %d objects", name, err, len(objs))
		}
		return refusedByKrusty
	}
	sameAsKustomizeBuild(t, name, root, path, krusty)
	if fastErr != nil {
		if fast && errors.Is(fastErr, render.ErrNotFast) {
			t.Errorf("%s: the fast path gave way: %v", name, fastErr)
		} else if fast {
			t.Errorf("%s: the fast path failed where krusty did not: %v", name, fastErr)
		}
		return gaveWay
	}
	if len(objs) != len(krusty) {
		t.Errorf("%s: fast path %d objects, krusty %d", name, len(objs), len(krusty))
		return builtFast
	}
	for i := range krusty {
		a, _ := json.Marshal(objs[i].Object)
		b, _ := json.Marshal(krusty[i].Object)
		if string(a) != string(b) || objs[i].File != krusty[i].File {
			t.Errorf("%s: object %d:\nfast path %s %s\nkrusty    %s %s", name, i, objs[i].File, a, krusty[i].File, b)
			break
		}
	}
	return builtFast
}

// sameAsKustomizeBuild checks that trainops's krusty build of path made
// objs as `kustomize build` does: krusty with its default options, run
// here, without trainops's confinement or its source annotations.
func sameAsKustomizeBuild(t *testing.T, name, root, path string, objs []render.Object) {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, path))
	if err != nil {
		t.Errorf("%s: kustomize build fails (%v) but trainops built %d objects", name, err, len(objs))
		return
	}
	want := m.Resources()
	if len(want) != len(objs) {
		t.Errorf("%s: trainops's krusty build %d objects, kustomize build %d", name, len(objs), len(want))
		return
	}
	for i, r := range want {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// Decoded as trainops decodes krusty's objects: numbers as the API
		// machinery holds them.
		w := &unstructured.Unstructured{}
		if err := w.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		wj, _ := json.Marshal(w.Object)
		a, _ := json.Marshal(objs[i].Object)
		if string(a) != string(wj) {
			t.Errorf("%s: object %d:\ntrainops       %s\nkustomize build %s", name, i, a, wj)
			return
		}
	}
}

// FuzzFastPathMatchesKrusty: the random tree of any seed builds alike with
// the fast path and with krusty (see compareBuilds).
func FuzzFastPathMatchesKrusty(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 6081} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		// Not t.TempDir: a fuzz input's name holds '#', which kustomize
		// refuses in a path.
		dir, err := os.MkdirTemp("", "tree-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		fast := randomTree(t, rand.New(rand.NewPCG(seed, 7)), dir)
		compareBuilds(t, fmt.Sprintf("seed %d", seed), dir, ".", fast)
	})
}

// TestNoFastPathBuildsInTheChild: with NoFastPath a kustomization the fast
// path builds is built by krusty in the child process instead, which the
// child's time bound shows: past a bound no build can meet, the child is
// stopped, where the fast path, in process, is not bounded by it.
func TestNoFastPathBuildsInTheChild(t *testing.T) {
	dir := tree(t, map[string]string{
		"kustomization.yaml": "resources:\n- cm.yaml\nnamespace: team\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
	})
	l := render.Limits{Timeout: time.Nanosecond}
	if objs, err := render.RenderContext(context.Background(), dir, ".", l); err != nil || len(objs) != 1 {
		t.Fatalf("fast path: %d objects, %v", len(objs), err)
	}
	l.NoFastPath = true
	objs, err := render.RenderContext(context.Background(), dir, ".", l)
	if err == nil || !strings.Contains(err.Error(), "render.timeout") && !strings.Contains(err.Error(), "cannot start the render") {
		t.Fatalf("without the fast path: %d objects, %v; want the child stopped by its time bound", len(objs), err)
	}
}
