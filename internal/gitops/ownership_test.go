// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
)

// plantStrangers makes n ConfigMaps in ns as another writer would, each
// wearing e's sync label, and returns their names.
func plantStrangers(t *testing.T, e *Engine, ns string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger-" + string(rune('a'+i)),
			Labels: map[string]string{LabelSync: e.SyncLabel()}}, Data: map[string]string{"team": "b"}}
		if err := e.Client.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
		names = append(names, cm.Name)
	}
	return names
}

// TestLabelledStrangersAreNeitherPrunedNorRecorded: objects another writer
// labels with a sync's label do not count as the sync's. Its next
// revision, pruning under a budget of one, syncs; prunes only what it
// applied; and its inventory never lists them.
func TestLabelledStrangersAreNeitherPrunedNorRecorded(t *testing.T) {
	e, _ := newEngine(t, "strangers")
	e.Opts.PruneBudget = config.Budget{Count: 1}
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-strangers")).
		write("a.yaml", pyjob("team-strangers", "a", "img", 1)).write("b.yaml", pyjob("team-strangers", "b", "img", 1))
	mustSync(t, r, e)
	strangers := plantStrangers(t, e, "team-strangers", 3)
	r.remove("b.yaml")
	res := mustSync(t, r, e)
	if strings.Join(res.Pruned, ",") != "PyJob team-strangers/b" {
		t.Errorf("pruned %v, want only b", res.Pruned)
	}
	wantStrangersLeftAlone(t, e, "team-strangers", strangers)
}

// wantStrangersLeftAlone fails unless each stranger in ns still exists and
// the inventory of e lists no ConfigMap (the strangers' kind) and records
// every entry with its UID.
func wantStrangersLeftAlone(t *testing.T, e *Engine, ns string, strangers []string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range strangers {
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("the labelled stranger %s: %v", name, err)
		}
	}
	inv, _, err := e.inventory().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range inv.Entries {
		if en.Kind == "ConfigMap" {
			t.Errorf("the inventory lists %s", en.ID())
		}
		if en.UID == "" {
			t.Errorf("the inventory records %s without its UID", en.ID())
		}
	}
}

// TestInventoriesWithStrangersAreMended: an inventory written before
// ownership was proven, listing labelled strangers (and its own objects
// without UIDs), prunes its own object and leaves the strangers, which
// leave the inventory.
func TestInventoriesWithStrangersAreMended(t *testing.T) {
	e, _ := newEngine(t, "mended")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-mended")).
		write("a.yaml", pyjob("team-mended", "a", "img", 1)).write("b.yaml", pyjob("team-mended", "b", "img", 1))
	mustSync(t, r, e)
	strangers := plantStrangers(t, e, "team-mended", 2)
	ctx := context.Background()
	inv, cm, err := e.inventory().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k, en := range inv.Entries {
		en.UID = ""
		inv.Entries[k] = en
	}
	for _, name := range strangers {
		en := Entry{Version: "v1", Kind: "ConfigMap", Namespace: "team-mended", Name: name}
		inv.Entries[en.Key()] = en
	}
	if _, err := e.inventory().Save(ctx, inv, cm); err != nil {
		t.Fatal(err)
	}
	r.remove("b.yaml")
	res := mustSync(t, r, e)
	if strings.Join(res.Pruned, ",") != "PyJob team-mended/b" {
		t.Errorf("pruned %v, want only b", res.Pruned)
	}
	wantStrangersLeftAlone(t, e, "team-mended", strangers)
}

// TestAnObjectWearingTheLabelIsNotTakenOver: a revision naming an object
// another writer made and labelled as the sync's is refused as a
// takeover, and the object is left as it was.
func TestAnObjectWearingTheLabelIsNotTakenOver(t *testing.T) {
	e, _ := newEngine(t, "wearer")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-wearer"))
	mustSync(t, r, e)
	names := plantStrangers(t, e, "team-wearer", 1)
	r.write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+names[0]+"\n  namespace: team-wearer\ndata:\n  team: a\n")
	wantSyncError(t, r, e, ReasonTakeoverRefused, "a label is not proof")
	cm := &corev1.ConfigMap{}
	if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: "team-wearer", Name: names[0]}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["team"] != "b" {
		t.Errorf("the stranger was written: %v", cm.Data)
	}
}

// TestAppliedButUnrecordedIsTakenBack: an object this sync applied (its
// label and trainops's own apply) but did not record, as after a process
// that stopped before saving its inventory, is applied again and recorded.
func TestAppliedButUnrecordedIsTakenBack(t *testing.T) {
	e, _ := newEngine(t, "unrecorded")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-unrecorded")).write("a.yaml", pyjob("team-unrecorded", "a", "img", 1))
	mustSync(t, r, e)
	ctx := context.Background()
	inv, cm, err := e.inventory().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k, en := range inv.Entries {
		if en.Name == "a" {
			delete(inv.Entries, k)
		}
	}
	inv.LastAppliedRevision = ""
	if _, err := e.inventory().Save(ctx, inv, cm); err != nil {
		t.Fatal(err)
	}
	mustSync(t, r, e)
	inv, _, err = e.inventory().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range inv.Entries {
		found = found || (en.Name == "a" && en.UID != "")
	}
	if !found {
		t.Error("the object applied again is not recorded with its UID")
	}
}

// TestStoppedBeforeTheInventoryIsSavedStillPrunes: a sync that applies a new
// object and stops before its inventory's save (here the save is refused,
// as a killed process never makes it) still knows the object, so a later
// revision without it prunes it instead of leaving it behind, unrecorded.
func TestStoppedBeforeTheInventoryIsSavedStillPrunes(t *testing.T) {
	e, _ := newEngine(t, "stopped")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-stopped")).write("a.yaml", pyjob("team-stopped", "a", "img", 1))
	mustSync(t, r, e)
	real := e.Client
	// Every save of the inventory once b exists is refused: the process
	// stopped right after applying it.
	e.Client = interceptor.NewClient(real.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if strings.HasSuffix(obj.GetName(), "-inventory") {
				if err := c.Get(ctx, client.ObjectKey{Namespace: "team-stopped", Name: "b"}, &trainingv1alpha1.PyJob{}); err == nil {
					return errors.New("stopped")
				}
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	r.write("b.yaml", pyjob("team-stopped", "b", "img", 1))
	if _, err := r.sync(e); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("the sync whose save is refused: %v", err)
	}
	e.Client = real
	if _, err := getPyJob(t, e, "team-stopped", "b"); err != nil {
		t.Fatalf("b was not applied: %v", err)
	}
	r.remove("b.yaml")
	res := mustSync(t, r, e)
	if strings.Join(res.Pruned, ",") != "PyJob team-stopped/b" {
		t.Errorf("pruned %v, want b", res.Pruned)
	}
	if pj, err := getPyJob(t, e, "team-stopped", "b"); !apierrors.IsNotFound(err) && pj.DeletionTimestamp == nil {
		t.Errorf("b was left behind (%v)", err)
	}
	inv, _, err := e.inventory().Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range inv.Entries {
		if en.Pending || en.UID == "" {
			t.Errorf("the inventory still holds %s pending or without its UID", en.ID())
		}
	}
}
