// SPDX-License-Identifier: Apache-2.0

package children

import "sigs.k8s.io/controller-runtime/pkg/client"

// Live reads from the API server (APIReader), for what the cache
// does not hold.
func (d Deps) Live() client.Reader {
	if d.APIReader != nil {
		return d.APIReader
	}
	return d.Client
}
