// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"fmt"
	"hash/fnv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// Names of the GPU stack's objects, as GPU operators name them.
const (
	RuntimeClassName      = "nvidia"
	DriverDaemonSet       = "nvidia-driver-daemonset"
	ToolkitDaemonSet      = "nvidia-container-toolkit-daemonset"
	DevicePluginDaemonSet = "nvidia-device-plugin-daemonset"
	DCGMExporterDaemonSet = "nvidia-dcgm-exporter"
	MIGManagerDaemonSet   = "nvidia-mig-manager"
	GFDDaemonSet          = "gpu-feature-discovery"
	ValidatorDaemonSet    = "nvidia-operator-validator"
	DevicePluginConfigMap = "nvidia-device-plugin-config"
	DCGMExporterService   = "nvidia-dcgm-exporter"
	DCGMExporterPortName  = "gpu-metrics"
	DCGMExporterPort      = 9400
)

// ServiceMonitorGVK is Prometheus Operator's ServiceMonitor, which may not be
// installed.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

// ClusterPolicyChildren are the objects the active ClusterPolicy becomes.
type ClusterPolicyChildren struct {
	// Namespace is created when missing and never owned: it may hold more
	// than trainops's objects.
	Namespace *corev1.Namespace
	// Objects are the owned children, cluster-scoped first, in apply order.
	Objects []client.Object
	// ServiceMonitor is nil unless enabled; it needs Prometheus Operator's
	// CRD.
	ServiceMonitor *unstructured.Unstructured
	// DaemonSets are the names of the enabled components' DaemonSets.
	DaemonSets []string
}

// component is one DaemonSet of the GPU stack.
type component struct {
	// name is the component's name in its nvidia.com/gpu.deploy label.
	name, daemonSet, serviceAccount string
	container                       corev1.Container
	// init run in order before container: validations and waits.
	init []corev1.Container
	// selector narrows the nodes beyond the component's deploy label;
	// affinity keeps it off nodes another DaemonSet of it serves.
	selector       map[string]string
	affinity       *corev1.Affinity
	hostPID        bool
	hostIPC        bool
	runtimeClass   string
	strategy       appsv1.DaemonSetUpdateStrategy
	volumes        []corev1.Volume
	podAnnotations map[string]string
	// rules are what the component's ServiceAccount may do in the GPU
	// namespace (a Role and RoleBinding of its name); none when empty.
	rules []rbacv1.PolicyRule
	// labels are added to the DaemonSet's and its pods' labels.
	labels map[string]string
}

