// SPDX-License-Identifier: Apache-2.0

package sreagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

func createAgent(t *testing.T, ns, name string, autoRepair bool) *aiopsv1alpha1.SREAgent {
	t.Helper()
	a := &aiopsv1alpha1.SREAgent{}
	testenv.LoadCase(t, testenv.Seed("gpu-monitor-agent"), a)
	a.Namespace, a.Name, a.Spec.AutoRepair = ns, name, autoRepair
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(a), a); err != nil {
			return err
		}
		if !conditions.IsReady(a) {
			return fmt.Errorf("not ready: %+v", a.Status.Conditions)
		}
		return nil
	})
	return a
}

// asAgent is a clientset acting as the agent's ServiceAccount.
func asAgent(t *testing.T, ns, name string) *kubernetes.Clientset {
	t.Helper()
	user, groups := testenv.ServiceAccountUser(ns, name)
	cs, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestSREAgentDeploymentAvailable(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	a := createAgent(t, ns, "gpu-monitor-agent", true)
	if a.Status.ReadyReplicas != 1 || a.Status.ObservedGeneration != a.Generation {
		t.Errorf("status %+v", a.Status)
	}
	d := &appsv1.Deployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: builder.AgentChildName(a)}, d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if c.Image != testCfg.AgentImage || !strings.Contains(args, "agent") || !strings.Contains(args, "--monitor-interval=15s") || !strings.Contains(args, "--auto-repair=true") || !strings.Contains(args, "--gpu=true") {
		t.Errorf("agent container %s %q", c.Image, args)
	}
	if d.Spec.Template.Spec.ServiceAccountName != builder.AgentChildName(a) {
		t.Errorf("runs as %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, ok := testenv.EventReasons(t, k8s, ns, a.Name)["RolledOut"]; !ok {
			return fmt.Errorf("no RolledOut event")
		}
		return nil
	})

	// A spec change rolls the Deployment.
	gen := d.Generation
	testenv.Update(t, k8s, a, func(a *aiopsv1alpha1.SREAgent) { a.Spec.MonitorInterval = 30 })
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if d.Generation == gen || !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), "--monitor-interval=30s") {
			return fmt.Errorf("deployment not rolled: generation %d, args %v", d.Generation, d.Spec.Template.Spec.Containers[0].Args)
		}
		return nil
	})
}

