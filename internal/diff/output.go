// SPDX-License-Identifier: Apache-2.0

package diff

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/trainops/trainops/internal/capacity"
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
	if p := r.Capacity; p != nil {
		fmt.Fprintf(&b, "\ncapacity (%s):\n", paint(cyan, p.Source))
		for _, line := range queueLines(p) {
			b.WriteString("  " + textsafe.Text(line) + "\n")
		}
		for _, v := range p.Jobs {
			c := map[string]string{capacity.Admitted: green, capacity.Waits: yellow, capacity.NeverFits: red}[v.Result]
			b.WriteString("  " + paint(c, fmt.Sprintf("%-11s", v.Result)) + " " + textsafe.Text(jobLine(v)) + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// queueLines describe each ClusterQueue's GPUs: quota, in use, what the
// change's admitted Jobs add.
func queueLines(p *capacity.Plan) []string {
	var out []string
	for _, cq := range p.ClusterQueues {
		for _, f := range cq.Flavor {
			out = append(out, fmt.Sprintf("ClusterQueue %s, flavor %s: %s quota %d, in use %d, this change %d (%d workloads admitted, %d pending)",
				cq.Name, f.Name, f.Resource, f.Quota, f.InUse, f.Planned, cq.Admitted, cq.Pending))
		}
	}
	return out
}

// jobLine describes one Job's verdict.
func jobLine(v capacity.Verdict) string {
	s := fmt.Sprintf("PyJob %s: %d %s (%d × %d)", v.PyJob, v.GPUs, v.Resource, v.Workers, v.PerWorker)
	if v.Queue != "" {
		s += " on queue " + v.Queue
	}
	if v.Flavor != "" {
		s += fmt.Sprintf(" in %s/%s", v.ClusterQueue, v.Flavor)
	}
	return s + ": " + v.Why
}

// WriteJSON writes {"changes":[...],"summary":{...}}, and "capacity" when
// there is a plan.
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		Changes  []Change       `json:"changes"`
		Summary  Summary        `json:"summary"`
		Capacity *capacity.Plan `json:"capacity,omitempty"`
	}{Changes: r.Changes, Summary: r.Summary, Capacity: r.Capacity}
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
	if p := r.Capacity; p != nil {
		fmt.Fprintf(&b, "#### Capacity (%s)\n\n| PyJob | GPUs | queue | result | why |\n|---|---|---|---|---|\n", p.Source)
		for _, v := range p.Jobs {
			result := v.Result
			if v.Result == capacity.NeverFits {
				result = "**" + strings.ToUpper(v.Result) + "**"
			}
			fmt.Fprintf(&b, "| `%s` | %d × %d %s | %s | %s | %s |\n", v.PyJob, v.Workers, v.PerWorker, v.Resource, v.Queue, result, strings.ReplaceAll(v.Why, "|", "\\|"))
		}
		if lines := queueLines(p); len(lines) > 0 {
			b.WriteString("\n")
			for _, line := range lines {
				b.WriteString("- " + line + "\n")
			}
		}
		b.WriteString("\n")
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
