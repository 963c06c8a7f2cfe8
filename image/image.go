// Package image assembles gitbroker's OCI images without Docker, the way ko does: each
// platform's static binary in one layer on an empty base, run as a non-root user, in a
// multi-platform index, written as an OCI image layout. Nothing in an image depends on when
// or where it was built (file times, the config's creation time and the layer's gzip header
// are fixed), so the same binaries give the same digests.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the uid:gid every image runs as (distroless' nonroot).
const User = "65532:65532"

// Image is one image: its name and, per platform ("linux/arm64"), the binary it runs.
type Image struct {
	// Name is the image's reference name in the layout, such as ghcr.io/gitbroker/gitbroker:v0.1.0.
	Name string
	// Path is where the binary goes in the image; it is the entrypoint.
	Path string
	// Binaries are the executables by platform.
	Binaries map[string]string
	// Labels are OCI annotations of the image's config (org.opencontainers.image.source, ...).
	Labels map[string]string
}

// Build returns the image index of img: one image per platform.
func Build(img Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	platforms := make([]string, 0, len(img.Binaries))
	for p := range img.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	for _, p := range platforms {
		osName, arch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: want os/arch", p)
		}
		one, err := platformImage(img, osName, arch, img.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("%s for %s: %w", img.Name, p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        one,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	return idx, nil
}

func platformImage(img Image, osName, arch, binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := tarOf(img.Path, data)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	out, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = osName, arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config = v1.Config{
		Entrypoint: []string{img.Path},
		User:       User,
		WorkingDir: "/",
		Labels:     img.Labels,
	}
	return mutate.ConfigFile(out, cf)
}

// tarOf is a layer holding the binary at path, and the folders above it, with fixed times
// and owners.
func tarOf(path string, binary []byte) ([]byte, error) {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	epoch := time.Unix(0, 0).UTC()
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/") + "/"
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.Join(parts, "/"), Mode: 0o755, Size: int64(len(binary)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := w.Write(binary); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Write writes the images into an OCI image layout at dir (created if missing), each named by
// its org.opencontainers.image.ref.name annotation, and returns each index's digest by name.
func Write(dir string, imgs ...Image) (map[string]v1.Hash, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	digests := map[string]v1.Hash{}
	for _, img := range imgs {
		idx, err := Build(img)
		if err != nil {
			return nil, err
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": img.Name})); err != nil {
			return nil, err
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		digests[img.Name] = d
	}
	return digests, nil
}

// Push pushes the index named name in the OCI image layout at dir (as Write wrote it) to the
// registry name names, with the credentials docker, podman or crane logins left
// (authn.DefaultKeychain; a registry on loopback is spoken to over plain HTTP), and returns the
// pushed reference pinned by digest (<repository>@sha256:...): the same bytes as the layout's.
func Push(ctx context.Context, dir, imageName string) (string, error) {
	ref, err := name.ParseReference(imageName)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", imageName, err)
	}
	p, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", err
	}
	m, err := p.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != imageName {
			continue
		}
		idx, err := p.ImageIndex(d.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return "", fmt.Errorf("pushing %s: %w", imageName, err)
		}
		return ref.Context().Name() + "@" + d.Digest.String(), nil
	}
	return "", fmt.Errorf("%s holds no image named %s", dir, imageName)
}

// Kustomization is the images: list of deploy/kustomization.yaml that runs the pushed images,
// pinned by digest: pinned maps the name deploy/ gives an image (gitbroker, gitbroker-agent)
// to Push's reference.
func Kustomization(pinned map[string]string) string {
	var b strings.Builder
	b.WriteString("images:\n")
	for _, n := range slices.Sorted(maps.Keys(pinned)) {
		repo, digest, _ := strings.Cut(pinned[n], "@")
		fmt.Fprintf(&b, "- name: %s\n  newName: %s\n  digest: %s\n", n, repo, digest)
	}
	return b.String()
}
