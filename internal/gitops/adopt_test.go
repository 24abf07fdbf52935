// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/check"
)

// outsideInventory drops the first save of the inventory (a POST to
// its namespace's ConfigMaps) from writes.
func outsideInventory(e *Engine, writes []string) []string {
	var out []string
	for _, w := range writes {
		if w != "POST /api/v1/namespaces/"+e.Opts.Namespace+"/configmaps" {
			out = append(out, w)
		}
	}
	return out
}

func configMapYAML(ns, name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  from: git\n", name, ns)
}

// TestExistingObjectsAreNeverTakenOver: a revision naming an object that
// exists and that this trainops did not create is refused whole, with
// nothing written, until someone who can write the object annotates it
// for adoption.
func TestExistingObjectsAreNeverTakenOver(t *testing.T) {
	ctx := context.Background()
	e, cnt := newEngine(t, "adopt")
	// An admin's namespace, with something in it.
	teamB := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b-adopt", Labels: map[string]string{"owner": "admin"}}}
	if err := e.Client.Create(ctx, teamB); err != nil {
		t.Fatal(err)
	}
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: teamB.Name, Name: "admin-settings"}, Data: map[string]string{"from": "admin"}}
	if err := e.Client.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	r := newRepo(t).
		write("ns.yaml", namespaceYAML("team-adopt")).
		write("job.yaml", pyjob("team-adopt", "job-a", "img", 1)).
		write("team-b.yaml", namespaceYAML(teamB.Name))
	cnt.takeWrites("adopt-inventory")
	se := wantSyncError(t, r, e, "TakeoverRefused", "team-b.yaml", "Namespace team-b-adopt already exists and trainops did not create it", AnnotationAdopt+"=true")
	if len(se.Problems) != 1 {
		t.Errorf("problems %v, want only the namespace", se.Problems)
	}
	if w := outsideInventory(e, cnt.takeWrites("adopt-inventory")); len(w) != 0 {
		t.Fatalf("a revision refused for a takeover wrote %v", w)
	}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "team-adopt"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused revision's new namespace exists (err %v)", err)
	}
	live := &corev1.Namespace{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: teamB.Name}, live); err != nil || live.Labels[LabelSync] != "" || len(live.ManagedFields) != 1 {
		t.Fatalf("the admin's namespace was touched: %v %v", err, live.ObjectMeta)
	}

	// Many objects of one kind in one namespace are looked up with a list:
	// the same refusal for the ConfigMap the admin made.
	r.remove("team-b.yaml")
	for i := range listAbove + 2 {
		r.write(fmt.Sprintf("cm-%d.yaml", i), configMapYAML(teamB.Name, fmt.Sprintf("cm-%d", i)))
	}
	r.write("cm-admin.yaml", configMapYAML(teamB.Name, held.Name))
	e.Opts.AllowedKinds = append(check.DefaultAllowedKinds, corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind())
	wantSyncError(t, r, e, "TakeoverRefused", "cm-admin.yaml", "ConfigMap team-b-adopt/admin-settings already exists")
	if w := outsideInventory(e, cnt.takeWrites("adopt-inventory")); len(w) != 0 {
		t.Fatalf("a revision refused for a takeover wrote %v", w)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil || held.Data["from"] != "admin" {
		t.Fatalf("the admin's ConfigMap changed: %v %v", err, held.Data)
	}

	// Annotated for adoption on the live object: applied, and pruned when
	// it leaves Git, like anything trainops created.
	held.Annotations = map[string]string{AnnotationAdopt: "true"}
	if err := e.Client.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	res := mustSync(t, r, e)
	if !strings.Contains(strings.Join(res.Applied, ","), "ConfigMap team-b-adopt/admin-settings") {
		t.Fatalf("applied %v, want the adopted ConfigMap", res.Applied)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil || held.Data["from"] != "git" || held.Labels[LabelSync] != e.SyncLabel() {
		t.Fatalf("adopted ConfigMap: %v %v %v", err, held.Labels, held.Data)
	}
	r.remove("cm-admin.yaml")
	if res := mustSync(t, r, e); strings.Join(res.Pruned, ",") != "ConfigMap team-b-adopt/admin-settings" {
		t.Fatalf("pruned %v, want the adopted ConfigMap", res.Pruned)
	}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: teamB.Name}, live); err != nil || live.DeletionTimestamp != nil {
		t.Fatalf("the admin's namespace: %v %v", err, live.DeletionTimestamp)
	}
}

