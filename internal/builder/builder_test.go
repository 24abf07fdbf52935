// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apicase"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden/builder")

const testUID = types.UID("11111111-2222-3333-4444-555555555555")

var opts = builder.Options{AgentImage: "ghcr.io/trainops/trainops:v0.0.0-test"}

// load reads a case file, applies the CRD defaults as the API server would,
// and decodes it into out.
func load(t *testing.T, path string, out runtime.Object) {
	t.Helper()
	s, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	cases, err := apicase.Load(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Path != path {
			continue
		}
		u := c.Objects[len(c.Objects)-1]
		if err := s.Default(u); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != gpuv1alpha1.ClusterPolicyKind {
			u.SetNamespace("team-a")
		}
		u.SetUID(testUID)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no case %s", path)
}

func golden(t *testing.T, name string, objs []client.Object) {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	testenv.Golden(t, filepath.Join("..", "..", "testdata", "golden", "builder", name+".yaml"), buf.Bytes(), *update, "run go test ./internal/builder -update")
}

var seeds = filepath.Join("..", "..", "testdata", "seeds")
var valid = filepath.Join("..", "..", "testdata", "api", "valid")

func TestGolden(t *testing.T) {
	for _, c := range []struct{ name, file string }{
		{"pyjob-bert-training", filepath.Join(seeds, "bert-training.yaml")},
		{"pyjob-distributed-training", filepath.Join(seeds, "distributed-training.yaml")},
		{"pyjob-every-field", filepath.Join(valid, "pyjob-every-field.yaml")},
		{"pyjob-suspended", filepath.Join(valid, "pyjob-suspend-update.yaml")},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pj trainingv1alpha1.PyJob
			load(t, c.file, &pj)
			golden(t, c.name, testenv.PyJobChildren(t, &pj).Objects())
		})
	}
	for _, c := range []struct{ name, file string }{
		{"sreagent-gpu-monitor-agent", filepath.Join(seeds, "gpu-monitor-agent.yaml")},
		{"sreagent-every-field", filepath.Join(valid, "sreagent-every-field.yaml")},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a aiopsv1alpha1.SREAgent
			load(t, c.file, &a)
			golden(t, c.name, builder.ForSREAgent(&a, opts).Objects())
		})
	}
	for _, c := range []struct{ name, file string }{
		{"clusterpolicy-gpu-cluster-config", filepath.Join(seeds, "gpu-cluster-config.yaml")},
		{"clusterpolicy-minimal", filepath.Join(valid, "clusterpolicy-minimal.yaml")},
		{"clusterpolicy-mig", filepath.Join(valid, "clusterpolicy-mig.yaml")},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cp gpuv1alpha1.ClusterPolicy
			load(t, c.file, &cp)
			golden(t, c.name, builder.ForClusterPolicy(&cp, builder.OfflineGPUNodes).AllObjects())
		})
	}
}

func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			m[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		default:
			m[e.Name] = e.Value
		}
	}
	return m
}

func pyjob(mutate func(*trainingv1alpha1.PyJob)) *trainingv1alpha1.PyJob {
	pj := &trainingv1alpha1.PyJob{}
	pj.Name, pj.Namespace, pj.UID = "llm", "team-a", testUID
	pj.Spec = trainingv1alpha1.PyJobSpec{Image: "img", Command: []string{"python", "train.py"}, Workers: 1, BackoffLimit: ptr.To(int32(3))}
	mutate(pj)
	return pj
}

