// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kustypes "sigs.k8s.io/kustomize/api/types"
)

// TestBuildsRunTogether: builds of several trees run at once, none
// waiting for another, while one of them patches a Deployment and so fills
// kyaml's OpenAPI data (make test runs it with the race detector too).
// Each build's Reuse waits, once, until every build is inside one: builds
// that ran one at a time would never all be.
func TestBuildsRunTogether(t *testing.T) {
	const n = 6
	root := t.TempDir()
	var inside atomic.Int32
	var alone atomic.Bool // a build waited for the others in vain
	all := make(chan struct{})
	var arrive sync.Once
	var wg sync.WaitGroup
	outs := make([][]Output, n)
	errs := make([]error, n)
	for i := range n {
		var once sync.Once
		reuse := func(string, string) ([]string, bool) {
			once.Do(func() {
				if inside.Add(1) == n {
					arrive.Do(func() { close(all) })
				}
				select {
				case <-all:
				case <-time.After(10 * time.Second):
					alone.Store(true)
				}
			})
			return nil, false
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = Build(treeInput(root, i, reuse))
		}()
	}
	wg.Wait()
	if alone.Load() {
		t.Fatalf("a build waited 10 s for the other %d to be running with it: builds ran one at a time", n-1)
	}
	for i := range n {
		if errs[i] != nil || len(outs[i]) != 1 {
			t.Fatalf("build %d: %d objects, %v", i, len(outs[i]), errs[i])
		}
		o := outs[i][0].Object
		if got, want := o.GetNamespace(), fmt.Sprintf("team-%d", i); got != want {
			t.Errorf("build %d: namespace %q, want %q", i, got, want)
		}
		if i == 0 {
			if r, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); r != 3 {
				t.Errorf("the Deployment's patch gave replicas %d, want 3", r)
			}
		}
	}
	if !schemaFilled.Load() {
		t.Error("the Deployment was patched without kyaml's OpenAPI data filled")
	}
}

// treeInput is the tree of build i: a Deployment patched with a strategic
// merge patch for i 0, a PyJob otherwise, each in namespace team-i.
func treeInput(root string, i int, reuse Reuse) Input {
	dir := filepath.Join(root, fmt.Sprint(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		panic(err)
	}
	doc := fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: job-%d\n", i)
	k := kustypes.Kustomization{Resources: []string{"a.yaml"}, Namespace: fmt.Sprintf("team-%d", i)}
	fields := map[string]any{"resources": nil, "namespace": nil}
	if i == 0 {
		doc = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n"
		k.Patches = []kustypes.Patch{{Patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"}}
		fields["patches"] = nil
	}
	return Input{Root: root, Dir: dir, MaxBytes: 1 << 20, Reuse: reuse,
		Kustomizations: map[string]*Kustomization{dir: {Fields: fields, K: k}},
		Resources:      map[string][]byte{filepath.Join(dir, "a.yaml"): []byte(doc)}}
}
