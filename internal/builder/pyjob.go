// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"fmt"
	"path"
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// Distributed-training settings every worker gets.
const (
	// TrainerContainer is the name of the training container.
	TrainerContainer = "trainer"
	// MasterPort is the rendezvous port of rank 0 (torch.distributed's
	// default).
	MasterPort = 29500
	// GPUResource is the extended resource of NVIDIA GPUs.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"

	// AttemptAnnotation on a PyJob's Job says which run and attempt of
	// it the Job is ("<run>.<attempt>"): a restart tells its new Job from
	// the old by it.
	AttemptAnnotation = "training.trainops.dev/attempt"
	// DisruptionRule is the index, in a PyJob Job's pod failure policy, of
	// the rule that fails the Job when a worker is disrupted (preempted,
	// evicted, its node lost); FailOnExitCodeRule the one for
	// failurePolicy.failOnExitCodes.
	DisruptionRule     = 0
	FailOnExitCodeRule = 1
	// DefaultShmSize is the size of /dev/shm when spec.shmSize is unset
	// and no memory limit is set.
	DefaultShmSize = "1Gi"
	// ShmPath is where the memory-backed shm volume is mounted.
	ShmPath = "/dev/shm"

	completionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
	datasetVolume             = "dataset"
	outputVolume              = "output"
	shmVolume                 = "dshm"
	checkpointFolder          = "checkpoints"
)

// PyJobChildren are the objects one PyJob becomes.
type PyJobChildren struct {
	// Job runs the workers.
	Job *batchv1.Job
	// Service is the headless Service giving workers stable DNS names; nil
	// for a single worker.
	Service *corev1.Service
	// OutputClaim is the output PVC trainops creates; nil unless
	// storage.output.size is set. It has no owner reference: it outlives the
	// PyJob on purpose.
	OutputClaim *corev1.PersistentVolumeClaim
}

// JobName is the name of a PyJob's Job (and of its headless Service).
func JobName(pj *trainingv1alpha1.PyJob) string { return pj.Name + "-job" }

// OutputClaimName is the name of the output PVC trainops creates.
func OutputClaimName(pj *trainingv1alpha1.PyJob) string { return pj.Name + "-output" }

// ForPyJob builds every child of a PyJob. It fails only on a bad
// spec.template, naming the field.
func ForPyJob(pj *trainingv1alpha1.PyJob) (PyJobChildren, error) {
	job, err := JobFor(pj)
	if err != nil {
		return PyJobChildren{}, err
	}
	c := PyJobChildren{Job: job}
	if workers(pj) > 1 {
		c.Service = ServiceFor(pj)
	}
	if s := pj.Spec.Storage; s != nil && s.Output != nil && s.Output.Size != nil {
		c.OutputClaim = OutputClaimFor(pj)
	}
	return c, nil
}

// Attempt is the value of AttemptAnnotation for the Job pj runs now.
func Attempt(pj *trainingv1alpha1.PyJob) string {
	return fmt.Sprintf("%d.%d", max(pj.Status.Runs, 1), pj.Status.Attempt)
}

// MaxRestarts is how many times a worker's failure may restart pj's run:
// failurePolicy.maxRestarts, else backoffLimit, else 0.
func MaxRestarts(pj *trainingv1alpha1.PyJob) int32 {
	if fp := pj.Spec.FailurePolicy; fp != nil && fp.MaxRestarts != nil {
		return *fp.MaxRestarts
	}
	return ptr.Deref(pj.Spec.BackoffLimit, 0)
}

func workers(pj *trainingv1alpha1.PyJob) int32 { return max(pj.Spec.Workers, 1) }

func pyjobLabels(pj *trainingv1alpha1.PyJob) map[string]string {
	return commonLabels(LabelPyJob, pj.Name)
}