// TestObjectsOfANewNamespaceAreNotLookedUp: nothing can exist in a
// namespace that does not, so a revision creating one looks up the
// namespace alone, not its objects one by one or by a list; the objects
// of a namespace that exists are still looked up, and one that is not
// this sync's is still refused.
func TestObjectsOfANewNamespaceAreNotLookedUp(t *testing.T) {
	ctx := context.Background()
	e, cnt := newEngine(t, "lookup")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-lookup"))
	for i := range listAbove + 2 {
		r.write(fmt.Sprintf("job-%d.yaml", i), pyjob("team-lookup", fmt.Sprintf("job-%d", i), "img", 1))
	}
	r.write("agent.yaml", "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: agent\n  namespace: team-lookup\nspec: {}\n")
	cnt.takeReads()
	res := mustSync(t, r, e)
	if len(res.Applied) != listAbove+4 {
		t.Fatalf("applied %v", res.Applied)
	}
	var inNamespace, namespaceGets []string
	for _, rd := range cnt.takeReads() {
		switch {
		case strings.Contains(rd, "/namespaces/team-lookup/") && !strings.Contains(rd, "labelSelector="):
			inNamespace = append(inNamespace, rd)
		case strings.HasPrefix(rd, "/api/v1/namespaces/team-lookup?"):
			namespaceGets = append(namespaceGets, rd)
		}
	}
	if len(inNamespace) != 0 {
		t.Errorf("the objects of a namespace the revision created were looked up: %v", inNamespace)
	}
	if len(namespaceGets) == 0 {
		t.Errorf("the new namespace was not looked up")
	}

	// The namespace exists now: a new object in it, made meanwhile by
	// someone else, is found and refused.
	other := &trainingv1alpha1.PyJob{}
	if err := yaml.Unmarshal([]byte(pyjob("team-lookup", "theirs", "img", 1)), other); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	r.write("theirs.yaml", pyjob("team-lookup", "theirs", "img", 1))
	cnt.takeWrites("lookup-inventory")
	wantSyncError(t, r, e, "TakeoverRefused", "theirs.yaml", "PyJob team-lookup/theirs already exists and trainops did not create it")
	if w := outsideInventory(e, cnt.takeWrites("lookup-inventory")); len(w) != 0 {
		t.Fatalf("a revision refused for a takeover wrote %v", w)
	}
}

// TestAnotherInstancesObjectIsNotTakenOver: objects of another trainops
// (another sync label) are refused, and say whose they are.
func TestAnotherInstancesObjectIsNotTakenOver(t *testing.T) {
	one, _ := newEngine(t, "owner-one")
	two, cnt := newEngine(t, "owner-two")
	mustSync(t, newRepo(t).write("ns.yaml", namespaceYAML("team-owned")).write("a.yaml", pyjob("team-owned", "mine", "img", 1)), one)
	r := newRepo(t).write("a.yaml", pyjob("team-owned", "mine", "img", 1))
	cnt.takeWrites("owner-two-inventory")
	wantSyncError(t, r, two, "TakeoverRefused", "PyJob team-owned/mine already exists and it belongs to the trainops of namespace owner-one-system")
	if w := outsideInventory(two, cnt.takeWrites("owner-two-inventory")); len(w) != 0 {
		t.Fatalf("wrote %v", w)
	}
	pj, err := getPyJob(t, one, "team-owned", "mine")
	if err != nil || pj.Labels[LabelSync] != "owner-one-system" {
		t.Fatalf("the first instance's PyJob: %v %v", err, pj.Labels)
	}
}
