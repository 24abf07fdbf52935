// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render"
)

// kustomizeCase is one test of kustomize's own (api/krusty/*_test.go)
// whose every step is literal: the files it writes, where it builds, and
// what it expects.
type kustomizeCase struct {
	name string
	// files by path, relative to the harness's root.
	files  map[string]string
	builds []kustomizeBuild
}

// kustomizeBuild is one build of a case, after the files written before it.
type kustomizeBuild struct {
	dir string
	// files are those written before this build.
	files map[string]string
	// expected is the YAML the test expects; empty when it expects an
	// error (wantErr).
	expected string
	wantErr  bool
	// restricted: the error expected is kustomize's load restrictor's.
	restricted bool
	// loadRestrictionsNone: the test turns kustomize's load restrictor off.
	loadRestrictionsNone bool
}

// kustomizeModuleDir is the folder of the kustomize api module go.mod
// requires, in the module cache.
func kustomizeModuleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kustomize/api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/kustomize/api: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("sigs.k8s.io/kustomize/api is not in the module cache: go mod download")
	}
	return dir
}

// kustomizeCases reads the tests of kustomize's krusty package (its
// *_test.go files) and returns those made only of literal steps, by file.
func kustomizeCases(t *testing.T, dir string) map[string][]kustomizeCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	// helpers are the package's functions of the harness alone, which
	// tests call to write shared files.
	helpers := map[string]*ast.FuncDecl{}
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[filepath.Base(file)] = f
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil && fn.Recv == nil {
				helpers[fn.Name.Name] = fn
			}
		}
	}
	out := map[string][]kustomizeCase{}
	for name, f := range parsed {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			r := caseReader{helpers: helpers, c: kustomizeCase{name: fn.Name.Name, files: map[string]string{}}}
			if r.steps(fn.Body.List, true) && r.pending == "" && len(r.c.builds) > 0 {
				out[name] = append(out[name], r.c)
			}
		}
	}
	return out
}

// caseReader reads a test function's steps.
type caseReader struct {
	helpers map[string]*ast.FuncDecl
	c       kustomizeCase
	// none is the load restrictor the test set on its options.
	none bool
	// pending is the folder of the last build, until its assertion.
	pending     string
	pendingNone bool
}

// steps reads statements; false at the first that is not one of the
// harness's literal steps. top is the test's own body (not a helper's).
func (r *caseReader) steps(list []ast.Stmt, top bool) bool {
	for i, st := range list {
		call, lhs := stepCall(st)
		name := ""
		if call != nil {
			name = callName(call)
		}
		switch {
		case top && i == 0 && name == "kusttest_test.MakeHarness":
		case name == "th.MakeDefaultOptions" || name == "krusty.MakeDefaultOptions":
		case name == "th.WriteF" || name == "th.WriteK":
			p, ok1 := literal(call.Args[0])
			body, ok2 := literal(call.Args[1])
			if !ok1 || !ok2 {
				return false
			}
			if name == "th.WriteK" {
				p = filepath.Join(p, "kustomization.yaml")
				body = "\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + body
			}
			r.c.files[strings.TrimPrefix(filepath.Clean("/"+p), "/")] = body
		case call != nil && r.helper(call) != nil:
			if !r.steps(r.helper(call).Body.List, false) {
				return false
			}
		case top && name == "th.Run" && lhs == "m":
			dir, ok := literal(call.Args[0])
			none, ok2 := r.options(call.Args[1])
			if !ok || !ok2 || r.pending != "" {
				return false
			}
			r.pending, r.pendingNone = dir, none
		case top && name == "th.AssertActualEqualsExpected" && r.pending != "":
			want, ok := literal(call.Args[1])
			if !ok {
				return false
			}
			r.c.builds = append(r.c.builds, kustomizeBuild{dir: r.pending, files: copyFiles(r.c.files), expected: want, loadRestrictionsNone: r.pendingNone})
			r.pending = ""
		case top && name == "th.RunWithErr":
			dir, ok := literal(call.Args[0])
			none, ok2 := r.options(call.Args[1])
			if !ok || !ok2 || r.pending != "" {
				return false
			}
			// What the test then asserts of the error is kustomize's
			// wording; the build failing is what trainops must match, and
			// where kustomize's load restrictor refuses, trainops's must.
			restricted := false
			for _, rest := range list[i+1:] {
				ast.Inspect(rest, func(n ast.Node) bool {
					if s, ok := literalNode(n); ok && strings.Contains(s, "is not in or below") {
						restricted = true
					}
					return true
				})
			}
			r.c.builds = append(r.c.builds, kustomizeBuild{dir: dir, files: copyFiles(r.c.files), wantErr: true, restricted: restricted, loadRestrictionsNone: none})
			return true
		case top && restrictor(st) != "":
			r.none = restrictor(st) == "LoadRestrictionsNone"
		default:
			return false
		}
	}
	return true
}

