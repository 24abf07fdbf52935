package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/gate"
)

// EventSource names trainops in the Events it records.
const EventSource = "trainops"

// NewScheme knows the built-in kinds and trainops's three APIs.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainingv1alpha1.AddToScheme(s))
	utilruntime.Must(aiopsv1alpha1.AddToScheme(s))
	utilruntime.Must(gpuv1alpha1.AddToScheme(s))
	return s
}

// Setup registers the PyJob, SREAgent and ClusterPolicy reconcilers. Each
// reconcile steps aside while g is held (nil: never), without waiting.
func Setup(mgr ctrl.Manager, cfg config.Controllers, g *gate.Gate) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	rec := mgr.GetEventRecorder(EventSource)
	// Jobs first: the SREAgent and ClusterPolicy reconcilers step aside
	// while PyJobs' Jobs are being created, for a bounded time.
	jobsFirst := &JobsFirst{}
	deps := func() Deps {
		return Deps{Client: mgr.GetClient(), Recorder: rec, APIReader: mgr.GetAPIReader(), Config: cfg, Gate: g, JobsFirst: jobsFirst}
	}
	if err := (&PyJobReconciler{Deps: deps()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&SREAgentReconciler{Deps: deps()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&GPUNodeReconciler{Client: mgr.GetClient(), Config: cfg}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&ClusterPolicyReconciler{Deps: deps()}).SetupWithManager(mgr)
}
