// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// PyJobKind is the kind name of PyJob.
const PyJobKind = "PyJob"

// RerunAnnotation starts a new run of a finished PyJob when its value
// changes (any new value): same spec, same output claim, status.runs
// counts the runs.
const RerunAnnotation = "trainops.dev/rerun"

// PyJobSpec is the training run a user asks for. Once created it is immutable
// except for suspend: a training run is a record of what ran, so running
// something else means creating a PyJob under a new name.
//
// +kubebuilder:validation:XValidation:rule="self.image == oldSelf.image",message="image cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run another image",fieldPath=".image",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.command == oldSelf.command",message="command cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".command",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.args) == has(oldSelf.args) && (!has(self.args) || self.args == oldSelf.args)",message="args cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".args",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)",message="env cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".env",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.gpu) == has(oldSelf.gpu) && (!has(self.gpu) || self.gpu == oldSelf.gpu)",message="gpu cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".gpu",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.workers) == has(oldSelf.workers) && (!has(self.workers) || self.workers == oldSelf.workers)",message="workers cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".workers",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)",message="resources cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".resources",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.datasetPath) == has(oldSelf.datasetPath) && (!has(self.datasetPath) || self.datasetPath == oldSelf.datasetPath)",message="datasetPath cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".datasetPath",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.outputPath) == has(oldSelf.outputPath) && (!has(self.outputPath) || self.outputPath == oldSelf.outputPath)",message="outputPath cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".outputPath",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.storage) == has(oldSelf.storage) && (!has(self.storage) || self.storage == oldSelf.storage)",message="storage cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".storage",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.nodeSelector) == has(oldSelf.nodeSelector) && (!has(self.nodeSelector) || self.nodeSelector == oldSelf.nodeSelector)",message="nodeSelector cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".nodeSelector",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) || self.tolerations == oldSelf.tolerations)",message="tolerations cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".tolerations",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.backoffLimit) == has(oldSelf.backoffLimit) && (!has(self.backoffLimit) || self.backoffLimit == oldSelf.backoffLimit)",message="backoffLimit cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".backoffLimit",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.activeDeadlineSeconds) == has(oldSelf.activeDeadlineSeconds) && (!has(self.activeDeadlineSeconds) || self.activeDeadlineSeconds == oldSelf.activeDeadlineSeconds)",message="activeDeadlineSeconds cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".activeDeadlineSeconds",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.ttlSecondsAfterFinished) == has(oldSelf.ttlSecondsAfterFinished) && (!has(self.ttlSecondsAfterFinished) || self.ttlSecondsAfterFinished == oldSelf.ttlSecondsAfterFinished)",message="ttlSecondsAfterFinished cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".ttlSecondsAfterFinished",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.queueName) == has(oldSelf.queueName) && (!has(self.queueName) || self.queueName == oldSelf.queueName)",message="queueName cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".queueName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.priorityClassName) == has(oldSelf.priorityClassName) && (!has(self.priorityClassName) || self.priorityClassName == oldSelf.priorityClassName)",message="priorityClassName cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".priorityClassName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.workloadPriorityClassName) == has(oldSelf.workloadPriorityClassName) && (!has(self.workloadPriorityClassName) || self.workloadPriorityClassName == oldSelf.workloadPriorityClassName)",message="workloadPriorityClassName cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".workloadPriorityClassName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.workloadPriorityClassName) || has(self.queueName)",message="workloadPriorityClassName is Kueue's: it needs queueName",fieldPath=".workloadPriorityClassName",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="has(self.shmSize) == has(oldSelf.shmSize) && (!has(self.shmSize) || self.shmSize == oldSelf.shmSize)",message="shmSize cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".shmSize",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.failurePolicy) == has(oldSelf.failurePolicy) && (!has(self.failurePolicy) || self.failurePolicy == oldSelf.failurePolicy)",message="failurePolicy cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".failurePolicy",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.template) == has(oldSelf.template) && (!has(self.template) || self.template == oldSelf.template)",message="template cannot change once the PyJob is created (only spec.suspend may change): create a PyJob under a new name to run it again",fieldPath=".template",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(self.storage.dataset) || has(self.datasetPath)",message="storage.dataset is mounted at datasetPath: set datasetPath too",fieldPath=".datasetPath",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(self.storage.output) || has(self.outputPath)",message="storage.output is mounted at outputPath: set outputPath too",fieldPath=".outputPath",reason=FieldValueRequired
type PyJobSpec struct {
	// Image is the training container image.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="image must name the training container image, e.g. pytorch/pytorch:2.0-cuda11.7-cudnn8-devel"
	// +kubebuilder:validation:MaxLength=512
	// +required
	Image string `json:"image"`

	// Command is the entrypoint of the training container, e.g.
	// ["python", "train.py"].
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="command must not be empty: give the training entrypoint, e.g. [\"python\", \"train.py\"]"
	// +listType=atomic
	// +required
	Command []string `json:"command"`

	// Args are appended to command.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`

	// Env is set in the training container, after the distributed-training
	// variables trainops sets (so a user value wins).
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// GPU is the number of GPUs each worker gets (the nvidia.com/gpu limit of
	// each pod). 0 runs on CPU.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="gpu cannot be negative: it is the number of GPUs per worker (0 runs on CPU)"
	// +kubebuilder:validation:XValidation:rule="self <= 64",message="gpu is the number of GPUs per worker and cannot exceed 64: use more workers for larger runs"
	// +optional
	GPU int32 `json:"gpu"`

	// Workers is the number of pods. More than one makes a distributed run: an
	// Indexed Job with a headless Service for rendezvous.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="workers must be at least 1: it is the number of training pods"
	// +kubebuilder:validation:XValidation:rule="self <= 1024",message="workers cannot exceed 1024"
	// +optional
	Workers int32 `json:"workers,omitempty"`

	// Resources are the CPU and memory of each worker, used as both request
	// and limit.
	// +optional
	Resources *PyJobResources `json:"resources,omitempty"`

	// DatasetPath is where the dataset is mounted in the container (exported
	// as DATASET_PATH). Without storage.dataset it is an empty emptyDir:
	// validate and diff warn, and the PyJob's Storage condition is False.
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	DatasetPath string `json:"datasetPath,omitempty"`

	// OutputPath is where the output volume is mounted in the container
	// (exported as OUTPUT_PATH). Without storage.output it is an emptyDir,
	// lost with the pod: validate and diff warn, and the PyJob's Storage
	// condition is False.
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	OutputPath string `json:"outputPath,omitempty"`

	// Storage says which volumes back datasetPath and outputPath.
	// +optional
	Storage *PyJobStorage `json:"storage,omitempty"`

	// NodeSelector constrains the workers to matching nodes.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations are added to the workers; a toleration for the
	// nvidia.com/gpu NoSchedule taint is added when gpu > 0.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// BackoffLimit is the older name of failurePolicy.maxRestarts: how many
	// times the whole run is restarted after a worker fails, used when
	// failurePolicy.maxRestarts is unset.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// ActiveDeadlineSeconds bounds each attempt of the run: a restart
	// starts the clock again.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// TTLSecondsAfterFinished deletes the finished Job (not the PyJob, and
	// never the output) after this many seconds.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// Suspend pauses the run: no pods run while it is true. It is the one
	// field that may change after creation.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// QueueName is the Kueue LocalQueue the run is submitted to.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	QueueName string `json:"queueName,omitempty"`

	// PriorityClassName is the workers' priority class.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// WorkloadPriorityClassName is the Kueue WorkloadPriorityClass of the
	// run (with queueName): its place in the queue and which runs it may
	// preempt or be preempted by, leaving its pods' scheduling priority to
	// priorityClassName.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	WorkloadPriorityClassName string `json:"workloadPriorityClassName,omitempty"`

	// ShmSize is the size of the memory-backed /dev/shm every worker gets
	// (PyTorch's DataLoader workers and NCCL share memory through it; the
	// container runtime's default is too small for them). Unset: half the
	// memory limit when resources.memory is set, 1Gi otherwise. "0" mounts
	// none, leaving the runtime's default.
	// +optional
	ShmSize *resource.Quantity `json:"shmSize,omitempty"`

	// FailurePolicy says when a failed worker restarts the whole run and
	// when it fails it.
	// +optional
	FailurePolicy *PyJobFailurePolicy `json:"failurePolicy,omitempty"`

	// Template is a PodTemplateSpec merged over the pod trainops builds,
	// strategic-merge style: containers, volumes, volume mounts and env by
	// name, the trainer container being "trainer". trainops's own fields
	// win: the trainer's image, command and args, the GPU limit, the
	// distributed-training variables, restartPolicy, subdomain, the
	// dataset, output and /dev/shm volumes, and trainops's labels.
	// Tolerations are added to trainops's. Everything else a pod holds is
	// the template's; the sync's workload policy applies to the merged pod.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +optional
	Template *runtime.RawExtension `json:"template,omitempty"`
}

