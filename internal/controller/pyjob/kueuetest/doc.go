// SPDX-License-Identifier: Apache-2.0

// Package kueuetest holds the tests of PyJobs under a real Kueue: built
// from its module, run against the local control plane with its own CRDs
// and webhooks, admitting the Indexed Jobs trainops builds.
package kueuetest
