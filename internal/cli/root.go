// Package cli holds trainops's cobra commands. cmd/trainops only calls
// Execute, so the commands can be tested in-process.
package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	ExitOK    = 0
	ExitUsage = 2 // bad usage or an internal error
)

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
	root.AddCommand(newVersionCommand(), newRunCommand(), newStatusCommand())
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
	fmt.Fprintf(stderr, "Error: %v\n", err)
	return ExitUsage
}
