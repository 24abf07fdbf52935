// SPDX-License-Identifier: Apache-2.0

package workload_test

import (
	"testing"

	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
)

// BenchmarkPolicyPyJob is the workload policy's cost on one PyJob with a
// template (a sidecar and a volume), as the PyJob reconciler pays it on
// every reconcile: the pod built, merged and held to the Pod Security
// Standards.
func BenchmarkPolicyPyJob(b *testing.B) {
	c := workloadtest.Case{Name: "typical", Spec: "gpu: 8\nworkers: 4\n" + workloadtest.Pod("    volumes:\n    - name: cache\n      emptyDir: {}\n    containers:\n    - name: sidecar\n      image: busybox\n      volumeMounts: [{name: cache, mountPath: /cache}]\n")}
	pj, err := c.PyJob("team-a", "typical")
	if err != nil {
		b.Fatal(err)
	}
	p := workload.Policy{}
	if msgs := p.PyJob(pj, ""); len(msgs) != 0 {
		b.Fatalf("a typical PyJob refused: %v", msgs)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.PyJob(pj, "")
	}
}