// JobFor builds the batch/v1 Job that runs the current attempt of a
// PyJob's workers (status.runs and status.attempt say which). Any worker's
// failure fails the Job: the PyJob's reconciler then restarts the whole
// run or fails it (failurePolicy), so a rank never waits for a lone
// replacement.
func JobFor(pj *trainingv1alpha1.PyJob) (*batchv1.Job, error) {
	user, err := DecodeTemplate(pj.Spec.Template)
	if err != nil {
		return nil, err
	}
	n := workers(pj)
	labels := pyjobLabels(pj)
	jobLabels := merge(labels)
	if pj.Spec.QueueName != "" {
		jobLabels[LabelKueueQueue] = pj.Spec.QueueName
		if wpc := pj.Spec.WorkloadPriorityClassName; wpc != "" {
			jobLabels[LabelKueuePriorityClass] = wpc
		}
	}
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            JobName(pj),
			Namespace:       pj.Namespace,
			Labels:          jobLabels,
			Annotations:     map[string]string{AttemptAnnotation: Attempt(pj)},
			OwnerReferences: ownerRef(trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind), pj),
		},
		Spec: batchv1.JobSpec{
			Parallelism:             ptr.To(n),
			Completions:             ptr.To(n),
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   pj.Spec.ActiveDeadlineSeconds,
			TTLSecondsAfterFinished: pj.Spec.TTLSecondsAfterFinished,
			PodFailurePolicy:        podFailurePolicy(pj),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(pj),
			},
		},
	}
	if user != nil {
		if job.Spec.Template, err = mergeTemplate(job.Spec.Template, user); err != nil {
			return nil, err
		}
	}
	// A queue controller (Kueue) owns suspend for queued jobs: state it only
	// when the user suspends, so trainops never fights it.
	if ptr.Deref(pj.Spec.Suspend, false) {
		job.Spec.Suspend = ptr.To(true)
	} else if pj.Spec.QueueName == "" {
		job.Spec.Suspend = ptr.To(false)
	}
	if n > 1 {
		job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	} else {
		job.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	}
	return job, nil
}

// podFailurePolicy fails the Job at once, saying why in its condition,
// when a worker is disrupted (the run restarts without counting it) or
// exits with one of failurePolicy.failOnExitCodes (the run fails).
func podFailurePolicy(pj *trainingv1alpha1.PyJob) *batchv1.PodFailurePolicy {
	rules := []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionFailJob,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}
	if fp := pj.Spec.FailurePolicy; fp != nil && len(fp.FailOnExitCodes) > 0 {
		codes := slices.Clone(fp.FailOnExitCodes)
		slices.Sort(codes)
		rules = append(rules, batchv1.PodFailurePolicyRule{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To(TrainerContainer), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes,
			},
		})
	}
	return &batchv1.PodFailurePolicy{Rules: rules}
}

func podSpec(pj *trainingv1alpha1.PyJob) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy:     corev1.RestartPolicyNever,
		NodeSelector:      pj.Spec.NodeSelector,
		PriorityClassName: pj.Spec.PriorityClassName,
		Tolerations:       append([]corev1.Toleration(nil), pj.Spec.Tolerations...),
		Containers: []corev1.Container{{
			Name:      TrainerContainer,
			Image:     pj.Spec.Image,
			Command:   pj.Spec.Command,
			Args:      pj.Spec.Args,
			Env:       append(trainingEnv(pj), pj.Spec.Env...),
			Resources: resources(pj),
			// A rank that dies without writing /dev/termination-log still
			// says why: the end of its log becomes the message the PyJob's
			// status quotes.
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
	}
	if pj.Spec.GPU > 0 {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
			Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
		})
	}
	if workers(pj) > 1 {
		spec.Subdomain = JobName(pj)
	}
	c := &spec.Containers[0]
	storage := pj.Spec.Storage
	if pj.Spec.DatasetPath != "" {
		v := corev1.Volume{Name: datasetVolume}
		if storage != nil && storage.Dataset != nil {
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: storage.Dataset.ClaimName, ReadOnly: true}
		} else {
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
		spec.Volumes = append(spec.Volumes, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: datasetVolume, MountPath: pj.Spec.DatasetPath, ReadOnly: v.PersistentVolumeClaim != nil})
	}
	if pj.Spec.OutputPath != "" {
		v := corev1.Volume{Name: outputVolume}
		switch {
		case storage != nil && storage.Output != nil && storage.Output.ClaimName != "":
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: storage.Output.ClaimName}
		case storage != nil && storage.Output != nil:
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: OutputClaimName(pj)}
		default:
			// No storage named: the path exists, but what is written there
			// goes with the pod. storage.output keeps it.
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
		spec.Volumes = append(spec.Volumes, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: outputVolume, MountPath: pj.Spec.OutputPath})
	}
	if size := ShmSize(pj); !size.IsZero() {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: shmVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: shmVolume, MountPath: ShmPath})
	}
	return spec
}

