// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainops/trainops/internal/limits"
)

// Policy is what bounds every GitSync's sync: the settings a shard must
// share with the main Deployment, which publishes them (PolicyConfigMap)
// for its shards to enforce.
type Policy struct {
	RequireServiceAccount  bool          `json:"requireServiceAccount"`
	RefuseSecretRefs       bool          `json:"refuseSecretRefs"`
	AllowTolerateAllTaints bool          `json:"allowTolerateAllTaints"`
	AllowedKinds           []string      `json:"allowedKinds"`
	AllowedNamespaces      []string      `json:"allowedNamespaces"`
	ProtectedNamespaces    []string      `json:"protectedNamespaces"`
	AllowedPriorityClasses []string      `json:"allowedPriorityClasses"`
	AllowedImageRegistries []string      `json:"allowedImageRegistries"`
	MaxGitSyncTimeout      time.Duration `json:"maxGitSyncTimeout"`
	Render                 Render        `json:"render"`
	PodPowers
}

// PodPowers are what a pod can ask for that reaches beyond its container
// into the node: each is refused in a PyJob's spec.template unless its
// setting allows it.
type PodPowers struct {
	// AllowHostNamespaces lets a pod share the node's network, PID or IPC
	// namespace (hostNetwork, hostPID, hostIPC).
	AllowHostNamespaces bool `json:"allowHostNamespaces"`
	// AllowPrivileged lets a container run privileged.
	AllowPrivileged bool `json:"allowPrivileged"`
	// AllowAddedCapabilities lets a container add Linux capabilities.
	AllowAddedCapabilities bool `json:"allowAddedCapabilities"`
	// AllowHostPath lets a pod mount a folder of the node (hostPath).
	AllowHostPath bool `json:"allowHostPath"`
	// PodSecurityLevel is the Pod Security Standards level every PyJob's
	// pod is held to (baseline when empty; restricted; privileged turns
	// the standards off). A namespace whose
	// pod-security.kubernetes.io/enforce label is stricter gets its
	// label's level.
	PodSecurityLevel string `json:"podSecurityLevel"`
	// AllowNodeName lets a pod name its node (spec.nodeName), which
	// bypasses the scheduler, cordons and taints.
	AllowNodeName bool `json:"allowNodeName"`
	// AllowReservedTolerations lets a pod tolerate the taints that keep
	// workloads off a node on purpose: control-plane, unschedulable and
	// trainops's own remediation taint.
	AllowReservedTolerations bool `json:"allowReservedTolerations"`
	// AllowedVolumeTypes are the volume types a pod may use beyond
	// emptyDir, configMap, secret, persistentVolumeClaim, downwardAPI and
	// projected (e.g. nfs, csi, ephemeral).
	AllowedVolumeTypes []string `json:"allowedVolumeTypes"`
	// AllowedTokenAudiences are the audiences a projected
	// serviceAccountToken may be issued for (empty: only the API
	// server's own).
	AllowedTokenAudiences []string `json:"allowedTokenAudiences"`
	// AllowAgentServiceAccounts lets a pod run as an SREAgent's
	// ServiceAccount (sreagent-<name>), with that agent's powers.
	AllowAgentServiceAccounts bool `json:"allowAgentServiceAccounts"`
	// AllowResourceClaims lets a pod claim devices through dynamic
	// resource allocation (resourceClaims), outside the PyJob's gpu.
	AllowResourceClaims bool `json:"allowResourceClaims"`
}

// Pod Security Standards levels (k8s.io/pod-security-admission/api).
const (
	PodSecurityPrivileged = "privileged"
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
)

// podSecurityRank orders the levels, strictest last.
var podSecurityRank = map[string]int{PodSecurityPrivileged: 0, "": 1, PodSecurityBaseline: 1, PodSecurityRestricted: 2}

// StricterPodSecurity is the stricter of two levels ("" is baseline).
func StricterPodSecurity(a, b string) string {
	if podSecurityRank[b] > podSecurityRank[a] {
		return b
	}
	return a
}

// validPodSecurityLevel reports whether l names a level ("" is the
// default).
func validPodSecurityLevel(l string) bool {
	_, ok := podSecurityRank[l]
	return ok
}

// both is what p and q both allow.
func (p PodPowers) both(q PodPowers) PodPowers {
	return PodPowers{
		AllowHostNamespaces:       p.AllowHostNamespaces && q.AllowHostNamespaces,
		AllowPrivileged:           p.AllowPrivileged && q.AllowPrivileged,
		AllowAddedCapabilities:    p.AllowAddedCapabilities && q.AllowAddedCapabilities,
		AllowHostPath:             p.AllowHostPath && q.AllowHostPath,
		PodSecurityLevel:          StricterPodSecurity(p.PodSecurityLevel, q.PodSecurityLevel),
		AllowNodeName:             p.AllowNodeName && q.AllowNodeName,
		AllowReservedTolerations:  p.AllowReservedTolerations && q.AllowReservedTolerations,
		AllowedVolumeTypes:        common(p.AllowedVolumeTypes, q.AllowedVolumeTypes),
		AllowedTokenAudiences:     common(p.AllowedTokenAudiences, q.AllowedTokenAudiences),
		AllowAgentServiceAccounts: p.AllowAgentServiceAccounts && q.AllowAgentServiceAccounts,
		AllowResourceClaims:       p.AllowResourceClaims && q.AllowResourceClaims,
	}
}

