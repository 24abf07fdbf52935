// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"errors"
	"sync"
	"sync/atomic"

	"sigs.k8s.io/kustomize/kyaml/openapi"
)

// kyaml keeps its OpenAPI data in process-wide state, filled on first
// use: a strategic merge patch of a Kubernetes kind fills it, while the
// namespace filter of another build may read it unlocked. Until it is
// filled, builds hold schemaMu's read lock, and a build that needs the
// data stops (errNeedSchema), fills it alone under the write lock, and
// builds again. From then on it is only read, and builds take no lock:
// they never wait for each other but around that once. A patch of
// trainops's own kinds needs no such data (applySmPatch), so most
// processes never fill it.
var (
	schemaMu     sync.RWMutex
	schemaFilled atomic.Bool
)

// errNeedSchema stops a build that needs kyaml's OpenAPI data before it
// is filled.
var errNeedSchema = errors.New("kyaml's OpenAPI data is needed")

// withSchema runs build, reading kyaml's OpenAPI data safely.
func withSchema[T any](build func() (T, error)) (T, error) {
	if schemaFilled.Load() {
		return build()
	}
	schemaMu.RLock()
	out, err := build()
	schemaMu.RUnlock()
	if !errors.Is(err, errNeedSchema) {
		return out, err
	}
	fillSchema()
	return build()
}

// fillSchema fills kyaml's OpenAPI data, alone.
func fillSchema() {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if !schemaFilled.Load() {
		openapi.Schema()
		schemaFilled.Store(true)
	}
}
