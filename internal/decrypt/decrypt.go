// SPDX-License-Identifier: Apache-2.0

// Package decrypt decrypts SOPS-encrypted objects of a revision with age
// identities, and checks without keys that an encrypted object is
// well-formed. It reads SOPS's format with SOPS's own code (its JSON store,
// tree, AES-GCM cipher and age key source) and decrypts data keys with age
// identities only: no key service, cloud KMS, PGP agent, plugin or
// program is ever reached, whatever a file's metadata names.
//
// Nothing here returns or logs a decrypted value: every error names the
// object's field path, never its content.
package decrypt

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"filippo.io/age"
	"github.com/getsops/sops/v3"
	sopsaes "github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	sopsconfig "github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/logging"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

// Field is the top-level field SOPS adds to an encrypted document.
const Field = "sops"

// KeySuffix ends the name of every entry of a keys Secret that holds age
// identities (the convention Flux's kustomize-controller uses too).
const KeySuffix = ".agekey"

func init() {
	// SOPS's loggers write progress ("Decryption succeeded") to stderr;
	// trainops reports through its own log, and only its own words.
	logging.SetLevel(logrus.PanicLevel)
}

// Encrypted reports whether obj is a SOPS-encrypted document: it has a
// top-level sops field with a message authentication code.
func Encrypted(obj map[string]any) bool {
	m, ok := obj[Field].(map[string]any)
	if !ok {
		return false
	}
	mac, _ := m["mac"].(string)
	return mac != ""
}

// Keys are the age identities that decrypt a sync's objects.
type Keys struct {
	source     string // where they were read, for messages
	ids        sopsage.ParsedIdentities
	recipients []string
}

// FromSecret reads the age identities of every entry of a Secret whose
// name ends in KeySuffix; source names the Secret in messages. An entry
// that is not a list of age identities is an error naming the entry and
// line, never their content.
func FromSecret(source string, data map[string][]byte) (*Keys, error) {
	k := &Keys{source: source}
	names := make([]string, 0, len(data))
	for name := range data {
		if strings.HasSuffix(name, KeySuffix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		sc := bufio.NewScanner(strings.NewReader(string(data[name])))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			// age's own parser: X25519 and hybrid identities, never a
			// plugin (which would run a program).
			ids, err := age.ParseIdentities(strings.NewReader(line))
			if err != nil {
				return nil, fmt.Errorf("%s: entry %s, line %d is not an age identity (AGE-SECRET-KEY-1…)", source, name, n)
			}
			k.ids = append(k.ids, ids...)
			for _, id := range ids {
				k.recipients = append(k.recipients, recipientOf(id))
			}
		}
	}
	if len(k.ids) == 0 {
		return nil, fmt.Errorf("%s holds no age identity: put one in an entry whose name ends in %s (such as identity%s)", source, KeySuffix, KeySuffix)
	}
	slices.Sort(k.recipients)
	k.recipients = slices.Compact(k.recipients)
	return k, nil
}

func recipientOf(id age.Identity) string {
	switch i := id.(type) {
	case *age.X25519Identity:
		return i.Recipient().String()
	case *age.HybridIdentity:
		return i.Recipient().String()
	}
	return fmt.Sprintf("%T", id)
}

// Recipients are the public keys of the identities: what they decrypt,
// safe to show and to fingerprint.
func (k *Keys) Recipients() []string {
	if k == nil {
		return nil
	}
	return k.recipients
}

// Source names where the keys were read.
func (k *Keys) Source() string {
	if k == nil {
		return ""
	}
	return k.source
}

