// SPDX-License-Identifier: Apache-2.0

package pyjob

import "testing"

// TestFairnessSinksBurstsOnly: a namespace's events in a burst come one
// step lower each; a lone event of another namespace comes at the top.
func TestFairnessSinksBurstsOnly(t *testing.T) {
	f := &fairness{}
	for i := range 100 {
		if p := f.priority("busy"); p != -i {
			t.Fatalf("event %d of a burst: priority %d, want %d", i, p, -i)
		}
	}
	if p := f.priority("quiet"); p != 0 {
		t.Errorf("a lone event of another namespace: priority %d, want 0", p)
	}
	if p := f.priority("busy"); p != -100 {
		t.Errorf("the burst goes on where it was: priority %d, want -100", p)
	}
}
