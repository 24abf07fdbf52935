// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/kustomize/api/builtins"
	"sigs.k8s.io/kustomize/api/filters/namespace"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/pkg/loader"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"
)

// The fast path builds, in this process and in linear time, the
// kustomizations most training-config repositories hold: lists of local
// files and folders, plus a namespace, labels, annotations and patches.
// krusty checks every resource it adds against every resource it holds, at
// each level and again for each namespace it sets, so its build grows with
// the square of the resources;
// this path keeps an index instead, and runs krusty's own filters and patch transformer on
// each resource, in krusty's order. Anything else a kustomization may say,
// any resource kind another resource may refer to by name (whose
// references krusty would rewrite), and every error give way to the
// isolated krusty build (isolate.go), which then also writes the message.
// TestFastPathMatchesKrusty holds the two builds equal, object for object.

// errNotFast says a tree uses something only krusty builds.
var errNotFast = errors.New("not for the fast path")

// fastFields are the kustomization fields the fast path builds.
var fastFields = map[string]bool{
	"apiVersion": true, "kind": true, "resources": true, "namespace": true,
	"commonLabels": true, "labels": true, "commonAnnotations": true,
	"patches": true, "buildMetadata": true,
}

// fastMu serializes fast builds: kustomize keeps global state (its OpenAPI
// data, which the namespace filter reads, set up on first use), and one
// build already runs on every core.
var fastMu sync.Mutex

// fastBuilder builds one tree.
type fastBuilder struct {
	root string
	// kusts are the kustomizations the pre-scan parsed, by path.
	kusts map[string]*parsedKustomization
	// data are the resource files the pre-scan read, by path.
	data  map[string][]byte
	rf    *resource.Factory
	files map[*resource.Resource]string
	// order is each file resource's place in the order files were met.
	order map[*resource.Resource]int
	// building holds the folders being built, to give a cycle to krusty.
	building map[string]bool
	// reuse, when set, is asked about each resource file (see chainKey).
	reuse Reuse
	// inputs are the other files the pre-scan read (patches), by path.
	inputs map[string][]byte
	// keys are the keys of the files parsed, by file ("" for a file built
	// through two kustomizations); reused the files reuse holds, in the
	// order met, reusedAt the place (see order) of the first resource met
	// after each, and reusedKinds their kinds. parsed counts the resources
	// of files met so far.
	keys        sync.Map
	reused      []Object
	reusedAt    []int
	reusedKinds []string
	parsed      int
}

// buildFast builds the kustomization in dir with the fast path; ok is
// false when the tree is not one it builds or anything failed.
func buildFast(root, dir string, s *scan, l Limits, reuse Reuse) (objs []Object, ok bool) {
	objs, err := fastBuild(root, dir, s, l, reuse)
	return objs, err == nil
}

