// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"

	securefs "github.com/fluxcd/pkg/kustomize/filesys"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// A kustomize build runs in a child process of the same binary, so that a
// repository cannot make the process that runs the reconcilers fetch,
// execute, wait or grow without bound:
//   - its environment is empty: no PATH, so no program (git, helm, a
//     plugin) can be found to run, and no proxy settings;
//   - its HTTP client refuses every request;
//   - its memory is capped (the data segment, and the Go heap goal below
//     it), and the parent kills it at the render's deadline;
//   - it reads files only inside the repository, each within
//     MaxFileBytes and all within Limits.MaxBytes, and its output is cut
//     at Limits.MaxBytes.
//
// These hold even if the pre-scan (scan.go) ever missed an entry. Any of
// them being reached fails the render with a message, never silently.

// childEnv marks the process as a render child. It is set only by
// buildIsolated, in an environment holding nothing else.
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

// childRequest is what the parent sends the child on its stdin.
type childRequest struct {
	Root string `json:"root"`
	Dir  string `json:"dir"`
	// KFile is the kustomization file, relative to Root, for messages.
	KFile string `json:"kfile"`
	// Overlay holds each kustomization as the pre-scan checked it.
	Overlay map[string][]byte `json:"overlay"`
	Limits  Limits            `json:"limits"`
}

// childRecord is one line of the child's stdout: an object, or the error
// that ended the build.
type childRecord struct {
	Object json.RawMessage `json:"object,omitempty"`
	File   string          `json:"file,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// errRefusedRequest is what the child's HTTP client answers every request.
var errRefusedRequest = errors.New("a render may not reach the network: remote content is not allowed, vendor it into the repository")

type refusedTransport struct{}

func (refusedTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errRefusedRequest
}

// serveChild builds the kustomization the request names and writes the
// objects to out. It returns the exit code.
func serveChild(in io.Reader, out io.Writer) int {
	http.DefaultTransport = refusedTransport{}
	var req childRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "render child: bad request: %v\n", err)
		return 3
	}
	capMemory(req.Limits.MemoryBytes)
	w := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(w)
	fail := func(err error) int {
		_ = enc.Encode(childRecord{File: req.KFile, Error: cleanKustomizeError(err, req.Root).Error()})
		_ = w.Flush()
		return 1
	}
	disk, err := securefs.MakeFsOnDiskSecure(req.Root)
	if err != nil {
		return fail(err)
	}
	mem := securefs.MakeFsInMemory(disk)
	for p, b := range req.Overlay {
		if err := mem.WriteFile(p, b); err != nil {
			return fail(err)
		}
	}
	fsys := &boundedFS{FileSystem: mem, max: req.Limits.MaxBytes}
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
			return 4 // the parent stopped reading
		}
	}
	if err := w.Flush(); err != nil {
		return 4
	}
	return 0
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

// boundedFS refuses, as kustomize reads them, files larger than
// MaxFileBytes, anything but regular files, and reads past max bytes in
// all.
type boundedFS struct {
	filesys.FileSystem
	max  int64
	read int64
}

// ReadFile reads path within the limits.
func (f *boundedFS) ReadFile(path string) ([]byte, error) {
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

// buildIsolated runs the kustomize build of dir in a child process within
// l, and returns its objects.
func buildIsolated(ctx context.Context, root, dir, kfile string, overlay map[string][]byte, l Limits) ([]Object, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, &Error{File: kfile, Err: fmt.Errorf("cannot start the render: %w", err)}
	}
	req, err := json.Marshal(childRequest{Root: root, Dir: dir, KFile: kfile, Overlay: overlay, Limits: l})
	if err != nil {
		return nil, &Error{File: kfile, Err: err}
	}
	bctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	cmd := exec.CommandContext(bctx, exe)
	// Nothing of the parent's environment: no PATH, no HOME, no proxies,
	// no credentials.
	cmd.Env = []string{childEnv + "=1"}
	cmd.Dir = root
	cmd.Stdin = bytes.NewReader(req)
	stderr := &capped{max: 64 << 10}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, &Error{File: kfile, Err: err}
	}
	if err := cmd.Start(); err != nil {
		return nil, &Error{File: kfile, Err: fmt.Errorf("cannot start the render: %w", err)}
	}
	objs, childErr, readErr := readChild(io.LimitReader(stdout, l.MaxBytes+1), root, dir, kfile, l)
	if readErr != nil {
		// Stop the child: it produced too much, or garbage.
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case bctx.Err() != nil:
		return nil, &Error{File: kfile, Err: fmt.Errorf("the kustomize build took longer than %s (render.timeout) and was stopped", l.Timeout)}
	case readErr != nil:
		return nil, &Error{File: kfile, Err: readErr}
	case childErr != nil:
		return nil, childErr
	case waitErr != nil:
		msg := stderr.String()
		if strings.Contains(msg, "out of memory") || strings.Contains(msg, "cannot allocate memory") || nearMemoryCap(cmd.ProcessState, l.MemoryBytes) {
			return nil, &Error{File: kfile, Err: fmt.Errorf("the kustomize build needed more than %d MiB of memory (render.memoryLimit) and was stopped", l.MemoryBytes>>20)}
		}
		if first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n"); first != "" {
			return nil, &Error{File: kfile, Err: fmt.Errorf("the kustomize build failed (%v): %s", waitErr, first)}
		}
		return nil, &Error{File: kfile, Err: fmt.Errorf("the kustomize build failed: %v", waitErr)}
	}
	return objs, nil
}

// readChild decodes the child's records. childErr is the build's own
// error; readErr a stream past the output limit, or one that is not the
// child's.
func readChild(r io.Reader, root, dir, kfile string, l Limits) (objs []Object, childErr, readErr error) {
	lr := r.(*io.LimitedReader)
	dec := json.NewDecoder(r)
	for {
		var rec childRecord
		err := dec.Decode(&rec)
		if err == io.EOF {
			if lr.N <= 0 {
				return nil, nil, fmt.Errorf("the rendered output is larger than %d MiB (render.maxBytes)", l.MaxBytes>>20)
			}
			return objs, childErr, nil
		}
		if err != nil {
			if lr.N <= 0 {
				return nil, nil, fmt.Errorf("the rendered output is larger than %d MiB (render.maxBytes)", l.MaxBytes>>20)
			}
			return nil, nil, fmt.Errorf("reading the kustomize build's output (a program that renders calls render.ServeIfChild first in main): %w", err)
		}
		if rec.Error != "" {
			file := rec.File
			if file == "" {
				file = kfile
			}
			childErr = &Error{File: file, Err: errors.New(rec.Error)}
			continue
		}
		o, err := objectFromKustomize(rec.Object, root, dir, kfile)
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, o)
	}
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		if len(p) > room {
			c.Buffer.Write(p[:room])
		} else {
			c.Buffer.Write(p)
		}
	}
	return len(p), nil
}