// helper is the package function call calls with the harness alone, if
// it is one.
func (r *caseReader) helper(call *ast.CallExpr) *ast.FuncDecl {
	id, ok := call.Fun.(*ast.Ident)
	if !ok || len(call.Args) != 1 {
		return nil
	}
	if arg, ok := call.Args[0].(*ast.Ident); !ok || arg.Name != "th" {
		return nil
	}
	return r.helpers[id.Name]
}

// options reads a build's options: the test's options variable, the
// default options, or a function literal making them that sets at most
// the load restrictor. none is LoadRestrictionsNone; ok is false for
// anything else.
func (r *caseReader) options(e ast.Expr) (none, ok bool) {
	switch x := e.(type) {
	case *ast.Ident:
		return r.none, true
	case *ast.CallExpr:
		if n := callName(x); n == "th.MakeDefaultOptions" || n == "krusty.MakeDefaultOptions" {
			return false, true
		}
		lit, isLit := x.Fun.(*ast.FuncLit)
		if !isLit {
			return false, false
		}
		for _, st := range lit.Body.List {
			call, _ := stepCall(st)
			switch {
			case call != nil && callName(call) == "th.MakeDefaultOptions":
			case restrictor(st) != "":
				none = restrictor(st) == "LoadRestrictionsNone"
			default:
				if _, isReturn := st.(*ast.ReturnStmt); !isReturn {
					return false, false
				}
			}
		}
		return none, true
	}
	return false, false
}

// stepCall is the call a statement makes (a bare call, or one assigned
// to a single name), and that name.
func stepCall(st ast.Stmt) (*ast.CallExpr, string) {
	switch s := st.(type) {
	case *ast.ExprStmt:
		call, _ := s.X.(*ast.CallExpr)
		return call, ""
	case *ast.AssignStmt:
		if len(s.Rhs) != 1 || len(s.Lhs) != 1 {
			return nil, ""
		}
		call, _ := s.Rhs[0].(*ast.CallExpr)
		id, _ := s.Lhs[0].(*ast.Ident)
		if id == nil {
			return nil, ""
		}
		return call, id.Name
	}
	return nil, ""
}

// restrictor is the load restrictor st sets on the options, if it does.
func restrictor(st ast.Stmt) string {
	s, ok := st.(*ast.AssignStmt)
	if !ok || len(s.Lhs) != 1 || len(s.Rhs) != 1 {
		return ""
	}
	sel, ok := s.Lhs[0].(*ast.SelectorExpr)
	val, ok2 := s.Rhs[0].(*ast.SelectorExpr)
	if !ok || !ok2 || sel.Sel.Name != "LoadRestrictions" {
		return ""
	}
	return val.Sel.Name
}

func callName(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return x.Name + "." + sel.Sel.Name
}

// literalNode is literal of any node.
func literalNode(n ast.Node) (string, bool) {
	e, ok := n.(ast.Expr)
	if !ok {
		return "", false
	}
	return literal(e)
}

