// SPDX-License-Identifier: Apache-2.0

package textsafe

import (
	"fmt"
	"strings"
	"testing"
)

func TestTextEscapesEveryControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                          "plain",
		"osc52 \x1b]52;c;aGk=\x07 end":   `osc52 \x1b]52;c;aGk=\x07 end`,
		"clear \x1b[2J\x1b[H":            `clear \x1b[2J\x1b[H`,
		"csi \u009b31m":                  `csi \u009b31m`,
		"bad \xff utf8":                  `bad \xff utf8`,
		"lines\nand\ttabs\rcarriage\x7f": "lines\nand\ttabs\\x0dcarriage\\x7f",
		"émoji ✓":                        "émoji ✓",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsRune(Text(in), 0x1b) || strings.ContainsRune(Line(in), '\n') {
			t.Errorf("%q: a control is left", in)
		}
	}
}

func TestJoinAndBoundStayUnderTheBound(t *testing.T) {
	var parts []string
	for i := range 1024 {
		parts = append(parts, fmt.Sprintf("rank %d exited 1: \x1b]8;;http://x\x07click\x1b]8;;\x07", i))
	}
	got := Join(parts, "; ", MessageBytes)
	if len(got) > MessageBytes || !strings.Contains(got, "more") || strings.ContainsRune(got, 0x1b) {
		t.Errorf("Join: %d bytes, ends %q", len(got), got[len(got)-40:])
	}
	long := strings.Repeat("é", MessageBytes)
	if b := Bound(long, MessageBytes); len(b) > MessageBytes || !strings.HasSuffix(b, "more bytes)") {
		t.Errorf("Bound: %d bytes, ends %q", len(b), b[len(b)-20:])
	}
	if got := Join([]string{long}, "; ", 100); len(got) > 100 {
		t.Errorf("Join of one long part: %d bytes", len(got))
	}
	if got := Join([]string{"a", "b"}, "; ", 100); got != "a; b" {
		t.Errorf("Join = %q", got)
	}
}

func TestWriterEscapesAcrossWrites(t *testing.T) {
	var b strings.Builder
	w := NewWriter(&b)
	csi := []byte("\u009b") // a C1 control, two bytes in UTF-8
	for _, p := range [][]byte{[]byte("a\x1b"), csi[:1], csi[1:], []byte("é\n")} {
		if n, err := w.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if got := b.String(); got != `a\x1b\u009bé`+"\n" {
		t.Errorf("wrote %q", got)
	}
}