// fastBuild builds the kustomization in dir with the fast path, or says
// why it did not.
func fastBuild(root, dir string, s *scan, l Limits, reuse Reuse) (objs []Object, err error) {
	fastMu.Lock()
	defer fastMu.Unlock()
	defer func() {
		// A method of resmap.ResMap the transformers were not expected to
		// call (see listMap) also gives way to krusty.
		if r := recover(); r != nil {
			objs, err = nil, fmt.Errorf("%w: %v", errNotFast, r)
		}
	}()
	b := &fastBuilder{root: root, kusts: s.parsed, data: s.data, rf: provider.NewDefaultDepProvider().GetResourceFactory(),
		files: map[*resource.Resource]string{}, order: map[*resource.Resource]int{}, building: map[string]bool{}, reuse: reuse, inputs: s.inputs}
	list, err := b.build(dir, "")
	if err != nil {
		return nil, err
	}
	if err := noReferences(list, b.reusedKinds); err != nil {
		return nil, err
	}
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
	out := make([]Object, len(list))
	var size atomic.Int64
	errs := parallel(len(list), func(i int) error {
		u, n, err := objectOf(list[i])
		list[i] = nil
		if size.Add(int64(n)) > l.MaxBytes {
			// The isolated build says so.
			err = fmt.Errorf("%w: the output is over render.maxBytes", errNotFast)
		}
		if err != nil {
			return err
		}
		out[i] = withOrigin(u, root, dir, "")
		out[i].File = files[i]
		if key, ok := b.keys.Load(out[i].File); ok {
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
	all := make([]Object, 0, len(out)+len(b.reused))
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
		return nil, fmt.Errorf("%w: %s is in a cycle", errNotFast, rel(b.root, dir))
	}
	b.building[dir] = true
	defer delete(b.building, dir)
	k, err := b.kustomization(dir)
	if err != nil {
		return nil, err
	}
	if b.reuse != nil {
		if chain, err = b.chainKey(chain, dir, k); err != nil {
			return nil, err
		}
	}
	// Files are read and parsed on every core, folders built after, and
	// everything is added in the kustomization's order.
	parts := make([][]*resource.Resource, len(k.Resources))
	isDir := make([]bool, len(k.Resources))
	kept := make([][]string, len(k.Resources)) // the kinds of a reused file
	errs := parallel(len(k.Resources), func(i int) (err error) {
		p := filepath.Join(dir, k.Resources[i])
		if raw, ok := b.data[p]; ok {
			if b.reuse != nil {
				file := rel(b.root, p)
				key := fileKey(chain, file, raw)
				if kinds, ok := b.reuse(file, key); ok {
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
			err = fmt.Errorf("%w: %s was not read by the pre-scan", errNotFast, rel(b.root, p))
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
		file := rel(b.root, filepath.Join(dir, entry))
		if kept[i] != nil {
			b.reused = append(b.reused, reused(file, kept[i][0]))
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

// parallel runs f(0) … f(n-1) on every core and returns their errors; a
// panic in one (kustomize's code can panic on odd input) is its error.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	workqueue.ParallelizeUntil(context.Background(), runtime.GOMAXPROCS(0), n, func(i int) {
		defer func() {
			if r := recover(); r != nil {
				errs[i] = fmt.Errorf("%w: %v", errNotFast, r)
			}
		}()
		errs[i] = f(i)
	})
	return errs
}

// kustomization is dir's kustomization as the pre-scan checked it, or an
// error for one the fast path does not build.
func (b *fastBuilder) kustomization(dir string) (*kustypes.Kustomization, error) {
	p, ok := b.kusts[filepath.Join(dir, KustomizationFile(dir))]
	if !ok {
		return nil, fmt.Errorf("%w: %s was not scanned", errNotFast, rel(b.root, dir))
	}
	for f := range p.fields {
		if !fastFields[f] {
			return nil, fmt.Errorf("%w: field %s", errNotFast, f)
		}
	}
	k := p.k
	if k.Kind != "" && k.Kind != kustypes.KustomizationKind {
		return nil, fmt.Errorf("%w: kind %s", errNotFast, k.Kind)
	}
	for _, meta := range k.BuildMetadata {
		if meta != kustypes.OriginAnnotations {
			return nil, fmt.Errorf("%w: buildMetadata %s", errNotFast, meta)
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
		return nil, fmt.Errorf("%w: %s may hold a YAML anchor or merge key", errNotFast, rel(b.root, p))
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
			return nil, fmt.Errorf("%w: %s holds a %s, which krusty expands", errNotFast, rel(b.root, p), md.Kind)
		case a[konfig.IgnoredByKustomizeAnnotation] != "":
			return nil, fmt.Errorf("%w: %s holds local configuration", errNotFast, rel(b.root, p))
		case a[originAnnotation] != "":
			return nil, fmt.Errorf("%w: %s sets %s", errNotFast, rel(b.root, p), originAnnotation)
		}
		kept = append(kept, n)
	}
	return b.rf.ResourcesFromRNodes(kept)
}

// transform runs k's transformers on list in krusty's order: patches,
// namespace, labels, annotations.
func (b *fastBuilder) transform(dir string, k *kustypes.Kustomization, list []*resource.Resource) ([]*resource.Resource, error) {
	m := &listMap{list: list}
	if slices.ContainsFunc(k.Patches, func(p kustypes.Patch) bool { return b.jsonPatch(dir, p) }) {
		for _, r := range m.list {
			if !annotationsAreStrings(r) {
				return nil, fmt.Errorf("%w: a JSON patch over %s, whose annotations are not all strings", errNotFast, r.CurId())
			}
		}
	}
	if len(k.Patches) > 0 {
		// Confined to dir, as kustomize's loader restricts a patch file;
		// the pre-scan has refused any path out of the repository.
		ldr, err := loader.NewFileLoaderAtRoot(filesys.MakeFsOnDisk()).New(strings.TrimPrefix(dir, string(filepath.Separator)))
		if err != nil {
			return nil, err
		}
		h := resmap.NewPluginHelpers(ldr, provider.NewDefaultDepProvider().GetFieldValidator(), resmap.NewFactory(b.rf), kustypes.DisabledPluginConfig())
		for _, pc := range k.Patches {
			c, err := yaml.Marshal(struct {
				Path    string              `json:"path,omitempty"`
				Patch   string              `json:"patch,omitempty"`
				Target  *kustypes.Selector  `json:"target,omitempty"`
				Options *kustypes.PatchArgs `json:"options,omitempty"`
			}{pc.Path, pc.Patch, pc.Target, pc.Options})
			if err != nil {
				return nil, err
			}
			p := builtins.NewPatchTransformerPlugin()
			if err := p.Config(h, c); err != nil {
				return nil, err
			}
			if err := p.Transform(m); err != nil {
				return nil, err
			}
			// As krusty after each transformer: a patch may have deleted
			// a resource.
			m.dropEmpties()
		}
	}
	if k.Namespace != "" {
		// As krusty's namespace transformer, one resource at a time (on
		// every core); unique below is its ID check.
		err := errors.Join(parallel(len(m.list), func(i int) error {
			r := m.list[i]
			if r.IsNilOrEmpty() || r.GetAnnotations(konfig.HelmGeneratedAnnotation)[konfig.HelmGeneratedAnnotation] == "true" {
				return nil
			}
			storePreviousID(r)
			if err := r.ApplyFilter(namespace.Filter{Namespace: k.Namespace, FsSlice: defaultSpecs().NameSpace, SetRoleBindingSubjects: namespace.DefaultSubjectsOnly}); err != nil {
				return err
			}
			return stringAnnotations(r)
		})...)
		if err != nil {
			return nil, err
		}
	}
	for _, l := range k.Labels {
		fss, err := labelFieldSpecs(l)
		if err != nil {
			return nil, err
		}
		if err := m.setEntries(l.Pairs, fss); err != nil {
			return nil, err
		}
	}
	if err := m.setEntries(k.CommonLabels, defaultSpecs().CommonLabels); err != nil {
		return nil, err
	}
	if err := m.setEntries(k.CommonAnnotations, defaultSpecs().CommonAnnotations); err != nil {
		return nil, err
	}
	if err := unique(m.list); err != nil {
		return nil, err
	}
	return m.list, nil
}

// jsonPatch reports whether p, of the kustomization in dir, is a JSON
// patch (a list of operations) rather than a strategic merge patch.
func (b *fastBuilder) jsonPatch(dir string, p kustypes.Patch) bool {
	text := []byte(p.Patch)
	if p.Path != "" {
		text = b.inputs[filepath.Join(dir, p.Path)]
	}
	var v any
	if err := yaml.Unmarshal(text, &v); err != nil {
		return true // krusty says what is wrong with it
	}
	_, list := v.([]any)
	return list
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
				return fmt.Errorf("%w: a %s may refer to a %s by name", errNotFast, referrer, target)
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
	errs := parallel(len(list), func(i int) error {
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
