// SPDX-License-Identifier: Apache-2.0

// Package limits holds the bounds on what a repository revision may hold,
// shared by the fetch (gitsource), the render and the settings.
package limits

import (
	"fmt"
	"io"
	"time"
)

const (
	// FileBytes bounds one file: a training-config file past it is a
	// mistake or an attack.
	FileBytes = 8 << 20
	// RevisionBytes is the default bound on a revision's files added up,
	// on what a render reads, and on its rendered output.
	RevisionBytes = 64 << 20
)

// Default bounds of one render.
const (
	// RenderTimeout bounds one kustomize build.
	RenderTimeout = time.Minute
	// RenderMemoryBytes caps the memory of a kustomize build in its child
	// process.
	RenderMemoryBytes = 512 << 20
)

// ReadAll reads r to its end, refusing more than max bytes: an error
// saying the bound, without reading past it.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d MiB", max>>20)
	}
	return b, nil
}
