// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/decrypt"
)

// The demo's encrypted Secret: a token the training jobs would read, kept
// in Git encrypted with SOPS for an age key only the cluster holds.
const (
	demoKeysSecret   = "sops-age"
	demoSecretNS     = "ml-team"
	demoSecretName   = "hf-token"
	demoSecretFile   = "clusters/dev/secrets/hf-token.sops.yaml"
	trainopsNS       = "trainops-system"
	devKustomization = "clusters/dev/kustomization.yaml"
	// demoRepo is the repository's name in Gitea; demoStatusSecret holds
	// the Gitea token trainops posts commit statuses with.
	demoRepo         = "training-config"
	demoStatusSecret = "gitea-token"
)

// addEncryptedSecret gives the cluster a new age key (Secret sops-age in
// trainops's namespace) and commits, to the served repository's dev
// cluster, a Secret encrypted for it as `sops --encrypt --age
// --encrypted-regex '^(data|stringData)$'` does. It returns the token.
func (d *demo) addEncryptedSecret(ctx context.Context) (string, error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return "", err
	}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trainopsNS, Name: demoKeysSecret},
		Data: map[string][]byte{"identity.agekey": []byte(id.String() + "\n")}}
	if err := d.c.Create(ctx, keys); err != nil {
		return "", err
	}
	token := "hf_demo_" + randomHex()
	plain := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: Opaque\nstringData:\n  token: %s\n", demoSecretName, demoSecretNS, token)
	enc, err := decrypt.EncryptYAML([]byte(plain), decrypt.SecretFields, id.Recipient().String())
	if err != nil {
		return "", err
	}
	kust, err := os.ReadFile(filepath.Join(d.work, devKustomization))
	if err != nil {
		return "", err
	}
	with := strings.Replace(string(kust), "- ../../base\n", "- ../../base\n- secrets/hf-token.sops.yaml\n", 1)
	if with == string(kust) {
		return "", fmt.Errorf("%s: no resource ../../base to add the encrypted Secret beside", devKustomization)
	}
	if d.head, err = d.gitea.Push(ctx, d.work, demoRepo, map[string]string{demoSecretFile: string(enc), devKustomization: with}); err != nil {
		return "", err
	}
	say("committed %s, encrypted with SOPS for a new age key the cluster holds (Secret %s/%s)", demoSecretFile, trainopsNS, demoKeysSecret)
	return token, nil
}

// checkSecret waits for the encrypted Secret to be applied decrypted, and
// makes sure its value appears nowhere in trainops's log.
func (d *demo) checkSecret(ctx context.Context, token string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		sec := &corev1.Secret{}
		err := d.c.Get(ctx, client.ObjectKey{Namespace: demoSecretNS, Name: demoSecretName}, sec)
		if err == nil && string(sec.Data["token"]) == token {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Secret %s/%s was not applied decrypted (err %v; see %s)", demoSecretNS, demoSecretName, err, rel(d.root, d.logPath))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	logged, err := os.ReadFile(d.logPath)
	if err != nil {
		return err
	}
	if strings.Contains(string(logged), token) {
		return fmt.Errorf("trainops's log shows the decrypted token")
	}
	say("Secret %s/%s applied decrypted from %s; its value is in no log", demoSecretNS, demoSecretName, demoSecretFile)
	return nil
}

// ensureNamespace makes namespace ns unless it exists.
func ensureNamespace(ctx context.Context, c client.Client, ns string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// checkStatus waits for trainops's commit status on the last commit the
// demo pushed, through Gitea's API.
func (d *demo) checkStatus(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		sts, err := d.gitea.Statuses(ctx, demoRepo, d.head)
		for _, st := range sts {
			if st.State == "success" && strings.HasPrefix(st.Context, "trainops/") {
				say("Gitea shows commit %s as %s by %s: %s", d.head[:8], st.State, st.Context, st.Description)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no success status of trainops on commit %s in Gitea (statuses %+v, err %v; see %s)", d.head[:8], sts, err, rel(d.root, d.logPath))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
