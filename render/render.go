// SPDX-License-Identifier: Apache-2.0

// Package render turns a folder of a checked-out repository into Kubernetes
// objects: with kustomize (krusty) when it holds a kustomization, otherwise
// by reading every YAML file under it. Rendering is confined to the
// repository root: no "..", no symlink out of it, no remote bases, no
// plugins. Each object remembers the file it came from, so errors can name
// it.
package render

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/limits"
	"github.com/trainops/trainops/render/internal/fast"
)

// MaxFileBytes bounds one file: a training-config file past it is a mistake
// or an attack.
const MaxFileBytes = limits.FileBytes

// originAnnotation is where kustomize records the file an object came from.
const originAnnotation = fast.OriginAnnotation

// Object is a rendered object and the file (relative to the repository
// root) it came from.
type Object struct {
	*unstructured.Unstructured
	File string
	// Key is File's reuse key (see Reuse); empty when krusty built it, or
	// when the fast path built it through two kustomizations.
	Key string
	// Reused stands in for File's objects, which the render's Reuse
	// holds: Unstructured is nil.
	Reused bool
}

// ID is "Kind namespace/name" (or "Kind name"), for messages.
func (o Object) ID() string { return ObjectID(o.Unstructured) }

// ObjectID is "Kind namespace/name" (or "Kind name"), for messages.
func ObjectID(u *unstructured.Unstructured) string {
	return IDOf(u.GetKind(), u.GetNamespace(), u.GetName())
}

