// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

// TestRepositoryCannotEscalate pushes, one after another, what someone who
// can only push to the training-config repository might try in order to
// gain power over the cluster, to `trainops run` on the local control
// plane: write into the cluster's namespaces or trainops's own, take over
// existing objects, run a privileged image of their choice on every GPU
// node, or schedule a pod with the cluster's own priority. Each revision
// is refused whole with a message that says why: nothing of it is
// applied, the objects it aimed at are as they were, and the process goes
// on to apply the next good push.
func TestRepositoryCannotEscalate(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	// What exists before trainops: an admin's namespace with data in it,
	// the cluster's DNS configuration, a ServiceAccount bound to
	// cluster-admin.
	teamB := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
	adminData := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: teamB.Name, Name: "admin-data"}, Data: map[string]string{"k": "v"}}
	coredns := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}, Data: map[string]string{"Corefile": ".:53 { forward . /etc/resolv.conf }"}}
	adminBot := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "admin-bot"}}
	adminBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "admin-bot"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "admin-bot"}},
	}
	for _, o := range []client.Object{teamB, adminData, coredns, adminBot, adminBinding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// fingerprint says what of an object a write would change.
	fingerprint := func(o client.Object) string {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("rv=%s labels=%v annotations=%v owners=%v deleting=%v", o.GetResourceVersion(), o.GetLabels(), o.GetAnnotations(), o.GetOwnerReferences(), o.GetDeletionTimestamp() != nil)
	}
	before := map[string]string{}
	watched := []client.Object{teamB, adminData, coredns, adminBot}
	for _, o := range watched {
		before[objectKey(o)] = fingerprint(o)
	}

	repo, cfg := repoRun(t, "ml/attack.git", "trainops-attack")
	cfg.Sync.RefuseSecretRefs = true
	const ns = "attack-e2e"
	cm := func(ns, name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  pushed: \"true\"\n", name, ns)
	}
	repo.MustWrite(t, "cluster/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n")
	repo.MustWrite(t, "cluster/good.yaml", cm(ns, "good"))
	first, err := repo.CommitAndPush("first")
	if err != nil {
		t.Fatal(err)
	}
	inventory := inventoryOf(c, cfg)
	applied := func(rev string) func() error {
		return func() error {
			inv, err := inventory()
			if err != nil {
				return err
			}
			if inv.LastAppliedRevision != "main@sha1:"+rev {
				return fmt.Errorf("applied %q, last error %q", inv.LastAppliedRevision, inv.LastError)
			}
			return nil
		}
	}
	stop := running(t, cfg)
	defer stop()
	testenv.Eventually(t, 60*time.Second, applied(first))

	pyjob := func(ns, extra string) string {
		return "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: escalate\n  namespace: " + ns +
			"\nspec:\n  image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime\n  command: [\"python\", \"train.py\"]\n  gpu: 1\n" + extra
	}
	agent := func(ns, name string) string {
		return "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
			"\nspec:\n  monitorInterval: 15\n  image: evil.example/shell:latest\n"
	}
	clusterPolicy := func(extra string) string {
		return "apiVersion: gpu.trainops.dev/v1alpha1\nkind: ClusterPolicy\nmetadata:\n  name: escalate\nspec:\n  driver:\n    version: \"535.104.05\"\n" + extra
	}
	cases := []struct {
		name, file, content string
		want                []string
	}{
		{"SREAgent named after a cluster-admin ServiceAccount in kube-system", "agent.yaml", agent("kube-system", "admin-bot"),
			[]string{"cluster/agent.yaml", "SREAgent kube-system/admin-bot", "namespace kube-system is protected"}},
		{"SREAgent named trainops in trainops's namespace", "agent.yaml", agent(cfg.Namespace, "trainops"),
			[]string{"namespace trainops-attack is protected"}},
		{"ClusterPolicy running its DaemonSets in kube-system", "policy.yaml", clusterPolicy("  namespace: kube-system\n"),
			[]string{"ClusterPolicy escalate", "spec.namespace: namespace kube-system is protected"}},
		{"ClusterPolicy with a driver image of the author's choice", "policy.yaml", clusterPolicy("    repository: evil.example/driver\n"),
			[]string{"spec.driver.repository: evil.example/driver is not from an allowed registry (allowedImageRegistries: nvcr.io/nvidia)"}},
		{"a Namespace that already exists", "team-b.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-b\n",
			[]string{"cluster/team-b.yaml", "Namespace team-b already exists and trainops did not create it", gitops.AnnotationAdopt}},
		{"the cluster's DNS configuration", "coredns.yaml", cm("kube-system", "coredns"),
			[]string{"ConfigMap kube-system/coredns", "namespace kube-system is protected"}},
		{"trainops's own settings", "config.yaml", cm(cfg.Namespace, "trainops-config"),
			[]string{"ConfigMap trainops-attack/trainops-config", "namespace trainops-attack is protected"}},
		{"trainops's inventory", "inventory.yaml", cm(cfg.Namespace, gitops.DefaultName+"-inventory"),
			[]string{"namespace trainops-attack is protected"}},
		{"a PyJob in kube-system", "job.yaml", pyjob("kube-system", ""),
			[]string{"PyJob kube-system/escalate", "namespace kube-system is protected"}},
		{"a PyJob with the cluster's priority, every toleration and a Secret", "job.yaml", pyjob(ns,
			"  priorityClassName: system-node-critical\n  tolerations:\n  - operator: Exists\n  env:\n  - name: TOKEN\n    valueFrom:\n      secretKeyRef:\n        name: admin-token\n        key: token\n"),
			[]string{"spec.priorityClassName: system-node-critical", "spec.tolerations[0]: tolerating every taint", "spec.env[0].valueFrom.secretKeyRef"}},
		{"a PyJob whose pod template takes the node", "job.yaml", pyjob(ns,
			"  template:\n    spec:\n      hostNetwork: true\n      volumes:\n      - name: root\n        hostPath:\n          path: /\n"+
				"      containers:\n      - name: trainer\n        volumeMounts:\n        - name: root\n          mountPath: /host\n        securityContext:\n          privileged: true\n"),
			[]string{"PyJob attack-e2e/escalate", "spec.template.spec.hostNetwork", "spec.template.spec.volumes[name=root].hostPath",
				"spec.template.spec.containers[name=trainer].securityContext.privileged"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			canary := fmt.Sprintf("canary-%d", i)
			repo.MustWrite(t, "cluster/canary.yaml", cm(ns, canary))
			repo.MustWrite(t, "cluster/"+tc.file, tc.content)
			rev, err := repo.CommitAndPush(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 60*time.Second, func() error {
				inv, err := inventory()
				if err != nil {
					return err
				}
				if inv.LastAttemptedRevision != "main@sha1:"+rev {
					return fmt.Errorf("attempted %s", inv.LastAttemptedRevision)
				}
				for _, w := range tc.want {
					if !strings.Contains(inv.LastError, w) {
						return fmt.Errorf("last error %q lacks %q", inv.LastError, w)
					}
				}
				return nil
			})
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: canary}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap %s of the refused revision: %v", canary, err)
			}
			if inv, err := inventory(); err != nil || inv.LastAppliedRevision != "main@sha1:"+first {
				t.Errorf("applied %v (err %v), want the first revision still", inv.LastAppliedRevision, err)
			}
			for _, o := range watched {
				if now := fingerprint(o); now != before[objectKey(o)] {
					t.Errorf("%s changed: %s, was %s", objectKey(o), now, before[objectKey(o)])
				}
			}
			for _, probe := range []client.Object{
				&aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "admin-bot"}},
				&aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: "trainops"}},
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: "trainops-config"}},
			} {
				if err := c.Get(ctx, client.ObjectKeyFromObject(probe), probe); !apierrors.IsNotFound(err) {
					t.Errorf("%T %s exists (err %v)", probe, objectKey(probe), err)
				}
			}
			var stack appsv1.DaemonSetList
			if err := c.List(ctx, &stack, client.InNamespace("kube-system"), client.HasLabels{builder.LabelClusterPolicy}); err != nil || len(stack.Items) > 0 {
				t.Errorf("kube-system holds %d DaemonSets of a ClusterPolicy (err %v)", len(stack.Items), err)
			}
			repo.MustRemove(t, "cluster/"+tc.file)
		})
	}

	// A legitimate SREAgent whose ServiceAccount name an admin already
	// uses (bound to cluster-admin): applied, but the agent stalls and
	// the ServiceAccount stays the admin's.
	t.Run("an SREAgent whose child name is taken", func(t *testing.T) {
		taken := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.AgentChildPrefix + "ops"}}
		if err := c.Create(ctx, taken); err != nil {
			t.Fatal(err)
		}
		binding := adminBinding.DeepCopy()
		binding.ObjectMeta = metav1.ObjectMeta{Name: "taken-ops"}
		binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: taken.Name}}
		if err := c.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		takenBefore := fingerprint(taken)
		repo.MustRemove(t, "cluster/canary.yaml")
		repo.MustWrite(t, "cluster/agent.yaml", agent(ns, "ops"))
		rev, err := repo.CommitAndPush("agent")
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, applied(rev))
		a := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ops"}}
		testenv.Eventually(t, 60*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
				return err
			}
			if conditions.GetReason(a, "Stalled") != children.ReasonConflict {
				return fmt.Errorf("not stalled: %v", a.Status.Conditions)
			}
			return nil
		})
		if msg := conditions.GetMessage(a, "Stalled"); !strings.Contains(msg, "ServiceAccount "+ns+"/sreagent-ops exists and is not controlled by trainops") {
			t.Errorf("stalled: %s", msg)
		}
		if now := fingerprint(taken); now != takenBefore {
			t.Errorf("the taken ServiceAccount changed: %s, was %s", now, takenBefore)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: taken.Name}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Deployment runs as the taken ServiceAccount (err %v)", err)
		}
	})
	for _, o := range watched {
		if now := fingerprint(o); now != before[objectKey(o)] {
			t.Errorf("%s changed: %s, was %s", objectKey(o), now, before[objectKey(o)])
		}
	}
}

func objectKey(o client.Object) string {
	return fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName())
}
