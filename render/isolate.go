// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// A kustomize build runs in a child process of the same binary, so that a
// repository cannot make the process that runs the reconcilers fetch,
// execute, wait or grow without bound:
//   - its environment is empty: no PATH, so no program (git, helm, a
//     plugin) can be found to run, and no proxy settings;
//   - its HTTP client refuses every request;
//   - its memory is capped (the data segment, and the Go heap goal below
//     it), and the parent kills it at the render's deadline (child.go);
//   - it reads files only inside the repository, each within
//     MaxFileBytes and all within Limits.MaxBytes, and its output is cut
//     at Limits.MaxBytes.
//
// These hold even if the pre-scan (scan.go) ever missed an entry. Any of
// them being reached fails the render with a message, never silently.

// A child is kept after a build and reused for the next one with the same
// memory cap, so that a render pays the child's start-up once rather than
// per build: at most maxIdleChildren wait, each at most idleChildTTL.
// Builds in one child run one after the other, and nothing of one is left
// for the next (forgetBuild). A child that failed any other way than by
// kustomize's own error (stopped at the deadline or with its caller, out
// of memory, output past the limit, a stream that is not its) is killed,
// never reused. Limits.FreshChild (render.reuseChild: false) starts a
// child for each build and ends it after.

// maxIdleChildren bounds the render children kept waiting; idleChildTTL is
// how long one waits before it is ended.
var (
	maxIdleChildren = min(max(runtime.GOMAXPROCS(0), 2), 4)
	idleChildTTL    = 10 * time.Minute
)

// children are the render children waiting for a build.
var children childPool

type childPool struct {
	mu   sync.Mutex
	idle []*child
}

// child is a render child process.
type child struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *budgetReader
	dec    *json.Decoder
	stderr *capped
	memory int64
	// idleTimer ends the child once it has waited idleChildTTL.
	idleTimer *time.Timer
}

// get takes a waiting child of the memory cap, or starts one.
func (p *childPool) get(memory int64) (*child, error) {
	p.mu.Lock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if c := p.idle[i]; c.memory == memory {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.mu.Unlock()
			c.idleTimer.Stop()
			return c, nil
		}
	}
	p.mu.Unlock()
	return startChild(memory)
}

// put keeps c for the next build, or ends it when enough wait.
func (p *childPool) put(c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxIdleChildren {
		go c.end()
		return
	}
	p.idle = append(p.idle, c)
	c.idleTimer = time.AfterFunc(idleChildTTL, func() {
		p.mu.Lock()
		i := slices.Index(p.idle, c)
		if i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
		}
		p.mu.Unlock()
		if i >= 0 {
			c.end()
		}
	})
}

// startChild starts a render child: this binary, with an environment
// holding nothing but childEnv (no PATH, no HOME, no proxies, no
// credentials), in the root folder.
func startChild(memory int64) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{childEnv + "=1"}
	cmd.Dir = "/"
	c := &child{cmd: cmd, stderr: &capped{max: 64 << 10}, memory: memory}
	cmd.Stderr = c.stderr
	cmd.WaitDelay = 5 * time.Second
	if c.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.out = &budgetReader{r: stdout}
	c.dec = json.NewDecoder(c.out)
	return c, nil
}

// end closes the child's stdin, which ends it, and waits for it; one that
// does not end at once is killed.
func (c *child) end() {
	_ = c.in.Close()
	stop := time.AfterFunc(5*time.Second, func() { _ = c.cmd.Process.Kill() })
	_ = c.cmd.Wait()
	stop.Stop()
}

// kill ends the child at once and waits for it, returning how it ended.
func (c *child) kill() error {
	_ = c.cmd.Process.Kill()
	_ = c.in.Close()
	return c.cmd.Wait()
}

// buildIsolated runs the kustomize build of dir in a render child within
// l, and returns its objects.
func buildIsolated(ctx context.Context, root, dir, kfile string, overlay map[string][]byte, sources map[string]string, l Limits) ([]Object, error) {
	// A key of this build's own: an annotation a repository sets is
	// never taken for it, nor taken off.
	sourceKey := sourceAnnotation + "." + rand.Text()[:16]
	req, err := json.Marshal(childRequest{Root: root, Dir: dir, KFile: kfile, Overlay: overlay, Sources: sources, SourceKey: sourceKey, Limits: l})
	if err != nil {
		return nil, &Error{File: kfile, Err: err}
	}
	var c *child
	if l.FreshChild {
		c, err = startChild(l.MemoryBytes)
	} else {
		c, err = children.get(l.MemoryBytes)
	}
	if err != nil {
		return nil, &Error{File: kfile, Err: fmt.Errorf("cannot start the render: %w", err)}
	}
	objs, healthy, err := c.build(ctx, req, root, dir, kfile, sourceKey, l)
	if healthy && !l.FreshChild {
		children.put(c)
	} else if healthy {
		go c.end()
	}
	return objs, err
}

