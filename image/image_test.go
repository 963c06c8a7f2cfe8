package image

import (
	"archive/tar"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
)

func fakeBinary(t *testing.T, content string) string {
	f := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.WriteFile(f, []byte(content), 0o755))
	return f
}

// The layout reads back as a multi-platform index whose images run the binary as non-root,
// and building twice from the same binaries gives the same digests.
func TestImageLayout(t *testing.T) {
	img := Image{
		Name: "ghcr.io/gitbroker/gitbroker-agent:v0.1.0",
		Path: "/usr/local/bin/gitbroker-agent",
		Binaries: map[string]string{
			"linux/amd64": fakeBinary(t, "amd64 binary"),
			"linux/arm64": fakeBinary(t, "arm64 binary"),
		},
		Labels: map[string]string{"org.opencontainers.image.source": "https://github.com/gitbroker/gitbroker"},
	}
	dir := t.TempDir()
	digests, err := Write(dir, img)
	require.NoError(t, err)
	again, err := Write(t.TempDir(), img)
	require.NoError(t, err)
	require.Equal(t, digests, again, "reproducible: same binaries, same digest")

	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	root, err := p.ImageIndex()
	require.NoError(t, err)
	rm, err := root.IndexManifest()
	require.NoError(t, err)
	require.Len(t, rm.Manifests, 1)
	require.Equal(t, img.Name, rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 2)
	seen := map[string]string{}
	for _, m := range im.Manifests {
		one, err := idx.Image(m.Digest)
		require.NoError(t, err)
		cf, err := one.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, m.Platform.Architecture, cf.Architecture)
		require.Equal(t, "linux", cf.OS)
		require.Equal(t, []string{img.Path}, cf.Config.Entrypoint)
		require.Equal(t, User, cf.Config.User)
		require.Equal(t, img.Labels, cf.Config.Labels)
		require.Equal(t, int64(0), cf.Created.Unix())
		layers, err := one.Layers()
		require.NoError(t, err)
		require.Len(t, layers, 1)
		rc, err := layers[0].Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(tr)
				require.NoError(t, err)
				seen[cf.Architecture] = h.Name + ": " + string(b)
				require.Equal(t, int64(0o755), h.Mode)
				require.Equal(t, int64(0), h.ModTime.Unix())
			}
		}
		rc.Close()
	}
	require.Equal(t, map[string]string{
		"amd64": "usr/local/bin/gitbroker-agent: amd64 binary",
		"arm64": "usr/local/bin/gitbroker-agent: arm64 binary",
	}, seen)

	_, err = Build(Image{Name: "x", Path: "/x", Binaries: map[string]string{"arm64": fakeBinary(t, "x")}})
	require.ErrorContains(t, err, "want os/arch")
}

// Push sends the layout's multi-platform index to a registry (go-containerregistry's own
// registry, on loopback) under the image's name, pinned by the layout's digest, and the
// kustomization's images: list runs exactly that digest.
func TestPushToARegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := Image{
		Name:     host + "/edge/gitbroker-agent:v0.1.0",
		Path:     "/usr/local/bin/gitbroker-agent",
		Binaries: map[string]string{"linux/amd64": fakeBinary(t, "amd64"), "linux/arm64": fakeBinary(t, "arm64")},
	}
	dir := t.TempDir()
	digests, err := Write(dir, img)
	require.NoError(t, err)
	pinned, err := Push(context.Background(), dir, img.Name)
	require.NoError(t, err)
	require.Equal(t, host+"/edge/gitbroker-agent@"+digests[img.Name].String(), pinned)
	_, err = Push(context.Background(), dir, host+"/edge/other:v0.1.0")
	require.ErrorContains(t, err, "holds no image named")

	ref, err := name.ParseReference(pinned)
	require.NoError(t, err)
	idx, err := remote.Index(ref)
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 2, "both platforms pushed")
	tagged, err := name.ParseReference(img.Name)
	require.NoError(t, err)
	desc, err := remote.Head(tagged)
	require.NoError(t, err)
	require.Equal(t, digests[img.Name], desc.Digest, "the tag names the same index")

	require.Equal(t, "images:\n- name: gitbroker-agent\n  newName: "+host+"/edge/gitbroker-agent\n  digest: "+digests[img.Name].String()+"\n",
		Kustomization(map[string]string{"gitbroker-agent": pinned}))
}
