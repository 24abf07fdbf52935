// SPDX-License-Identifier: Apache-2.0

// Command image writes trainops's container images without a Docker
// engine, with go-containerregistry, and pushes them to a registry:
//
//	image build  --out bin/image --binary bin/trainops --pause bin/node/.../pause
//	image rootfs --out bin/image --dir ROOTFS --ref REF --file NAME.tar
//	image files  --out DIR --binary bin/trainops
//	image push   --index bin/image/index.txt --registry host/path
//
// Each image is a tarball `ctr -n k8s.io images import` loads, listed in
// index.txt as "reference file" (one line each). Images are reproducible:
// every file's time and the image's creation time are SOURCE_DATE_EPOCH
// (the commit's time in the Makefile), owners and modes fixed.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "rootfs":
		err = rootfs(os.Args[2:])
	case "files":
		err = files(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: image build|rootfs|files|push [flags] (see the package comment)")
	os.Exit(2)
}

// epoch is the time every file and image carries: SOURCE_DATE_EPOCH, or
// the Unix epoch when it is not set.
func epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// build writes trainops's image and the node's pause image.
func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("out", "bin/image", "folder the images and index.txt are written to")
	binary := fs.String("binary", "bin/trainops", "the static trainops binary")
	pause := fs.String("pause", "", "the static pause binary (no pause image when empty)")
	repo := fs.String("repository", "ghcr.io/trainops/trainops", "trainops's image repository")
	version := fs.String("version", "dev", "trainops's version: the image's tag")
	commit := fs.String("commit", "unknown", "the commit the binary was built from")
	cacerts := fs.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle the image carries")
	_ = fs.Parse(args)
	at, err := epoch()
	if err != nil {
		return err
	}
	ref := *repo + ":" + *version
	img, err := trainopsImage(*binary, *cacerts, *version, *commit, at)
	if err != nil {
		return err
	}
	if err := writeImage(*out, "trainops.tar", ref, img); err != nil {
		return err
	}
	if *pause == "" {
		return nil
	}
	pimg, err := pauseImage(*pause, at)
	if err != nil {
		return err
	}
	return writeImage(*out, "pause.tar", PauseRef, pimg)
}

// rootfs writes the image of a root filesystem folder (the training image).
func rootfs(args []string) error {
	fs := flag.NewFlagSet("rootfs", flag.ExitOnError)
	out := fs.String("out", "bin/image", "folder the image and index.txt are written to")
	dir := fs.String("dir", "", "the root filesystem")
	ref := fs.String("ref", "", "the image's reference")
	file := fs.String("file", "", "the tarball's name in --out")
	workdir := fs.String("workdir", "/", "the image's working folder")
	_ = fs.Parse(args)
	if *dir == "" || *ref == "" || *file == "" {
		return fmt.Errorf("rootfs needs --dir, --ref and --file")
	}
	at, err := epoch()
	if err != nil {
		return err
	}
	img, err := folderImage(*dir, *workdir, at)
	if err != nil {
		return err
	}
	return writeImage(*out, *file, *ref, img)
}

// files writes the files of trainops's image into a folder: the
// Dockerfile's build stage does, so that the image Docker makes holds
// what `make image` writes.
func files(args []string) error {
	fs := flag.NewFlagSet("files", flag.ExitOnError)
	out := fs.String("out", "", "the folder to write the files into")
	binary := fs.String("binary", "bin/trainops", "the static trainops binary")
	cacerts := fs.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle the image carries")
	_ = fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("files needs --out")
	}
	return writeFiles(*out, trainopsFiles(*binary, *cacerts))
}
