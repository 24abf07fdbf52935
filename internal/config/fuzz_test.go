// SPDX-License-Identifier: Apache-2.0

package config

import "testing"

// FuzzParseBudget: any input gives a budget or an error naming the key.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"50%", "20", "0", "100%", "101%", "-1", "", "%", "lots"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s)
		if err != nil {
			return
		}
		if b.Percent < 0 || b.Percent > 100 || b.Count < 0 || (b.Percent > 0 && b.Count > 0) {
			t.Fatalf("%q parsed to an impossible budget %+v", s, b)
		}
	})
}

// FuzzParseKinds: any input gives kinds or an error.
func FuzzParseKinds(f *testing.F) {
	for _, s := range []string{"PyJob.training.trainops.dev", "ConfigMap", "pyjob", "", ".", "A.b.c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		gks, err := ParseKinds([]string{s})
		if err != nil {
			return
		}
		for _, gk := range gks {
			if gk.Kind == "" {
				t.Fatalf("%q parsed to an empty kind", s)
			}
		}
	})
}