// ForClusterPolicy builds the GPU stack of an active ClusterPolicy for
// the GPU nodes nodes: one driver DaemonSet per OS among them.
func ForClusterPolicy(cp *gpuv1alpha1.ClusterPolicy, nodes GPUNodes) ClusterPolicyChildren {
	s := cp.Spec
	ns := namespaceOf(cp)
	out := ClusterPolicyChildren{
		Namespace: &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelPartOf: ManagedBy}},
		},
	}
	// With CDI on, the toolkit also configures the nvidia-cdi and
	// nvidia-legacy handlers (a runtime forced into one mode), and the GPU
	// Operator offers a RuntimeClass for each.
	handlers := []string{RuntimeClassName}
	if s.ContainerRuntime.CDI.Enabled {
		handlers = append(handlers, RuntimeClassName+"-cdi", RuntimeClassName+"-legacy")
	}
	for _, h := range handlers {
		out.Objects = append(out.Objects, &nodev1.RuntimeClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: "node.k8s.io/v1", Kind: "RuntimeClass"},
			ObjectMeta: cpMeta(cp, h, ""),
			Handler:    h,
		})
	}
	rolling := rollingUpdate(s.RollingUpdate.MaxUnavailable, intstr.FromInt32(1))
	var comps []component

	driver := enabled(s.Driver.Enabled)
	if driver {
		for _, c := range driverComponents(s, nodes) {
			// A new driver restarts every GPU workload on the node: its pod
			// is replaced only when deleted, by an operator or, with
			// autoUpgrade, by trainops once the node is drained.
			c.strategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
			comps = append(comps, c)
		}
	}
	if enabled(s.ContainerRuntime.Enabled) {
		comps = append(comps, toolkitComponent(s, driver))
	}
	comps = append(comps, validatorComponent(s))
	dp, gfd := enabled(s.DevicePlugin.Enabled), enabled(s.GFD.Enabled)
	if cm := devicePluginConfigMap(cp, s, ns); cm != nil && (dp || gfd) {
		out.Objects = append(out.Objects, cm)
	}
	if dp {
		comps = append(comps, perConfig(s, func() component { return devicePluginComponent(s) }, DevicePluginDaemonSetFor)...)
	}
	if gfd {
		comps = append(comps, perConfig(s, func() component { return gfdComponent(s) }, GFDDaemonSetFor)...)
	}
	if enabled(s.DCGM.Exporter.Enabled) {
		comps = append(comps, dcgmExporterComponent(s))
		out.Objects = append(out.Objects, &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: cpMeta(cp, DCGMExporterService, ns, "app", DCGMExporterDaemonSet),
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": DCGMExporterDaemonSet},
				Ports:    []corev1.ServicePort{{Name: DCGMExporterPortName, Port: DCGMExporterPort, TargetPort: intstr.FromString(DCGMExporterPortName), Protocol: corev1.ProtocolTCP}},
			},
		})
		if enabled(s.DCGM.Exporter.ServiceMonitor.Enabled) {
			out.ServiceMonitor = serviceMonitor(cp, ns)
		}
	}
	if s.MIGManager.Enabled {
		out.Objects = append(out.Objects, migManagerObjects(cp, ns)...)
		comps = append(comps, migManagerComponent(s))
	}

	for _, c := range comps {
		if c.strategy.Type == "" {
			c.strategy = rolling
		}
		out.Objects = append(out.Objects,
			&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: cpMeta(cp, c.serviceAccount, ns)})
		if len(c.rules) > 0 {
			out.Objects = append(out.Objects, componentRBAC(cp, ns, c)...)
		}
		out.Objects = append(out.Objects, daemonSet(cp, ns, c))
		out.DaemonSets = append(out.DaemonSets, c.daemonSet)
	}
	return out
}

// DCGMExporterURL is the metrics address of cp's DCGM exporter Service,
// or "" when cp runs none.
func DCGMExporterURL(cp *gpuv1alpha1.ClusterPolicy) string {
	if cp == nil || !enabled(cp.Spec.DCGM.Exporter.Enabled) {
		return ""
	}
	return fmt.Sprintf("http://%s.%s.svc:%d/metrics", DCGMExporterService, namespaceOf(cp), DCGMExporterPort)
}

// DefaultGPUNamespace is where the GPU stack runs when a ClusterPolicy
// names no namespace (the CRD's default too).
const DefaultGPUNamespace = "gpu-operator"

func namespaceOf(cp *gpuv1alpha1.ClusterPolicy) string {
	if cp.Spec.Namespace == "" {
		return DefaultGPUNamespace
	}
	return cp.Spec.Namespace
}

// cpMeta is the metadata of a ClusterPolicy child; extra are label pairs.
func cpMeta(cp *gpuv1alpha1.ClusterPolicy, name, ns string, extra ...string) metav1.ObjectMeta {
	labels := commonLabels(LabelClusterPolicy, cp.Name)
	for i := 0; i+1 < len(extra); i += 2 {
		labels[extra[i]] = extra[i+1]
	}
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       ns,
		Labels:          labels,
		OwnerReferences: ownerRef(gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind), cp),
	}
}

