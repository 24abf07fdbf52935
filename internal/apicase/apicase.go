// SPDX-License-Identifier: Apache-2.0

// Package apicase loads the API validation cases in testdata/api: YAML files
// of one object (created) or two (the first created, the second an update),
// with the message the API server must answer in a "# want:" first line.
// The same cases check the real API server and offline validation, so the
// two cannot drift apart unnoticed.
package apicase

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Case is one API validation case.
type Case struct {
	// Name is the file name without extension.
	Name string
	// Path is the file.
	Path string
	// Want is the message expected in the rejection; empty for valid cases.
	Want string
	// Objects are the file's documents: a create, then optionally an update.
	Objects []*unstructured.Unstructured
}

// Load reads every *.yaml case in dir, sorted by name.
func Load(dir string) ([]Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var cases []Case
	for _, p := range paths {
		c, err := loadFile(p)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("no cases in %s", dir)
	}
	return cases, nil
}

func loadFile(path string) (Case, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Case{}, err
	}
	c := Case{Name: strings.TrimSuffix(filepath.Base(path), ".yaml"), Path: path}
	if first, _, _ := bytes.Cut(raw, []byte("\n")); bytes.HasPrefix(first, []byte("# want: ")) {
		c.Want = strings.TrimSpace(string(bytes.TrimPrefix(first, []byte("# want: "))))
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Case{}, fmt.Errorf("%s: %w", path, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return Case{}, fmt.Errorf("%s: %w", path, err)
		}
		if strings.TrimSpace(string(j)) == "null" {
			continue
		}
		// Through JSON so numbers are int64, as the API machinery has them.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return Case{}, fmt.Errorf("%s: %w", path, err)
		}
		c.Objects = append(c.Objects, u)
	}
	if n := len(c.Objects); n < 1 || n > 2 {
		return Case{}, fmt.Errorf("%s: want 1 or 2 objects, found %d", path, n)
	}
	return c, nil
}
