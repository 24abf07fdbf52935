// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/limits"
)

// maxCRDFile bounds one file ReadCRDs reads: the largest CRDs in use
// (a Prometheus Operator's, a Kueue's) are a small part of it.
const maxCRDFile = 32 << 20

// ReadCRDs reads every apiextensions.k8s.io/v1 CustomResourceDefinition in
// the YAML and JSON files under dir (a project's config/crd, a release's
// manifest, a chart's crds folder); the other documents there are skipped.
// An error names the file and the document.
func ReadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		crds, err := readCRDFile(p)
		out = append(out, crds...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no CustomResourceDefinition (apiextensions.k8s.io/v1) in its YAML or JSON files", dir)
	}
	return out, nil
}

// readCRDFile reads the CRDs of one file.
func readCRDFile(p string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := limits.ReadAll(f, maxCRDFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for i := 1; ; i++ {
		var doc unstructured.Unstructured
		if err := dec.Decode(&doc.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", p, i, err)
		}
		if doc.GetKind() != "CustomResourceDefinition" || doc.GetAPIVersion() != apiextensionsv1.SchemeGroupVersion.String() {
			continue
		}
		b, err := doc.MarshalJSON()
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("%s: CRD %s: %w", p, doc.GetName(), err)
		}
		out = append(out, crd)
	}
}
