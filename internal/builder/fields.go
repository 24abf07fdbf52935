// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"bytes"
	"fmt"
	"hash/fnv"
)

// htmlEscapes are the escapes a JSON encoder may write where protobuf's
// bytes hold the character itself: undone before hashing, so a set of
// fields hashes the same from a list read as JSON and an apply's answer.
var htmlEscapes = [][2][]byte{
	{[]byte(`\u003c`), []byte("<")},
	{[]byte(`\u003e`), []byte(">")},
	{[]byte(`\u0026`), []byte("&")},
	{[]byte(`\u2028`), []byte("\u2028")},
	{[]byte(`\u2029`), []byte("\u2029")},
}

// FieldsHash hashes a managed fields entry's fieldsV1, alike whether it
// was read as JSON or protobuf.
func FieldsHash(raw []byte) string {
	if bytes.Contains(raw, []byte(`\u`)) {
		for _, r := range htmlEscapes {
			raw = bytes.ReplaceAll(raw, r[0], r[1])
		}
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return fmt.Sprintf("%016x", h.Sum64())
}
