// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// templated is a distributed PyJob of 2 workers with the given
// spec.template (JSON) and outputPath.
func templated(template string) *trainingv1alpha1.PyJob {
	pj := &trainingv1alpha1.PyJob{}
	pj.Name, pj.Namespace = "llm", "team-a"
	pj.Spec = trainingv1alpha1.PyJobSpec{Image: "pytorch:2", Command: []string{"torchrun", "train.py"}, Workers: 2, GPU: 1, OutputPath: "/out"}
	if template != "" {
		pj.Spec.Template = &runtime.RawExtension{Raw: []byte(template)}
	}
	return pj
}

// TestTemplateCannotTakeWhatTrainopsOwns: a template naming every field
// trainops owns changes none of them, and keeps the rest it asks for.
func TestTemplateCannotTakeWhatTrainopsOwns(t *testing.T) {
	pj := templated(`{"metadata":{"labels":{"pyjob-name":"other","team":"a"}},
	  "spec":{"restartPolicy":"Always","subdomain":"elsewhere","serviceAccountName":"trainer",
	    "containers":[{"name":"trainer","image":"evil:1","command":["sh"],"args":["-c","id"],
	      "resources":{"limits":{"nvidia.com/gpu":"8","cpu":"4"}},
	      "env":[{"name":"MASTER_ADDR","value":"attacker"},{"name":"EXTRA","value":"1"}],
	      "volumeMounts":[{"name":"output","mountPath":"/elsewhere"}]}],
	    "volumes":[{"name":"output","hostPath":{"path":"/"}}],
	    "tolerations":[{"key":"spot","operator":"Exists"}]}}`)
	job, err := builder.JobFor(pj)
	if err != nil {
		t.Fatal(err)
	}
	tpl := job.Spec.Template
	s := tpl.Spec
	if tpl.Labels[builder.LabelPyJob] != "llm" || tpl.Labels["team"] != "a" {
		t.Errorf("labels %v: want trainops's pyjob-name and the template's team", tpl.Labels)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.Subdomain != "llm-job" || s.ServiceAccountName != "trainer" {
		t.Errorf("restartPolicy %s subdomain %s serviceAccountName %s", s.RestartPolicy, s.Subdomain, s.ServiceAccountName)
	}
	c := s.Containers[0]
	if c.Name != "trainer" || c.Image != "pytorch:2" || strings.Join(c.Command, " ") != "torchrun train.py" || len(c.Args) != 0 {
		t.Errorf("trainer %s %q %v %v: want the PyJob's image and command", c.Name, c.Image, c.Command, c.Args)
	}
	gpu := c.Resources.Limits[builder.GPUResource]
	cpu := c.Resources.Limits[corev1.ResourceCPU]
	if gpu.Value() != 1 || cpu.String() != "4" {
		t.Errorf("limits %v: want the PyJob's GPU and the template's CPU", c.Resources.Limits)
	}
	e := env(c)
	if e["MASTER_ADDR"] != "llm-job-0.llm-job" || e["EXTRA"] != "1" {
		t.Errorf("env %v", e)
	}
	for _, v := range s.Volumes {
		if v.Name == "output" && v.HostPath != nil {
			t.Errorf("the template replaced the output volume: %+v", v)
		}
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "output" && m.MountPath != "/out" {
			t.Errorf("output mounted at %s", m.MountPath)
		}
	}
	if len(s.Tolerations) != 2 {
		t.Errorf("tolerations %v: want the GPU's and the template's", s.Tolerations)
	}
}

// TestTemplateRemovesAGPUTheSpecDoesNotAsk: the GPU limit is the
// PyJob's, so a template cannot give a CPU run GPUs.
func TestTemplateRemovesAGPUTheSpecDoesNotAsk(t *testing.T) {
	pj := templated(`{"spec":{"containers":[{"name":"trainer","resources":{"limits":{"nvidia.com/gpu":"8"},"requests":{"nvidia.com/gpu":"8"}}}]}}`)
	pj.Spec.GPU = 0
	job, err := builder.JobFor(pj)
	if err != nil {
		t.Fatal(err)
	}
	r := job.Spec.Template.Spec.Containers[0].Resources
	if _, ok := r.Limits[builder.GPUResource]; ok {
		t.Errorf("limits %v", r.Limits)
	}
	if _, ok := r.Requests[builder.GPUResource]; ok {
		t.Errorf("requests %v", r.Requests)
	}
}

// TestBadTemplateNamesTheField: what the API server does not check of a
// stored template (it keeps unknown fields) trainops refuses, naming it.
func TestBadTemplateNamesTheField(t *testing.T) {
	for _, tc := range []struct{ name, template, want string }{
		{"unknown field", `{"spec":{"hostNetwrk":true}}`, `spec.template: unknown field "spec.hostNetwrk"`},
		{"wrong type", `{"spec":{"containers":"trainer"}}`, `spec.template: cannot unmarshal string into Go struct field PodSpec.spec.containers`},
		{"sidecar without image", `{"spec":{"containers":[{"name":"proxy"}]}}`, `spec.template.spec.containers[name=proxy].image: required`},
		{"container without name", `{"spec":{"initContainers":[{"image":"busybox"}]}}`, `spec.template.spec.initContainers[0].name: required`},
		{"name twice", `{"spec":{"initContainers":[{"name":"trainer","image":"busybox"}]}}`, `spec.template.spec.containers[name=trainer].name: "trainer" is used twice`},
		{"mount of no volume", `{"spec":{"containers":[{"name":"trainer","volumeMounts":[{"name":"cache","mountPath":"/cache"}]}]}}`, `spec.template.spec.containers[name=trainer].volumeMounts[name=cache]: no volume "cache" in the pod`},
		{"a second /dev/shm", `{"spec":{"volumes":[{"name":"shm2","emptyDir":{}}],"containers":[{"name":"trainer","volumeMounts":[{"name":"shm2","mountPath":"/dev/shm"}]}]}}`, `spec.template.spec.containers[name=trainer].volumeMounts[name=shm2].mountPath: trainops mounts its dshm volume at /dev/shm`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := builder.JobFor(templated(tc.template))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if job != nil {
				t.Errorf("built a Job from a bad template: %s", job.Name)
			}
		})
	}
}

