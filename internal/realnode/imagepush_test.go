// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/trainops/trainops/internal/testenv"
)

// TestImagePushReachesARegistry: `make image-push` (hack/image push) pushes
// every image of bin/image/index.txt to a registry a user names, with the
// credentials of their Docker configuration; without credentials the
// registry refuses it and nothing is there.
func TestImagePushReachesARegistry(t *testing.T) {
	testenv.RequireRealNode(t, env)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tool := filepath.Join(dir, "image")
	build := exec.Command("go", "build", "-o", tool, "./hack/image")
	build.Dir, build.Env = root, append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hack/image: %v\n%s", err, out)
	}
	imageDir, err := testenv.ImageDir()
	if err != nil {
		t.Fatal(err)
	}
	// Only the small images: the index the tool reads is the user's choice.
	index := filepath.Join(dir, "index.txt")
	refs, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range []string{"trainops.tar", "pause.tar"} {
		if err := os.Symlink(filepath.Join(imageDir, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, refs[f]+" "+f)
	}
	if err := os.WriteFile(index, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	push := func(dockerConfig string) ([]byte, error) {
		cmd := exec.Command(tool, "push", "--index", index, "--registry", testenv.RegistryAddr+"/pushed", "--insecure")
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerConfig)
		return cmd.CombinedOutput()
	}
	tag := refs["trainops.tar"][strings.LastIndex(refs["trainops.tar"], ":")+1:]
	pushed, err := name.NewTag(testenv.RegistryAddr+"/pushed/trainops:"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	auth := remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: testenv.RegistryUser, Password: env.RegistryPassword}))

	// No credentials: refused, and nothing is there.
	if out, err := push(t.TempDir()); err == nil {
		t.Fatalf("a push without credentials succeeded:\n%s", out)
	}
	if _, err := remote.Head(pushed, auth); err == nil {
		t.Fatal("the refused push left an image in the registry")
	}
	// With `docker login`'s configuration.
	cfgDir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{testenv.RegistryAddr: map[string]string{
		"username": testenv.RegistryUser, "password": env.RegistryPassword}}})
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := push(cfgDir); err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	desc, err := remote.Head(pushed, auth)
	if err != nil {
		t.Fatalf("%s is not in the registry after the push: %v", pushed, err)
	}
	local, err := tarball.ImageFromPath(filepath.Join(imageDir, "trainops.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want, err := local.Digest(); err != nil || desc.Digest != want {
		t.Errorf("the registry holds %s, the tarball is %s (%v)", desc.Digest, want, err)
	}
}
