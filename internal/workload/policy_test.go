// SPDX-License-Identifier: Apache-2.0

package workload_test

import (
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
)

// refusals is what p refuses of c's PyJob in a namespace labelled
// nsLevel.
func refusals(t *testing.T, p workload.Policy, c workloadtest.Case, nsLevel string) []string {
	t.Helper()
	pj, err := c.PyJob("team-b", "pj")
	if err != nil {
		t.Fatal(err)
	}
	return p.PyJob(pj, nsLevel)
}

// TestEveryCaseRefusedAndAllowedBySetting: every case is refused with its
// field and setting named, and passes with its setting (every other
// setting at its default).
func TestEveryCaseRefusedAndAllowedBySetting(t *testing.T) {
	for _, c := range workloadtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var p workload.Policy
			if c.Under != nil {
				c.Under(&p)
				if got := refusals(t, workload.Policy{}, c, ""); len(got) != 0 {
					t.Errorf("refused without its setting: %v", got)
				}
			}
			got := refusals(t, p, c, "")
			if len(got) == 0 {
				t.Fatal("not refused")
			}
			if !strings.HasPrefix(got[0], c.Field+": ") && !strings.HasPrefix(got[0], c.Field+" ") {
				t.Errorf("refusal %q does not start with the field %s", got[0], c.Field)
			}
			if !strings.Contains(got[0], c.Setting) {
				t.Errorf("refusal %q does not name %s", got[0], c.Setting)
			}
			if c.Allow == nil {
				return
			}
			c.Allow(&p)
			if got := refusals(t, p, c, ""); len(got) != 0 {
				t.Errorf("refused with its setting: %v", got)
			}
		})
	}
}

// TestLevelDecides: the restricted cases pass at baseline and are refused
// at restricted, by the setting or by the namespace's label; a laxer label
// than the setting does not loosen it; privileged lets every Pod Security
// case through.
func TestLevelDecides(t *testing.T) {
	for _, c := range workloadtest.Restricted {
		if got := refusals(t, workload.Policy{}, c, ""); len(got) != 0 {
			t.Errorf("%s: refused at baseline: %v", c.Name, got)
		}
		restricted := workload.Policy{PodPowers: config.PodPowers{PodSecurityLevel: config.PodSecurityRestricted}}
		got := refusals(t, restricted, c, "")
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.Setting) || !strings.Contains(got[0], "(podSecurityLevel)") {
			t.Errorf("%s: at restricted: %v", c.Name, got)
		}
		got = refusals(t, workload.Policy{}, c, config.PodSecurityRestricted)
		if len(got) == 0 || !strings.Contains(got[0], "pod-security.kubernetes.io/enforce") {
			t.Errorf("%s: in a namespace labelled restricted: %v", c.Name, got)
		}
		if got := refusals(t, restricted, c, config.PodSecurityPrivileged); len(got) == 0 {
			t.Errorf("%s: a namespace labelled privileged loosened restricted", c.Name)
		}
	}
	lax := workload.Policy{PodPowers: config.PodPowers{PodSecurityLevel: config.PodSecurityPrivileged}}
	for _, c := range workloadtest.Cases {
		if c.Allow == nil || c.Field != "spec.template.spec" {
			continue
		}
		if got := refusals(t, workload.Policy{}, c, config.PodSecurityPrivileged); len(got) == 0 {
			t.Errorf("%s: a namespace labelled privileged loosened baseline", c.Name)
		}
		if got := refusals(t, lax, c, ""); len(got) != 0 {
			t.Errorf("%s: refused at privileged: %v", c.Name, got)
		}
	}
}

// TestPlainPyJobPasses: a PyJob asking for GPUs, with a sidecar, a
// ConfigMap and claim volume and a prefixed envFrom, passes at baseline;
// at restricted it passes once its template says what restricted needs.
func TestPlainPyJobPasses(t *testing.T) {
	plain := workloadtest.Case{Spec: "gpu: 2\nworkers: 2\n" + workloadtest.Pod(`    volumes:
    - name: cfg
      configMap: {name: settings}
    - name: data
      persistentVolumeClaim: {claimName: data}
    containers:
    - name: trainer
      resources: {limits: {nvidia.com/gpu: '2'}}
      envFrom: [{prefix: APP_, configMapRef: {name: settings}}]
    - name: logs
      image: busybox
`)}
	if got := refusals(t, workload.Policy{}, plain, ""); len(got) != 0 {
		t.Errorf("plain PyJob refused: %v", got)
	}
	restricted := workloadtest.Case{Spec: "gpu: 1\n" + workloadtest.Pod(`    securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
    containers:
    - name: trainer
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`)}
	if got := refusals(t, workload.Policy{}, restricted, config.PodSecurityRestricted); len(got) != 0 {
		t.Errorf("restricted-ready PyJob refused at restricted: %v", got)
	}
	if got := refusals(t, workload.Policy{}, plain, config.PodSecurityRestricted); len(got) == 0 {
		t.Error("a pod without restricted's settings passed at restricted")
	}
}

// TestKueuePriorityClassFollowsTheList: allowedPriorityClasses, when set,
// names the Kueue WorkloadPriorityClasses a PyJob may use too; unset, any
// is allowed (Kueue's classes have no system ones).
func TestKueuePriorityClassFollowsTheList(t *testing.T) {
	c := workloadtest.Case{Spec: "queueName: team\nworkloadPriorityClassName: urgent\n"}
	if got := refusals(t, workload.Policy{}, c, ""); len(got) != 0 {
		t.Errorf("refused with no list: %v", got)
	}
	got := refusals(t, workload.Policy{AllowedPriorityClasses: []string{"normal"}}, c, "")
	if len(got) != 1 || !strings.HasPrefix(got[0], "spec.workloadPriorityClassName: urgent is not allowed (allowedPriorityClasses: normal)") {
		t.Errorf("off the list: %v", got)
	}
	if got := refusals(t, workload.Policy{AllowedPriorityClasses: []string{"normal", "urgent"}}, c, ""); len(got) != 0 {
		t.Errorf("on the list: %v", got)
	}
}
