package yamlcodec_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gitbroker/gitbroker/fixtures"
	"github.com/gitbroker/gitbroker/internal/yamlcodec"
	"github.com/gitbroker/gitbroker/render"
)

// Every object a fleet's render writes takes the fast emitter, and it writes what yaml.v2 would.
func TestEmitFleetTakesFastPath(t *testing.T) {
	spec := fixtures.Fleet10k
	spec.Nodes, spec.Devices = 50, 500
	res := render.Render(render.Request{Files: render.Tree(fixtures.Fleet(spec))})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	for p, b := range res.Files {
		if !strings.HasPrefix(p, render.RenderedDir) || !strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, "kustomization.yaml") {
			continue
		}
		if strings.Contains(string(b), "\n---\n") {
			continue
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		fast, ok := yamlcodec.FastYAML(js)
		if !ok {
			t.Fatalf("%s went to yaml.v2:\n%s", p, b)
		}
		if string(fast) != string(b) {
			t.Fatalf("%s: the fast emitter wrote\n%s", p, fast)
		}
	}
}
