// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// probeScript prints what the pod got: the Secret's file, the size df
// gives /dev/shm, the subject of the ServiceAccount token, and what the
// sidecar wrote.
const probeScript = `
import base64, json, os, subprocess, time
print("secret=" + open("/etc/tokenizer/token").read())
size = subprocess.check_output(["df", "-B1", "--output=size", "/dev/shm"], text=True).split()[-1]
print("shm=" + size)
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read().split(".")[1]
print("sub=" + json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["sub"])
for _ in range(300):
    if os.path.exists("/shared/sidecar"):
        print("sidecar=" + open("/shared/sidecar").read())
        break
    time.sleep(0.1)
`

// TestTemplateReachesThePod: what a PyJob's spec.template asks the pod
// really gets on the node: a ServiceAccount (its token's subject), a pull
// Secret for the node's registry (the image pulled with it, and refused
// without it), a Secret mounted as a file, a native sidecar sharing a
// folder, and /dev/shm of spec.shmSize as df sees it.
func TestTemplateReachesThePod(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tokenizer", Namespace: ns}, StringData: map[string]string{"token": "vocab-7"}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pull := corev1.PullAlways
	trainer := corev1.Container{Name: builder.TrainerContainer, ImagePullPolicy: pull}
	pod := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: "trainer",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: PullSecret}},
		Volumes: []corev1.Volume{
			{Name: "tokenizer", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tokenizer"}}},
			{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []corev1.Container{{
			Name: "sidecar", Image: images.Training, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Command:      []string{"python3", "-c", "import time; open('/shared/sidecar', 'w').write('up'); time.sleep(3600)"},
			VolumeMounts: []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}},
		}},
		Containers: []corev1.Container{func() corev1.Container {
			c := trainer
			c.VolumeMounts = []corev1.VolumeMount{{Name: "tokenizer", MountPath: "/etc/tokenizer", ReadOnly: true}, {Name: "shared", MountPath: "/shared"}}
			return c
		}()},
	}}
	pj := probe(t, ns, "templated", pod)
	pj.Spec.ShmSize = ptr.To(resource.MustParse("256Mi"))
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pj, trainingv1alpha1.PyJobSucceeded, 3*time.Minute)
	logs := podLogs(t, ns, builder.TrainerContainer)
	for _, want := range []string{"secret=vocab-7", "shm=268435456", "sub=system:serviceaccount:" + ns + ":trainer", "sidecar=up"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the trainer's log lacks %q:\n%s", want, logs)
		}
	}

	// The same ServiceAccount, which names no pull Secret, without the
	// template's: the node's registry refuses the pull.
	bare := probe(t, ns, "no-pull-secret", corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: "trainer", Containers: []corev1.Container{trainer},
	}})
	if err := k8s.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(bare), bare); err != nil {
			return err
		}
		if bare.Status.Phase != trainingv1alpha1.PyJobPending || !strings.Contains(bare.Status.Message, images.Training) || !strings.Contains(bare.Status.Message, "cannot start") {
			return fmt.Errorf("phase %q: %s", bare.Status.Phase, bare.Status.Message)
		}
		return nil
	})
}

// probe is a one-worker PyJob running probeScript on the real node with
// template.
func probe(t *testing.T, ns, name string, template corev1.PodTemplateSpec) *trainingv1alpha1.PyJob {
	t.Helper()
	raw, err := json.Marshal(template)
	if err != nil {
		t.Fatal(err)
	}
	pj := pythonJob(ns, name, probeScript)
	pj.Spec.Template = &runtime.RawExtension{Raw: raw}
	return pj
}
