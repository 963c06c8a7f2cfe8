package verify_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gitbroker/gitbroker/api"
	"github.com/gitbroker/gitbroker/trust"
	"github.com/gitbroker/gitbroker/verify"
)

const clusterSettings = "apiVersion: gitbroker.dev/v1alpha1\nkind: Settings\nspec:\n  clusters:\n  - name: site-a\n    nodes: [edge-a]\n  - name: site-b\n    nodes: [edge-b]\n"

const jobRecord = "apiVersion: gitbroker.dev/v1alpha1\nkind: JobRecord\n"

// newClusterFixture is newFixture's repository split into two clusters, each with its recorder
// enrolled as recorder:<cluster> and one record on its ref, rendered once.
func newClusterFixture(t *testing.T) *fixture {
	f := newFixture(t)
	dir := t.TempDir()
	for _, p := range []string{"recorder:site-a", "recorder:site-b"} {
		file := filepath.Join(dir, strings.ReplaceAll(p, ":", "-"))
		k, _, err := trust.LoadOrCreateSigner(file, p)
		require.NoError(t, err)
		f.keys[p], f.keyFiles[p] = k, file
		f.allowed += k.AllowedSignersLine(p) + "\n"
	}
	f.person(map[string]string{verify.AllowedSignersPath: f.allowed, api.SettingsPath: clusterSettings}, "two clusters, a recorder each")
	for _, c := range []string{"site-a", "site-b"} {
		f.write("recorder:"+c, api.ClusterStatusBranch(c), api.ClusterStatusPath(c, "status/jobs/default/job-1.yaml"), jobRecord)
	}
	// The one-cluster layout's brokers move under rendered/<cluster>/ (allowed, as a person
	// moving to clusters does once).
	f.allowDeletions = true
	in := f.render()
	f.allowDeletions = false
	require.Empty(t, in.Rejections)
	return f
}

// Each cluster's records come from its own recorder's ref, signed as recorder:<cluster>.
func TestClusterRecordsComeFromTheirRecorder(t *testing.T) {
	f := newClusterFixture(t)
	in := f.accepted
	for _, c := range []string{"site-a", "site-b"} {
		require.Contains(t, in.Inputs, "status/"+c+"/jobs/default/job-1.yaml")
		require.Equal(t, f.srv.On(api.ClusterStatusBranch(c)).Head(), in.Writers[api.ClusterStatusBranch(c)])
	}

	// A cluster the people's branch does not declare is not read.
	f.write("recorder", api.ClusterStatusBranch("site-x"), api.ClusterStatusPath("site-x", "status/jobs/default/job-9.yaml"), jobRecord)
	in = f.collect()
	require.Empty(t, in.Rejections)
	require.NotContains(t, in.Inputs, "status/site-x/jobs/default/job-9.yaml")
	require.NotContains(t, in.Writers, api.ClusterStatusBranch("site-x"))
}

// A recorder's key writes its own cluster's records only: another cluster's ref, another
// cluster's records on its own ref, and the one-cluster recorder's key on a cluster's ref are
// each refused with that ref, whose records verified before are kept.
func TestClusterRecorderCannotWriteAnotherCluster(t *testing.T) {
	siteB := api.ClusterStatusBranch("site-b")
	siteA := api.ClusterStatusBranch("site-a")
	for _, tt := range []struct {
		name, ref, writer, why string
		attack                 func(f *fixture)
	}{
		{"site-a's recorder signs site-b's ref", siteB, "recorder:site-b", "not by recorder:site-b", func(f *fixture) {
			f.write("recorder:site-a", siteB, api.ClusterStatusPath("site-b", "status/jobs/default/job-2.yaml"), jobRecord)
		}},
		{"site-a's recorder writes site-b's records on its own ref", siteA, "recorder:site-a", "may hold only status/site-a/", func(f *fixture) {
			f.write("recorder:site-a", siteA, api.ClusterStatusPath("site-b", "status/jobs/default/job-2.yaml"), jobRecord)
		}},
		{"the one-cluster recorder's key signs a cluster's ref", siteA, "recorder:site-a", "not by recorder:site-a", func(f *fixture) {
			f.write("recorder", siteA, api.ClusterStatusPath("site-a", "status/jobs/default/job-2.yaml"), jobRecord)
		}},
		{"a node's key signs a cluster's ref", siteA, "recorder:site-a", "not by recorder:site-a", func(f *fixture) {
			f.write("node:edge-a", siteA, api.ClusterStatusPath("site-a", "status/jobs/default/job-2.yaml"), jobRecord)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newClusterFixture(t)
			before := f.accepted
			tt.attack(f)
			in := f.collect()
			require.Len(t, in.Rejections, 1, "%v", in.Untrusted)
			r := in.Rejections[0]
			require.Equal(t, tt.writer, r.Writer)
			require.Equal(t, tt.ref, r.Ref)
			require.Contains(t, r.Reason, tt.why)
			require.Equal(t, before.Writers[tt.ref], in.Writers[tt.ref], "the ref's accepted tip is kept")
			for _, c := range []string{"site-a", "site-b"} {
				require.Contains(t, in.Inputs, "status/"+c+"/jobs/default/job-1.yaml", "the records verified before are kept")
			}
			for p := range in.Inputs {
				require.NotContains(t, p, "job-2", "nothing of the attack is read")
			}
		})
	}
}