func TestPyJob(t *testing.T) {
	rankRef := "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']"
	tests := []struct {
		name  string
		pj    *trainingv1alpha1.PyJob
		check func(t *testing.T, c builder.PyJobChildren)
	}{
		{"single worker on one GPU", pyjob(func(p *trainingv1alpha1.PyJob) { p.Spec.GPU = 1 }), func(t *testing.T, c builder.PyJobChildren) {
			j := c.Job
			if j.Name != "llm-job" || *j.Spec.CompletionMode != batchv1.NonIndexedCompletion || *j.Spec.Completions != 1 {
				t.Errorf("job %s mode %s completions %d", j.Name, *j.Spec.CompletionMode, *j.Spec.Completions)
			}
			if c.Service != nil {
				t.Error("single worker got a headless Service")
			}
			ct := j.Spec.Template.Spec.Containers[0]
			if got := ct.Resources.Limits[builder.GPUResource]; got.Value() != 1 {
				t.Errorf("gpu limit %s", got.String())
			}
			want := map[string]string{"MASTER_ADDR": "localhost", "MASTER_PORT": "29500", "WORLD_SIZE": "1", "NNODES": "1", "NPROC_PER_NODE": "1", "NODE_RANK": "0", "RANK": "0", "PET_NNODES": "1", "PET_NODE_RANK": "0"}
			got := env(ct)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			tol := j.Spec.Template.Spec.Tolerations
			if len(tol) != 1 || tol[0].Key != "nvidia.com/gpu" || tol[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("tolerations %v, want the nvidia.com/gpu NoSchedule toleration", tol)
			}
		}},
		{"distributed 4 workers x 8 GPUs", pyjob(func(p *trainingv1alpha1.PyJob) { p.Spec.GPU, p.Spec.Workers = 8, 4 }), func(t *testing.T, c builder.PyJobChildren) {
			j := c.Job
			if *j.Spec.CompletionMode != batchv1.IndexedCompletion || *j.Spec.Completions != 4 || *j.Spec.Parallelism != 4 {
				t.Errorf("want Indexed with completions = parallelism = 4, got %s %d %d", *j.Spec.CompletionMode, *j.Spec.Completions, *j.Spec.Parallelism)
			}
			if c.Service == nil || c.Service.Name != "llm-job" || c.Service.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Fatalf("want headless Service llm-job, got %+v", c.Service)
			}
			if j.Spec.Template.Spec.Subdomain != "llm-job" {
				t.Errorf("subdomain %q", j.Spec.Template.Spec.Subdomain)
			}
			want := map[string]string{"MASTER_ADDR": "llm-job-0.llm-job", "WORLD_SIZE": "32", "NNODES": "4", "NPROC_PER_NODE": "8", "NODE_RANK": rankRef, "RANK": rankRef, "PET_NODE_RANK": rankRef, "PET_MASTER_ADDR": "llm-job-0.llm-job"}
			got := env(j.Spec.Template.Spec.Containers[0])
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
		}},
		{"CPU only: no GPU limit or toleration", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.Resources = &trainingv1alpha1.PyJobResources{CPU: ptr.To(resource.MustParse("4")), Memory: ptr.To(resource.MustParse("8Gi"))}
		}), func(t *testing.T, c builder.PyJobChildren) {
			ps := c.Job.Spec.Template.Spec
			r := ps.Containers[0].Resources
			if _, ok := r.Limits[builder.GPUResource]; ok || len(ps.Tolerations) != 0 {
				t.Errorf("CPU job got GPU limit or toleration: %v %v", r.Limits, ps.Tolerations)
			}
			if r.Requests.Cpu().String() != "4" || r.Limits.Memory().String() != "8Gi" {
				t.Errorf("resources %v", r)
			}
		}},
		{"user env comes after and can override", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.Env = []corev1.EnvVar{{Name: "MASTER_PORT", Value: "1234"}}
		}), func(t *testing.T, c builder.PyJobChildren) {
			e := c.Job.Spec.Template.Spec.Containers[0].Env
			if last := e[len(e)-1]; last.Name != "MASTER_PORT" || last.Value != "1234" {
				t.Errorf("user env not last: %v", last)
			}
		}},
		{"queued job leaves suspend to the queue", pyjob(func(p *trainingv1alpha1.PyJob) { p.Spec.QueueName = "team-a" }), func(t *testing.T, c builder.PyJobChildren) {
			if c.Job.Spec.Suspend != nil {
				t.Errorf("suspend = %v, want unset for a queued job", *c.Job.Spec.Suspend)
			}
			if c.Job.Labels["kueue.x-k8s.io/queue-name"] != "team-a" {
				t.Errorf("labels %v", c.Job.Labels)
			}
			if _, ok := c.Job.Labels["kueue.x-k8s.io/priority-class"]; ok {
				t.Errorf("a priority class no one asked for: %v", c.Job.Labels)
			}
		}},
		{"a Kueue priority class is the Job's label, its pods' priority left alone", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.QueueName, p.Spec.WorkloadPriorityClassName = "team-a", "urgent"
		}), func(t *testing.T, c builder.PyJobChildren) {
			if c.Job.Labels["kueue.x-k8s.io/priority-class"] != "urgent" || c.Job.Spec.Template.Spec.PriorityClassName != "" {
				t.Errorf("labels %v, pods' priority class %q", c.Job.Labels, c.Job.Spec.Template.Spec.PriorityClassName)
			}
		}},
		{"suspended", pyjob(func(p *trainingv1alpha1.PyJob) { p.Spec.Suspend = ptr.To(true); p.Spec.QueueName = "q" }), func(t *testing.T, c builder.PyJobChildren) {
			if !ptr.Deref(c.Job.Spec.Suspend, false) {
				t.Error("suspended PyJob's Job is not suspended")
			}
		}},
		{"any worker's failure fails the Job; disruptions and failOnExitCodes by name", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.BackoffLimit = ptr.To(int32(7))
			p.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{FailOnExitCodes: []int32{42, 3}}
		}), func(t *testing.T, c builder.PyJobChildren) {
			s := c.Job.Spec
			if *s.BackoffLimit != 0 || s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("backoffLimit %d restartPolicy %s: the reconciler restarts the whole run", *s.BackoffLimit, s.Template.Spec.RestartPolicy)
			}
			rules := s.PodFailurePolicy.Rules
			if r := rules[builder.DisruptionRule]; r.Action != batchv1.PodFailurePolicyActionFailJob || r.OnPodConditions[0].Type != corev1.DisruptionTarget {
				t.Errorf("disruption rule %+v", r)
			}
			if r := rules[builder.FailOnExitCodeRule]; r.Action != batchv1.PodFailurePolicyActionFailJob || *r.OnExitCodes.ContainerName != "trainer" ||
				fmt.Sprint(r.OnExitCodes.Values) != "[3 42]" {
				t.Errorf("exit-code rule %+v", r.OnExitCodes)
			}
		}},
		{"created output claim is kept and mounted", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.OutputPath, p.Spec.DatasetPath = "/out", "/data"
			p.Spec.Storage = &trainingv1alpha1.PyJobStorage{
				Dataset: &trainingv1alpha1.DatasetVolume{ClaimName: "imagenet"},
				Output:  &trainingv1alpha1.OutputVolume{Size: ptr.To(resource.MustParse("100Gi"))},
			}
		}), func(t *testing.T, c builder.PyJobChildren) {
			pvc := c.OutputClaim
			if pvc == nil || pvc.Name != "llm-output" || len(pvc.OwnerReferences) != 0 {
				t.Fatalf("want llm-output with no owner reference, got %+v", pvc)
			}
			ps := c.Job.Spec.Template.Spec
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range ps.Containers[0].VolumeMounts {
				mounts[m.MountPath] = m
			}
			if !mounts["/data"].ReadOnly || mounts["/out"].ReadOnly {
				t.Errorf("dataset must be read-only and output writable: %v", mounts)
			}
			claims := map[string]string{}
			for _, v := range ps.Volumes {
				if v.PersistentVolumeClaim != nil {
					claims[v.Name] = v.PersistentVolumeClaim.ClaimName
				}
			}
			if claims["dataset"] != "imagenet" || claims["output"] != "llm-output" {
				t.Errorf("claims %v", claims)
			}
			e := env(ps.Containers[0])
			if e["DATASET_PATH"] != "/data" || e["OUTPUT_PATH"] != "/out" {
				t.Errorf("paths not exported: %v", e)
			}
		}},
		{"existing output claim is mounted, not created", pyjob(func(p *trainingv1alpha1.PyJob) {
			p.Spec.OutputPath = "/out"
			p.Spec.Storage = &trainingv1alpha1.PyJobStorage{Output: &trainingv1alpha1.OutputVolume{ClaimName: "results"}}
		}), func(t *testing.T, c builder.PyJobChildren) {
			if c.OutputClaim != nil {
				t.Error("created a claim for an existing one")
			}
			if got := c.Job.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName; got != "results" {
				t.Errorf("claim %q", got)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.PyJobChildren(t, tc.pj)
			for _, o := range c.Objects() {
				l := o.GetLabels()
				if l["app.kubernetes.io/managed-by"] != "trainops" || l["app.kubernetes.io/part-of"] != "trainops" || l["pyjob-name"] != "llm" {
					t.Errorf("%T %s labels %v", o, o.GetName(), l)
				}
			}
			if c.Job.Spec.Template.Labels["pyjob-name"] != "llm" || c.Job.Spec.Template.Spec.Containers[0].Name != "trainer" {
				t.Error("pods lack pyjob-name label or trainer container")
			}
			if ref := c.Job.OwnerReferences; len(ref) != 1 || !*ref[0].Controller || ref[0].UID != testUID {
				t.Errorf("owner refs %v", ref)
			}
			tc.check(t, c)
		})
	}
}

