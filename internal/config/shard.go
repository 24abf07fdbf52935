// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// ShardLabel is the Namespace label that gives a namespace's GitSyncs to
// a shard: the main Deployment (no shard setting) syncs the GitSyncs of
// namespaces without it, and each shard those of the namespaces its
// selector picks by it. It is read from the Namespace, which the platform
// labels, never from a GitSync, which its team may label at will.
const ShardLabel = "sharding.trainops.dev/key"

// ShardSelector is the selector of the namespaces whose GitSyncs a process
// syncs: for the main process (shard ""), those without ShardLabel; for a
// shard, those its selector picks. A shard is a label selector that must pick by
// ShardLabel's value (= or in), so no GitSync is synced by the main
// process and a shard both; a bare value v stands for ShardLabel=v.
func ShardSelector(shard string) (labels.Selector, error) {
	shard = strings.TrimSpace(shard)
	if shard == "" {
		req, err := labels.NewRequirement(ShardLabel, selection.DoesNotExist, nil)
		if err != nil {
			return nil, err
		}
		return labels.NewSelector().Add(*req), nil
	}
	if !strings.ContainsAny(shard, "=!(), ") {
		shard = ShardLabel + "=" + shard
	}
	sel, err := labels.Parse(shard)
	if err != nil {
		return nil, fmt.Errorf("shard %q: not a label selector: %w", shard, err)
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Key() == ShardLabel {
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				return sel, nil
			}
		}
	}
	return nil, fmt.Errorf("shard %q: the selector must pick GitSyncs by the value of %s (%s=NAME or %s in (A,B)), so that the main Deployment, which syncs the GitSyncs without that label, never syncs them too", shard, ShardLabel, ShardLabel, ShardLabel)
}

// LeaderElectionID is the lease the replicas of a process compete for:
// base for the main process, and one per shard, so each shard elects its
// own leader.
func LeaderElectionID(base, shard string) string {
	if strings.TrimSpace(shard) == "" {
		return base
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.TrimSpace(shard)))
	return fmt.Sprintf("shard-%08x-%s", h.Sum32(), base)
}
