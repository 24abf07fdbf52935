// SPDX-License-Identifier: Apache-2.0

package decrypt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const plainSecret = `apiVersion: v1
kind: Secret
metadata:
  name: hf-token
  namespace: team-a
type: Opaque
data:
  token: aGZfc2VjcmV0dmFsdWU=
stringData:
  wandb: wandb-plaintext-key
`

// plaintexts are the values no error or output may show.
var plaintexts = []string{"aGZfc2VjcmV0dmFsdWU=", "wandb-plaintext-key", "hf_secretvalue"}

func identity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// encrypted is plainSecret as SOPS's own code encrypts it for id, read
// back as an object.
func encrypted(t *testing.T, ids ...*age.X25519Identity) map[string]any {
	t.Helper()
	var rs []string
	for _, id := range ids {
		rs = append(rs, id.Recipient().String())
	}
	enc, err := EncryptYAML([]byte(plainSecret), SecretFields, rs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plaintexts {
		if strings.Contains(string(enc), p) {
			t.Fatalf("encrypted file holds %q:\n%s", p, enc)
		}
	}
	return object(t, enc)
}

func object(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	out := map[string]any{}
	if err := yaml.Unmarshal(doc, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func keysOf(t *testing.T, ids ...*age.X25519Identity) *Keys {
	t.Helper()
	var lines []string
	for _, id := range ids {
		lines = append(lines, id.String())
	}
	k, err := FromSecret("Secret trainops/sops-age", map[string][]byte{"identity.agekey": []byte("# team keys\n" + strings.Join(lines, "\n") + "\n"), "note": []byte("ignored")})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func noPlaintext(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, p := range plaintexts {
		if strings.Contains(err.Error(), p) {
			t.Fatalf("error shows a secret value: %v", err)
		}
	}
}

func TestDecryptsWhatSOPSEncrypts(t *testing.T) {
	id := identity(t)
	obj := encrypted(t, identity(t), id)
	if !Encrypted(obj) {
		t.Fatal("not seen as encrypted")
	}
	if err := Check(obj); err != nil {
		t.Fatalf("check: %v", err)
	}
	// kustomize adds labels and reorders fields before an object is
	// decrypted: neither is encrypted, and neither stops decryption.
	md := obj["metadata"].(map[string]any)
	md["labels"] = map[string]any{"trainops.dev/sync": "team-a"}
	got, err := keysOf(t, id).Decrypt(obj)
	if err != nil {
		t.Fatalf("decrypt: %v", err)
	}
	want := object(t, []byte(plainSecret))
	want["metadata"].(map[string]any)["labels"] = map[string]any{"trainops.dev/sync": "team-a"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("decrypted object (-want +got):\n%s", d)
	}
	if Encrypted(got) {
		t.Fatal("decrypted object still has sops metadata")
	}
	if Encrypted(want) {
		t.Fatal("a plain Secret is seen as encrypted")
	}
}

func TestWrongKeyNamesTheRecipients(t *testing.T) {
	owner, other := identity(t), identity(t)
	obj := encrypted(t, owner)
	_, err := keysOf(t, other).Decrypt(obj)
	noPlaintext(t, err)
	for _, want := range []string{owner.Recipient().String(), other.Recipient().String(), "Secret trainops/sops-age"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), other.String()) {
		t.Fatalf("error shows the identity: %v", err)
	}
}

func TestAlteredValuesAreRefusedByPath(t *testing.T) {
	id := identity(t)
	obj := encrypted(t, id)
	data := obj["data"].(map[string]any)
	sd := obj["stringData"].(map[string]any)
	// A value moved from another field does not open under this path.
	data["token"] = sd["wandb"]
	_, err := keysOf(t, id).Decrypt(obj)
	noPlaintext(t, err)
	if !strings.Contains(err.Error(), "data.token") {
		t.Fatalf("error does not name data.token: %v", err)
	}
	if Check(obj) != nil {
		t.Fatalf("a well-formed value is refused without keys: %v", Check(obj))
	}
}

func TestCheckFindsValuesLeftInTheClear(t *testing.T) {
	id := identity(t)
	for name, value := range map[string]string{
		"clear":     "aGZfc2VjcmV0dmFsdWU=",
		"malformed": "ENC[AES256_GCM,data:!!!,iv:hf_secretvalue,tag:x,type:str]",
	} {
		t.Run(name, func(t *testing.T) {
			obj := encrypted(t, id)
			obj["data"].(map[string]any)["token"] = value
			err := Check(obj)
			noPlaintext(t, err)
			if !strings.Contains(err.Error(), "data.token") {
				t.Fatalf("error does not name data.token: %v", err)
			}
			_, err = keysOf(t, id).Decrypt(obj)
			noPlaintext(t, err)
		})
	}
	obj := encrypted(t, id)
	delete(obj[Field].(map[string]any), "age")
	if err := Check(obj); err == nil || !strings.Contains(err.Error(), "No keys found") {
		t.Fatalf("metadata without keys: %v", err)
	}
}

// SOPS's own example file is encrypted with PGP: refused, with no program
// (gpg, an age plugin, a key command) run and no identity taken from the
// environment.
func TestOtherKeyTypesReachNothing(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for _, prog := range []string{"gpg", "gpg2", "age-plugin-yubikey", "keycmd"} {
		script := "#!/bin/sh\necho " + prog + " >> " + marker + "\n"
		if err := os.WriteFile(filepath.Join(dir, prog), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	example, err := os.ReadFile(filepath.Join(sopsDir(t), "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	owner := identity(t)
	t.Setenv("PATH", dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("SOPS_AGE_KEY", owner.String())
	t.Setenv("SOPS_AGE_KEY_CMD", filepath.Join(dir, "keycmd"))
	t.Setenv("GNUPGHOME", dir)

	pgp := object(t, example)
	if !Encrypted(pgp) {
		t.Fatal("SOPS's example is not seen as encrypted")
	}
	if err := Check(pgp); err == nil || !strings.Contains(err.Error(), "pgp") {
		t.Fatalf("check of a PGP file: %v", err)
	}
	if _, err := keysOf(t, identity(t)).Decrypt(pgp); err == nil || !strings.Contains(err.Error(), "age keys only") {
		t.Fatalf("decrypt of a PGP file: %v", err)
	}
	// The environment holds the right identity: it is never read.
	if _, err := keysOf(t, identity(t)).Decrypt(encrypted(t, owner)); err == nil {
		t.Fatal("decrypted with an identity from the environment")
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		ran, _ := os.ReadFile(marker)
		t.Fatalf("a program ran: %s", ran)
	}
}

// sopsDir is the SOPS module go.mod requires, as the module cache holds it.
func sopsDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/getsops/sops/v3").Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("go list the SOPS module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestKeysSecretIsCheckedWithoutEchoingIt(t *testing.T) {
	for name, data := range map[string]map[string][]byte{
		"plugin":   {"identity.agekey": []byte("AGE-PLUGIN-YUBIKEY-1QQQQQQQQQQQQQQQ")},
		"garbage":  {"identity.agekey": []byte("hf_secretvalue")},
		"no entry": {"identity": []byte(identity(t).String())},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromSecret("Secret trainops/sops-age", data)
			noPlaintext(t, err)
			if strings.Contains(err.Error(), "AGE-PLUGIN") || strings.Contains(err.Error(), "AGE-SECRET-KEY-1Q") {
				t.Fatalf("error shows the entry: %v", err)
			}
			if !strings.Contains(err.Error(), "Secret trainops/sops-age") {
				t.Fatalf("error does not name the Secret: %v", err)
			}
		})
	}
	id := identity(t)
	k := keysOf(t, id, id)
	if got := k.Recipients(); len(got) != 1 || got[0] != id.Recipient().String() {
		t.Fatalf("recipients: %v", got)
	}
}

func TestMessagesAreTrainopssOwn(t *testing.T) {
	id := identity(t)
	obj := encrypted(t, id)
	obj["data"].(map[string]any)["token"] = "aGZfc2VjcmV0dmFsdWU="
	err := Check(obj)
	if err == nil || err.Error() != "sops: the value of data.token is not encrypted: it should be, by the file's SOPS rules" {
		t.Fatalf("check: %v", err)
	}
}
