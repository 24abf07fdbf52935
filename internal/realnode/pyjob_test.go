// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestDistributedPyJobTrains: a PyJob of 2 workers × 2 processes runs
// torchrun with gloo on the real node: the 4 ranks rendezvous through the
// headless Service's DNS name of rank 0, train, and rank 0 writes a
// checkpoint to the output claim; the PyJob goes Succeeded with its real
// start and completion, and the ranks' logs show a world of 4 and a
// falling loss. Each worker's ranks were given the same two GPUs by
// NVIDIA's device plugin, the two workers different ones, all of them GPUs
// the plugin registered.
func TestDistributedPyJobTrains(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	outDir := outputVolume(t, ns, "output")
	script, err := TrainScript()
	if err != nil {
		t.Fatal(err)
	}
	pj := DistributedPyJob(ns, "ddp", images.Training, script, "output")
	phases := watchPhases(t, pj)
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	// The run may be slow on a loaded machine; it must keep moving: its
	// status, or the trainers' logs (a line a step).
	testenv.Progressing(t, 2*time.Minute, 15*time.Minute, func() (string, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return "", err
		}
		if pj.Status.Phase == trainingv1alpha1.PyJobFailed {
			t.Fatalf("the PyJob failed: %s\n%s", pj.Status.Message, podLogs(t, ns, builder.TrainerContainer))
		}
		if pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
			logs := podLogs(t, ns, builder.TrainerContainer)
			return fmt.Sprintf("%s %s %d", pj.Status.Phase, pj.Status.Message, strings.Count(logs, "\n")), fmt.Errorf("phase %q: %s", pj.Status.Phase, pj.Status.Message)
		}
		return "", nil
	})
	// Every phase the status went through, in order: it never goes back.
	var seen []trainingv1alpha1.PyJobPhase
	testenv.Eventually(t, 30*time.Second, func() error {
		if seen = phases(); len(seen) == 0 || seen[len(seen)-1] != trainingv1alpha1.PyJobSucceeded {
			return fmt.Errorf("phases watched: %v", seen)
		}
		return nil
	})
	rank := map[trainingv1alpha1.PyJobPhase]int{trainingv1alpha1.PyJobPending: 1, trainingv1alpha1.PyJobRunning: 2, trainingv1alpha1.PyJobSucceeded: 3}
	for i := 1; i < len(seen); i++ {
		if rank[seen[i]] < rank[seen[i-1]] || rank[seen[i]] == 0 {
			t.Errorf("phases %v: %s after %s", seen, seen[i], seen[i-1])
		}
	}
	if !slices.Contains(seen, trainingv1alpha1.PyJobRunning) || seen[len(seen)-1] != trainingv1alpha1.PyJobSucceeded {
		t.Errorf("phases %v: want Running seen and Succeeded last", seen)
	}
	if pj.Status.StartTime == nil || pj.Status.CompletionTime == nil || !pj.Status.CompletionTime.After(pj.Status.StartTime.Time) {
		t.Errorf("start %v, completion %v: want both, in order", pj.Status.StartTime, pj.Status.CompletionTime)
	}
	logs := podLogs(t, ns, builder.TrainerContainer)
	ranks := map[string]bool{}
	for _, m := range regexp.MustCompile(`rank=(\d) world=(\d+) `).FindAllStringSubmatch(logs, -1) {
		if m[2] != "4" {
			t.Errorf("a rank saw a world of %s, want 4", m[2])
		}
		ranks[m[1]] = true
	}
	if len(ranks) != 4 {
		t.Errorf("ranks logged: %v, want 0-3\n%s", ranks, logs)
	}
	checkGPUsPerWorker(t, logs)
	first, last := lossAt(t, logs, 0), lossAt(t, logs, 19)
	if !(last < first/2) {
		t.Errorf("loss %g at step 0, %g at step 19: want it to fall by half at least", first, last)
	}
	if fi, err := os.Stat(filepath.Join(outDir, "checkpoint.pt")); err != nil || fi.Size() == 0 {
		t.Errorf("no checkpoint in the output claim: %v", err)
	}
}

// checkGPUsPerWorker reads the GPUs each rank of a 2 workers × 2
// processes run logged (torchrun numbers a worker's ranks together): both
// ranks of a worker name the same two, the workers different ones, and
// each is a device NVIDIA's device plugin registered with the kubelet.
func checkGPUsPerWorker(t *testing.T, logs string) {
	t.Helper()
	registered, _ := kubeletDevices(t)
	byRank := map[int][]string{}
	for _, m := range regexp.MustCompile(`rank=(\d) gpus=(\S*)`).FindAllStringSubmatch(logs, -1) {
		r, _ := strconv.Atoi(m[1])
		byRank[r] = strings.Split(m[2], ",")
	}
	seen := map[string]int{}
	for worker := range 2 {
		a, b := byRank[2*worker], byRank[2*worker+1]
		if len(a) != 2 || !slices.Equal(a, b) {
			t.Errorf("worker %d: its ranks were given %v and %v, want the same two GPUs", worker, a, b)
		}
		for _, id := range a {
			if !slices.Contains(registered, id) {
				t.Errorf("worker %d was given %q, not a GPU the device plugin registered (%v)", worker, id, registered)
			}
			if w, ok := seen[id]; ok {
				t.Errorf("GPU %s was given to workers %d and %d", id, w, worker)
			}
			seen[id] = worker
		}
	}
}

