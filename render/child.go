// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"

	securefs "github.com/fluxcd/pkg/kustomize/filesys"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
)

// The render child: the side of isolate.go that runs in the child process.

// childEnv marks the process as a render child. It is set only by
// startChild, in an environment holding nothing else.
const childEnv = "TRAINOPS_RENDER_CHILD"

// ServeIfChild makes this process the render child it was started as,
// and exits; in any other process it returns at once. The child is the
// same binary, started from os.Executable: every program that renders
// (trainops, and each test binary whose tests render, through TestMain)
// calls it first in main, before anything else of the program runs.
// Importing this package does nothing by itself.
func ServeIfChild() {
	if os.Getenv(childEnv) == "1" {
		os.Exit(serveChild(os.Stdin, os.Stdout))
	}
}

// childRequest is one build the parent asks of the child, one JSON value
// on its stdin.
type childRequest struct {
	Root string `json:"root"`
	Dir  string `json:"dir"`
	// KFile is the kustomization file, relative to Root, for messages.
	KFile string `json:"kfile"`
	// Overlay holds each kustomization as the pre-scan checked it.
	Overlay map[string][]byte `json:"overlay"`
	// Sources names, by its path as kustomize reads it, each resource
	// file whose objects carry sourceAnnotation through the build, with
	// the file's path in the repository (source.go).
	Sources map[string]string `json:"sources,omitempty"`
	// SourceKey is the annotation that names them: sourceAnnotation and
	// a part of this build's own.
	SourceKey string `json:"sourceKey,omitempty"`
	Limits    Limits `json:"limits"`
}

// childRecord is one line of the child's stdout: an object, the error
// that ended the build, or the end of the build's answer.
type childRecord struct {
	Object json.RawMessage `json:"object,omitempty"`
	File   string          `json:"file,omitempty"`
	Error  string          `json:"error,omitempty"`
	End    bool            `json:"end,omitempty"`
}

// errRefusedRequest is what the child's HTTP client answers every request.
var errRefusedRequest = errors.New("a render may not reach the network: remote content is not allowed, vendor it into the repository")

type refusedTransport struct{}

func (refusedTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errRefusedRequest
}

// serveChild builds each kustomization the requests on in name, one after
// the other, until in ends, writing each one's objects and an end record
// to out. It returns the exit code.
func serveChild(in io.Reader, out io.Writer) int {
	http.DefaultTransport = refusedTransport{}
	dec := json.NewDecoder(in)
	w := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(w)
	var memory int64
	for {
		var req childRequest
		if err := dec.Decode(&req); err == io.EOF {
			return 0
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "render child: bad request: %v\n", err)
			return 3
		}
		if req.Limits.MemoryBytes != memory {
			memory = req.Limits.MemoryBytes
			capMemory(memory)
		}
		if err := serveRequest(req, enc); err != nil {
			return 4 // the parent stopped reading
		}
		if err := enc.Encode(childRecord{End: true}); err != nil {
			return 4
		}
		if err := w.Flush(); err != nil {
			return 4
		}
		forgetBuild(req)
	}
}

// serveRequest builds the kustomization req names and encodes its objects,
// or the error that ended the build. Only a failure to write is returned.
func serveRequest(req childRequest, enc *json.Encoder) error {
	fail := func(err error) error {
		return enc.Encode(childRecord{File: req.KFile, Error: cleanKustomizeError(err, req.Root).Error()})
	}
	// As a child started in Root: kustomize resolves nothing against the
	// working folder, but a relative path would be resolved there.
	if err := os.Chdir(req.Root); err != nil {
		return fail(err)
	}
	disk, err := securefs.MakeFsOnDiskSecure(req.Root)
	if err != nil {
		return fail(err)
	}
	fsys := &boundedFS{FileSystem: disk, root: req.Root, overlay: req.Overlay, sources: req.Sources, sourceKey: req.SourceKey, max: req.Limits.MaxBytes}
	resMap, err := krustyBuild(fsys, req.Dir, req.Limits.LoadRestrictionsNone)
	if err != nil {
		return fail(err)
	}
	for _, r := range resMap.Resources() {
		j, err := r.MarshalJSON()
		if err != nil {
			return fail(err)
		}
		if err := enc.Encode(childRecord{Object: j}); err != nil {
			return err
		}
	}
	return nil
}