func TestSREAgentRole(t *testing.T) {
	for _, repair := range []bool{false, true} {
		a := &aiopsv1alpha1.SREAgent{}
		a.Name, a.Namespace, a.UID = "ops", "team-a", testUID
		a.Spec = aiopsv1alpha1.SREAgentSpec{AutoRepair: repair, MonitorInterval: 20}
		c := builder.ForSREAgent(a, opts)
		canDelete := false
		for _, r := range c.Role.Rules {
			for _, res := range r.Resources {
				if res == "secrets" || res == "*" {
					t.Errorf("role grants %s", res)
				}
				for _, v := range r.Verbs {
					if v == "*" {
						t.Errorf("role has a wildcard verb on %v", r.Resources)
					}
					if res == "pods" && v == "delete" {
						canDelete = true
					}
				}
			}
		}
		if canDelete != repair {
			t.Errorf("autoRepair=%v but pod delete=%v", repair, canDelete)
		}
		d := c.Deployment
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		for _, want := range []string{"agent", "--monitor-interval=20s", "--auto-repair=" + map[bool]string{true: "true", false: "false"}[repair]} {
			if !strings.Contains(args, want) {
				t.Errorf("args %q lack %q", args, want)
			}
		}
		if d.Spec.Template.Spec.Containers[0].Image != opts.AgentImage || d.Spec.Template.Spec.ServiceAccountName != "sreagent-ops" {
			t.Errorf("image %s sa %s", d.Spec.Template.Spec.Containers[0].Image, d.Spec.Template.Spec.ServiceAccountName)
		}
		sc := d.Spec.Template.Spec.Containers[0].SecurityContext
		if !*d.Spec.Template.Spec.SecurityContext.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem {
			t.Error("agent must run non-root with a read-only root filesystem")
		}
	}
}

