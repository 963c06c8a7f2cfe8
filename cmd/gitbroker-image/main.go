// Command gitbroker-image builds gitbroker's OCI images without Docker (make image): it
// cross-compiles gitbroker and gitbroker-agent for each platform, static and stripped, and
// writes one multi-platform OCI image layout per image; with -push it also pushes both to the
// registry and prints deploy/kustomization.yaml's images: list pinned by digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gitbroker/gitbroker/image"
)

func main() {
	out := flag.String("out", "bin/image", "folder of the OCI image layouts, one per image")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list (edge nodes are often arm64)")
	registry := flag.String("registry", "ghcr.io/gitbroker", "registry and path the images are named under")
	version := flag.String("version", "dev", "version stamped into the binaries and the images' tag")
	commit := flag.String("commit", "unknown", "commit stamped into the binaries")
	push := flag.Bool("push", false, "also push both images to -registry, with the credentials of docker login, podman login or crane auth login (plain HTTP to a registry on loopback), and print deploy/kustomization.yaml's images: pinned by digest")
	flag.Parse()
	if err := build(*out, strings.Split(*platforms, ","), *registry, *version, *commit, *push); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func build(out string, platforms []string, registry, version, commit string, push bool) error {
	work, err := os.MkdirTemp("", "gitbroker-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	const cli = "github.com/gitbroker/gitbroker/cmd/internal/cli"
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.commit=%s", cli, version, cli, commit)
	pinned := map[string]string{}
	for _, name := range []string{"gitbroker", "gitbroker-agent"} {
		img := image.Image{
			Name:     fmt.Sprintf("%s/%s:%s", registry, name, version),
			Path:     "/usr/local/bin/" + name,
			Binaries: map[string]string{},
			Labels: map[string]string{
				"org.opencontainers.image.source":   "https://github.com/gitbroker/gitbroker",
				"org.opencontainers.image.version":  version,
				"org.opencontainers.image.revision": commit,
			},
		}
		for _, p := range platforms {
			goos, goarch, ok := strings.Cut(p, "/")
			if !ok {
				return fmt.Errorf("platform %q: want os/arch", p)
			}
			bin := filepath.Join(work, name+"-"+goos+"-"+goarch)
			cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./cmd/"+name)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("building %s for %s: %w", name, p, err)
			}
			img.Binaries[p] = bin
		}
		dir := filepath.Join(out, name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		digests, err := image.Write(dir, img)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s (%s) in %s\n", img.Name, digests[img.Name], strings.Join(platforms, ", "), dir)
		if push {
			if pinned[name], err = image.Push(context.Background(), dir, img.Name); err != nil {
				return err
			}
			fmt.Printf("pushed %s\n", pinned[name])
		}
	}
	if push {
		fmt.Printf("\nIn deploy/kustomization.yaml, to run exactly these images:\n\n%s", image.Kustomization(pinned))
	}
	return nil
}
