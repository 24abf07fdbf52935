// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// temps are the layer files made, removed once the images are written.
var temps []string

// writeImage writes img as out/file, tagged ref, and records it in
// out/index.txt in place of any earlier line for the same file.
func writeImage(out, file, ref string, img v1.Image) error {
	defer func() {
		for _, t := range temps {
			os.Remove(t)
		}
		temps = nil
	}()
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(out, file)
	tmp := dst + ".partial"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %s)\n", dst, ref, digest)
	return record(filepath.Join(out, "index.txt"), ref, file)
}

// record sets the line of file in the index to "ref file".
func record(index, ref, file string) error {
	lines, err := readIndex(index)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	byFile := map[string]string{}
	for _, l := range lines {
		byFile[l[1]] = l[0]
	}
	byFile[file] = ref
	files := make([]string, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s %s\n", byFile[f], f)
	}
	return os.WriteFile(index, []byte(b.String()), 0o644)
}

// readIndex reads index.txt as (reference, file) pairs.
func readIndex(index string) ([][2]string, error) {
	f, err := os.Open(index)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"reference file\", got %q", index, n, sc.Text())
		}
		out = append(out, [2]string{fields[0], fields[1]})
	}
	return out, sc.Err()
}

// push pushes every image of the index to a registry, under the registry's
// path and each image's own last path element and tag, with the
// credentials of the Docker configuration (docker login, or
// DOCKER_CONFIG).
func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	index := fs.String("index", "bin/image/index.txt", "the images to push")
	registry := fs.String("registry", "", "host[:port][/path] to push to")
	insecure := fs.Bool("insecure", false, "the registry speaks plain HTTP")
	_ = fs.Parse(args)
	if *registry == "" {
		return fmt.Errorf("push needs --registry (make image-push REGISTRY=host/path)")
	}
	lines, err := readIndex(*index)
	if err != nil {
		return fmt.Errorf("%w (run make image first)", err)
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	for _, l := range lines {
		dst, err := Retag(l[0], *registry, opts...)
		if err != nil {
			return err
		}
		img, err := tarball.ImageFromPath(filepath.Join(filepath.Dir(*index), l[1]), nil)
		if err != nil {
			return fmt.Errorf("read %s: %w", l[1], err)
		}
		if err := remote.Write(dst, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", dst, err)
		}
		fmt.Printf("pushed %s\n", dst)
	}
	return nil
}

// Retag is ref's repository's last element and tag under registry.
func Retag(ref, registry string, opts ...name.Option) (name.Tag, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(strings.TrimSuffix(registry, "/")+"/"+path.Base(t.RepositoryStr())+":"+t.TagStr(), opts...)
}
