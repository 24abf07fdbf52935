// SPDX-License-Identifier: Apache-2.0

// Package textsafe makes text a team controls (a worker's termination
// message and log tail, file and object names, Git messages) safe to write
// where people read it: status, conditions, Events, logs and terminals.
// Control characters are escaped, so an escape sequence arrives as data
// and never drives a terminal, and messages are bounded.
package textsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MessageBytes bounds every message trainops writes from text a team
// controls: a status message, a condition's, an Event's.
const MessageBytes = 4096

// Text is s with every control character but newline and tab escaped
// (ESC becomes \x1b), C1 controls and invalid UTF-8 too.
func Text(s string) string { return escape(s, false) }

// Line is s on one line: Text, with newlines and tabs escaped as well,
// for table cells and log fields.
func Line(s string) string { return escape(s, true) }

func escape(s string, oneLine bool) string {
	if clean(s, oneLine) {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, oneLine) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r, oneLine):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
	}
	return b.String()
}

// clean reports whether s needs no escaping.
func clean(s string, oneLine bool) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if unsafeRune(r, oneLine) {
			return false
		}
	}
	return true
}

// unsafeRune reports whether r can drive a terminal: C0 controls (ESC,
// BEL, backspace, carriage return…), DEL, and C1 controls (CSI, OSC as
// single code points); newline and tab only on one line.
func unsafeRune(r rune, oneLine bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return oneLine
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	}
	return false
}

// Bound cuts s to at most max bytes, at a rune boundary, saying how much
// was left out.
func Bound(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const more = " … (%d more bytes)"
	cut := max - len(fmt.Sprintf(more, len(s)))
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(more, len(s)-cut)
}

// Join is the parts, escaped (Text), joined with sep, bounded to max
// bytes: the parts that do not fit are counted ("… and 3 more"), not cut
// in the middle, unless the first alone is too long.
func Join(parts []string, sep string, max int) string {
	more := func(n int) string { return fmt.Sprintf("%s… and %d more", sep, n) }
	var b strings.Builder
	for i, p := range parts {
		p = Text(p)
		if i > 0 {
			p = sep + p
		}
		room := max
		if left := len(parts) - i - 1; left > 0 {
			room -= len(more(left)) // what is after must still be counted
		}
		if b.Len()+len(p) > room {
			if i == 0 {
				return Bound(p, max)
			}
			b.WriteString(more(len(parts) - i))
			return b.String()
		}
		b.WriteString(p)
	}
	return b.String()
}

// Writer escapes, as Text does, everything written through it.
type Writer struct {
	w io.Writer
	// held is the start of a rune cut between two writes.
	held []byte
}

// NewWriter is a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports all of p written.
func (w *Writer) Write(p []byte) (int, error) {
	b := append(w.held, p...)
	w.held = nil
	// Hold back an incomplete rune at the end for the next write.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				w.held = append([]byte(nil), b[i:]...)
				b = b[:i]
			}
			break
		}
	}
	if _, err := io.WriteString(w.w, Text(string(b))); err != nil {
		return 0, err
	}
	return len(p), nil
}
