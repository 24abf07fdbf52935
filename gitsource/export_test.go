// SPDX-License-Identifier: Apache-2.0

package gitsource

// MaxPacks is maxPacks, for the tests of package gitsource_test.
const MaxPacks = maxPacks

// CacheDirOf is the folder a Source keeps its clone in.
func CacheDirOf(s *Source) string { return s.opts.CacheDir }
