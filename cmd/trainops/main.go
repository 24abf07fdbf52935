// SPDX-License-Identifier: Apache-2.0

// Command trainops keeps a GPU training cluster in the state a Git repository
// describes. See README.md.
package main

import (
	"os"

	"github.com/trainops/trainops/internal/cli"
	"github.com/trainops/trainops/render"
)

func main() {
	render.ServeIfChild()
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