// TestShm: every worker gets a memory-backed /dev/shm of spec.shmSize,
// else half the memory limit, else the default; "0" gives none.
func TestShm(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shm    *resource.Quantity
		memory *resource.Quantity
		want   string // "" for none
	}{
		{"default", nil, nil, builder.DefaultShmSize},
		{"half the memory limit", nil, ptr.To(resource.MustParse("8Gi")), "4Gi"},
		{"asked", ptr.To(resource.MustParse("2Gi")), ptr.To(resource.MustParse("8Gi")), "2Gi"},
		{"off", ptr.To(resource.MustParse("0")), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pj := templated("")
			pj.Spec.ShmSize = tc.shm
			if tc.memory != nil {
				pj.Spec.Resources = &trainingv1alpha1.PyJobResources{Memory: tc.memory}
			}
			job, err := builder.JobFor(pj)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			s := job.Spec.Template.Spec
			for _, v := range s.Volumes {
				if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
					got = v.EmptyDir.SizeLimit.String()
					mounted := false
					for _, m := range s.Containers[0].VolumeMounts {
						mounted = mounted || (m.Name == v.Name && m.MountPath == builder.ShmPath)
					}
					if !mounted {
						t.Errorf("volume %s is not mounted at %s", v.Name, builder.ShmPath)
					}
				}
			}
			if got != tc.want {
				t.Errorf("/dev/shm %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRestartAttemptAndCheckpointDir: each rank learns its attempt and
// the checkpoint folder on the output volume; the Job names its run and
// attempt.
func TestRestartAttemptAndCheckpointDir(t *testing.T) {
	pj := templated("")
	pj.Status.Runs, pj.Status.Attempt = 2, 3
	job, err := builder.JobFor(pj)
	if err != nil {
		t.Fatal(err)
	}
	e := env(job.Spec.Template.Spec.Containers[0])
	if e["TRAINOPS_RESTART_ATTEMPT"] != "3" || e["TRAINOPS_CHECKPOINT_DIR"] != "/out/checkpoints" {
		t.Errorf("env %v", e)
	}
	if got := job.Annotations[builder.AttemptAnnotation]; got != "2.3" {
		t.Errorf("attempt annotation %q", got)
	}
}
