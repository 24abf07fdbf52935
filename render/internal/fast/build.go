// SPDX-License-Identifier: Apache-2.0

// Package fast builds, in this process and in linear time, the
// kustomizations most training-config repositories hold: lists of local
// files and folders, plus a namespace, labels, annotations and patches.
// krusty checks every resource it adds against every resource it holds, at
// each level and again for each namespace it sets, so its build grows with
// the square of the resources; this path keeps an index instead, and runs
// krusty's own filters on each resource, in krusty's order. Anything else
// a kustomization may say, any resource kind another resource may refer to
// by name (whose references krusty would rewrite), and every error give
// way to krusty (ErrNotFast or any other error: the caller then builds
// with krusty, which writes the message). The render package's
// TestFastPathMatchesKrusty and FuzzFastPathMatchesKrusty hold the two
// builds equal, object for object.
//
// The copies of kustomize code here (entriesFilter, the field specs,
// applySmPatch, storePreviousID, patchTransformer) follow the
// sigs.k8s.io/kustomize/api release kustomizeVersion names.
package fast

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio"
)

// ErrNotFast says a tree uses something only krusty builds.
var ErrNotFast = errors.New("not for the fast path")

// fastFields are the kustomization fields the fast path builds.
var fastFields = map[string]bool{
	"apiVersion": true, "kind": true, "resources": true, "namespace": true,
	"commonLabels": true, "labels": true, "commonAnnotations": true,
	"patches": true, "buildMetadata": true,
}

// OriginAnnotation is the annotation kustomize's origin build metadata
// sets on each resource: the file it came from.
const OriginAnnotation = "config.kubernetes.io/origin"

// Kustomization is one kustomization as the caller's pre-scan parsed and
// checked it: its fields as YAML gave them, and typed.
type Kustomization struct {
	Fields map[string]any
	K      kustypes.Kustomization
}

// Reuse is asked, for each resource file, whether the caller already
// holds what that file builds to (see render.Reuse); kinds are the kinds
// of its objects. It is asked from several goroutines at once.
type Reuse func(file, key string) (kinds []string, ok bool)

// Input is one build: the kustomization in Dir, under the repository
// Root, from what the pre-scan read.
type Input struct {
	Root, Dir string
	// Kustomizations are those the pre-scan parsed, by folder.
	Kustomizations map[string]*Kustomization
	// Resources are the resource files the pre-scan read, and Patches the
	// other files it read (patches), by path.
	Resources, Patches map[string][]byte
	// MaxBytes bounds the output's size (render.maxBytes).
	MaxBytes int64
	// Reuse, when set, is asked about each resource file.
	Reuse Reuse
}

// Output is one object of a build: Object built from File, whose key
// (see Reuse) is Key; or, Reused, a file the caller holds, in the place
// its objects would be.
type Output struct {
	Object *unstructured.Unstructured
	File   string
	Key    string
	Reused bool
}

// fastBuilder builds one tree.
type fastBuilder struct {
	in Input
	rf *resource.Factory
	// files is each resource's file.
	files map[*resource.Resource]string
	// order is each file resource's place in the order files were met.
	order map[*resource.Resource]int
	// building holds the folders being built, to give a cycle to krusty.
	building map[string]bool
	// keys are the keys of the files parsed, by file ("" for a file built
	// through two kustomizations); reused the files Reuse holds, in the
	// order met, reusedAt the place (see order) of the first resource met
	// after each, and reusedKinds their kinds. parsed counts the resources
	// of files met so far.
	keys        sync.Map
	reused      []Output
	reusedAt    []int
	reusedKinds []string
	parsed      int
}

// Build builds in.Dir's kustomization, or says why it did not: ErrNotFast
// for a tree only krusty builds, or an error krusty would also meet.
func Build(in Input) ([]Output, error) {
	return withSchema(func() (objs []Output, err error) {
		defer func() {
			// kustomize's code can panic on odd input: krusty builds it then.
			if r := recover(); r != nil {
				objs, err = nil, fmt.Errorf("%w: %v", ErrNotFast, r)
			}
		}()
		b := &fastBuilder{in: in, rf: provider.NewDefaultDepProvider().GetResourceFactory(),
			files: map[*resource.Resource]string{}, order: map[*resource.Resource]int{}, building: map[string]bool{}}
		list, err := b.build(in.Dir, "")
		if err != nil {
			return nil, err
		}
		if err := noReferences(list, b.reusedKinds); err != nil {
			return nil, err
		}
		return b.output(list)
	})
}