func TestSREAgentIsConfinedToItsNamespace(t *testing.T) {
	ns, other := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	createAgent(t, ns, "repairer", true)
	createAgent(t, ns, "watcher", false)

	repairer := asAgent(t, ns, builder.AgentChildPrefix+"repairer")
	if _, err := repairer.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("agent cannot list pods in its own namespace: %v", err)
	}
	if _, err := repairer.CoreV1().Pods(other).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing pods in another namespace: err %v, want Forbidden", err)
	}
	if _, err := repairer.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets: err %v, want Forbidden", err)
	}
	if _, err := repairer.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing pods cluster-wide: err %v, want Forbidden", err)
	}
	// Deleting a missing pod tells authorisation apart: NotFound means the
	// delete was allowed.
	if err := repairer.CoreV1().Pods(ns).Delete(ctx, "no-such-pod", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("autoRepair agent deleting a pod: err %v, want NotFound (allowed)", err)
	}
	if err := asAgent(t, ns, builder.AgentChildPrefix+"watcher").CoreV1().Pods(ns).Delete(ctx, "no-such-pod", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("agent without autoRepair deleting a pod: err %v, want Forbidden", err)
	}
	// GPU node remediation is trainops's own: an agent, even with
	// autoRepair, can neither taint nor cordon a node, nor evict a pod of
	// another namespace, and nothing changed.
	node := env.GPUNodeNames()[0]
	before := testenv.Node(t, k8s, node)
	taint := []byte(`{"spec":{"unschedulable":true,"taints":[{"key":"trainops.dev/gpu-unhealthy","value":"xid-79","effect":"NoSchedule"}]}}`)
	if _, err := repairer.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, taint, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("agent tainting and cordoning node %s: err %v, want Forbidden", node, err)
	}
	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "victim"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.trainops.test/x:1"}}}}
	if err := k8s.Create(ctx, victim); err != nil {
		t.Fatal(err)
	}
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: victim.Name}}
	if err := repairer.PolicyV1().Evictions(other).Evict(ctx, eviction); !apierrors.IsForbidden(err) {
		t.Errorf("agent evicting a pod of another namespace: err %v, want Forbidden", err)
	}
	after := testenv.Node(t, k8s, node)
	if after.Spec.Unschedulable != before.Spec.Unschedulable || len(after.Spec.Taints) != len(before.Spec.Taints) {
		t.Errorf("node %s changed: unschedulable %v, taints %v", node, after.Spec.Unschedulable, after.Spec.Taints)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(victim), victim); err != nil || !victim.DeletionTimestamp.IsZero() {
		t.Errorf("the other namespace's pod: err %v, deleting %v", err, victim.DeletionTimestamp)
	}
	var crs rbacv1.ClusterRoleList
	if err := k8s.List(ctx, &crs, client.MatchingLabels{"app.kubernetes.io/managed-by": "trainops"}); err != nil {
		t.Fatal(err)
	}
	var crbs rbacv1.ClusterRoleBindingList
	if err := k8s.List(ctx, &crbs, client.MatchingLabels{"app.kubernetes.io/managed-by": "trainops"}); err != nil {
		t.Fatal(err)
	}
	if len(crs.Items)+len(crbs.Items) != 0 {
		t.Errorf("trainops created cluster-wide RBAC: %d ClusterRoles, %d ClusterRoleBindings", len(crs.Items), len(crbs.Items))
	}
}

func TestUnchangedSREAgentReconcileWritesNothing(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	a := createAgent(t, ns, "steady", false)
	objs := []client.Object{&aiopsv1alpha1.SREAgent{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}}
	versions := func() string {
		var out []string
		for i, o := range objs {
			name := builder.AgentChildName(a)
			if i == 0 {
				name = a.Name
			}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%T=%s", o, o.GetResourceVersion()))
		}
		return strings.Join(out, " ")
	}
	r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	var before string
	testenv.Eventually(t, 10*time.Second, func() error {
		before = versions()
		cached := &aiopsv1alpha1.SREAgent{}
		if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(a), cached); err != nil {
			return err
		}
		if !strings.Contains(before, "SREAgent="+cached.ResourceVersion+" ") {
			return fmt.Errorf("cache behind")
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)}); err != nil {
			t.Fatal(err)
		}
	}
	if after := versions(); after != before {
		t.Fatalf("reconciling an unchanged SREAgent wrote:\n%s\n%s", before, after)
	}
}

