// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/benchrepo"
)

// TestSyncParsesOnlyTheChangedFiles: after a sync, the next revision's
// unchanged files come from the engine's memo, in every layout; what the
// sync applies and refuses is what a whole render would make it.
func TestSyncParsesOnlyTheChangedFiles(t *testing.T) {
	for _, l := range benchrepo.Layouts {
		t.Run(string(l), func(t *testing.T) {
			name := "reuse-" + string(l)
			e, cnt := newEngine(t, name)
			e.Opts.Path = l.Path()
			r := newRepo(t)
			objs := benchrepo.Generate(12, name)
			if err := benchrepo.Write(r.dir, objs, l); err != nil {
				t.Fatal(err)
			}
			first := mustSync(t, r, e)
			total := len(first.Applied) + first.Unchanged
			if first.Reused != 0 || total < 12 {
				t.Fatalf("first sync: %d applied, %d unchanged, %d reused", len(first.Applied), first.Unchanged, first.Reused)
			}

			// One PyJob's file gains a label: one object parsed and applied.
			last := objs[len(objs)-1]
			ns, job := last.U.GetNamespace(), last.U.GetName()
			file := l.FileOf(last)
			raw := benchrepo.PyJobYAML(ns, job)
			r.write(file, strings.Replace(raw, "metadata:\n", "metadata:\n  labels:\n    pushed: \"yes\"\n", 1))
			res := mustSync(t, r, e)
			if res.Reused != total-1 || len(res.Applied) != 1 {
				t.Fatalf("one file changed: reused %d of %d, applied %v", res.Reused, total, res.Applied)
			}
			pj, err := getPyJob(t, e, ns, job)
			if err != nil || pj.Labels["pushed"] != "yes" {
				t.Fatalf("%s/%s after the push: %v %v", ns, job, err, pj.Labels)
			}
			if l == benchrepo.Overlays && pj.Labels["cluster"] != "prod" {
				t.Fatalf("the overlay's labels are lost from the changed file's PyJob: %v", pj.Labels)
			}

			// A new PyJob, listed in its kustomization: only its file is
			// parsed.
			if err := benchrepo.Add(r.dir, benchrepo.NewPyJob(ns, "added"), l); err != nil {
				t.Fatal(err)
			}
			res = mustSync(t, r, e)
			if res.Reused != total || strings.Join(res.Applied, ",") != "PyJob "+ns+"/added" {
				t.Fatalf("one file added: reused %d of %d, applied %v", res.Reused, total, res.Applied)
			}
			total++

			// Someone edits a PyJob whose file did not change: the sync
			// parses that file again and puts the PyJob back.
			other := objs[len(objs)-2]
			ons := other.U.GetNamespace()
			opj, err := getPyJob(t, e, ons, other.U.GetName())
			if err != nil {
				t.Fatal(err)
			}
			opj.Spec.Suspend = ptr.To(true)
			if err := e.Client.Update(context.Background(), opj, client.FieldOwner("kubectl-edit")); err != nil {
				t.Fatal(err)
			}
			res = mustResync(t, r, e)
			if res.Reused != total || strings.Join(res.Applied, ",") != fmt.Sprintf("PyJob %s/%s", ons, other.U.GetName()) {
				t.Fatalf("drift: reused %d of %d, applied %v", res.Reused, total, res.Applied)
			}
			if opj, _ := getPyJob(t, e, ons, other.U.GetName()); ptr.Deref(opj.Spec.Suspend, false) {
				t.Fatal("the edit of an unchanged file's PyJob was not put back")
			}

			// A new file defines an unchanged file's PyJob again: the
			// revision is refused as a whole render refuses it, naming
			// both files, and nothing of it is applied.
			r.write(dupFile(l, file), strings.Replace(benchrepo.PyJobYAML(ons, other.U.GetName()), "suspend: false", "suspend: true", 1))
			if l != benchrepo.Plain {
				kust, entry := "kustomization.yaml", "dup.yaml"
				if l == benchrepo.Overlays {
					kust = strings.Join(strings.Split(file, "/")[:2], "/") + "/kustomization.yaml"
				}
				appendEntry(t, r, kust, entry)
			}
			cnt.takeWrites(InventoryName(name))
			_, err = r.sync(e)
			if err == nil || !strings.Contains(err.Error(), other.U.GetName()) {
				t.Fatalf("a PyJob defined twice: %v", err)
			}
			if l == benchrepo.Plain && !strings.Contains(err.Error(), "defined twice (also in dup.yaml)") {
				t.Fatalf("not the whole render's message: %v", err)
			}
			if w := cnt.takeWrites(InventoryName(name)); len(w) != 0 {
				t.Fatalf("a refused revision wrote %v", w)
			}
			if opj, _ := getPyJob(t, e, ons, other.U.GetName()); ptr.Deref(opj.Spec.Suspend, false) {
				t.Fatal("the refused revision's copy of the PyJob was applied")
			}
		})
	}
}

// dupFile is a new file beside file, listed by the same kustomization.
func dupFile(l benchrepo.Layout, file string) string {
	if l != benchrepo.Overlays {
		return "dup.yaml"
	}
	return strings.Join(strings.Split(file, "/")[:2], "/") + "/dup.yaml"
}

// appendEntry lists entry last in the kustomization at path.
func appendEntry(t *testing.T, r *repo, path, entry string) {
	t.Helper()
	raw := readRepoFile(t, r, path)
	r.write(path, raw+"- "+entry+"\n")
}

func readRepoFile(t *testing.T, r *repo, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