// IDOf is ObjectID of the object of kind, namespace and name.
func IDOf(kind, namespace, name string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

// Error is a render failure; File is the offending file when known.
type Error struct {
	File string
	Err  error
}

func (e *Error) Error() string {
	if e.File == "" {
		return "render: " + e.Err.Error()
	}
	return fmt.Sprintf("render %s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Limits bound one render, whatever the repository holds. Zero fields take
// the defaults.
type Limits struct {
	// Timeout bounds a kustomize build (default 1m).
	Timeout time.Duration `json:"timeout"`
	// MemoryBytes caps the memory of a kustomize build (default 512 MiB).
	MemoryBytes int64 `json:"memoryBytes"`
	// MaxBytes bounds the files a render reads, added up, and separately
	// its rendered output (default 64 MiB).
	MaxBytes int64 `json:"maxBytes"`
	// NoFastPath builds every kustomization with krusty in its confined
	// child process, never in this one (render/internal/fast).
	NoFastPath bool `json:"noFastPath,omitempty"`
	// LoadRestrictionsNone lets a kustomization read files outside its own
	// folder (still inside the repository), as kustomize's
	// --load-restrictor LoadRestrictionsNone does; by default kustomize's
	// LoadRestrictionsRootOnly refuses them.
	LoadRestrictionsNone bool `json:"loadRestrictionsNone,omitempty"`
	// FreshChild starts a child process for each kustomize build and ends
	// it after, instead of keeping one warm for the next build.
	FreshChild bool `json:"freshChild,omitempty"`
}

// KustomizeRelease is the kustomize release whose code (its api module)
// trainops links; a kustomization's managedByLabel build metadata names
// it, as that release's kustomize binary does.
const KustomizeRelease = "v5.8.2"

// ManagedByValue is the app.kubernetes.io/managed-by label kustomize
// KustomizeRelease gives every object of a kustomization asking for
// managedByLabel.
const ManagedByValue = "kustomize-" + KustomizeRelease

// Default limits of a render.
const (
	DefaultTimeout     = limits.RenderTimeout
	DefaultMemoryBytes = limits.RenderMemoryBytes
	DefaultMaxBytes    = limits.RevisionBytes
)

// WithDefaults fills the zero fields of l.
func (l Limits) WithDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// Render renders path (relative to root) of a checkout within the default
// limits. Objects come out in a stable order: by file, then by position in
// the file.
func Render(root, path string) ([]Object, error) {
	return RenderContext(context.Background(), root, path, Limits{})
}

// RenderContext renders path (relative to root) of a checkout within l.
func RenderContext(ctx context.Context, root, path string, l Limits) ([]Object, error) {
	return RenderCached(ctx, root, path, l, nil)
}

// RenderCached is RenderContext, taking what c holds of files rendered
// before (see Cache) and keeping what it renders in c. c may be nil.
func RenderCached(ctx context.Context, root, path string, l Limits, c *Cache) ([]Object, error) {
	if c == nil {
		return renderWith(ctx, root, path, l, nil)
	}
	objs, err := renderWith(ctx, root, path, l, c.reuse)
	if err != nil {
		return nil, err
	}
	out, reused := c.fill(objs)
	if reused && collide(out) {
		// A reused file's objects meet others of the same identity: a
		// file listed twice, or two files of one object. kustomize
		// refuses that, but the build saw only the files it built, so
		// the tree is built again without the cache to say so exactly.
		return renderWith(ctx, root, path, l, nil)
	}
	return out, nil
}

// collide reports whether two of objs have one identity (apiVersion,
// kind, namespace and name).
func collide(objs []Object) bool {
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		id := o.GetAPIVersion() + "\x00" + o.ID()
		if seen[id] {
			return true
		}
		seen[id] = true
	}
	return false
}

// renderWith renders, asking reuse (may be nil).
func renderWith(ctx context.Context, root, path string, l Limits, reuse Reuse) ([]Object, error) {
	l = l.WithDefaults()
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if absRoot, err = filepath.EvalSymlinks(absRoot); err != nil {
		return nil, &Error{Err: err}
	}
	dir, err := inside(absRoot, path)
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, &Error{File: path, Err: errors.New("no such folder in the repository")}
	}
	if !info.IsDir() {
		// One file, as kubectl takes it.
		us, err := parsePlainFile(absRoot, dir)
		if err != nil {
			return nil, &Error{File: rel(absRoot, dir), Err: err}
		}
		out := make([]Object, len(us))
		for i, u := range us {
			out[i] = Object{Unstructured: u, File: rel(absRoot, dir)}
		}
		return out, nil
	}
	if kfile := KustomizationFile(dir); kfile != "" {
		return renderKustomize(ctx, absRoot, dir, kfile, l, reuse)
	}
	return renderPlain(absRoot, dir, l, reuse)
}

// inside resolves path under root and refuses anything that leaves it.
func inside(root, path string) (string, error) {
	clean := filepath.Clean("/" + path)
	if strings.Contains(path, "..") && filepath.Join(root, path) != filepath.Join(root, clean) {
		return "", errors.New("leaves the repository (\"..\")")
	}
	p := filepath.Join(root, clean)
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return p, nil // missing: reported by the caller
	}
	if resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
		return "", errors.New("is a symlink that leaves the repository")
	}
	return resolved, nil
}

// KustomizationFile is the name of dir's kustomization file ("" when it
// has none).
func KustomizationFile(dir string) string {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return n
		}
	}
	return ""
}

func rel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// renderKustomize builds dir as krusty does, confined to root: the
// pre-scan refuses anything outside the repository (and, under kustomize's
// default load restrictor, any file outside its kustomization's folder);
// then the fast path builds the tree (render/internal/fast), or krusty
// does, isolated within l (isolate.go).
func renderKustomize(ctx context.Context, root, dir, kfile string, l Limits, reuse Reuse) ([]Object, error) {
	s := newScan(root, l)
	if err := s.kustomization(dir, true); err != nil {
		return nil, err
	}
	// The fast path makes no origin annotations: a kustomization that
	// asks for them in its output is built by krusty.
	if !l.NoFastPath && !s.keepOrigin {
		if objs, err := buildFast(root, dir, s, l, reuse); err == nil {
			return s.finish(objs), nil
		}
	}
	overlay, err := s.overlay()
	if err != nil {
		return nil, err
	}
	objs, err := buildIsolated(ctx, root, dir, rel(root, filepath.Join(dir, kfile)), overlay, s.sources(), l)
	if err != nil {
		return nil, err
	}
	return s.finish(objs), nil
}