// watchPhases watches pj (by name, from before it exists) and returns a
// function giving every phase its status has had so far, each change once,
// in order.
func watchPhases(t *testing.T, pj *trainingv1alpha1.PyJob) func() []trainingv1alpha1.PyJobPhase {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &trainingv1alpha1.PyJobList{}, client.InNamespace(pj.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", pj.Name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	var seen []trainingv1alpha1.PyJobPhase
	go func() {
		for ev := range w.ResultChan() {
			got, ok := ev.Object.(*trainingv1alpha1.PyJob)
			if !ok || got.Status.Phase == "" {
				continue
			}
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1] != got.Status.Phase {
				seen = append(seen, got.Status.Phase)
			}
			mu.Unlock()
		}
	}()
	return func() []trainingv1alpha1.PyJobPhase {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// lossAt is rank 0's logged loss at step.
func lossAt(t *testing.T, logs string, step int) float64 {
	t.Helper()
	m := regexp.MustCompile(`rank=0 world=\d+ step=` + strconv.Itoa(step) + ` loss=([0-9.]+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no loss of rank 0 at step %d in:\n%s", step, logs)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// podLogs is the log of container in every pod of ns that has one, by pod
// name.
func podLogs(t *testing.T, ns, container string) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	var b strings.Builder
	for _, p := range pods.Items {
		if !slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) {
			continue
		}
		raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
		fmt.Fprintf(&b, "--- %s (%s) %v\n%s\n", p.Name, p.Status.Phase, err, raw)
	}
	return b.String()
}

// newNamespace creates a namespace for one test, whose pods pull from the
// node's registry.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := Namespace(context.Background(), env, k8s, "real-")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// outputVolume makes a claim named name in ns, bound to a hostPath volume
// on the real node, and returns the volume's folder.
func outputVolume(t *testing.T, ns, name string) string {
	t.Helper()
	dir := filepath.Join(env.Dir, "volumes", ns, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	size := resource.MustParse("1Gi")
	class := "real-node-local"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany, corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: name},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	for _, o := range []client.Object{pv, pvc} {
		if err := k8s.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestFailingPyJobSaysWhy: a PyJob whose script exits 3 goes Failed, and
// its status quotes the worker's exit code and the end of its log (the
// termination message, by the trainer's FallbackToLogsOnError).
func TestFailingPyJobSaysWhy(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	pj := pythonJob(ns, "broken", "import sys; print('shard 7: corrupt record at offset 4096', file=sys.stderr); sys.exit(3)")
	pj.Spec.BackoffLimit = ptr.To[int32](0)
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		if pj.Status.Phase != trainingv1alpha1.PyJobFailed {
			return fmt.Errorf("phase %q: %s", pj.Status.Phase, pj.Status.Message)
		}
		return nil
	})
	for _, want := range []string{"exited with code 3", "shard 7: corrupt record at offset 4096"} {
		if !strings.Contains(pj.Status.Message, want) {
			t.Errorf("status message %q does not say %q", pj.Status.Message, want)
		}
	}
}

// TestUnpullableImageSaysSo: a PyJob whose image its namespace may not pull
// (the node's registry, without a pull secret) stays Pending, and its
// status and a Warning Event name the image and the kubelet's reason,
// within the first pull back-off; no pod of it starts.
func TestUnpullableImageSaysSo(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "no-credentials-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	image := images.Training
	pj := DistributedPyJob(ns.Name, "unpullable", image, "print(1)", "")
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release(t, ns.Name) })
	testenv.Eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		if pj.Status.Phase != trainingv1alpha1.PyJobPending || !strings.Contains(pj.Status.Message, image) ||
			!strings.Contains(pj.Status.Message, "cannot start") {
			return fmt.Errorf("phase %q: %s", pj.Status.Phase, pj.Status.Message)
		}
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns.Name)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "PyJob" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, image) {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event of the PyJob names %s", image)
	})
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.ContainerID != "" || cs.State.Running != nil {
				t.Errorf("pod %s's %s started without credentials for its image", p.Name, cs.Name)
			}
		}
	}
}

// release is Release, for a test's clean-up.
func release(t *testing.T, ns string) {
	t.Helper()
	if err := Release(context.Background(), k8s, ns); err != nil {
		t.Error(err)
	}
}

// TestDNSDownSaysWhy: with the cluster's DNS down, a distributed PyJob's
// ranks cannot resolve rank 0's name; the PyJob fails, and its status
// quotes the rank's error, which names the address it could not reach.
func TestDNSDownSaysWhy(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	restart := env.StopDNS()
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("start CoreDNS again: %v", err)
		}
	})
	pj := DistributedPyJob(ns, "no-dns", images.Training, "print(1)", "")
	pj.Spec.BackoffLimit = ptr.To[int32](0)
	// torchrun's static rendezvous waits up to its timeout for rank 0.
	pj.Spec.Env = []corev1.EnvVar{{Name: "PET_RDZV_CONF", Value: "timeout=20"}}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		if pj.Status.Phase != trainingv1alpha1.PyJobFailed {
			return fmt.Errorf("phase %q: %s", pj.Status.Phase, pj.Status.Message)
		}
		return nil
	})
	// torch 1.13's rank gives up on rank 0's name with a TimeoutError
	// naming it; the resolver's own error comes earlier in its log, and
	// the status quotes it.
	failure := pj.Status.Message[strings.Index(pj.Status.Message, "exited with code")+1:]
	if !strings.Contains(failure, "no-dns-job-0.no-dns-job") || !strings.Contains(failure, "Error") {
		t.Errorf("the status does not quote the rank's error naming rank 0: %s", pj.Status.Message)
	}
	said := failure[strings.Index(failure, "the resolver said: ")+1:]
	if !strings.Contains(failure, "the resolver said: ") || !strings.Contains(said, "name resolution") && !strings.Contains(said, "Name or service not known") {
		t.Errorf("the status does not quote the resolver's error: %s\n%s", pj.Status.Message, podLogs(t, ns, builder.TrainerContainer))
	}
}
