// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/workload"
)

// sharePolicy makes a shard enforce the main Deployment's policy as well as
// its own (config.Tighten), and makes the main Deployment publish it for
// its shards and for the API server's admission policy. A shard set to enforce its own settings (shardPolicy: own)
// reads nothing. A shard started before the main Deployment published its
// policy does not start: the platform's policy is not known yet.
func sharePolicy(ctx context.Context, c client.Client, cfg config.Run) (config.Run, error) {
	kinds := config.KindNames(check.DefaultAllowedKinds)
	key := client.ObjectKey{Namespace: cfg.Namespace, Name: config.PolicyConfigMap}
	if cfg.Shard == "" {
		if err := ensureNamespace(ctx, c, cfg.Namespace); err != nil {
			return cfg, err
		}
		raw, err := json.Marshal(config.PolicyOf(cfg, kinds))
		if err != nil {
			return cfg, err
		}
		// The same ConfigMap holds the settings the API server's admission
		// policy for PyJobs reads (config/admission), one key each.
		data := workload.Of(cfg.Sync).AdmissionParams()
		data[config.PolicyKey] = string(raw)
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{builder.LabelManagedBy: builder.ManagedBy}},
			Data:       data}
		if err := c.Patch(ctx, cm, client.Apply, client.FieldOwner(builder.FieldManager), client.ForceOwnership); err != nil {
			return cfg, fmt.Errorf("publish the policy shards enforce (ConfigMap %s): %w", key, err)
		}
		return cfg, nil
	}
	if cfg.ShardPolicy == config.ShardPolicyOwn {
		return cfg, nil
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return cfg, fmt.Errorf("shard %s: the main Deployment has not published its policy (ConfigMap %s): start it first, or set shardPolicy to %q to enforce this shard's own settings", cfg.Shard, key, config.ShardPolicyOwn)
		}
		return cfg, fmt.Errorf("shard %s: read the main Deployment's policy (ConfigMap %s): %w", cfg.Shard, key, err)
	}
	var main config.Policy
	if err := json.Unmarshal([]byte(cm.Data[config.PolicyKey]), &main); err != nil {
		return cfg, fmt.Errorf("shard %s: the main Deployment's policy (ConfigMap %s, key %s): %w", cfg.Shard, key, config.PolicyKey, err)
	}
	tight, err := config.Tighten(cfg, main, kinds)
	if err != nil {
		return cfg, fmt.Errorf("shard %s under the main Deployment's policy: %w", cfg.Shard, err)
	}
	return tight, nil
}