// common is what both lists hold (empty allowing nothing more).
func common(a, b []string) []string {
	var out []string
	for _, v := range a {
		if slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

// PolicyConfigMap is the ConfigMap, in trainops's namespace, where the main
// Deployment publishes its Policy under the key PolicyKey.
const (
	PolicyConfigMap = "trainops-policy"
	PolicyKey       = "policy.json"
)

// ShardPolicyOwn is the shardPolicy setting of a shard that enforces its
// own settings, on purpose, rather than the main Deployment's.
const ShardPolicyOwn = "own"

// PolicyOf is the Policy r's settings make, with every default resolved
// (defaultKinds stands for an empty allowedKinds).
func PolicyOf(r Run, defaultKinds []string) Policy {
	return Policy{
		RequireServiceAccount:  r.Sync.RequireServiceAccount,
		RefuseSecretRefs:       r.Sync.RefuseSecretRefs,
		AllowTolerateAllTaints: r.Sync.AllowTolerateAllTaints,
		AllowedKinds:           orDefault(r.Sync.AllowedKinds, defaultKinds),
		AllowedNamespaces:      r.Sync.AllowedNamespaces,
		ProtectedNamespaces:    r.Sync.ProtectedNamespaces,
		AllowedPriorityClasses: r.Sync.AllowedPriorityClasses,
		AllowedImageRegistries: r.Sync.AllowedImageRegistries,
		MaxGitSyncTimeout:      firstSet(r.Sync.MaxGitSyncTimeout, DefaultMaxGitSyncTimeout),
		Render:                 r.Render,
		PodPowers:              r.Sync.PodPowers,
	}
}

// Tighten returns shard's settings bounded by main's policy as well: of
// each setting, the stricter. A list that allows (kinds, namespaces,
// priority classes, registries) keeps what both allow, an empty list
// standing for "any" (image registries: the defaults); protected
// namespaces add up; a bound takes the lower. Two lists with nothing in
// common are an error: no setting could honour both.
func Tighten(shard Run, main Policy, defaultKinds []string) (Run, error) {
	own := PolicyOf(shard, defaultKinds)
	s := &shard.Sync
	s.RequireServiceAccount = own.RequireServiceAccount || main.RequireServiceAccount
	s.RefuseSecretRefs = own.RefuseSecretRefs || main.RefuseSecretRefs
	s.AllowTolerateAllTaints = own.AllowTolerateAllTaints && main.AllowTolerateAllTaints
	s.PodPowers = own.PodPowers.both(main.PodPowers)
	var err error
	for _, l := range []struct {
		key        string
		dst        *[]string
		own, main  []string
		emptyIsAny bool
	}{
		{"allowedKinds", &s.AllowedKinds, own.AllowedKinds, main.AllowedKinds, false},
		{"allowedNamespaces", &s.AllowedNamespaces, own.AllowedNamespaces, main.AllowedNamespaces, true},
		{"allowedPriorityClasses", &s.AllowedPriorityClasses, own.AllowedPriorityClasses, main.AllowedPriorityClasses, true},
		{"allowedImageRegistries", &s.AllowedImageRegistries, own.AllowedImageRegistries, main.AllowedImageRegistries, true},
	} {
		if *l.dst, err = bothAllow(l.own, l.main, l.emptyIsAny); err != nil {
			return shard, fmt.Errorf("%s: %w", l.key, err)
		}
	}
	for _, ns := range main.ProtectedNamespaces {
		if !slices.Contains(s.ProtectedNamespaces, ns) {
			s.ProtectedNamespaces = append(s.ProtectedNamespaces, ns)
		}
	}
	s.MaxGitSyncTimeout = min(own.MaxGitSyncTimeout, firstSet(main.MaxGitSyncTimeout, DefaultMaxGitSyncTimeout))
	shard.Render.Timeout = min(firstSet(shard.Render.Timeout, limits.RenderTimeout), firstSet(main.Render.Timeout, limits.RenderTimeout))
	shard.Render.MemoryLimit = min(firstSet(shard.Render.MemoryLimit, limits.RenderMemoryBytes), firstSet(main.Render.MemoryLimit, limits.RenderMemoryBytes))
	shard.Render.MaxBytes = min(firstSet(shard.Render.MaxBytes, limits.RevisionBytes), firstSet(main.Render.MaxBytes, limits.RevisionBytes))
	if main.Render.LoadRestrictor != LoadRestrictionsNone {
		// Files outside a kustomization's folder only where both allow them.
		shard.Render.LoadRestrictor = main.Render.LoadRestrictor
	}
	return shard, nil
}

// bothAllow is what two allow-lists both allow.
func bothAllow(a, b []string, emptyIsAny bool) ([]string, error) {
	switch {
	case emptyIsAny && len(a) == 0:
		return b, nil
	case emptyIsAny && len(b) == 0:
		return a, nil
	}
	var out []string
	for _, v := range a {
		if slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the shard's %v and the main Deployment's %v have nothing in common", a, b)
	}
	return out, nil
}

// orDefault is v, or def when v is empty.
func orDefault(v, def []string) []string {
	if len(v) == 0 {
		return def
	}
	return v
}

// firstSet is v, or def when v is not set.
func firstSet[T int64 | time.Duration](d, def T) T {
	if d > 0 {
		return d
	}
	return def
}
