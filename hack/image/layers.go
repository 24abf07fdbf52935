// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// PauseRef is the node's sandbox image (containerd's sandbox_image).
const PauseRef = "registry.k8s.io/pause:3.10"

// nonroot is the user trainops runs as, as distroless's nonroot is.
const nonroot = 65532

// file is one entry of a layer made from named files.
type file struct {
	name string // path in the image, without the leading slash
	mode int64
	dir  bool
	data []byte
	from string // read the content from this host file instead of data
	uid  int
}

// trainopsImage is the static binary on a base with what distroless's
// static:nonroot gives: CA certificates, a nonroot user and group, /tmp.
// The Dockerfile makes the same files (image files) and config.
func trainopsImage(binary, cacerts, version, commit string, at time.Time) (v1.Image, error) {
	return imageOf(trainopsFiles(binary, cacerts), trainopsConfig(version, commit), at)
}

// trainopsFiles are the files of trainops's image.
func trainopsFiles(binary, cacerts string) []file {
	return []file{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl", dir: true, mode: 0o755},
		{name: "etc/ssl/certs", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, from: cacerts},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: nonroot},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "trainops", mode: 0o755, from: binary},
	}
}

// trainopsConfig is the config of trainops's image.
func trainopsConfig(version, commit string) v1.Config {
	return v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/trainops"},
		Cmd:        []string{"run"},
		Env:        []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/nonroot"},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "trainops",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": commit,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
}

// writeFiles writes files into the folder dir, with their modes and
// owners (owners only when running as root).
func writeFiles(dir string, files []file) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		mode := fs.FileMode(f.mode & 0o777)
		if f.mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		var err error
		if f.dir {
			err = os.MkdirAll(p, mode)
		} else {
			data := f.data
			if f.from != "" {
				data, err = os.ReadFile(f.from)
			}
			if err == nil {
				err = os.WriteFile(p, data, mode)
			}
		}
		if err == nil {
			err = os.Chmod(p, mode)
		}
		if err == nil && f.uid != 0 && os.Geteuid() == 0 {
			err = os.Chown(p, f.uid, f.uid)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pauseImage is the pause binary alone.
func pauseImage(binary string, at time.Time) (v1.Image, error) {
	return imageOf([]file{{name: "pause", mode: 0o755, from: binary}},
		v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}, at)
}

// imageOf is one layer of files on an empty image, with cfg.
func imageOf(files []file, cfg v1.Config, at time.Time) (v1.Image, error) {
	layer, err := layerOf(func(tw *tar.Writer) error {
		for _, f := range files {
			if err := writeFile(tw, f, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return finish(layer, cfg, at)
}

// finish puts layer on an empty linux/amd64 image with cfg, created at.
func finish(layer v1.Layer, cfg v1.Config, at time.Time) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config = cfg
	cf.Created = v1.Time{Time: at}
	return mutate.ConfigFile(img, cf)
}

// writeFile writes one named file or folder.
func writeFile(tw *tar.Writer, f file, at time.Time) error {
	hdr := &tar.Header{Name: f.name, Mode: f.mode, ModTime: at, Uid: f.uid, Gid: f.uid, Format: tar.FormatPAX}
	if f.dir {
		hdr.Typeflag, hdr.Name = tar.TypeDir, f.name+"/"
		return tw.WriteHeader(hdr)
	}
	data := f.data
	if f.from != "" {
		var err error
		if data, err = os.ReadFile(f.from); err != nil {
			return err
		}
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// layerOf writes a gzipped tar with fill into a temporary file, once, and
// returns it as a layer (compressed once: go-containerregistry reads the
// file's digest and diff ID from it).
func layerOf(fill func(*tar.Writer) error) (v1.Layer, error) {
	tmp, err := os.CreateTemp("", "trainops-layer-*.tar.gz")
	if err != nil {
		return nil, err
	}
	defer tmp.Close()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	err = fill(tw)
	for _, c := range []func() error{tw.Close, zw.Close, bw.Flush, tmp.Sync} {
		if err != nil {
			break
		}
		err = c()
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	temps = append(temps, tmp.Name())
	return tarball.LayerFromFile(tmp.Name())
}

// folderImage is the image of a root filesystem: every entry of dir with
// its mode and owner (device nodes are left out: the runtime makes /dev).
func folderImage(dir, workdir string, at time.Time) (v1.Image, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	layer, err := layerOf(func(tw *tar.Writer) error {
		links := map[uint64]string{} // inode -> first name, for hard links
		for _, p := range paths {
			if err := writeEntry(tw, dir, p, at, links); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return finish(layer, v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
		WorkingDir: workdir,
		Cmd:        []string{"/bin/sh"},
	}, at)
}

// writeEntry writes the entry at p of the folder dir.
func writeEntry(tw *tar.Writer, dir, p string, at time.Time, links map[uint64]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	rel := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
	if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
		return nil
	}
	target := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name, hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = rel, at, time.Time{}, time.Time{}
	hdr.Uname, hdr.Gname, hdr.Format = "", "", tar.FormatPAX
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, seen := links[st.Ino]; seen {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			links[st.Ino] = rel
		}
	}
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