// build sends the child one request and reads its answer; healthy says the
// child answered in full and may build again.
func (c *child) build(ctx context.Context, req []byte, root, dir, kfile, sourceKey string, l Limits) (objs []Object, healthy bool, err error) {
	bctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	stopped := make(chan struct{})
	stopAtDeadline := context.AfterFunc(bctx, func() {
		_ = c.cmd.Process.Kill()
		close(stopped)
	})
	c.stderr.reset()
	c.out.left = l.MaxBytes
	var childErr, readErr error
	if _, err := c.in.Write(append(req, '\n')); err != nil {
		readErr = fmt.Errorf("%w: %w", errChildStopped, err)
	} else {
		objs, childErr, readErr = readChild(c.dec, root, dir, kfile, sourceKey)
	}
	inTime := stopAtDeadline()
	if inTime && readErr == nil {
		return objs, true, childErr
	}
	if !inTime {
		<-stopped // killed at the deadline, or with the caller
	}
	waitErr := c.kill()
	switch {
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	case bctx.Err() != nil:
		return nil, false, &Error{File: kfile, Err: fmt.Errorf("the kustomize build took longer than %s (render.timeout) and was stopped", l.Timeout)}
	case errors.Is(readErr, errOutputTooLarge):
		return nil, false, &Error{File: kfile, Err: fmt.Errorf("the rendered output is larger than %d MiB (render.maxBytes)", l.MaxBytes>>20)}
	case errors.As(readErr, new(*Error)):
		return nil, false, readErr
	case !errors.Is(readErr, io.EOF) && !errors.Is(readErr, io.ErrUnexpectedEOF) && !errors.Is(readErr, errChildStopped):
		return nil, false, &Error{File: kfile, Err: fmt.Errorf("reading the kustomize build's output (a program that renders calls render.ServeIfChild first in main): %w", readErr)}
	}
	// The child ended in the middle of its answer: say why.
	msg := c.stderr.String()
	if strings.Contains(msg, "out of memory") || strings.Contains(msg, "cannot allocate memory") || nearMemoryCap(c.cmd.ProcessState, l.MemoryBytes) {
		return nil, false, &Error{File: kfile, Err: fmt.Errorf("the kustomize build needed more than %d MiB of memory (render.memoryLimit) and was stopped", l.MemoryBytes>>20)}
	}
	if first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n"); first != "" {
		return nil, false, &Error{File: kfile, Err: fmt.Errorf("the kustomize build failed (%v): %s", waitErr, first)}
	}
	return nil, false, &Error{File: kfile, Err: fmt.Errorf("the kustomize build failed: %v", waitErr)}
}

// readChild decodes the child's records up to its end record. childErr is
// the build's own error; readErr a stream that ended early, went past the
// output limit, or is not the child's.
func readChild(dec *json.Decoder, root, dir, kfile, sourceKey string) (objs []Object, childErr, readErr error) {
	for {
		var rec childRecord
		if err := dec.Decode(&rec); err != nil {
			return nil, nil, err
		}
		switch {
		case rec.End:
			return objs, childErr, nil
		case rec.Error != "":
			file := cmp.Or(rec.File, kfile)
			childErr = &Error{File: file, Err: errors.New(rec.Error)}
			continue
		}
		o, err := objectFromKustomize(rec.Object, root, dir, kfile, sourceKey)
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, o)
	}
}

// errChildStopped says the render child was gone when asked to build.
var errChildStopped = errors.New("the render child stopped")

// errOutputTooLarge is what a budgetReader answers past its budget.
var errOutputTooLarge = errors.New("the rendered output is past render.maxBytes")

// budgetReader reads at most left more bytes of r.
type budgetReader struct {
	r    io.Reader
	left int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errOutputTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// capped keeps the first max bytes written to it since its last reset;
// the child's stderr is copied into it while a build reads it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Reset()
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