func TestClusterPolicy(t *testing.T) {
	base := func() *gpuv1alpha1.ClusterPolicy {
		var cp gpuv1alpha1.ClusterPolicy
		load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
		return &cp
	}
	names := func(c builder.ClusterPolicyChildren) map[string]bool {
		m := map[string]bool{}
		for _, o := range c.AllObjects() {
			m[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = true
		}
		return m
	}
	t.Run("seed deploys the whole stack", func(t *testing.T) {
		c := builder.ForClusterPolicy(base(), builder.OfflineGPUNodes)
		got := names(c)
		for _, w := range []string{"Namespace/gpu-operator", "RuntimeClass/nvidia", "DaemonSet/nvidia-driver-daemonset-ubuntu22.04", "DaemonSet/nvidia-container-toolkit-daemonset",
			"DaemonSet/nvidia-device-plugin-daemonset", "ConfigMap/nvidia-device-plugin-config", "DaemonSet/nvidia-dcgm-exporter", "Service/nvidia-dcgm-exporter",
			"ServiceMonitor/nvidia-dcgm-exporter", "ServiceAccount/nvidia-device-plugin"} {
			if !got[w] {
				t.Errorf("missing %s", w)
			}
		}
		if got["DaemonSet/nvidia-mig-manager"] {
			t.Error("MIG manager deployed while disabled")
		}
	})
	t.Run("time-slicing config is the device plugin's own format", func(t *testing.T) {
		c := builder.ForClusterPolicy(base(), builder.OfflineGPUNodes)
		for _, o := range c.Objects {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				want := "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: false\n    renameByDefault: false\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\nversion: v1\n"
				if d := cmp.Diff(want, cm.Data["config.yaml"]); d != "" {
					t.Errorf("config.yaml (-want +got):\n%s", d)
				}
				return
			}
		}
		t.Fatal("no device plugin ConfigMap")
	})
	t.Run("turning dcgm off removes exporter, Service and ServiceMonitor", func(t *testing.T) {
		cp := base()
		cp.Spec.DCGM.Exporter.Enabled = ptr.To(false)
		got := names(builder.ForClusterPolicy(cp, builder.OfflineGPUNodes))
		for _, w := range []string{"DaemonSet/nvidia-dcgm-exporter", "Service/nvidia-dcgm-exporter", "ServiceMonitor/nvidia-dcgm-exporter"} {
			if got[w] {
				t.Errorf("%s still built", w)
			}
		}
	})
	t.Run("daemonsets: GPU nodes, tolerations, priority, strategies", func(t *testing.T) { stackDaemonSets(t, base()) })
	t.Run("a new time-slicing config rolls the device plugin", func(t *testing.T) {
		hash := func(cp *gpuv1alpha1.ClusterPolicy) string {
			for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
				if ds, ok := o.(*appsv1.DaemonSet); ok && ds.Name == builder.DevicePluginDaemonSet {
					return ds.Spec.Template.Annotations[builder.AnnotationConfigHash]
				}
			}
			return ""
		}
		cp := base()
		before := hash(cp)
		cp.Spec.DevicePlugin.Config.Sharing.TimeSlicing.Resources[0].Replicas = 8
		if after := hash(cp); before == "" || before == after {
			t.Errorf("config hash %q -> %q, want a change", before, after)
		}
	})
}

