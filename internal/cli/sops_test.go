// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/decrypt"
)

// TestSOPSBeforeMerge: validate, render and diff read a repository with a
// SOPS-encrypted Secret without keys. Its values never appear in their
// output, not even the live diff's against a cluster holding the Secret
// decrypted; validate refuses a value left in the clear and an encrypted
// object of a kind not decrypted, naming the file, object and field.
func TestSOPSBeforeMerge(t *testing.T) {
	const ns, home = "ml-sops-cli", "trainops-sops-cli"
	const first, second = "first-token-0b7d44", "second-token-5e19c2"
	id, _ := age.GenerateX25519Identity()
	kinds := "--allowed-kinds=" + strings.Join(append(config.KindNames(check.DefaultAllowedKinds), "Secret"), ",")
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secretFor := func(token string) string {
		plain := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: tokens\n  namespace: %s\ndata:\n  hf: %s\n", ns, base64.StdEncoding.EncodeToString([]byte(token)))
		enc, err := decrypt.EncryptYAML([]byte(plain), decrypt.SecretFields, id.Recipient().String())
		if err != nil {
			t.Fatal(err)
		}
		return string(enc)
	}
	write("namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n")
	write("tokens.sops.yaml", secretFor(first))
	write("kustomization.yaml", "resources:\n- namespace.yaml\n- tokens.sops.yaml\n")
	noValues := func(what, text string) {
		t.Helper()
		for _, v := range []string{first, second} {
			if strings.Contains(text, v) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(v))) {
				t.Errorf("%s shows a secret value:\n%s", what, text)
			}
		}
	}

	out, errOut, code := run(t, "validate", dir, kinds)
	if code != ExitOK {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, "render", dir, kinds)
	if code != ExitOK || !strings.Contains(out, "ENC[AES256_GCM") {
		t.Fatalf("render: exit %d\n%s%s", code, out, errOut)
	}
	noValues("render", out+errOut)

	// The cluster holds the Secret decrypted, as a sync applied it.
	ctx := context.Background()
	keys, err := decrypt.FromSecret("the test's keys", map[string][]byte{"id.agekey": []byte(id.String())})
	if err != nil {
		t.Fatal(err)
	}
	e, c := syncEngine(t, home, append(slices.Clone(check.DefaultAllowedKinds), check.DefaultDecryptKinds...), keys)
	if _, err := e.Sync(ctx, dir, "main@sha1:0000000000000000000000000000000000000005"); err != nil {
		t.Fatal(err)
	}
	live := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tokens"}, live); err != nil || string(live.Data["hf"]) != first {
		t.Fatalf("the sync did not apply the Secret decrypted (err %v)", err)
	}
	diffArgs := []string{"diff", "--cluster", "--repo", dir, "--kubeconfig", env.Kubeconfig, "--namespace", home, "--no-color", kinds}
	out, errOut, code = run(t, diffArgs...)
	if code != ExitOK || !strings.Contains(out, "no changes") {
		t.Fatalf("just synced: exit %d\n%s%s", code, out, errOut)
	}
	write("tokens.sops.yaml", secretFor(second))
	out, errOut, code = run(t, diffArgs...)
	if code != ExitChanges {
		t.Fatalf("diff of a new token: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "live diff", out, "~ update Secret "+ns+"/tokens")
	noValues("the live diff", out+errOut)

	// A value left in the clear, and an encrypted ConfigMap.
	enc := secretFor(second)
	clear := regexpReplaceValue(t, enc, "hf", base64.StdEncoding.EncodeToString([]byte(second)))
	write("tokens.sops.yaml", clear)
	out, errOut, code = run(t, "validate", dir, kinds)
	if code != ExitChanges {
		t.Fatalf("validate of a value in the clear: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "validate", out+errOut, "tokens.sops.yaml", "Secret "+ns+"/tokens", "data.hf is not encrypted")
	noValues("validate", out+errOut)

	write("tokens.sops.yaml", strings.Replace(enc, "kind: Secret", "kind: ConfigMap", 1))
	out, errOut, code = run(t, "validate", dir, kinds)
	if code != ExitChanges {
		t.Fatalf("validate of an encrypted ConfigMap: exit %d\n%s%s", code, out, errOut)
	}
	mustContain(t, "validate", out+errOut, "ConfigMap "+ns+"/tokens", "decryption.kinds")
}

// regexpReplaceValue replaces the value of key (a line "  key: …") in doc.
func regexpReplaceValue(t *testing.T, doc, key, value string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "    "+key+": ") {
			lines[i] = "    " + key + ": " + value
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("no %s in:\n%s", key, doc)
	return ""
}
