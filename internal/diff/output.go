// SPDX-License-Identifier: Apache-2.0

package diff

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/trainops/trainops/internal/textsafe"
)

const (
	red    = "\x1b[31m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	cyan   = "\x1b[36m"
	reset  = "\x1b[0m"
)

// WriteText writes the report for a terminal; colour only when asked.
func (r *Report) WriteText(w io.Writer, color bool) error {
	// File names, object names and values are the repository's text:
	// escaped, so only trainops's own colours reach the terminal.
	paint := func(c, s string) string {
		s = textsafe.Text(s)
		if !color {
			return s
		}
		return c + s + reset
	}
	if r.Empty() {
		_, err := fmt.Fprintln(w, "no changes")
		return err
	}
	var b strings.Builder
	for _, c := range r.Changes {
		sign := map[string]string{Create: "+", Update: "~", Delete: "-"}[c.Action]
		head := fmt.Sprintf("%s %s %s", sign, c.Action, c.ID())
		if c.Owner != "" {
			head += " (child of " + c.Owner + ")"
		} else if c.File != "" {
			head += " (" + c.File + ")"
		}
		b.WriteString(paint(cyan, head) + "\n")
		if c.Refused != "" {
			b.WriteString(paint(yellow, "  ! will be refused: "+c.Refused) + "\n")
		}
		if c.Action == Update {
			for _, line := range strings.SplitAfter(c.Diff, "\n") {
				switch {
				case strings.HasPrefix(line, "# REFUSED"), line == "":
					continue
				case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
					b.WriteString("  " + textsafe.Text(line))
				case strings.HasPrefix(line, "+"):
					b.WriteString("  " + paint(green, strings.TrimSuffix(line, "\n")) + "\n")
				case strings.HasPrefix(line, "-"):
					b.WriteString("  " + paint(red, strings.TrimSuffix(line, "\n")) + "\n")
				default:
					b.WriteString("  " + textsafe.Text(line))
				}
			}
		}
	}
	fmt.Fprintf(&b, "\n%d to create, %d to update, %d to delete\n", r.Summary.Create, r.Summary.Update, r.Summary.Delete)
	for _, warn := range r.Warnings {
		b.WriteString(paint(yellow, "warning: "+warn) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes {"changes":[...],"summary":{...}}.
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		Changes []Change `json:"changes"`
		Summary Summary  `json:"summary"`
	}{Changes: r.Changes, Summary: r.Summary}
	if out.Changes == nil {
		out.Changes = []Change{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteMarkdown writes a pull-request comment: a summary table, then each
// object's diff in a collapsible block.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("### trainops diff\n\n")
	if r.Empty() {
		b.WriteString("No changes.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString("| action | count |\n|---|---|\n")
	fmt.Fprintf(&b, "| create | %d |\n| update | %d |\n| delete | %d |\n\n", r.Summary.Create, r.Summary.Update, r.Summary.Delete)
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "> **Warning:** %s\n\n", warn)
	}
	for _, c := range r.Changes {
		title := fmt.Sprintf("%s <code>%s</code>", c.Action, c.ID())
		if c.Owner != "" {
			title += fmt.Sprintf(" (child of <code>%s</code>)", c.Owner)
		}
		fmt.Fprintf(&b, "<details><summary>%s</summary>\n\n```diff\n%s```\n\n</details>\n\n", title, strings.ReplaceAll(c.Diff, "```", "'''"))
	}
	_, err := io.WriteString(w, textsafe.Text(b.String()))
	return err
}