func daemonSet(cp *gpuv1alpha1.ClusterPolicy, ns string, c component) *appsv1.DaemonSet {
	meta := cpMeta(cp, c.daemonSet, ns, "app", c.daemonSet)
	for k, v := range c.labels {
		meta.Labels[k] = v
	}
	// The stack runs on a node remediation took out of service too: its
	// driver restarts there and its exporter says when the node is well.
	tolerations := []corev1.Toleration{{Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: gpuv1alpha1.RemediationTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	tolerations = append(tolerations, cp.Spec.Tolerations...)
	if c.name == ComponentDriver {
		tolerations = append(tolerations, cp.Spec.Driver.Tolerations...)
	}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: meta,
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": c.daemonSet}},
			UpdateStrategy: c.strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: meta.Labels, Annotations: c.podAnnotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: c.serviceAccount,
					RuntimeClassName:   runtimeClass(c.runtimeClass),
					NodeSelector:       merge(cp.Spec.NodeSelector, c.selector, map[string]string{DeployLabel(c.name): "true"}),
					Affinity:           c.affinity,
					Tolerations:        tolerations,
					PriorityClassName:  cp.Spec.PriorityClassName,
					HostPID:            c.hostPID,
					HostIPC:            c.hostIPC,
					InitContainers:     c.init,
					Containers:         []corev1.Container{c.container},
					Volumes:            c.volumes,
				},
			},
		},
	}
}

func rollingUpdate(maxUnavailable *intstr.IntOrString, def intstr.IntOrString) appsv1.DaemonSetUpdateStrategy {
	mu := def
	if maxUnavailable != nil {
		mu = *maxUnavailable
	}
	return appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &mu},
	}
}

// migStrategy is how the device plugin and GFD advertise MIG devices:
// set whether or not the MIG manager runs, as the GPU Operator sets it
// from mig.strategy (a GPU without MIG is nvidia.com/gpu either way).
func migStrategy(s gpuv1alpha1.ClusterPolicySpec) string {
	if s.MIGManager.Strategy == "" {
		return "single"
	}
	return s.MIGManager.Strategy
}

// deviceListStrategy is how the device plugin hands a container its
// devices. Under strict isolation (isolationStrict) it uses volume mounts,
// the one way the toolkit then accepts from an unprivileged container; under
// Envvar, the GPU Operator's default, the environment variable. With CDI
// on, CDI annotations too, as the GPU Operator adds them.
func deviceListStrategy(s gpuv1alpha1.ClusterPolicySpec) string {
	strategy := "volume-mounts"
	if !isolationStrict(s) {
		strategy = "envvar"
	}
	if s.ContainerRuntime.CDI.Enabled {
		strategy += ",cdi-annotations"
	}
	return strategy
}

// isolationStrict reports whether containers get GPUs only through the
// device plugin (containerRuntime.isolation Strict, the default).
func isolationStrict(s gpuv1alpha1.ClusterPolicySpec) bool {
	return s.ContainerRuntime.Isolation != gpuv1alpha1.IsolationEnvvar
}

// CDIAnnotationPrefix is the prefix of the CDI annotations the device
// plugin writes and the NVIDIA runtime reads.
const CDIAnnotationPrefix = "nvidia.cdi.k8s.io/"

// cdiHookPath is where the toolkit installs nvidia-cdi-hook, which the CDI
// specs the device plugin generates call.
const cdiHookPath = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"

func serviceMonitor(cp *gpuv1alpha1.ClusterPolicy, ns string) *unstructured.Unstructured {
	meta := cpMeta(cp, DCGMExporterService, ns)
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": DCGMExporterDaemonSet}},
			"endpoints": []any{map[string]any{
				"port":     DCGMExporterPortName,
				"path":     "/metrics",
				"interval": cp.Spec.DCGM.Exporter.ServiceMonitor.Interval,
			}},
		},
	}}
	u.SetGroupVersionKind(ServiceMonitorGVK)
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(meta.Labels)
	u.SetOwnerReferences(meta.OwnerReferences)
	return u
}

func enabled(b *bool) bool { return b == nil || *b }

func runtimeClass(name string) *string {
	if name == "" {
		return nil
	}
	return &name
}

func hashString(s string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}

// componentRBAC is the Role and RoleBinding that give c's ServiceAccount
// its rules in the GPU namespace, both named after the ServiceAccount as
// the GPU Operator names them.
func componentRBAC(cp *gpuv1alpha1.ClusterPolicy, ns string, c component) []client.Object {
	return []client.Object{
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: cpMeta(cp, c.serviceAccount, ns),
			Rules:      c.rules,
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: cpMeta(cp, c.serviceAccount, ns),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: c.serviceAccount},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: c.serviceAccount, Namespace: ns}},
		},
	}
}