// output makes each resource its object, and puts each reused file's
// marker in place.
func (b *fastBuilder) output(list []*resource.Resource) ([]Output, error) {
	// Each resource's tree is let go once its object is made, so the
	// trees and the objects are not all live at once: the file and place
	// of each are taken out of the maps first.
	files, order := make([]string, len(list)), make([]int, len(list))
	for i, r := range list {
		files[i] = b.files[r]
		order[i] = -1
		if m, ok := b.order[r]; ok {
			order[i] = m
		}
	}
	b.files, b.order = nil, nil
	out := make([]Output, len(list))
	var size atomic.Int64
	errs := Parallel(len(list), func(i int) error {
		u, n, err := objectOf(list[i])
		list[i] = nil
		if size.Add(int64(n)) > b.in.MaxBytes {
			// krusty's build says so.
			err = fmt.Errorf("%w: the output is over render.maxBytes", ErrNotFast)
		}
		if err != nil {
			return err
		}
		out[i] = Output{Object: u, File: files[i]}
		if key, ok := b.keys.Load(files[i]); ok {
			out[i].Key = key.(string)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(b.reused) == 0 {
		return out, nil
	}
	// Each marker goes where its file's objects would have been: before
	// the first object built from a file met after it. A patch may have
	// deleted objects; the transformers keep the others' order.
	all := make([]Output, 0, len(out)+len(b.reused))
	j, met := 0, 0
	for i, o := range out {
		if order[i] >= 0 {
			met = order[i]
		}
		for ; j < len(b.reused) && b.reusedAt[j] <= met; j++ {
			all = append(all, b.reused[j])
		}
		all = append(all, o)
	}
	return append(all, b.reused[j:]...), nil
}

// build accumulates the kustomization in dir, then runs its transformers.
func (b *fastBuilder) build(dir, chain string) ([]*resource.Resource, error) {
	if b.building[dir] {
		return nil, fmt.Errorf("%w: %s is in a cycle", ErrNotFast, b.rel(dir))
	}
	b.building[dir] = true
	defer delete(b.building, dir)
	k, err := b.kustomization(dir)
	if err != nil {
		return nil, err
	}
	if b.in.Reuse != nil {
		if chain, err = b.chainKey(chain, dir, k); err != nil {
			return nil, err
		}
	}
	// Files are read and parsed on every core, folders built after, and
	// everything is added in the kustomization's order.
	parts := make([][]*resource.Resource, len(k.Resources))
	isDir := make([]bool, len(k.Resources))
	kept := make([][]string, len(k.Resources)) // the kinds of a reused file
	errs := Parallel(len(k.Resources), func(i int) (err error) {
		p := filepath.Join(dir, k.Resources[i])
		if raw, ok := b.in.Resources[p]; ok {
			if b.in.Reuse != nil {
				file := b.rel(p)
				key := FileKey(chain, file, raw)
				if kinds, ok := b.in.Reuse(file, key); ok {
					kept[i] = append([]string{key}, kinds...)
					return nil
				}
				if prev, twice := b.keys.LoadOrStore(file, key); twice && prev.(string) != key {
					// Built through two kustomizations: no one key.
					b.keys.Store(file, "")
				}
			}
			parts[i], err = b.parseResources(p, raw)
			return err
		}
		info, err := os.Stat(p)
		switch {
		case err != nil:
		case info.IsDir():
			isDir[i] = true
		default:
			// Every file entry was read by the pre-scan; one it did not
			// read is not for the fast path.
			err = fmt.Errorf("%w: %s was not read by the pre-scan", ErrNotFast, b.rel(p))
		}
		return err
	})
	var list []*resource.Resource
	for i, entry := range k.Resources {
		if isDir[i] {
			parts[i], errs[i] = b.build(filepath.Join(dir, entry), chain)
		}
		if errs[i] != nil {
			return nil, errs[i]
		}
		file := b.rel(filepath.Join(dir, entry))
		if kept[i] != nil {
			b.reused = append(b.reused, Output{File: file, Key: kept[i][0], Reused: true})
			b.reusedAt = append(b.reusedAt, b.parsed)
			b.reusedKinds = append(b.reusedKinds, kept[i][1:]...)
		}
		if !isDir[i] {
			for j, r := range parts[i] {
				b.files[r] = file
				b.order[r] = b.parsed + j
			}
			b.parsed += len(parts[i])
		}
		list = append(list, parts[i]...)
	}
	if err := unique(list); err != nil {
		return nil, err
	}
	return b.transform(dir, k, list)
}

// Parallel runs f(0) … f(n-1) on every core and returns their errors; a
// panic in one (kustomize's code can panic on odd input) is its error.
func Parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	workqueue.ParallelizeUntil(context.Background(), runtime.GOMAXPROCS(0), n, func(i int) {
		defer func() {
			if r := recover(); r != nil {
				errs[i] = fmt.Errorf("%w: %v", ErrNotFast, r)
			}
		}()
		errs[i] = f(i)
	})
	return errs
}

// kustomization is dir's kustomization as the pre-scan checked it, or an
// error for one the fast path does not build.
func (b *fastBuilder) kustomization(dir string) (*kustypes.Kustomization, error) {
	p, ok := b.in.Kustomizations[dir]
	if !ok {
		return nil, fmt.Errorf("%w: %s was not scanned", ErrNotFast, b.rel(dir))
	}
	for f := range p.Fields {
		if !fastFields[f] {
			return nil, fmt.Errorf("%w: field %s", ErrNotFast, f)
		}
	}
	k := p.K
	if k.Kind != "" && k.Kind != kustypes.KustomizationKind {
		return nil, fmt.Errorf("%w: kind %s", ErrNotFast, k.Kind)
	}
	for _, meta := range k.BuildMetadata {
		// The origin annotation is what the scan asks for to name files
		// (a kustomization asking for it itself is built by krusty); the
		// managed-by label is added to what either builds.
		if meta != kustypes.OriginAnnotations && meta != kustypes.ManagedByLabelOption {
			return nil, fmt.Errorf("%w: buildMetadata %s", ErrNotFast, meta)
		}
	}
	return &k, nil
}

// parseResources reads the resources of file p, holding data, as krusty
// does.
func (b *fastBuilder) parseResources(p string, data []byte) ([]*resource.Resource, error) {
	// An anchor makes aliases possible, and a merge key merges: both are
	// for the isolated build, whose memory is capped. Without them, the
	// walk krusty's reader makes to expand them is skipped.
	if bytes.IndexByte(data, '&') >= 0 || bytes.Contains(data, []byte("<<")) {
		return nil, fmt.Errorf("%w: %s may hold a YAML anchor or merge key", ErrNotFast, b.rel(p))
	}
	nodes, err := (&kio.ByteReader{OmitReaderAnnotations: true, Reader: bytes.NewReader(data)}).Read()
	if err != nil {
		return nil, err
	}
	// What krusty's resource factory checks of each document, before it
	// makes it a resource.
	kept := nodes[:0]
	for _, n := range nodes {
		if n.IsNilOrEmpty() {
			continue
		}
		md, err := n.GetValidatedMetadata()
		if err != nil {
			return nil, err
		}
		if nilEntry, path := n.HasNilEntryInList(); nilEntry {
			return nil, fmt.Errorf("empty item at %v in object %v", path, n)
		}
		switch a := md.ObjectMeta.Annotations; {
		case strings.HasSuffix(md.Kind, "List"):
			return nil, fmt.Errorf("%w: %s holds a %s, which krusty expands", ErrNotFast, b.rel(p), md.Kind)
		case a[konfig.IgnoredByKustomizeAnnotation] != "":
			return nil, fmt.Errorf("%w: %s holds local configuration", ErrNotFast, b.rel(p))
		case a[OriginAnnotation] != "":
			return nil, fmt.Errorf("%w: %s sets %s", ErrNotFast, b.rel(p), OriginAnnotation)
		}
		kept = append(kept, n)
	}
	return b.rf.ResourcesFromRNodes(kept)
}

// noReferences refuses a tree where krusty's name-reference transformer
// could rewrite something: one holding a kind that may refer by name to
// another kind it also holds (a Deployment and a ConfigMap). The
// transformer changes a reference only to an object of the build.
func noReferences(list []*resource.Resource, more []string) error {
	kinds := map[string]bool{}
	for _, r := range list {
		kinds[r.GetKind()] = true
	}
	for _, k := range more {
		kinds[k] = true
	}
	for target := range kinds {
		for referrer := range referrers()[target] {
			if kinds[referrer] {
				return fmt.Errorf("%w: a %s may refer to a %s by name", ErrNotFast, referrer, target)
			}
		}
	}
	return nil
}

// labelFieldSpecs are the fields one `labels` entry sets, as krusty
// merges them.
func labelFieldSpecs(l kustypes.Label) (kustypes.FsSlice, error) {
	fss, err := kustypes.FsSlice(l.FieldSpecs).MergeAll(defaultSpecs().Labels)
	if err != nil {
		return nil, err
	}
	if l.IncludeSelectors {
		return fss.MergeAll(defaultSpecs().CommonLabels)
	}
	if l.IncludeTemplates {
		if fss, err = fss.MergeAll(defaultSpecs().TemplateLabels); err != nil {
			return nil, err
		}
	}
	if l.IncludeVolumeClaimTemplates {
		if fss, err = fss.MergeAll(defaultSpecs().VolumeClaimTemplateLabels); err != nil {
			return nil, err
		}
	}
	return fss.MergeOne(kustypes.FieldSpec{Path: "metadata/labels", CreateIfNotPresent: true})
}

// unique refuses two resources of one ID, as krusty's accumulator does.
// Each ID is read from its resource's YAML, on every core; a resource
// whose ID cannot be read gives way to krusty.
func unique(list []*resource.Resource) error {
	keys := make([]string, len(list))
	errs := Parallel(len(list), func(i int) error {
		id := list[i].CurId()
		keys[i] = id.Gvk.String() + "|" + id.EffectiveNamespace() + "|" + id.Name
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	seen := make(map[string]bool, len(list))
	for i, key := range keys {
		if seen[key] {
			return fmt.Errorf("may not add resource with an already registered id: %s", list[i].CurId())
		}
		seen[key] = true
	}
	return nil
}

// rel is p in the repository, as a slash path.
func (b *fastBuilder) rel(p string) string {
	if r, err := filepath.Rel(b.in.Root, p); err == nil {
		return filepath.ToSlash(r)
	}
	return p
}
