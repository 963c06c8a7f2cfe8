//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/internal/mistakes"
)

// TestMistakesCorpus keeps api/testdata/mistakes true: each Configuration's broker Deployment
// (a Pod broker as gitbroker renders it), Job and Services, built from it as Akri's controller
// would build them otherwise (the placeholder in containers' resources becomes
// akri.sh/<configuration>), are submitted to the API server as a server-side dry run with
// strict field validation. The object the mistake is in must be refused with the message the
// corpus gives (or accepted, where only the kubelet refuses), and every other object accepted, so
// that each file has the one mistake it says. api's TestMistakesAreRefused checks gitbroker
// refuses every one, naming its file, line and field.
func TestMistakesCorpus(t *testing.T) {
	ctx := context.Background()
	const ns = "mistakes"
	require.NoError(t, cluster.CreateNamespace(ctx, ns))
	corpus, err := mistakes.Load("../api/testdata/mistakes")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(corpus), 50)
	for i, m := range corpus {
		t.Run(m.File, func(t *testing.T) {
			objs := akriObjects(t, m.Data, ns, fmt.Sprintf("mistake-%02d", i+1))
			require.NotEmpty(t, objs)
			found := false
			for _, o := range objs {
				err := cluster.DryRun(ctx, o.obj)
				if !strings.HasPrefix(m.Field, o.field+".") {
					require.NoError(t, err, "%s: the %s has no mistake", m.About, o.obj.GetKind())
					continue
				}
				found = true
				if m.APIServer == "" {
					require.NoError(t, err, "%s: the API server accepts it (the kubelet refuses it: %s)", m.About, m.Kubelet)
					continue
				}
				require.Error(t, err, "%s: the API server accepts the %s", m.About, o.obj.GetKind())
				t.Logf("the API server: %v", err)
				require.Contains(t, err.Error(), m.APIServer, m.About)
			}
			require.True(t, found, "%s: %s is in no object", m.About, m.Field)
		})
	}
}

type akriObject struct {
	field string // the Configuration's field the object is built from
	obj   *unstructured.Unstructured
}

// akriObjects builds from a Configuration the objects made for one instance: Akri's, except that
// a Pod broker is a Deployment of one Pod, as gitbroker renders it.
func akriObjects(t *testing.T, data []byte, ns, name string) []akriObject {
	var cfg struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			BrokerSpec struct {
				Pod map[string]any `json:"brokerPodSpec"`
				Job map[string]any `json:"brokerJobSpec"`
			} `json:"brokerSpec"`
			InstanceService      map[string]any `json:"instanceServiceSpec"`
			ConfigurationService map[string]any `json:"configurationServiceSpec"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(data, &cfg))
	resource := "akri.sh/" + cfg.Metadata.Name
	object := func(apiVersion, kind string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     spec,
		}}
	}
	var out []akriObject
	if s := cfg.Spec.BrokerSpec.Pod; s != nil {
		placeholder(s, resource)
		labels := map[string]any{"akri.sh/instance": name}
		out = append(out, akriObject{"spec.brokerSpec.brokerPodSpec", object("apps/v1", "Deployment", map[string]any{
			"replicas": int64(1), "strategy": map[string]any{"type": "Recreate"},
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": s},
		})})
	}
	if s := cfg.Spec.BrokerSpec.Job; s != nil {
		if tmpl, ok := s["template"].(map[string]any); ok {
			if ps, ok := tmpl["spec"].(map[string]any); ok {
				placeholder(ps, resource)
			}
		}
		out = append(out, akriObject{"spec.brokerSpec.brokerJobSpec", object("batch/v1", "Job", s)})
	}
	for field, s := range map[string]map[string]any{"spec.instanceServiceSpec": cfg.Spec.InstanceService, "spec.configurationServiceSpec": cfg.Spec.ConfigurationService} {
		if s != nil {
			s["selector"] = map[string]any{"akri.sh/instance": name}
			out = append(out, akriObject{field, object("v1", "Service", s)})
		}
	}
	return out
}

// placeholder replaces Akri's {{PLACEHOLDER}} in the resources of a Pod spec's containers and init
// containers, as Akri's controller does; one anywhere else stays, as it does there.
func placeholder(podSpec map[string]any, resource string) {
	for _, list := range []string{"containers", "initContainers"} {
		cs, _ := podSpec[list].([]any)
		for _, c := range cs {
			ct, _ := c.(map[string]any)
			res, _ := ct["resources"].(map[string]any)
			for _, kind := range []string{"limits", "requests"} {
				if rl, ok := res[kind].(map[string]any); ok {
					if v, ok := rl["{{PLACEHOLDER}}"]; ok {
						delete(rl, "{{PLACEHOLDER}}")
						rl[resource] = v
					}
				}
			}
		}
	}
}
