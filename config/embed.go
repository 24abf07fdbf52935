// SPDX-License-Identifier: Apache-2.0

// Package config embeds the install manifests and the generated CRDs, so
// the binary can print its installation and validate and default objects
// offline with the exact schemas the API server uses.
package config

import "embed"

// CRDs holds config/crd/bases/*.yaml.
//
//go:embed crd/bases/*.yaml
var CRDs embed.FS

// Manifests holds every kustomization under config/, for `trainops install`.
//
//go:embed crd rbac manager admission default prometheus
var Manifests embed.FS
