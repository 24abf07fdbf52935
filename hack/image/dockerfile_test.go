// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDockerfileMakesTheSameImage: the Dockerfile's final stage copies the
// files `image files` writes and states the config trainopsConfig gives
// (user, environment, entrypoint, command, labels); and `image files`
// writes every file of the image with its mode.
func TestDockerfileMakesTheSameImage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if !strings.Contains(text, "go run ./hack/image files --binary /out/trainops --out /rootfs") {
		t.Error("the build stage does not write the image's files with `image files`")
	}
	final := text[strings.LastIndex(text, "\nFROM "):]
	lines := map[string]string{}
	for _, l := range strings.Split(final, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			lines[k] += v
		}
	}
	cfg := trainopsConfig("${VERSION}", "${COMMIT}")
	list := func(v []string) string { b, _ := json.Marshal(v); return string(b) }
	want := map[string]string{
		"FROM":       "scratch",
		"USER":       cfg.User,
		"ENV":        strings.Join(cfg.Env, " "),
		"ENTRYPOINT": list(cfg.Entrypoint),
		"CMD":        list(cfg.Cmd),
	}
	for k, v := range want {
		if lines[k] != v {
			t.Errorf("Dockerfile %s %q, want %q", k, lines[k], v)
		}
	}
	for k, v := range cfg.Labels {
		if !strings.Contains(lines["LABEL"], k+"="+v) {
			t.Errorf("Dockerfile LABEL lacks %s=%s", k, v)
		}
	}
	if !strings.Contains(lines["COPY"], "--from=build /rootfs/ /") {
		t.Errorf("the final stage does not copy the files: COPY %s", lines["COPY"])
	}

	dir := t.TempDir()
	bin, certs := filepath.Join(dir, "trainops"), filepath.Join(dir, "ca.crt")
	for _, f := range []string{bin, certs} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "rootfs")
	if err := files([]string{"--out", root, "--binary", bin, "--ca-certificates", certs}); err != nil {
		t.Fatal(err)
	}
	for _, f := range trainopsFiles(bin, certs) {
		fi, err := os.Stat(filepath.Join(root, f.name))
		if err != nil {
			t.Errorf("%s: %v", f.name, err)
			continue
		}
		got := int64(fi.Mode().Perm())
		if fi.Mode()&os.ModeSticky != 0 {
			got |= 0o1000
		}
		if got != f.mode || fi.IsDir() != f.dir {
			t.Errorf("%s: mode %o dir %v, want %o %v", f.name, got, fi.IsDir(), f.mode, f.dir)
		}
	}
	if !slices.ContainsFunc(trainopsFiles(bin, certs), func(f file) bool { return f.name == "home/nonroot" && f.uid == nonroot }) ||
		!strings.Contains(lines["COPY"], "--chown=65532:65532 /rootfs/home/nonroot /home/nonroot") {
		t.Error("the nonroot user's home is not the nonroot user's in both")
	}
}