// Decrypt returns obj decrypted, without its sops field. The message
// authentication code is not compared: kustomize reorders fields and may
// add labels before an object reaches here, which changes what the code
// covers; every encrypted value is still authenticated by AES-GCM and bound
// to its field path, so a value cannot be altered or moved undetected.
func (k *Keys) Decrypt(obj map[string]any) (map[string]any, error) {
	tree, err := load(obj)
	if err != nil {
		return nil, err
	}
	if err := k.covers(tree.Metadata); err != nil {
		return nil, err
	}
	key, err := tree.Metadata.GetDataKeyWithKeyServices([]keyservice.KeyServiceClient{ageOnly{k.ids}}, nil)
	if err != nil {
		return nil, fmt.Errorf("sops: the data key cannot be decrypted with the age identities of %s: %s", k.source, err)
	}
	if _, err := tree.Decrypt(key, pathCipher{}); err != nil {
		return nil, ownWords(err)
	}
	store := sopsjson.NewStore(&sopsconfig.JSONStoreConfig{})
	raw, err := store.EmitPlainFile(tree.Branches)
	if err != nil {
		return nil, fmt.Errorf("sops: emit the decrypted object: %w", err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("sops: read the decrypted object: %w", err)
	}
	return out, nil
}

// covers says which key the object lacks when no identity of k fits any
// age recipient of its metadata.
func (k *Keys) covers(md sops.Metadata) error {
	want := recipients(md)
	for _, r := range want {
		if slices.Contains(k.recipients, r) {
			return nil
		}
	}
	if len(want) == 0 {
		return fmt.Errorf("sops: the object is encrypted for no age recipient (%s): trainops decrypts with age keys only", keyTypes(md))
	}
	return fmt.Errorf("sops: no age identity of %s decrypts it: it is encrypted for %s, and %s holds identities for %s",
		k.source, strings.Join(want, ", "), k.source, strings.Join(k.recipients, ", "))
}

// recipients are the age recipients of md's key groups.
func recipients(md sops.Metadata) []string {
	var out []string
	for _, g := range md.KeyGroups {
		for _, key := range g {
			if a, ok := key.(*sopsage.MasterKey); ok {
				out = append(out, a.Recipient)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// keyTypes names the kinds of key md's groups hold.
func keyTypes(md sops.Metadata) string {
	var out []string
	for _, g := range md.KeyGroups {
		for _, key := range g {
			out = append(out, key.TypeToIdentifier())
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return "no key at all"
	}
	return strings.Join(out, ", ")
}

// load reads obj as SOPS's JSON store reads an encrypted file.
func load(obj map[string]any) (sops.Tree, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return sops.Tree{}, fmt.Errorf("sops: %w", err)
	}
	store := sopsjson.NewStore(&sopsconfig.JSONStoreConfig{})
	tree, err := store.LoadEncryptedFile(raw)
	if err != nil {
		return sops.Tree{}, fmt.Errorf("sops: the %s field is not SOPS metadata: %s", Field, err)
	}
	return tree, nil
}

// Check reports, without keys, whether obj is a well-formed SOPS document
// trainops can decrypt: its metadata reads, it names at least one age
// recipient, and every value its rules say is encrypted has SOPS's
// encrypted form.
func Check(obj map[string]any) error {
	tree, err := load(obj)
	if err != nil {
		return err
	}
	if len(recipients(tree.Metadata)) == 0 {
		return fmt.Errorf("sops: the object is encrypted for no age recipient (%s): trainops decrypts with age keys only", keyTypes(tree.Metadata))
	}
	// A random key opens no value: the check tells a value in SOPS's form
	// (which fails authentication) from one that is not (which fails to
	// parse).
	key := make([]byte, 32)
	_, err = tree.Decrypt(key, formCipher{})
	return ownWords(err)
}

// ownWords is err without the words SOPS wraps a cipher's error in ("Error
// walking tree: Could not decrypt value: …"), when the cipher's error is
// one of this package's.
func ownWords(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if i := strings.Index(msg, "sops: the value of "); i > 0 {
		return errors.New(msg[i:])
	}
	return fmt.Errorf("sops: %s", msg)
}

// errNotOpened stands for a well-formed value a wrong key cannot open.
var errNotOpened = errors.New("not opened")

// formCipher checks each encrypted value's form, not its content.
type formCipher struct{}

func (formCipher) Encrypt(any, []byte, string) (string, error) {
	return "", errors.New("sops: encryption is not supported")
}

func (formCipher) Decrypt(value string, key []byte, path string) (any, error) {
	if value == "" {
		return "", nil
	}
	if !strings.HasPrefix(value, "ENC[AES256_GCM,") {
		return nil, valueError(path, "is not encrypted: it should be, by the file's SOPS rules")
	}
	_, err := sopsaes.NewCipher().Decrypt(value, key, path)
	if err != nil && !strings.HasPrefix(err.Error(), "Could not decrypt with AES_GCM") {
		return nil, valueError(path, "is not in SOPS's encrypted form ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]")
	}
	// Every value must be read: a stand-in of the right type lets the
	// walk go on.
	return "", nil
}

// pathCipher is SOPS's AES-GCM cipher with errors that name a value's
// path and never its content (SOPS's own quote the value).
type pathCipher struct{}

func (pathCipher) Encrypt(any, []byte, string) (string, error) {
	return "", errors.New("sops: encryption is not supported")
}

func (pathCipher) Decrypt(value string, key []byte, path string) (any, error) {
	v, err := sopsaes.NewCipher().Decrypt(value, key, path)
	if err != nil {
		if !strings.HasPrefix(value, "ENC[AES256_GCM,") {
			return nil, valueError(path, "is not encrypted: it should be, by the file's SOPS rules")
		}
		return nil, valueError(path, "does not decrypt with the file's data key (altered, or moved from another field)")
	}
	return v, nil
}

// valueError names a value by its field path, as SOPS writes it
// ("data:token:").
func valueError(path, what string) error {
	return fmt.Errorf("sops: the value of %s %s", strings.ReplaceAll(strings.TrimSuffix(path, ":"), ":", "."), what)
}

// ageOnly is a SOPS key service that decrypts data keys with age
// identities and refuses every other kind of key, so decrypting a
// revision never reaches a network service or runs a program.
type ageOnly struct{ ids sopsage.ParsedIdentities }

func (ageOnly) Encrypt(context.Context, *keyservice.EncryptRequest, ...grpc.CallOption) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("encryption is not supported")
}

func (a ageOnly) Decrypt(_ context.Context, req *keyservice.DecryptRequest, _ ...grpc.CallOption) (*keyservice.DecryptResponse, error) {
	k, ok := req.GetKey().GetKeyType().(*keyservice.Key_AgeKey)
	if !ok {
		return nil, errors.New("not an age key: trainops decrypts with age keys only")
	}
	if len(a.ids) == 0 {
		// The age key source would look for identities elsewhere
		// (environment, files, a command): never.
		return nil, errors.New("no age identity")
	}
	mk := &sopsage.MasterKey{Recipient: k.AgeKey.GetRecipient(), EncryptedKey: string(req.GetCiphertext())}
	a.ids.ApplyToMasterKey(mk)
	plain, err := mk.Decrypt()
	if err != nil {
		return nil, err
	}
	return &keyservice.DecryptResponse{Plaintext: plain}, nil
}