// stackDaemonSets: for GPU nodes of two OSes, every DaemonSet of cp's
// stack selects GPU nodes, tolerates the GPU taint, runs at cp's priority
// with its update strategy, and the driver runs once per OS, tagged for
// it.
func stackDaemonSets(t *testing.T, cp *gpuv1alpha1.ClusterPolicy) {
	nodes := builder.GPUNodes{OS: []builder.NodeOS{{ID: "rhel", VersionID: "9.4"}, {ID: "ubuntu", VersionID: "22.04"}}}
	c := builder.ForClusterPolicy(cp, nodes)
	seen, drivers := 0, map[string]string{}
	for _, o := range c.Objects {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		seen++
		ps := ds.Spec.Template.Spec
		driver := strings.HasPrefix(ds.Name, builder.DriverDaemonSet+"-")
		selector := ps.NodeSelector
		if driver {
			selector = maps.Clone(selector)
			drivers[ds.Name] = selector[builder.LabelOSReleaseID] + "=" + selector[builder.LabelOSVersionID] + " " + ps.Containers[0].Image
			delete(selector, builder.LabelOSReleaseID)
			delete(selector, builder.LabelOSVersionID)
		}
		if len(selector) != 2 || !strings.HasPrefix(keysOf(selector), "gpu,nvidia.com/gpu.deploy.") || selector["gpu"] != "true" {
			t.Errorf("%s nodeSelector %v", ds.Name, ps.NodeSelector)
		}
		if ps.PriorityClassName != "system-node-critical" {
			t.Errorf("%s priority class %q", ds.Name, ps.PriorityClassName)
		}
		tolerates := map[string]bool{}
		for _, tol := range ps.Tolerations {
			tolerates[tol.Key] = true
		}
		if !tolerates["nvidia.com/gpu"] || tolerates["gpu-node"] != driver {
			t.Errorf("%s tolerations %v", ds.Name, ps.Tolerations)
		}
		switch {
		case driver:
			if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || !ps.HostPID || !*ps.Containers[0].SecurityContext.Privileged {
				t.Errorf("driver: strategy %s hostPID %v", ds.Spec.UpdateStrategy.Type, ps.HostPID)
			}
		default:
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String() != "1" {
				t.Errorf("%s strategy %+v", ds.Name, ds.Spec.UpdateStrategy)
			}
		}
	}
	want := map[string]string{
		"nvidia-driver-daemonset-rhel9.4":     "rhel=9.4 nvcr.io/nvidia/driver:535.104.05-rhel9.4",
		"nvidia-driver-daemonset-ubuntu22.04": "ubuntu=22.04 nvcr.io/nvidia/driver:535.104.05-ubuntu22.04",
	}
	if d := cmp.Diff(want, drivers); d != "" {
		t.Errorf("driver DaemonSets: OS selector and image (-want +got):\n%s", d)
	}
	if seen != len(c.DaemonSets) || seen != 7 {
		t.Errorf("built %d DaemonSets, listed %v; want 7", seen, c.DaemonSets)
	}
	cp.Spec.Driver.UpgradePolicy.AutoUpgrade = true
	for _, o := range builder.ForClusterPolicy(cp, nodes).Objects {
		if ds, ok := o.(*appsv1.DaemonSet); ok && strings.HasPrefix(ds.Name, builder.DriverDaemonSet) {
			// trainops replaces each node's driver pod itself, once the
			// node is drained: the DaemonSet never rolls on its own.
			if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
				t.Errorf("autoUpgrade driver strategy %+v", ds.Spec.UpdateStrategy)
			}
		}
	}
}
