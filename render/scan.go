// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render/internal/fast"
)

// The pre-scan reads every kustomization a build will reach before
// kustomize runs, and refuses any entry that is not a path inside the
// repository. kustomize itself would fetch http(s) URLs with its own HTTP
// client and clone Git URLs by running the git program; trainops renders
// only what a Git revision holds.

// errRemote is the reason every remote entry is refused.
var errRemote = errors.New("is remote content, which trainops never fetches: vendor it into the repository")

var (
	// schemeRE matches any URL scheme: http, https, ssh, git, file, s3 …
	schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)
	// scpRE matches Git's scp-like form, user@host:path, which kustomize
	// clones (git@github.com:org/repo).
	scpRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)
)

// IsRemote reports whether kustomize would fetch entry from elsewhere
// rather than read it from the repository: a URL of any scheme, Git's
// user@host:path form, the github.com/org/repo shorthand, the forced
// git:: prefix, or a ?ref= / ?version= query.
func IsRemote(entry string) bool {
	e := strings.ToLower(strings.TrimSpace(entry))
	switch {
	case strings.HasPrefix(e, "git::"),
		schemeRE.MatchString(e),
		scpRE.MatchString(e),
		strings.HasPrefix(e, "github.com/"), strings.HasPrefix(e, "github.com:"),
		strings.Contains(e, "?ref="), strings.Contains(e, "?version="):
		return true
	}
	return false
}

