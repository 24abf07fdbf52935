// Package config embeds the generated CRDs, so the binary can install them
// and validate and default objects offline with the exact schemas the API
// server uses.
package config

import "embed"

// CRDs holds config/crd/bases/*.yaml.
//
//go:embed crd/bases/*.yaml
var CRDs embed.FS
