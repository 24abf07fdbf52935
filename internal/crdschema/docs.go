// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"fmt"
	"io"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// WriteAPIReference writes docs/api.md from the CRDs: every field of the
// three kinds with its type, default, description and validation rules.
func (s *Schemas) WriteAPIReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# API reference\n\nGenerated from the CRDs in `config/crd/bases` (`make docs`); do not edit by hand.\n")
	b.WriteString("Every rule below is enforced by the API server and by `trainops validate`, with the same message.\n\n")
	crds := append([]*apiextensionsv1.CustomResourceDefinition(nil), s.crds...)
	order := map[string]int{"PyJob": 0, "SREAgent": 1, "ClusterPolicy": 2}
	sort.Slice(crds, func(i, j int) bool { return order[crds[i].Spec.Names.Kind] < order[crds[j].Spec.Names.Kind] })
	for _, crd := range crds {
		v := crd.Spec.Versions[0]
		root := v.Schema.OpenAPIV3Schema
		fmt.Fprintf(&b, "## %s\n\n", crd.Spec.Names.Kind)
		fmt.Fprintf(&b, "`apiVersion: %s/%s` · %s · short name `%s`\n\n", crd.Spec.Group, v.Name, crd.Spec.Scope, strings.Join(crd.Spec.Names.ShortNames, "`, `"))
		if root.Description != "" {
			b.WriteString(oneLine(root.Description) + "\n\n")
		}
		for _, r := range root.XValidations {
			fmt.Fprintf(&b, "- Rule on the object: %s\n", oneLine(r.Message))
		}
		if len(root.XValidations) > 0 {
			b.WriteString("\n")
		}
		for _, part := range []string{"spec", "status"} {
			p, ok := root.Properties[part]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "### %s.%s\n\n", crd.Spec.Names.Kind, part)
			if len(p.XValidations) > 0 {
				for _, r := range p.XValidations {
					fmt.Fprintf(&b, "- Rule on `%s`%s: %s\n", part, fieldPath(r.FieldPath), oneLine(r.Message))
				}
				b.WriteString("\n")
			}
			b.WriteString("| field | type | default | description |\n|---|---|---|---|\n")
			walk(&b, part, p)
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fieldPath(p string) string {
	if p == "" {
		return ""
	}
	return " (`" + strings.TrimPrefix(p, ".") + "`)"
}

func walk(b *strings.Builder, path string, p apiextensionsv1.JSONSchemaProps) {
	names := make([]string, 0, len(p.Properties))
	for n := range p.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	required := map[string]bool{}
	for _, r := range p.Required {
		required[r] = true
	}
	for _, n := range names {
		c := p.Properties[n]
		fp := path + "." + n
		typ := c.Type
		if c.XIntOrString {
			typ = "int or string"
		}
		if typ == "array" && c.Items != nil && c.Items.Schema != nil {
			typ = "[]" + itemType(c.Items.Schema)
		}
		if typ == "object" && c.AdditionalProperties != nil {
			typ = "map"
		}
		def := " "
		if c.Default != nil {
			def = "`" + string(c.Default.Raw) + "`"
		}
		desc := oneLine(c.Description)
		if required[n] {
			desc = "**Required.** " + desc
		}
		if len(c.Enum) > 0 {
			var vals []string
			for _, e := range c.Enum {
				vals = append(vals, string(e.Raw))
			}
			desc += " One of " + strings.Join(vals, ", ") + "."
		}
		for _, r := range c.XValidations {
			desc += " Rule: " + oneLine(r.Message) + "."
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", fp, typ, def, strings.ReplaceAll(desc, "|", "\\|"))
		// Descend into our own structures, not into embedded Kubernetes
		// types (env, tolerations, resources), which have their own docs.
		if typ == "object" && len(c.Properties) > 0 && !kubernetesType(n) {
			walk(b, fp, c)
		}
		if strings.HasPrefix(typ, "[]") && c.Items.Schema != nil && len(c.Items.Schema.Properties) > 0 && !kubernetesType(n) {
			walk(b, fp+"[]", *c.Items.Schema)
		}
	}
}

func itemType(s *apiextensionsv1.JSONSchemaProps) string {
	if s.Type == "" {
		return "object"
	}
	return s.Type
}

// kubernetesType names fields that hold core Kubernetes types.
func kubernetesType(name string) bool {
	switch name {
	case "env", "tolerations", "conditions", "claims":
		return true
	}
	return false
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
