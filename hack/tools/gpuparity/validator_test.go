// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// validatorWait reads, from the GPU Operator's validator/main.go, the file
// its driver check waits for (assertDriverContainerReady's stat) and the
// apiVersion prefix of the driver DaemonSet's owner for which it waits
// (isDriverManagedByOperator).
func validatorWait(t *testing.T) (file, ownerPrefix string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(upstream(t), "validator", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	stat := regexp.MustCompile(`"stat (/[^"]+)"`).FindSubmatch(raw)
	owner := regexp.MustCompile(`strings\.HasPrefix\(owner\.APIVersion, "([^"]+)"\)`).FindSubmatch(raw)
	if stat == nil || owner == nil {
		t.Fatal("the GPU Operator's validator no longer waits for the driver container as this test reads it")
	}
	return string(stat[1]), string(owner[1])
}

// TestDriverValidationWaitsForTheDriverContainer: the validator waits for
// the driver container's ready file only when the driver DaemonSet's owner
// is the GPU Operator's, which trainops's is not; so trainops's driver
// validations (validator and toolkit) wait for that same file themselves
// before running the validator, with the driver container on, and not with
// a driver on the host. The wait is run: the validator starts only once the
// file exists.
func TestDriverValidationWaitsForTheDriverContainer(t *testing.T) {
	file, prefix := validatorWait(t)
	if strings.HasPrefix(gpuv1alpha1.GroupVersion.String(), prefix) {
		t.Fatalf("trainops's ClusterPolicy (%s) now satisfies the validator's own wait (%s): this wait is no longer needed", gpuv1alpha1.GroupVersion, prefix)
	}
	for _, driver := range []bool{true, false} {
		cp := clusterPolicy(t, "clusterpolicy-minimal")
		cp.Spec.Driver.Enabled = &driver
		for _, ds := range []string{builder.ValidatorDaemonSet, builder.ToolkitDaemonSet} {
			ctr, _ := findContainer(built[*appsv1.DaemonSet](t, cp, ds).Spec.Template.Spec, "driver-validation")
			if ctr == nil {
				t.Fatalf("%s has no driver-validation", ds)
			}
			script := strings.Join(ctr.Args, " ")
			if waits := strings.Contains(script, file); waits != driver {
				t.Errorf("%s (driver container %v): waits for %s: %v\n%s", ds, driver, file, waits, script)
				continue
			}
			if driver {
				runDriverWait(t, *ctr, file)
			}
		}
	}
}

// runDriverWait runs ctr's script with the ready file moved into a
// temporary folder and stand-ins for nvidia-validator and sleep: the
// validator must not run while the file is missing (after the script said
// it is waiting), and must run once it exists.
func runDriverWait(t *testing.T, ctr corev1.Container, file string) {
	t.Helper()
	dir := t.TempDir()
	ready, ran := filepath.Join(dir, "ready"), filepath.Join(dir, "validator-ran")
	for name, body := range map[string]string{"nvidia-validator": "touch " + ran, "sleep": "exec /bin/sleep 0.05"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.ReplaceAll(strings.Join(ctr.Args, " "), file, ready)
	cmd := exec.Command(ctr.Command[0], append(ctr.Command[1:], script)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // ends a script that failed the test
	// Proof that it looked: it said it waits, twice (one pass of its loop).
	for deadline := time.Now().Add(30 * time.Second); strings.Count(out.String(), "waiting") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never said it waits: %q", ctr.Name, out.String())
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatalf("%s ran the validator before %s existed", ctr.Name, file)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v: %s", ctr.Name, err, out.String())
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatalf("%s did not run the validator once %s existed", ctr.Name, file)
	}
}

// syncBuffer is a bytes.Buffer safe to write from a process and read from
// the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
