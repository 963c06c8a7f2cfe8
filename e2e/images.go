//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gitbroker/gitbroker/image"
)

// Images on the real node, all named under nodeRegistry, which no registry serves.
const (
	agentImage   = nodeRegistry + "/gitbroker-agent:e2e"
	brokerImage  = nodeRegistry + "/broker:e2e"
	handlerImage = nodeRegistry + "/handler:e2e"
)

// NodeImages builds, into dir, the images the real node runs and returns them as OCI archives
// for containerd to import: gitbroker's own as make image builds them (cmd/gitbroker-image, for
// this machine's platform only), and the test programs of e2e/testimages (broker, pause, handler)
// in images made the same way.
func NodeImages(ctx context.Context, dir string) ([]string, error) {
	own := filepath.Join(dir, "gitbroker")
	run := exec.CommandContext(ctx, "go", "run", "./cmd/gitbroker-image", "-out", own, "-platforms", "linux/amd64",
		"-registry", nodeRegistry, "-version", "e2e", "-commit", "e2e")
	run.Dir = ".." // the repository's root, as make image runs it
	if out, err := run.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make image: %v: %s", err, out)
	}
	test := filepath.Join(dir, "test")
	var imgs []image.Image
	for _, name := range []string{"broker", "pause", "handler"} {
		bin := filepath.Join(dir, "bin", name)
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./testimages/"+name)
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v: %s", name, err, out)
		}
		imgs = append(imgs, image.Image{Name: nodeRegistry + "/" + name + ":e2e", Path: "/" + name, Binaries: map[string]string{"linux/amd64": bin}})
	}
	if _, err := image.Write(test, imgs...); err != nil {
		return nil, err
	}
	// make image writes one layout per image.
	layouts := []string{filepath.Join(own, "gitbroker"), filepath.Join(own, "gitbroker-agent"), test}
	var tars []string
	for _, layout := range layouts {
		t := layout + ".tar"
		if err := tarDir(layout, t); err != nil {
			return nil, err
		}
		tars = append(tars, t)
	}
	return tars, nil
}

// tarDir writes the folder src as a tar archive at dst, paths relative to src.
func tarDir(src, dst string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	err = filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == src {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		r, err := os.Open(path)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	})
	if err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
