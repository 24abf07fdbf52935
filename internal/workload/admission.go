// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"strconv"
	"strings"
)

// AdmissionParams are the policy's settings as the API server's admission
// policy for PyJobs (config/admission) reads them: one key per setting,
// named as in trainops's configuration, booleans "true" or "false", lists
// joined by commas. trainops publishes them in its policy ConfigMap, so
// the API server refuses by the settings the reconciler enforces.
func (p Policy) AdmissionParams() map[string]string {
	flags := map[string]bool{
		"allowPrivileged":           p.AllowPrivileged,
		"allowAddedCapabilities":    p.AllowAddedCapabilities,
		"allowHostPath":             p.AllowHostPath,
		"allowHostNamespaces":       p.AllowHostNamespaces,
		"allowNodeName":             p.AllowNodeName,
		"allowReservedTolerations":  p.AllowReservedTolerations,
		"allowAgentServiceAccounts": p.AllowAgentServiceAccounts,
		"allowResourceClaims":       p.AllowResourceClaims,
		"allowTolerateAllTaints":    p.AllowTolerateAll,
		"refuseSecretRefs":          p.RefuseSecretRefs,
	}
	out := make(map[string]string, len(flags)+3)
	for k, v := range flags {
		out[k] = strconv.FormatBool(v)
	}
	out["allowedPriorityClasses"] = strings.Join(p.AllowedPriorityClasses, ",")
	out["allowedVolumeTypes"] = strings.Join(p.AllowedVolumeTypes, ",")
	out["allowedTokenAudiences"] = strings.Join(p.AllowedTokenAudiences, ",")
	return out
}
