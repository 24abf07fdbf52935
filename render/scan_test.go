// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trainops/trainops/render"
)

// TestLongListRefusesInItsOrder: the files of a long resources list are
// read ahead on every core, yet a render refuses the first bad entry in
// the list's order, as reading them one by one does, and renders the
// list in its order when none is bad.
func TestLongListRefusesInItsOrder(t *testing.T) {
	const n = 40
	files := map[string]string{}
	k := "resources:\n"
	for i := range n {
		name := fmt.Sprintf("cm-%02d.yaml", i)
		files[name] = cmYAML(fmt.Sprintf("cm-%02d", i))
		k += "- " + name + "\n"
	}
	files["kustomization.yaml"] = k
	objs, err := render.Render(tree(t, files), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != n || objs[0].GetName() != "cm-00" || objs[n-1].GetName() != fmt.Sprintf("cm-%02d", n-1) || objs[7].File != "cm-07.yaml" {
		t.Fatalf("rendered %s", ids(objs))
	}

	// Entry 12 holds an alias past the parser's limits; entry 30 names no
	// file. The first is what the render reports.
	var bomb strings.Builder
	bomb.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&bomb, "  a%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				bomb.WriteString(",")
			}
			fmt.Fprintf(&bomb, "*a%d", i-1)
		}
		bomb.WriteString("]\n")
	}
	files["cm-12.yaml"] = bomb.String()
	files["kustomization.yaml"] = strings.Replace(k, "- cm-30.yaml\n", "- missing.yaml\n", 1)
	_, err = render.Render(tree(t, files), ".")
	if err == nil || !strings.Contains(err.Error(), "cm-12.yaml") || strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("err %v, want cm-12.yaml's alias refused first", err)
	}

	// Without the bomb, the missing file is the first bad entry.
	files["cm-12.yaml"] = cmYAML("cm-12")
	_, err = render.Render(tree(t, files), ".")
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") || !strings.Contains(err.Error(), "names no file") {
		t.Fatalf("err %v, want missing.yaml refused", err)
	}
}