func literal(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func copyFiles(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestKustomizesOwnCases: every test of kustomize's own krusty package
// (api/krusty/*_test.go of the release go.mod requires) made only of
// literal steps — write files, build a folder, expect objects or an error —
// builds with trainops as kustomize's test expects, object for object
// (JSON, byte for byte, in order), and krusty run here on the same files
// agrees. Among them: origin annotations, compositions of bases, overlays
// and components across folders, and the load restrictor's refusals.
func TestKustomizesOwnCases(t *testing.T) {
	perFile := map[string]int{}
	restricted, unrestricted := 0, 0
	for file, cases := range kustomizeCases(t, filepath.Join(kustomizeModuleDir(t), "krusty")) {
		for _, c := range cases {
			for i, b := range c.builds {
				perFile[file]++
				if b.restricted {
					restricted++
				}
				if b.loadRestrictionsNone {
					unrestricted++
				}
				t.Run(c.name+"/"+strconv.Itoa(i), func(t *testing.T) { checkKustomizeBuild(t, b) })
			}
		}
	}
	total := 0
	for _, n := range perFile {
		total += n
	}
	t.Logf("%d builds of kustomize's tests from %d files", total, len(perFile))
	// The extraction must keep understanding kustomize's tests: a corpus
	// that silently shrank would prove nothing.
	if total < minKustomizeCases || perFile["originannotation_test.go"] < 5 || restricted == 0 || unrestricted == 0 {
		t.Fatalf("only %d builds read from kustomize's tests (%d of originannotation_test.go, %d refused by the load restrictor, %d without it): the extraction no longer understands them",
			total, perFile["originannotation_test.go"], restricted, unrestricted)
	}
}

// minKustomizeCases is well below what kustomize v5.8.2's tests give.
const minKustomizeCases = 100

func checkKustomizeBuild(t *testing.T, b kustomizeBuild) {
	for _, body := range b.files {
		if strings.Contains(body, "https://") || strings.Contains(body, "github.com/") {
			t.Logf("remote content: trainops refuses it by design (no network); not compared")
			return
		}
	}
	if _, ok := b.files[filepath.Join(b.dir, "kustomization.yaml")]; !ok {
		t.Logf("no kustomization in %s: trainops reads such a folder as plain YAML files by design; not compared", b.dir)
		return
	}
	root := tree(t, b.files)
	objs, err := render.RenderContext(context.Background(), root, b.dir, render.Limits{LoadRestrictionsNone: b.loadRestrictionsNone})
	krustyOut, krustyErr := krustyHere(filepath.Join(root, b.dir), b.loadRestrictionsNone)
	switch {
	case b.wantErr && err == nil:
		t.Fatalf("kustomize's test expects the build of %s to fail; trainops built %d objects", b.dir, len(objs))
	case b.wantErr:
		if b.restricted && !strings.Contains(err.Error(), "outside the kustomization's folder") {
			t.Errorf("kustomize's load restrictor refuses this build; trainops refused it for another reason: %v", err)
		}
		if krustyErr == nil {
			t.Errorf("krusty built what kustomize's test expects to fail")
		}
		return
	case err != nil && krustyErr != nil && strings.Contains(err.Error(), "leaves the repository"):
		// The harness's in-memory root is its own parent ("/.." is "/"),
		// which a folder on disk is not.
		t.Logf("reaches above the harness's root; not compared: %v", err)
		return
	case err != nil:
		t.Fatalf("trainops: %v (krusty: %v)", err, krustyErr)
	case krustyErr != nil:
		t.Fatalf("krusty here: %v", krustyErr)
	}
	got := make([]string, len(objs))
	for i, o := range objs {
		got[i] = jsonOf(t, o.Object)
	}
	want := expectedObjects(t, b.expected)
	// kustomize's tests run with the version "(test)"; the release's
	// binary says its version.
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], `"kustomize-(test)"`, strconv.Quote(render.ManagedByValue))
	}
	for i := range krustyOut {
		krustyOut[i] = strings.ReplaceAll(krustyOut[i], `"kustomize-(devel)"`, strconv.Quote(render.ManagedByValue))
	}
	compareObjects(t, "kustomize's expectation", got, want)
	compareObjects(t, "krusty here", got, krustyOut)
}

func compareObjects(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("trainops built %d objects, %s %d:\ntrainops: %s\n%s: %s", len(got), what, len(want), strings.Join(got, "\n"), what, strings.Join(want, "\n"))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("object %d differs from %s:\ntrainops: %s\n%s: %s", i, what, got[i], what, want[i])
		}
	}
}

// krustyHere builds dir with krusty in this process, as `kustomize build`
// does (plugins off), each object as JSON.
func krustyHere(dir string, noRestrictions bool) ([]string, error) {
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = kustypes.DisabledPluginConfig()
	if noRestrictions {
		opts.LoadRestrictions = kustypes.LoadRestrictionsNone
	}
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range m.Resources() {
		j, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		var v map[string]any
		if err := json.Unmarshal(j, &v); err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

// expectedObjects is each document of a test's expected YAML as JSON.
func expectedObjects(t *testing.T, expected string) []string {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(expected, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var v map[string]any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("kustomize's expected output: %v", err)
		}
		out = append(out, jsonOf(t, v))
	}
	return out
}

func jsonOf(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
