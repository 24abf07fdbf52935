// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestTrainopsImageIsReproducibleAndNonRoot: the same binary at the same
// time gives the same image, byte for byte; another time another; the image
// runs `trainops run` as the nonroot user, with CA certificates.
func TestTrainopsImageIsReproducibleAndNonRoot(t *testing.T) {
	dir := t.TempDir()
	bin, certs := filepath.Join(dir, "trainops"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certs, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1764000000, 0).UTC()
	digest := func(at time.Time) string {
		img, err := trainopsImage(bin, certs, "v1.2.3", "abc", at)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b := digest(at), digest(at)
	if a != b {
		t.Errorf("two builds of the same input: %s and %s", a, b)
	}
	if c := digest(at.Add(time.Second)); c == a {
		t.Errorf("a build at another time has the same digest %s", c)
	}
	img, err := trainopsImage(bin, certs, "v1.2.3", "abc", at)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/trainops" || cf.Config.Cmd[0] != "run" {
		t.Errorf("config: user %q, entrypoint %v, cmd %v", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	files := map[string]int64{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h.Mode
		if !h.ModTime.Equal(at) {
			t.Errorf("%s carries the time %s, want %s", h.Name, h.ModTime, at)
		}
	}
	for name, mode := range map[string]int64{"trainops": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "etc/passwd": 0o644, "tmp": 0o1777} {
		if got, ok := files[name]; !ok || got != mode {
			t.Errorf("%s: mode %o (present %v), want %o", name, got, ok, mode)
		}
	}
}
