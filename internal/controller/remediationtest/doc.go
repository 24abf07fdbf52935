// SPDX-License-Identifier: Apache-2.0

// Package remediationtest runs GPU node remediation against a local
// control plane of its own, with simulated GPU nodes whose DCGM exporters
// are HTTP servers of the test serving testdata's samples: a cluster has
// one ClusterPolicy, so these tests cannot share the controller package's.
package remediationtest