// finish applies the top kustomization's build metadata as kustomize does:
// the origin annotation stays only where the kustomization asks for it
// (kustomize takes off even one a file sets), and
// managedByLabel labels every object with the kustomize release whose code
// trainops links.
func (s *scan) finish(objs []Object) []Object {
	for _, o := range objs {
		if o.Reused {
			continue // as built before, under the same kustomizations
		}
		if !s.keepOrigin {
			if ann := o.GetAnnotations(); ann != nil {
				if _, ok := ann[originAnnotation]; ok {
					delete(ann, originAnnotation)
					if len(ann) == 0 {
						ann = nil
					}
					o.SetAnnotations(ann)
				}
			}
		}
		if s.managedBy {
			labels := o.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[konfig.ManagedbyLabelKey] = ManagedByValue
			o.SetLabels(labels)
		}
	}
	return objs
}

// cleanKustomizeError shortens absolute paths in kustomize's messages to
// paths in the repository.
func cleanKustomizeError(err error, root string) error {
	return errors.New(strings.ReplaceAll(err.Error(), root+string(filepath.Separator), ""))
}

// renderPlain reads every .yaml/.yml file under dir (hidden folders
// skipped), in path order.
func renderPlain(root, dir string, l Limits, reuse Reuse) ([]Object, error) {
	var files []string
	// links are the files that are symlinks. The walk follows none and
	// dir is resolved, so any other file is inside root as it stands.
	links := map[string]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if k := KustomizationFile(p); p != dir && k != "" {
				// Its files are not objects: kustomize builds them.
				return &Error{File: rel(root, filepath.Join(p, k)), Err: fmt.Errorf("a kustomization below the rendered folder, which has none: render it as its own root (path %s), or list it in a kustomization.yaml at the top", rel(root, p))}
			}
			return nil
		}
		if ext := filepath.Ext(p); ext == ".yaml" || ext == ".yml" {
			if info, err := d.Info(); err == nil {
				if total += info.Size(); total > l.MaxBytes {
					return &Error{File: rel(root, p), Err: fmt.Errorf("the files this render reads add up to more than %d MiB (render.maxBytes)", l.MaxBytes>>20)}
				}
			}
			files = append(files, p)
			if d.Type()&fs.ModeSymlink != 0 {
				links[p] = true
			}
		}
		return nil
	})
	var re *Error
	if errors.As(err, &re) {
		return nil, re
	}
	if err != nil {
		return nil, &Error{Err: err}
	}
	sort.Strings(files)
	// Parse on every core; the result and the error reported (the first
	// file's, in path order) are the same as parsing one after another.
	parsed := make([][]*unstructured.Unstructured, len(files))
	keys := make([]string, len(files))
	skipped := make([]bool, len(files))
	errs := make([]error, len(files))
	workqueue.ParallelizeUntil(context.Background(), runtime.GOMAXPROCS(0), len(files), func(i int) {
		raw, err := readPlainFile(root, files[i], links[files[i]])
		if err != nil {
			errs[i] = err
			return
		}
		if reuse != nil {
			keys[i] = fast.FileKey(plainTree, rel(root, files[i]), raw)
			if _, skipped[i] = reuse(rel(root, files[i]), keys[i]); skipped[i] {
				return
			}
		}
		parsed[i], errs[i] = Parse(raw)
	})
	var out []Object
	for i, f := range files {
		if errs[i] != nil {
			return nil, &Error{File: rel(root, f), Err: errs[i]}
		}
		if skipped[i] {
			out = append(out, reused(rel(root, f), keys[i]))
			continue
		}
		for _, u := range parsed[i] {
			out = append(out, Object{Unstructured: u, File: rel(root, f), Key: keys[i]})
		}
	}
	return out, nil
}