// FieldError is an entry of a kustomization refused before kustomize runs.
type FieldError struct {
	// Field is the kustomization's field, e.g. "resources" or
	// "configMapGenerator[0].files".
	Field string
	// Entry is the value refused.
	Entry string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("field %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("field %s: entry %q %v", e.Field, e.Entry, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// scan walks the kustomizations reachable from one build.
type scan struct {
	root   string
	limits Limits
	// read is the bytes of every file read or sized so far.
	read int64
	// seen holds the folders already scanned (kustomize refuses cycles;
	// this only avoids scanning a shared base twice).
	seen map[string]bool
	// parsed is each kustomization as trainops parsed and checked it, by
	// path: the fast path builds from it, and krusty is given it
	// re-encoded (overlay).
	parsed map[string]*fast.Kustomization
	// data holds each resource file read, by the path its entry gives.
	data map[string][]byte
	// inputs holds every other YAML file read (patches), by the path its
	// entry gives: with the kustomizations, what decides how each resource
	// file is built.
	inputs map[string][]byte
	// dirs are folders resolved so far (resolve).
	dirs map[string]string
	// ahead holds the files a kustomization's resources list names, read
	// ahead on every core (readAhead), by path: entry takes them from here
	// and checks them in the list's order as if it had read them itself.
	ahead map[string][]byte
	// keepOrigin and managedBy are the top kustomization's own build
	// metadata (finish applies them).
	keepOrigin, managedBy bool
}

func newScan(root string, l Limits) *scan {
	return &scan{root: root, limits: l, seen: map[string]bool{}, parsed: map[string]*fast.Kustomization{}, data: map[string][]byte{}, inputs: map[string][]byte{}, dirs: map[string]string{}, ahead: map[string][]byte{}}
}

// kustomization scans the kustomization in dir (absolute, inside root)
// and everything it reaches. top adds the build metadata trainops needs to
// name each object's file.
func (s *scan) kustomization(dir string, top bool) error {
	if s.seen[dir] {
		return nil
	}
	s.seen[dir] = true
	name := KustomizationFile(dir)
	if name == "" {
		return &Error{File: rel(s.root, dir), Err: errors.New("is a folder without a kustomization.yaml: kustomize can only build a folder that has one")}
	}
	kpath := filepath.Join(dir, name)
	kfile := rel(s.root, kpath)
	raw, err := s.readFile(kpath)
	if err != nil {
		return &Error{File: kfile, Err: err}
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return &Error{File: kfile, Err: err}
	}
	if m == nil {
		m = map[string]any{}
	}
	var k kustypes.Kustomization
	j, err := json.Marshal(m)
	if err != nil {
		return &Error{File: kfile, Err: err}
	}
	if err := json.Unmarshal(j, &k); err != nil {
		return &Error{File: kfile, Err: err}
	}
	if err := s.fields(dir, &k); err != nil {
		var nested *Error
		if errors.As(err, &nested) {
			return nested // a file this one reaches: name that file
		}
		return &Error{File: kfile, Err: err}
	}
	if err := checkEmpty(j); err != nil {
		return &Error{File: kfile, Err: err}
	}
	if top {
		s.keepOrigin = slices.Contains(k.BuildMetadata, kustypes.OriginAnnotations)
		s.managedBy = slices.Contains(k.BuildMetadata, kustypes.ManagedByLabelOption)
	}
	s.parsed[kpath] = &fast.Kustomization{Fields: m, K: k}
	return nil
}

// checkEmpty refuses a kustomization that holds nothing, with kustomize's
// own test and message: kustomize refuses to build one, and a sync
// allowed to render nothing would otherwise prune everything.
func checkEmpty(j []byte) error {
	var k kustypes.Kustomization
	if err := json.Unmarshal(j, &k); err != nil {
		return err
	}
	k.FixKustomization()
	if err := k.CheckEmpty(); err != nil {
		return fmt.Errorf("%w: kustomize refuses to build it; list resources in it, or remove it", err)
	}
	return nil
}

// sources names each resource file read (but those also read as a patch)
// by its path as kustomize reads it, with its path in the repository: its
// objects carry it through a krusty build (source.go).
func (s *scan) sources() map[string]string {
	out := make(map[string]string, len(s.data))
	for p := range s.data {
		if _, patch := s.inputs[p]; !patch {
			out[filepath.Clean(p)] = rel(s.root, p)
		}
	}
	return out
}

// overlay is each kustomization as trainops parsed it, re-encoded, by
// path: kustomize is given these bytes, so it builds exactly what was
// checked, whatever its own YAML parser would make of the original.
func (s *scan) overlay() (map[string][]byte, error) {
	out := make(map[string][]byte, len(s.parsed))
	for p, k := range s.parsed {
		raw, err := yaml.Marshal(k.Fields)
		if err != nil {
			return nil, &Error{File: rel(s.root, p), Err: err}
		}
		out[p] = raw
	}
	return out, nil
}

// entryKind says what a field's entries are, and so how each is checked.
type entryKind int

const (
	// kustomizations: a folder with a kustomization (scanned in turn) or
	// a YAML file.
	kustomizations entryKind = iota
	// yamlFile: a YAML file.
	yamlFile
	// dataFile: a file of any content (a generator's files and envs).
	dataFile
	// inlineOrFile: a YAML file, or YAML written inline.
	inlineOrFile
	// inlineOrKustomizations: as kustomizations, or YAML written inline.
	inlineOrKustomizations
)

// fields checks every field of k that names something to read.
func (s *scan) fields(dir string, k *kustypes.Kustomization) error {
	switch {
	case len(k.HelmCharts) > 0 || k.HelmGlobals != nil:
		return &FieldError{Field: "helmCharts", Err: errors.New("is not rendered: trainops runs no programs, Helm included; commit the output of `helm template` instead")}
	case len(k.HelmChartInflationGenerator) > 0:
		return &FieldError{Field: "helmChartInflationGenerator", Err: errors.New("is not rendered: trainops runs no programs, Helm included; commit the output of `helm template` instead")}
	}
	// generators, transformers and validators may also hold a plugin's
	// configuration written inline.
	lists := []struct {
		field   string
		entries []string
		kind    entryKind
	}{
		{"resources", k.Resources, kustomizations},
		{"bases", k.Bases, kustomizations},
		{"components", k.Components, kustomizations},
		{"crds", k.Crds, yamlFile},
		{"configurations", k.Configurations, yamlFile},
		{"generators", k.Generators, inlineOrKustomizations},
		{"transformers", k.Transformers, inlineOrKustomizations},
		{"validators", k.Validators, inlineOrKustomizations},
	}
	s.readAhead(dir, k.Resources)
	for _, l := range lists {
		for _, e := range l.entries {
			if err := s.entry(dir, l.field, e, l.kind); err != nil {
				return err
			}
		}
	}
	if p, ok := k.OpenAPI["path"]; ok {
		if err := s.entry(dir, "openapi.path", p, yamlFile); err != nil {
			return err
		}
	}
	for i, p := range k.Patches {
		if err := s.patch(dir, fmt.Sprintf("patches[%d]", i), p); err != nil {
			return err
		}
	}
	for i, p := range k.PatchesJson6902 {
		if err := s.patch(dir, fmt.Sprintf("patchesJson6902[%d]", i), p); err != nil {
			return err
		}
	}
	for i, p := range k.PatchesStrategicMerge {
		if err := s.entry(dir, fmt.Sprintf("patchesStrategicMerge[%d]", i), string(p), inlineOrFile); err != nil {
			return err
		}
	}
	for i, r := range k.Replacements {
		if r.Path != "" {
			if err := s.entry(dir, fmt.Sprintf("replacements[%d].path", i), r.Path, yamlFile); err != nil {
				return err
			}
		}
	}
	for i, g := range k.ConfigMapGenerator {
		if err := s.generator(dir, fmt.Sprintf("configMapGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	for i, g := range k.SecretGenerator {
		if err := s.generator(dir, fmt.Sprintf("secretGenerator[%d]", i), g.KvPairSources); err != nil {
			return err
		}
	}
	return nil
}

func (s *scan) patch(dir, field string, p kustypes.Patch) error {
	if p.Path != "" {
		if err := s.entry(dir, field+".path", p.Path, yamlFile); err != nil {
			return err
		}
	}
	if p.Patch != "" {
		if err := checkYAML([]byte(p.Patch)); err != nil {
			return &FieldError{Field: field + ".patch", Err: err}
		}
	}
	return nil
}

func (s *scan) generator(dir, field string, src kustypes.KvPairSources) error {
	for _, f := range src.FileSources {
		// "key=path" or "path".
		p := f
		if _, after, ok := strings.Cut(f, "="); ok {
			p = after
		}
		if err := s.entry(dir, field+".files", p, dataFile); err != nil {
			return err
		}
	}
	envs := src.EnvSources
	if src.EnvSource != "" {
		envs = append(envs, src.EnvSource)
	}
	for _, e := range envs {
		if err := s.entry(dir, field+".envs", e, dataFile); err != nil {
			return err
		}
	}
	return nil
}

// entry checks one entry of a field: it must be a path inside the
// repository, and what it names must pass the limits.
func (s *scan) entry(dir, field, e string, kind entryKind) error {
	if (kind == inlineOrFile || kind == inlineOrKustomizations) && inline(e) {
		// YAML written inline: kustomize parses it, so the alias limit
		// applies; there is no path to follow.
		if err := checkYAML([]byte(e)); err != nil {
			return &FieldError{Field: field, Err: err}
		}
		return nil
	}
	if IsRemote(e) {
		return &FieldError{Field: field, Entry: e, Err: errRemote}
	}
	if filepath.IsAbs(e) {
		return &FieldError{Field: field, Entry: e, Err: errors.New("is an absolute path: name a path inside the repository, relative to the kustomization")}
	}
	joined := filepath.Join(dir, e)
	if joined != s.root && !strings.HasPrefix(joined, s.root+string(filepath.Separator)) {
		return &FieldError{Field: field, Entry: e, Err: errors.New("leaves the repository")}
	}
	resolved, info, err := s.resolve(joined)
	if err != nil {
		return &FieldError{Field: field, Entry: e, Err: errors.New("names no file or folder in the repository")}
	}
	if resolved != s.root && !strings.HasPrefix(resolved, s.root+string(filepath.Separator)) {
		return &FieldError{Field: field, Entry: e, Err: errors.New("is a symlink that leaves the repository")}
	}
	if !info.IsDir() && !s.limits.LoadRestrictionsNone && !strings.HasPrefix(resolved, dir+string(filepath.Separator)) {
		// kustomize's default load restrictor (LoadRestrictionsRootOnly):
		// a kustomization reads files only in or below its own folder.
		return &FieldError{Field: field, Entry: e, Err: fmt.Errorf("is outside the kustomization's folder (%s), which kustomize refuses by default (LoadRestrictionsRootOnly): move it into that folder, list the folder holding it as a kustomization of its own, or set render.loadRestrictor to LoadRestrictionsNone", rel(s.root, dir))}
	}
	if info.IsDir() {
		if kind != kustomizations && kind != inlineOrKustomizations {
			return &FieldError{Field: field, Entry: e, Err: errors.New("is a folder: name a file")}
		}
		if err := s.kustomization(resolved, false); err != nil {
			return err
		}
		if joined != resolved {
			// kustomize reads the folder by the path the entry gives.
			name := KustomizationFile(resolved)
			s.parsed[filepath.Join(joined, name)] = s.parsed[filepath.Join(resolved, name)]
		}
		return nil
	}
	if kind == dataFile {
		if err := s.count(resolved, info); err != nil {
			return &FieldError{Field: field, Entry: e, Err: err}
		}
		return nil
	}
	if err := s.count(resolved, info); err != nil {
		return &FieldError{Field: field, Entry: e, Err: err}
	}
	raw, ok := s.ahead[resolved]
	delete(s.ahead, resolved)
	if !ok {
		var err error
		if raw, err = readLimited(resolved); err != nil {
			return &FieldError{Field: field, Entry: e, Err: err}
		}
	}
	if err := checkYAML(raw); err != nil {
		return &Error{File: rel(s.root, resolved), Err: err}
	}
	if field == "resources" {
		// Read once: the fast path builds from these bytes.
		s.data[joined] = raw
	} else {
		s.inputs[joined] = raw
	}
	return nil
}

// readAhead reads, on every core, the regular files a long resources list
// names in dir or in its folders (jobs/a.yaml), within the file and total
// limits, so entry finds them read. A folder on the way that is a symlink
// is not read ahead, so nothing outside dir is. Anything else (folders,
// symlinks, files past a limit, errors) is left to entry, which reads and
// refuses in the list's order.
func (s *scan) readAhead(dir string, entries []string) {
	const worthIt = 16
	if len(entries) < worthIt {
		return
	}
	if parent, err := filepath.EvalSymlinks(dir); err != nil || parent != dir {
		return
	}
	paths := make([]string, len(entries))
	for i, e := range entries {
		if inline(e) || IsRemote(e) || filepath.IsAbs(e) {
			continue
		}
		p := filepath.Join(dir, e)
		sub := filepath.Dir(p)
		if !strings.HasPrefix(sub+string(filepath.Separator), dir+string(filepath.Separator)) {
			continue
		}
		// Only a folder that is itself, no symlink between dir and it;
		// its resolution is remembered as resolve remembers it.
		resolved, seen := s.dirs[sub]
		if !seen {
			var err error
			if resolved, err = filepath.EvalSymlinks(sub); err != nil {
				continue
			}
			s.dirs[sub] = resolved
		}
		if resolved == sub {
			paths[i] = p
		}
	}
	raws := make([][]byte, len(entries))
	var budget atomic.Int64
	budget.Store(s.limits.MaxBytes - s.read)
	fast.Parallel(len(entries), func(i int) error {
		p := paths[i]
		if p == "" {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil || !info.Mode().IsRegular() || info.Size() > MaxFileBytes || budget.Add(-info.Size()) < 0 {
			return nil
		}
		raws[i], _ = readLimited(p)
		return nil
	})
	for i, raw := range raws {
		if raw != nil {
			s.ahead[paths[i]] = raw
		}
	}
}

// resolve is filepath.EvalSymlinks of p and the file it names, with the
// folders' resolutions remembered: a kustomization listing a thousand
// files in one folder resolves that folder once.
func (s *scan) resolve(p string) (string, os.FileInfo, error) {
	parent, ok := s.dirs[filepath.Dir(p)]
	if !ok {
		var err error
		if parent, err = filepath.EvalSymlinks(filepath.Dir(p)); err != nil {
			return "", nil, err
		}
		s.dirs[filepath.Dir(p)] = parent
	}
	info, err := os.Lstat(p)
	if err != nil {
		return "", nil, err
	}
	if info.Mode()&os.ModeSymlink == 0 {
		return filepath.Join(parent, filepath.Base(p)), info, nil
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", nil, err
	}
	info, err = os.Stat(resolved)
	return resolved, info, err
}

// inline reports whether an entry is YAML or JSON written in place rather
// than a path: several lines, or a JSON object on one.
func inline(e string) bool {
	return strings.Contains(e, "\n") || strings.HasPrefix(strings.TrimSpace(e), "{")
}

// count adds a file's size to what the render reads, refusing a file or a
// total past the limits.
func (s *scan) count(path string, info os.FileInfo) error {
	if !info.Mode().IsRegular() {
		return errors.New("is not a regular file")
	}
	if info.Size() > MaxFileBytes {
		return fmt.Errorf("larger than %d MiB", MaxFileBytes>>20)
	}
	s.read += info.Size()
	if s.read > s.limits.MaxBytes {
		return fmt.Errorf("the files this render reads add up to more than %d MiB (render.maxBytes)", s.limits.MaxBytes>>20)
	}
	return nil
}

// readFile reads a file inside the repository within the limits.
func (s *scan) readFile(path string) ([]byte, error) {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		if info, lerr := os.Lstat(path); lerr == nil && info.Mode()&os.ModeSymlink != 0 {
			return nil, errors.New("is a symlink to nothing in the repository")
		}
		return nil, errors.New("cannot be read")
	}
	if !strings.HasPrefix(resolved, s.root+string(filepath.Separator)) {
		return nil, errors.New("is a symlink that leaves the repository")
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return nil, err
	}
	if err := s.count(resolved, info); err != nil {
		return nil, err
	}
	return readLimited(resolved)
}

// checkYAML parses every document of raw with the alias-limited parser
// repository files go through, so an alias bomb is refused before
// kustomize's parser sees it. Without an anchor there can be no alias, and
// the parse is skipped.
func checkYAML(raw []byte) error {
	if bytes.IndexByte(raw, '&') < 0 {
		return nil
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if _, err := yaml.YAMLToJSON(doc); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
	}
}
