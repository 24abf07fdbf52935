// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestShardSelector: the main process and every valid shard pick disjoint
// GitSyncs; a selector that does not pick by the shard label is refused.
func TestShardSelector(t *testing.T) {
	main, err := ShardSelector("")
	if err != nil {
		t.Fatal(err)
	}
	unlabelled := labels.Set{"team": "a"}
	s1 := labels.Set{ShardLabel: "s1", "team": "a"}
	s2 := labels.Set{ShardLabel: "s2"}
	if !main.Matches(unlabelled) || main.Matches(s1) || main.Matches(s2) {
		t.Errorf("the main selector %q must pick exactly the GitSyncs without %s", main, ShardLabel)
	}
	for _, shard := range []string{"s1", ShardLabel + "=s1", ShardLabel + " in (s1,s3)", ShardLabel + "==s1,team=a"} {
		sel, err := ShardSelector(shard)
		if err != nil {
			t.Fatalf("%q: %v", shard, err)
		}
		if !sel.Matches(s1) || sel.Matches(s2) || sel.Matches(unlabelled) {
			t.Errorf("shard %q (%s) picks the wrong GitSyncs", shard, sel)
		}
	}
	for _, bad := range []string{"team=a", "!" + ShardLabel, ShardLabel + "!=s1", ShardLabel + " notin (s1)", ShardLabel, "a=(b"} {
		if _, err := ShardSelector(bad); err == nil {
			t.Errorf("shard %q accepted: it could pick GitSyncs the main process syncs too", bad)
		} else if !strings.Contains(err.Error(), "shard") {
			t.Errorf("shard %q: error %q does not name the setting", bad, err)
		}
	}
	if LeaderElectionID("base", "") != "base" || LeaderElectionID("base", "s1") == LeaderElectionID("base", "s2") || LeaderElectionID("base", "s1") == "base" {
		t.Error("each shard must elect a leader of its own")
	}
}