// parsePlainFile parses f, refusing a symlink that leaves root.
func parsePlainFile(root, f string) ([]*unstructured.Unstructured, error) {
	raw, err := readPlainFile(root, f, true)
	if err != nil {
		return nil, err
	}
	return Parse(raw)
}

// readPlainFile reads f; a link is resolved first, and refused when it
// leaves root.
func readPlainFile(root, f string, link bool) ([]byte, error) {
	if link {
		resolved, err := filepath.EvalSymlinks(f)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
			return nil, errors.New("is a symlink that leaves the repository")
		}
		f = resolved
	}
	return readLimited(f)
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return limits.ReadAll(f, MaxFileBytes)
}

// ParseFile reads the Kubernetes objects of one YAML file. Each document
// must be an object with apiVersion, kind and metadata.name.
func ParseFile(path string) ([]*unstructured.Unstructured, error) {
	raw, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	return Parse(raw)
}

// Parse reads the Kubernetes objects of multi-document YAML.
func Parse(raw []byte) ([]*unstructured.Unstructured, error) {
	// A file where no line starts a new document (as utilyaml.YAMLReader
	// reads them) is its one document: no reader to allocate.
	if !bytes.HasPrefix(raw, []byte("---")) && !bytes.Contains(raw, []byte("\n---")) {
		return appendDocument(nil, raw, 1)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if out, err = appendDocument(out, doc, i); err != nil {
			return nil, err
		}
	}
}

// appendDocument appends document i, doc, to out, unless it holds only
// comments or null.
func appendDocument(out []*unstructured.Unstructured, doc []byte, i int) ([]*unstructured.Unstructured, error) {
	if blank(doc) {
		return out, nil
	}
	u, err := parseDocument(doc, i)
	if err != nil || u == nil {
		return out, err
	}
	return append(out, u), nil
}

// parseDocument reads document i, doc; nil when it holds nothing (null).
func parseDocument(doc []byte, i int) (*unstructured.Unstructured, error) {
	u, ok := decodeDirect(doc)
	if !ok {
		// Through JSON, so numbers become int64 as the API machinery
		// expects; the messages of a document that is not an object are
		// this path's.
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if t := bytes.TrimSpace(j); bytes.Equal(t, []byte("null")) {
			return nil, nil
		} else if len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("document %d: not an object", i)
		}
		u = &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			// Say precisely what is missing.
			var m map[string]any
			if jerr := json.Unmarshal(j, &m); jerr != nil {
				return nil, fmt.Errorf("document %d: %w", i, jerr)
			}
			probe := &unstructured.Unstructured{Object: m}
			switch {
			case probe.GetAPIVersion() == "":
				return nil, fmt.Errorf("document %d: no apiVersion", i)
			case probe.GetKind() == "":
				return nil, fmt.Errorf("document %d: no kind", i)
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
	} else if u == nil {
		return nil, nil
	}
	if u.GetAPIVersion() == "" {
		return nil, fmt.Errorf("document %d (%s): no apiVersion", i, u.GetKind())
	}
	if u.GetName() == "" {
		return nil, fmt.Errorf("document %d (%s): no metadata.name", i, u.GetKind())
	}
	if strings.HasSuffix(u.GetKind(), "List") && u.IsList() {
		return nil, fmt.Errorf("document %d: %s is a list: write its items as separate documents", i, u.GetKind())
	}
	return u, nil
}

// blank reports whether doc holds only comments and space.
func blank(doc []byte) bool {
	for len(doc) > 0 {
		line := doc
		if i := bytes.IndexByte(doc, '\n'); i >= 0 {
			line, doc = doc[:i], doc[i+1:]
		} else {
			doc = nil
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}
