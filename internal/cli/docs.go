// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// WriteCLIReference writes docs/cli.md: every command with its description
// and flags, from the commands themselves.
func WriteCLIReference(w io.Writer) error {
	root := NewRootCommand(io.Discard, io.Discard)
	var b strings.Builder
	b.WriteString("# CLI reference\n\nGenerated from the commands (`make docs`); do not edit by hand.\n\n")
	cmds := root.Commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name() < cmds[j].Name() })
	for _, c := range cmds {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		writeCommand(&b, c)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCommand(b *strings.Builder, c *cobra.Command) {
	fmt.Fprintf(b, "## trainops %s\n\n%s\n\n", c.Name(), c.Short)
	fmt.Fprintf(b, "```\ntrainops %s\n```\n\n", c.Use)
	if c.Long != "" {
		b.WriteString(c.Long + "\n\n")
	}
	var rows []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = " "
		} else {
			def = "`" + def + "`"
		}
		rows = append(rows, fmt.Sprintf("| `--%s` | %s | %s |", f.Name, def, escape(f.Usage)))
	})
	if len(rows) > 0 {
		b.WriteString("| flag | default | description |\n|---|---|---|\n")
		b.WriteString(strings.Join(rows, "\n") + "\n\n")
	}
}

func escape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// WriteConfigReference writes docs/configuration.md: every key of
// `trainops run` with its flag, environment variable and default, from the
// settings table the command reads.
func WriteConfigReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# Configuration reference

Generated from the settings of ` + "`trainops run`" + ` (` + "`make docs`" + `); do not edit by hand.

Each key is read, first found wins, from the flag, the environment variable,
the YAML file given with ` + "`--config`" + ` (nested keys such as ` + "`repo.url`" + ` may be written
nested), then the default. ` + "`trainops run --print-config`" + ` shows the effective
values. Credentials are never values here: only files and Secret names.

| key | flag | environment | default | description |
|---|---|---|---|---|
`)
	for _, s := range runSettings() {
		def := fmt.Sprint(s.def)
		switch v := s.def.(type) {
		case time.Duration:
			def = v.String()
		case []string:
			def = strings.Join(v, ", ")
		case string:
			if s.key == "namespace" {
				def = "trainops-system (the pod's namespace in-cluster)"
			}
			if s.key == "logFormat" {
				def = "console (json in-cluster)"
			}
		case bool:
			if s.key == "leaderElection" {
				def = "false (true in-cluster)"
			}
		}
		if s.key == "agentImage" {
			def = "ghcr.io/trainops/trainops:<version>"
		}
		if def == "" {
			def = " "
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s | %s |\n", s.key, flagName(s.key), envName(s.key), def, escape(s.usage))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
