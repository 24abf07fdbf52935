// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/bcrypt"
)

// The real node's registry: the distribution registry (CNCF Distribution,
// what most registries run) on the node's bridge, with basic auth, so
// images reach the node as a cluster pulls them: by reference, with a pull
// secret.
const (
	// RegistryAddr is the registry's host:port, on the bridge.
	RegistryAddr = NodeIP + ":5000"
	// RegistryUser may push and pull; its password is the Env's
	// RegistryPassword.
	RegistryUser = "trainops"
)

// startRegistry starts the registry and tells containerd to reach it over
// plain HTTP (certs.d/<host>/hosts.toml, as containerd's config_path
// reads).
func (e *Env) startRegistry(p nodePaths, bin, logDir string) error {
	dir := filepath.Join(p.root, "registry")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	e.RegistryPassword = randomToken()
	hash, err := bcrypt.GenerateFromPassword([]byte(e.RegistryPassword), bcrypt.MinCost)
	if err != nil {
		return err
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(RegistryUser+":"+string(hash)+"\n"), 0o600); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(registryConfig(filepath.Join(dir, "data"), htpasswd)), 0o600); err != nil {
		return err
	}
	hosts := filepath.Join(p.root, "certs.d", RegistryAddr)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(fmt.Sprintf(
		"server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+RegistryAddr, "http://"+RegistryAddr)), 0o644); err != nil {
		return err
	}
	// No traces: the registry would send them to an OpenTelemetry
	// collector on localhost.
	proc, err := startProc("registry", filepath.Join(bin, "registry"), []string{"serve", cfg}, logDir, "OTEL_TRACES_EXPORTER=none")
	if err != nil {
		return err
	}
	e.procs = append(e.procs, proc)
	return waitFor(proc, "registry", 30*time.Second, func() error {
		resp, err := http.Get("http://" + RegistryAddr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("GET /v2/ without credentials: %s, want 401", resp.Status)
		}
		return nil
	})
}

// registryConfig is the registry's configuration: storage in dataDir,
// basic auth from htpasswd, on the bridge.
func registryConfig(dataDir, htpasswd string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
http:
  addr: %q
  secret: %q
auth:
  htpasswd:
    realm: trainops-test
    path: %q
`, dataDir, RegistryAddr, randomToken(), htpasswd)
}

// PushImage pushes the image tarball (as `make image` writes them) to the
// node's registry under repository (e.g. "trainops/pytorch-cpu") with its
// own tag, and returns the reference pods name it by.
func (e *Env) PushImage(ctx context.Context, tarballPath, ref, repository string) (string, error) {
	src, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", tarballPath, err)
	}
	return e.PushImageOf(ctx, img, repository, src.TagStr())
}

// PushImageOf pushes img to the node's registry as repository:tag and
// returns the reference pods name it by.
func (e *Env) PushImageOf(ctx context.Context, img v1.Image, repository, tag string) (string, error) {
	dst, err := name.NewTag(RegistryAddr+"/"+repository+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: RegistryUser, Password: e.RegistryPassword})
	if err := remote.Write(dst, img, remote.WithAuth(auth), remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", dst, err)
	}
	return dst.String(), nil
}

// PullSecretData is a kubernetes.io/dockerconfigjson Secret's data that
// pulls from the node's registry.
func (e *Env) PullSecretData() map[string][]byte {
	auth := base64.StdEncoding.EncodeToString([]byte(RegistryUser + ":" + e.RegistryPassword))
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{RegistryAddr: map[string]string{
		"username": RegistryUser, "password": e.RegistryPassword, "auth": auth,
	}}})
	return map[string][]byte{".dockerconfigjson": b}
}

// randomToken is 16 random bytes, hex.
func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