// ShmSize is the size of a worker's /dev/shm: spec.shmSize, else half the
// memory limit, else DefaultShmSize; zero for none.
func ShmSize(pj *trainingv1alpha1.PyJob) resource.Quantity {
	if pj.Spec.ShmSize != nil {
		return *pj.Spec.ShmSize
	}
	if r := pj.Spec.Resources; r != nil && r.Memory != nil {
		return *resource.NewQuantity(r.Memory.Value()/2, resource.BinarySI)
	}
	return resource.MustParse(DefaultShmSize)
}

func resources(pj *trainingv1alpha1.PyJob) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	set := func(name corev1.ResourceName, q resource.Quantity, request bool) {
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Limits[name] = q
		if request {
			if r.Requests == nil {
				r.Requests = corev1.ResourceList{}
			}
			r.Requests[name] = q
		}
	}
	if res := pj.Spec.Resources; res != nil {
		if res.CPU != nil {
			set(corev1.ResourceCPU, *res.CPU, true)
		}
		if res.Memory != nil {
			set(corev1.ResourceMemory, *res.Memory, true)
		}
	}
	if pj.Spec.GPU > 0 {
		// Extended resources take the limit as the request.
		set(GPUResource, *resource.NewQuantity(int64(pj.Spec.GPU), resource.DecimalSI), false)
	}
	return r
}

// trainingEnv is what torchrun and plain torch.distributed read, plus the
// dataset and output paths. NODE_RANK and RANK come from the pod's
// completion index, so one template serves every worker.
func trainingEnv(pj *trainingv1alpha1.PyJob) []corev1.EnvVar {
	n := workers(pj)
	procs := max(pj.Spec.GPU, 1)
	master := "localhost"
	if n > 1 {
		master = JobName(pj) + "-0." + JobName(pj)
	}
	rank := corev1.EnvVar{Value: "0"}
	if n > 1 {
		rank = corev1.EnvVar{ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['" + completionIndexAnnotation + "']",
		}}}
	}
	named := func(name string, v corev1.EnvVar) corev1.EnvVar { v.Name = name; return v }
	value := func(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }
	env := []corev1.EnvVar{
		value("MASTER_ADDR", master),
		value("MASTER_PORT", strconv.Itoa(MasterPort)),
		value("WORLD_SIZE", strconv.Itoa(int(n*procs))),
		value("NNODES", strconv.Itoa(int(n))),
		value("NPROC_PER_NODE", strconv.Itoa(int(procs))),
		named("NODE_RANK", rank),
		named("RANK", rank),
		value("PET_MASTER_ADDR", master),
		value("PET_MASTER_PORT", strconv.Itoa(MasterPort)),
		value("PET_NNODES", strconv.Itoa(int(n))),
		value("PET_NPROC_PER_NODE", strconv.Itoa(int(procs))),
		named("PET_NODE_RANK", rank),
	}
	if pj.Spec.DatasetPath != "" {
		env = append(env, value("DATASET_PATH", pj.Spec.DatasetPath))
	}
	if pj.Spec.OutputPath != "" {
		env = append(env, value("OUTPUT_PATH", pj.Spec.OutputPath),
			value("TRAINOPS_CHECKPOINT_DIR", path.Join(pj.Spec.OutputPath, checkpointFolder)))
	}
	return append(env, value("TRAINOPS_RESTART_ATTEMPT", strconv.Itoa(int(pj.Status.Attempt))))
}

// ServiceFor builds the headless Service that gives each worker the DNS name
// <name>-job-<index>.<name>-job, which MASTER_ADDR points at.
func ServiceFor(pj *trainingv1alpha1.PyJob) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            JobName(pj),
			Namespace:       pj.Namespace,
			Labels:          pyjobLabels(pj),
			OwnerReferences: ownerRef(trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind), pj),
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelPyJob: pj.Name},
			PublishNotReadyAddresses: true, // workers rendezvous before they are ready
			Ports:                    []corev1.ServicePort{{Name: "rendezvous", Port: MasterPort, TargetPort: intstr.FromInt32(MasterPort), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// OutputClaimFor builds the output PVC trainops creates. It carries no owner
// reference, so deleting the PyJob keeps the training output.
func OutputClaimFor(pj *trainingv1alpha1.PyJob) *corev1.PersistentVolumeClaim {
	out := pj.Spec.Storage.Output
	mode := corev1.ReadWriteOnce
	if workers(pj) > 1 {
		mode = corev1.ReadWriteMany // every worker writes checkpoints
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        OutputClaimName(pj),
			Namespace:   pj.Namespace,
			Labels:      pyjobLabels(pj),
			Annotations: map[string]string{AnnotationRetain: "true"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			StorageClassName: out.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *out.Size}},
		},
	}
}
