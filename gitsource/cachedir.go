// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/config"
)

// keyFile holds the random key clone folders are named with, in the cache
// folder, readable by trainops alone.
const keyFile = ".key"

// cloneFolder is the name of the folder under cacheDir that holds the
// clone of url at ref: an HMAC of both under the cache's own random key,
// so nobody who knows the URL and ref, but not the key, can compute where
// the clone sits. The key is made on first use and kept, so a restart
// finds its clones again.
func cloneFolder(cacheDir, url string, ref Ref) (string, error) {
	key, err := cacheKey(cacheDir)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(url + "\x00" + ref.Branch + "\x00" + ref.Tag + "\x00" + ref.Commit))
	return hex.EncodeToString(m.Sum(nil)[:16]), nil
}

// cacheKey reads cacheDir's key, making it (and the folder) when absent.
// A key is published whole by a hard link, so concurrent first users agree
// on one.
func cacheKey(cacheDir string) ([]byte, error) {
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("cache folder: %w", errors.Unwrap(err))
	}
	p := filepath.Join(cacheDir, keyFile)
	for range 2 {
		if key, err := os.ReadFile(p); err == nil && len(key) == 32 {
			return key, nil
		} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("the cache folder's key is unreadable or malformed: remove the cache folder")
		}
		tmp, err := os.CreateTemp(cacheDir, ".key-")
		if err != nil {
			return nil, fmt.Errorf("cache folder: %w", errors.Unwrap(err))
		}
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		_, werr := tmp.Write(key)
		cerr := tmp.Close()
		if werr == nil && cerr == nil {
			if err := os.Link(tmp.Name(), p); err == nil || errors.Is(err, fs.ErrExist) {
				_ = os.Remove(tmp.Name())
				continue
			}
		}
		_ = os.Remove(tmp.Name())
		return nil, errors.New("cache folder: the key could not be written")
	}
	return nil, errors.New("cache folder: the key could not be read back")
}

// cloneConfig is the one configuration a clone of url may hold: a bare
// repository with the remote origin at url. A clone whose config differs
// in any byte was changed by something other than trainops, and is
// discarded rather than trusted.
func cloneConfig(url string) ([]byte, error) {
	c := config.NewConfig()
	c.Core.IsBare = true
	c.Remotes[remoteName] = &config.RemoteConfig{Name: remoteName, URLs: []string{url}}
	return c.Marshal()
}

// remoteName is the clone's one remote.
const remoteName = "origin"

// checkCloneConfig reports whether the clone in bare holds exactly the
// configuration trainops gave it for url.
func checkCloneConfig(bare, url string) bool {
	want, err := cloneConfig(url)
	if err != nil {
		return false
	}
	got, err := os.ReadFile(filepath.Join(bare, "config"))
	return err == nil && bytes.Equal(got, want)
}

// writeCloneConfig replaces whatever configuration the clone in bare holds
// with the one for url.
func writeCloneConfig(bare, url string) error {
	want, err := cloneConfig(url)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bare, "config"), want, 0o600)
}
