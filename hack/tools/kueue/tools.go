// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the Kueue hack/build-controlplane.sh builds: the queue
// controller the tests, `make demo` and `make bench` run beside the control
// plane, with its CRDs and webhook configuration from the same module.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
