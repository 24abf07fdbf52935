// SPDX-License-Identifier: Apache-2.0

// Package cli holds trainops's cobra commands. cmd/trainops only calls
// Execute, so the commands can be tested in-process.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Exit codes shared by every command, as kubectl diff and flux diff use
// them.
const (
	ExitOK      = 0
	ExitChanges = 1 // validate: invalid input; diff: there are changes
	ExitUsage   = 2 // bad usage, invalid input to diff, or an internal error
)

// exitError ends a command with a given code; an empty message prints
// nothing more.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// NewRootCommand builds the trainops command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "trainops",
		Short: "GitOps reconciler for GPU training clusters",
		Long: `trainops keeps a GPU training cluster in the state a Git repository describes.

Teams keep PyJob (training jobs), SREAgent (ops agents) and ClusterPolicy
(the GPU node stack) resources in a training-config repository; trainops
renders it with kustomize, applies it with server-side apply, and reconciles
each resource into the Jobs, Deployments and DaemonSets that do the work.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newVersionCommand(), newRunCommand(), newStatusCommand(), newRenderCommand(), newValidateCommand(), newDiffCommand(), newInstallCommand(), newAgentCommand(), newConvertCommand())
	return root
}

// Execute runs the command line and returns the process exit code.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "Error: %v\n", err)
	return ExitUsage
}

// newLogger logs JSON lines (or, for a console, readable lines) to w, with
// millisecond timestamps so the steps of one sync can be told apart.
func newLogger(w io.Writer, console bool) logr.Logger {
	return zap.New(zap.WriteTo(w), zap.UseDevMode(console), func(o *zap.Options) {
		o.TimeEncoder = zapcore.TimeEncoderOfLayout("2006-01-02T15:04:05.000Z07:00")
	})
}
