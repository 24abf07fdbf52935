// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// AgentContainer is the name of the agent container; AgentPort serves its
// /metrics and /healthz.
const (
	AgentContainer = "agent"
	AgentPort      = 8080
	agentUID       = 65532
)

// SREAgentChildren are the objects one SREAgent becomes, all in its
// namespace. There is never a ClusterRole: an agent acts in its namespace
// only.
type SREAgentChildren struct {
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	RoleBinding    *rbacv1.RoleBinding
	Deployment     *appsv1.Deployment
}

// ForSREAgent builds every child of an SREAgent.
func ForSREAgent(a *aiopsv1alpha1.SREAgent, opts Options) SREAgentChildren {
	return SREAgentChildren{
		ServiceAccount: agentServiceAccount(a),
		Role:           AgentRole(a),
		RoleBinding:    agentRoleBinding(a),
		Deployment:     AgentDeployment(a, opts),
	}
}

// AgentChildPrefix starts the name of every child of an SREAgent, so an
// SREAgent cannot be named after an object that exists for another reason
// (a ServiceAccount bound to cluster-admin) and take it over.
const AgentChildPrefix = "sreagent-"

// AgentChildName is the name of an SREAgent's ServiceAccount, Role,
// RoleBinding and Deployment.
func AgentChildName(a *aiopsv1alpha1.SREAgent) string { return AgentChildPrefix + a.Name }

func agentMeta(a *aiopsv1alpha1.SREAgent) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            AgentChildName(a),
		Namespace:       a.Namespace,
		Labels:          commonLabels(LabelSREAgent, a.Name),
		OwnerReferences: ownerRef(aiopsv1alpha1.GroupVersion.WithKind(aiopsv1alpha1.SREAgentKind), a),
	}
}

func agentServiceAccount(a *aiopsv1alpha1.SREAgent) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: agentMeta(a),
	}
}

// AgentRole is everything the agent may do: read pods, events and PyJobs,
// record events, write its SREAgent's status, and, only with autoRepair,
// delete pods and patch PyJobs (a rerun's annotation).
func AgentRole(a *aiopsv1alpha1.SREAgent) *rbacv1.Role {
	podVerbs := []string{"get", "list", "watch"}
	pyjobVerbs := []string{"get", "list", "watch"}
	if a.Spec.AutoRepair {
		// Crash-looping pods deleted; a PyJob that failed on a node since
		// taken out of service rerun through its trainops.dev/rerun
		// annotation.
		podVerbs = append(podVerbs, "delete")
		pyjobVerbs = append(pyjobVerbs, "patch")
	}
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: agentMeta(a),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: podVerbs},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
			{APIGroups: []string{trainingv1alpha1.GroupVersion.Group}, Resources: []string{"pyjobs"}, Verbs: pyjobVerbs},
			// Its findings and actions, in its own SREAgent's status only
			// (read back when it restarts).
			{APIGroups: []string{aiopsv1alpha1.GroupVersion.Group}, Resources: []string{"sreagents"}, ResourceNames: []string{a.Name}, Verbs: []string{"get"}},
			{APIGroups: []string{aiopsv1alpha1.GroupVersion.Group}, Resources: []string{"sreagents/status"}, ResourceNames: []string{a.Name}, Verbs: []string{"patch"}},
		},
	}
}

func agentRoleBinding(a *aiopsv1alpha1.SREAgent) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: agentMeta(a),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentChildName(a)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentChildName(a), Namespace: a.Namespace}},
	}
}

// dcgmURL is the exporter address an agent reads: only with gpuEnable.
func dcgmURL(a *aiopsv1alpha1.SREAgent, opts Options) string {
	if !a.Spec.GPUEnable {
		return ""
	}
	return opts.DCGMURL
}

// AgentDeployment runs `trainops agent` (or spec.image) under the agent's
// ServiceAccount, non-root with a read-only root filesystem.
func AgentDeployment(a *aiopsv1alpha1.SREAgent, opts Options) *appsv1.Deployment {
	image := a.Spec.Image
	if image == "" {
		image = opts.AgentImage
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	if a.Spec.Resources != nil {
		res = *a.Spec.Resources
	}
	selector := map[string]string{LabelSREAgent: a.Name}
	meta := agentMeta(a)
	replicas := ptr.To(ptr.Deref(a.Spec.Replicas, 1))
	if a.Spec.ExternalScaling {
		replicas = nil // another controller's field
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 10}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: meta.Labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentChildName(a),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(agentUID)),
						RunAsGroup:     ptr.To(int64(agentUID)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  AgentContainer,
						Image: image,
						Args: []string{
							"agent",
							"--namespace=$(POD_NAMESPACE)",
							"--sreagent=" + a.Name,
							"--monitor-interval=" + strconv.Itoa(int(a.Spec.MonitorInterval)) + "s",
							"--auto-repair=" + strconv.FormatBool(a.Spec.AutoRepair),
							"--gpu=" + strconv.FormatBool(a.Spec.GPUEnable),
							"--dcgm-url=" + dcgmURL(a, opts),
							"--listen=:" + strconv.Itoa(AgentPort),
						},
						Env:            []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
						Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: AgentPort, Protocol: corev1.ProtocolTCP}},
						Resources:      res,
						LivenessProbe:  probe,
						ReadinessProbe: probe,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}