// forgetBuild leaves nothing of a build for the next one: kustomize keeps
// the OpenAPI schema a kustomization names (its openapi field) in a
// global, which the next build would otherwise inherit, so after any
// build that may have named one the schema goes back to kustomize's
// default. Then the build's memory goes back to the system while the
// child waits.
func forgetBuild(req childRequest) {
	reset := len(req.Overlay) == 0 // kustomizations read from disk: unknown
	for _, b := range req.Overlay {
		reset = reset || bytes.Contains(b, []byte("openapi"))
	}
	if reset {
		openapi.ResetOpenAPI()
	}
	debug.FreeOSMemory()
}

// krustyBuild builds dir with krusty as `kustomize build` does, with
// kustomize's default load restrictor unless none is asked for, no
// plugins, and a panic of kustomize's made an error.
func krustyBuild(fsys filesys.FileSystem, dir string, noRestrictions bool) (m resmap.ResMap, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("kustomize failed: %v", r)
		}
	}()
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = kustypes.DisabledPluginConfig()
	opts.LoadRestrictions = kustypes.LoadRestrictionsRootOnly
	if noRestrictions {
		opts.LoadRestrictions = kustypes.LoadRestrictionsNone
	}
	return krusty.MakeKustomizer(opts).Run(fsys, dir)
}

// capMemory caps the child's memory: the Go heap goal at three quarters of
// limit, so the collector works hard before the hard cap is reached, and
// the data segment at limit (where the system supports it).
func capMemory(limit int64) {
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit / 4 * 3)
	setDataLimit(limit)
}

// boundedFS reads each kustomization as the pre-scan checked it (overlay,
// by its path on disk) and every other file from disk, each resource file
// of sources with its objects naming it (source.go), refusing, as
// kustomize reads them, files larger than MaxFileBytes, anything but
// regular files, and reads past max bytes in all. The overlay is a map,
// not kustomize's in-memory file system, which refuses folder names
// outside [a-zA-Z0-9-_.:] (a checkout in "workspace@2").
type boundedFS struct {
	filesys.FileSystem
	root    string
	overlay map[string][]byte
	sources map[string]string
	// sourceKey is the annotation naming each source's file.
	sourceKey string
	max       int64
	read      int64
}

// ReadFile reads path within the limits.
func (f *boundedFS) ReadFile(path string) ([]byte, error) {
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(f.root, abs) // the child's working folder
	}
	abs = filepath.Clean(abs)
	if b, ok := f.overlay[abs]; ok {
		return f.count(bytes.Clone(b))
	}
	if info, err := os.Stat(path); err == nil {
		// On disk (the overlay holds only the checked kustomizations).
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", path)
		}
		if info.Size() > MaxFileBytes {
			return nil, fmt.Errorf("%s: larger than %d MiB", path, MaxFileBytes>>20)
		}
	}
	b, err := f.FileSystem.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, err := f.count(b); err != nil {
		return nil, err
	}
	if file, ok := f.sources[abs]; ok && f.sourceKey != "" {
		return withSource(b, f.sourceKey, file), nil
	}
	return b, nil
}

// count adds b to what the build has read, refusing it past max.
func (f *boundedFS) count(b []byte) ([]byte, error) {
	f.read += int64(len(b))
	if f.read > f.max {
		return nil, fmt.Errorf("the files this render reads add up to more than %d MiB (render.maxBytes)", f.max>>20)
	}
	return b, nil
}

// Open refuses: kustomize reads files with ReadFile; a file opened any
// other way would escape the limits.
func (f *boundedFS) Open(path string) (filesys.File, error) {
	return nil, fmt.Errorf("%s: opened outside the render's limits", path)
}