// TestSREAgentFirstStatusNamesTheDeployment reconciles a new SREAgent once
// with a cache that has not seen the Deployment yet, as after a large sync,
// and checks the status written already describes the Deployment (taken
// from the apply's answer) rather than saying it is being created, which
// would need a second write to correct.
func TestSREAgentFirstStatusNamesTheDeployment(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	a := createIsolatedAgent(ctx, t, ns, "first-status")
	live, err := client.NewWithWatch(env.Config, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	lagging := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*appsv1.Deployment); ok {
				return apierrors.NewNotFound(appsv1.Resource("deployments"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &Reconciler{Deps: children.Deps{Client: lagging, Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	msg := conditions.GetMessage(a, status.ReadyCondition)
	if !strings.HasPrefix(msg, "Deployment sreagent-first-status rolling out") {
		t.Errorf("first status %q, want the Deployment's rollout", msg)
	}
}

// createIsolatedAgent creates the seed's SREAgent as ns/name, labelled for
// a test's own manager (ctrltest.IsolatedLabel).
func createIsolatedAgent(ctx context.Context, t *testing.T, ns, name string) *aiopsv1alpha1.SREAgent {
	t.Helper()
	a := &aiopsv1alpha1.SREAgent{}
	testenv.LoadCase(t, testenv.Seed("gpu-monitor-agent"), a)
	a.Namespace, a.Name = ns, name
	a.Labels = map[string]string{ctrltest.IsolatedLabel: "true"}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestFailuresBackOffOrStall reconciles an SREAgent whose children the API
// server refuses, with a client that fails every apply: a transient error
// (500) is returned for controller-runtime's per-object backoff, not hidden
// behind a fixed requeue; a refusal (422) is terminal and the SREAgent
// Stalled. Neither counts as observing the new generation.
func TestFailuresBackOffOrStall(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	a := createIsolatedAgent(ctx, t, ns, "failing")
	// A new generation, which the failing reconciles must not claim.
	testenv.Update(t, k8s, a, func(a *aiopsv1alpha1.SREAgent) { a.Spec.MonitorInterval++ })
	live, err := client.NewWithWatch(env.Config, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		err      error
		terminal bool
	}{
		{"transient", apierrors.NewInternalError(fmt.Errorf("etcdserver: leader changed")), false},
		{"refused", apierrors.NewInvalid(appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind(), "x", nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failing := interceptor.NewClient(live, interceptor.Funcs{
				Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
					return tc.err
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if patch.Type() == types.ApplyPatchType {
						return tc.err
					}
					return c.Patch(ctx, obj, patch, opts...)
				},
			})
			r := &Reconciler{Deps: children.Deps{Client: failing, Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)})
			if err == nil || res.RequeueAfter != 0 {
				t.Fatalf("Reconcile returned %+v, %v: want the error, and no fixed requeue", res, err)
			}
			if got := errors.Is(err, reconcile.TerminalError(nil)); got != tc.terminal {
				t.Errorf("terminal: %v, want %v (%v)", got, tc.terminal, err)
			}
			got := &aiopsv1alpha1.SREAgent{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.ObservedGeneration == got.Generation {
				t.Errorf("observedGeneration %d claims a generation no reconcile applied", got.Status.ObservedGeneration)
			}
			if conditions.IsStalled(got) != tc.terminal || conditions.GetReason(got, status.ReadyCondition) != status.ReasonApplyFailed {
				t.Errorf("stalled %v (want %v), Ready reason %q", conditions.IsStalled(got), tc.terminal, conditions.GetReason(got, status.ReadyCondition))
			}
		})
	}
}

// TestAgentFollowsTheActiveExporter: a GPU-watching agent's Deployment
// reads the DCGM exporter of the active ClusterPolicy, and follows it when
// that ClusterPolicy's spec moves the exporter and when it goes.
func TestAgentFollowsTheActiveExporter(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	a := createAgent(t, ns, "follows-exporter", false)
	if !a.Spec.GPUEnable {
		t.Fatal("the seed's agent does not watch GPUs")
	}
	dcgmArg := func() (string, error) {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.AgentChildName(a)}, d); err != nil {
			return "", err
		}
		for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(arg, "--dcgm-url=") {
				return arg, nil
			}
		}
		return "", errors.New("no --dcgm-url argument")
	}
	wantArg := func(want string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, func() error {
			got, err := dcgmArg()
			if err == nil && got != want {
				err = fmt.Errorf("agent reads %q, want %q", got, want)
			}
			return err
		})
	}
	cp := &gpuv1alpha1.ClusterPolicy{}
	testenv.LoadCase(t, testenv.Seed("gpu-cluster-config"), cp)
	cp.Name, cp.Spec.Namespace = "agent-exporter", "gpu-a"
	if err := k8s.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = k8s.Delete(context.Background(), cp)
		}
	})
	wantArg("--dcgm-url=" + builder.DCGMExporterURL(cp))
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		t.Fatal(err)
	}
	cp.Spec.Namespace = "gpu-b"
	if err := k8s.Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	wantArg("--dcgm-url=" + builder.DCGMExporterURL(cp))
	if err := k8s.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	deleted = true
	wantArg("--dcgm-url=")
}
