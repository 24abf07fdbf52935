// SPDX-License-Identifier: Apache-2.0

package decrypt

import (
	"fmt"
	"time"

	"github.com/getsops/sops/v3"
	sopsaes "github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	sopsconfig "github.com/getsops/sops/v3/config"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	sopsversion "github.com/getsops/sops/v3/version"
)

// SecretFields is the rule that encrypts a Secret's values and leaves its
// name, namespace and labels readable: sops --encrypted-regex.
const SecretFields = "^(data|stringData)$"

// EncryptYAML encrypts a YAML document for the age recipients as
// `sops --encrypt --age <recipients> --encrypted-regex <regex>` does, with
// SOPS's own code: the demo's repository and tests make encrypted files
// with it.
func EncryptYAML(plain []byte, encryptedRegex string, recipients ...string) ([]byte, error) {
	store := sopsyaml.NewStore(&sopsconfig.YAMLStoreConfig{})
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	var group sops.KeyGroup
	for _, r := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("sops: recipient %s: %w", r, err)
		}
		group = append(group, mk)
	}
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups:      []sops.KeyGroup{group},
		EncryptedRegex: encryptedRegex,
		Version:        sopsversion.Version,
	}}
	dataKey, errs := tree.GenerateDataKey()
	if len(errs) > 0 {
		return nil, fmt.Errorf("sops: data key: %v", errs)
	}
	cipher := sopsaes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	if tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339)); err != nil {
		return nil, fmt.Errorf("sops: %w", err)
	}
	return store.EmitEncryptedFile(tree)
}