// PyJobFailurePolicy bounds restarts of a PyJob's whole run. A restart
// stops every worker, then starts them all again together as a new
// attempt of the Job; each worker's TRAINOPS_RESTART_ATTEMPT says which.
type PyJobFailurePolicy struct {
	// MaxRestarts is how many times a worker's failure restarts the whole
	// run before the run fails. Unset: backoffLimit when set, else 0.
	// Disruptions (preemption, eviction, node loss) restart the run
	// without counting.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// FailOnExitCodes are exit codes of the trainer container that fail
	// the run at once, never restarted.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=255
	// +listType=set
	// +optional
	FailOnExitCodes []int32 `json:"failOnExitCodes,omitempty"`
}

// PyJobResources are the CPU and memory of one worker.
type PyJobResources struct {
	// CPU is the CPU request and limit, e.g. "4" or "500m".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`

	// Memory is the memory request and limit, e.g. "8Gi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// PyJobStorage names the volumes behind datasetPath and outputPath.
type PyJobStorage struct {
	// Dataset is an existing claim with the training data, mounted read-only
	// at datasetPath.
	// +optional
	Dataset *DatasetVolume `json:"dataset,omitempty"`

	// Output is mounted read-write at outputPath: an existing claim, or a
	// claim "<name>-output" that trainops creates and keeps after the PyJob
	// is deleted.
	// +optional
	Output *OutputVolume `json:"output,omitempty"`
}

// DatasetVolume is an existing PersistentVolumeClaim with the dataset.
type DatasetVolume struct {
	// ClaimName is the existing PersistentVolumeClaim in the PyJob's
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ClaimName string `json:"claimName"`
}

// OutputVolume is either an existing claim or a claim trainops creates.
//
// +kubebuilder:validation:XValidation:rule="has(self.claimName) != has(self.size)",message="set exactly one of claimName (an existing claim) or size (a claim trainops creates)"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || has(self.size)",message="storageClassName applies only to a claim trainops creates: set size too",fieldPath=".storageClassName"
type OutputVolume struct {
	// ClaimName is an existing PersistentVolumeClaim in the PyJob's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ClaimName string `json:"claimName,omitempty"`

	// Size makes trainops create the claim "<name>-output" of this size. The
	// claim is kept when the PyJob is deleted: training output is data.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the claim trainops creates; the cluster default
	// when unset.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// PyJobPhase is where a PyJob is in its life.
// +kubebuilder:validation:Enum=Pending;Queued;Running;Succeeded;Failed;Suspended
type PyJobPhase string

// The phases of a PyJob.
const (
	PyJobPending PyJobPhase = "Pending"
	// PyJobQueued is a PyJob whose Job waits for its queue (spec.queueName)
	// to admit it: no worker of it runs, none holds a GPU.
	PyJobQueued    PyJobPhase = "Queued"
	PyJobRunning   PyJobPhase = "Running"
	PyJobSucceeded PyJobPhase = "Succeeded"
	PyJobFailed    PyJobPhase = "Failed"
	PyJobSuspended PyJobPhase = "Suspended"
)

// PyJobStatus is what trainops observed of the run.
type PyJobStatus struct {
	// Phase is Pending, Queued, Running, Succeeded, Failed or Suspended.
	// +optional
	Phase PyJobPhase `json:"phase,omitempty"`

	// Message says why the PyJob is in its phase, e.g. the Job's failure
	// reason.
	// +optional
	Message string `json:"message,omitempty"`

	// StartTime is when the Job started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the run succeeded or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// JobName is the batch/v1 Job running the workers.
	// +optional
	JobName string `json:"jobName,omitempty"`

	// Active is the number of running worker pods.
	// +optional
	Active int32 `json:"active,omitempty"`

	// Succeeded is the number of worker pods that succeeded.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`

	// Failed is the number of worker pods that failed.
	// +optional
	Failed int32 `json:"failed,omitempty"`

	// Restarts is how many times this run was restarted for a worker's
	// failure (disruptions are not counted).
	// +optional
	Restarts int32 `json:"restarts,omitempty"`

	// Attempt is the attempt of the run the Job runs now, 0 for the
	// first: every restart, disruptions included, starts the next. Workers
	// read it as TRAINOPS_RESTART_ATTEMPT.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// Runs is how many runs the PyJob has started: 1 for the first, one
	// more for each rerun (the trainops.dev/rerun annotation).
	// +optional
	Runs int32 `json:"runs,omitempty"`

	// Rerun is the trainops.dev/rerun value the latest run answers.
	// +optional
	Rerun string `json:"rerun,omitempty"`

	// Conditions are the kstatus-compatible conditions (Ready, Reconciling,
	// Stalled); JobUpToDate (False, reason Immutable) while the Job
	// differs from what the PyJob builds now in its pod template, which
	// cannot change in place; and Storage (False, reason NoStorage) while
	// datasetPath or outputPath has no storage behind it; and Restarting
	// (True while a restart or rerun stops the old workers and starts the
	// new, False once they started, naming the cause).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Queue is Kueue's account of the run while it is Queued: its
	// Workload, Kueue's reason, and its place in line (unset in other
	// phases).
	// +optional
	Queue *PyJobQueueStatus `json:"queue,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PyJobQueueStatus is where a queued run waits, as Kueue says.
type PyJobQueueStatus struct {
	// Workload is the Kueue Workload of the run's Job; empty until Kueue
	// made it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Workload string `json:"workload,omitempty"`

	// Reason is Kueue's reason the Workload waits: its QuotaReserved
	// condition's (Pending), or its Evicted condition's after an eviction
	// (Preempted, PodsReadyTimeout, ...).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`

	// PositionInLocalQueue is how many pending Workloads of the PyJob's
	// LocalQueue Kueue tries before this one (0: it is next), as Kueue's
	// visibility API says; unset where that API is not served.
	// +optional
	PositionInLocalQueue *int32 `json:"positionInLocalQueue,omitempty"`

	// PositionInClusterQueue is the same within the LocalQueue's
	// ClusterQueue, whose quota it waits for, every team's Workloads
	// counted.
	// +optional
	PositionInClusterQueue *int32 `json:"positionInClusterQueue,omitempty"`
}

// PyJob is a deep-learning training run on GPUs. trainops runs it as a
// batch/v1 Job "<name>-job" (Indexed, with a headless Service, when workers >
// 1) and mounts its dataset and output volumes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pj,categories=trainops
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpu`,description="GPUs per worker"
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.spec.workers`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`
// +kubebuilder:printcolumn:name="Runs",type=integer,JSONPath=`.status.runs`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queueName`,description="Kueue LocalQueue"
// +kubebuilder:printcolumn:name="Position",type=integer,JSONPath=`.status.queue.positionInLocalQueue`,description="Workloads ahead of it in its LocalQueue while Queued"
// +kubebuilder:printcolumn:name="Waits",type=string,JSONPath=`.status.queue.reason`,priority=1,description="Kueue's reason while Queued"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of at most 52 characters: it names the Job, its Service and the workers' hostnames"
type PyJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   PyJobSpec   `json:"spec"`
	Status PyJobStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *PyJob) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the status conditions.
func (in *PyJob) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// ObserveGeneration records, in status.observedGeneration, that the status
// describes the current spec.
func (in *PyJob) ObserveGeneration() { in.Status.ObservedGeneration = in.Generation }

// +kubebuilder:object:root=true

// PyJobList is a list of PyJobs.
type PyJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PyJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PyJob{}, &PyJobList{})
}
