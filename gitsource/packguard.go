// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/trainops/trainops/internal/limits"
)

// go-git's fetch indexes a received pack by reading every object into
// memory whole: a small pack can hold a huge, highly compressible blob. The
// guard reads each object's size as the pack streams in (from the object's
// header, or for a delta from the first bytes of its data) and refuses the
// pack before go-git's index reads any object, holding back the pack's
// last bytes until every object has been checked.

// guardedStorage is the bare clone's storage, with a guard on every pack
// a fetch writes into it.
type guardedStorage struct {
	*filesystem.Storage
	// maxTotal bounds the pack's objects added up, once inflated: twice
	// the revision's bound, for its trees and commits beside its files.
	maxTotal int64
}

// PackfileWriter wraps the storage's pack writer in a guard.
func (s *guardedStorage) PackfileWriter() (io.WriteCloser, error) {
	w, err := s.Storage.PackfileWriter()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	g := &packGuard{w: w, pw: pw, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = checkPack(pr, limits.FileBytes, s.maxTotal)
		// Unblock the writer whatever happened; read the rest, if any,
		// to nowhere.
		_ = pr.CloseWithError(g.err)
	}()
	return g, nil
}

// packTrailer is the pack's SHA-1 checksum: without it, go-git's parser
// fails before it reads any object's content.
const packTrailer = 20

// packGuard passes a pack through to w, minus its last packTrailer bytes
// until the pack has been checked.
type packGuard struct {
	w    io.WriteCloser
	pw   *io.PipeWriter
	tail []byte
	done chan struct{}
	err  error
}

func (g *packGuard) Write(p []byte) (int, error) {
	if _, err := g.pw.Write(p); err != nil {
		<-g.done
		if g.err != nil {
			return 0, g.err
		}
		return 0, err
	}
	g.tail = append(g.tail, p...)
	if n := len(g.tail) - packTrailer; n > 0 {
		if _, err := g.w.Write(g.tail[:n]); err != nil {
			return 0, err
		}
		g.tail = append(g.tail[:0], g.tail[n:]...)
	}
	return len(p), nil
}

// Close waits for the check. A pack that passed is completed and stored;
// one that did not is closed short, so go-git drops it unread.
func (g *packGuard) Close() error {
	_ = g.pw.Close()
	<-g.done
	if g.err != nil {
		_ = g.w.Close()
		return g.err
	}
	if _, err := g.w.Write(g.tail); err != nil {
		_ = g.w.Close()
		return err
	}
	return g.w.Close()
}

// ObjectSizeError is a fetched pack refused for an object's size, or for
// its objects' sizes added up, before any object is read.
type ObjectSizeError struct {
	Size, Limit int64
	Total       bool
}

func (e *ObjectSizeError) Error() string {
	if e.Total {
		return fmt.Sprintf("the fetched objects add up to more than %d MiB (render.maxBytes): the revision is refused before any is read", e.Limit>>20)
	}
	return fmt.Sprintf("the fetched revision holds an object of %d MiB, larger than the %d MiB a file may be: the revision is refused before it is read", e.Size>>20, e.Limit>>20)
}

// checkPack reads a pack from r, refusing it at the first object past
// maxObject or when the objects pass maxTotal, all inflated.
func checkPack(r io.Reader, maxObject, maxTotal int64) error {
	sc := packfile.NewScanner(r)
	_, count, err := sc.Header()
	if err != nil {
		return nil // not a pack go-git would accept either; let it say so
	}
	var total int64
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return nil
		}
		size := oh.Length
		if oh.Type.IsDelta() {
			// A delta's header gives the delta's size; the object it
			// makes is sized at the start of its data.
			d := &deltaSize{max: maxObject}
			if _, _, err := sc.NextObject(d); err != nil {
				var se *ObjectSizeError
				if errors.As(err, &se) {
					return se
				}
				return nil
			}
			size = d.target
		} else {
			if size > maxObject {
				return &ObjectSizeError{Size: size, Limit: maxObject}
			}
			if _, _, err := sc.NextObject(io.Discard); err != nil {
				return nil
			}
		}
		if total += size; total > maxTotal {
			return &ObjectSizeError{Size: total, Limit: maxTotal, Total: true}
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return nil
}

// deltaSize reads a delta's target size: the second of the two
// little-endian base-128 numbers at the start of the delta data.
type deltaSize struct {
	max    int64
	target int64
	shift  uint
	field  int // 0: base size, 1: target size, 2: done
}

func (d *deltaSize) Write(p []byte) (int, error) {
	for _, b := range p {
		if d.field == 2 {
			break
		}
		if d.field == 1 {
			d.target |= int64(b&0x7f) << d.shift
			d.shift += 7
			if d.target > d.max || d.shift > 56 {
				return 0, &ObjectSizeError{Size: d.target, Limit: d.max}
			}
		}
		if b&0x80 == 0 {
			d.field++
			d.shift = 0
		}
	}
	return len(p), nil
}
