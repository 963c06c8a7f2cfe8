package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gitbroker/gitbroker/api"
)

// DefaultPropertiesDir is where the agent's Pod mounts the Secrets and ConfigMaps that
// discoveryProperties[].valueFrom refer to: secrets/<namespace>/<name>/<key> and
// configmaps/<namespace>/<name>/<key>, one volume per Secret or ConfigMap (deploy/agent shows how).
const DefaultPropertiesDir = "/etc/gitbroker/discovery"

// akriPropertyNamespace is the namespace of a valueFrom reference that names none, as Akri's
// agent reads it.
const akriPropertyNamespace = "default"

// properties resolves a Configuration's discoveryProperties as Akri's agent passes them to a
// handler: an inline value as it is, a valueFrom from the file the agent's Pod mounts for it,
// and a property with neither as "" (Akri sends it empty). A reference that cannot be resolved
// and is not optional is an error naming the reference, never a value; an optional one is left
// out.
func (a *Agent) properties(c *api.ParsedConfiguration) (map[string][]byte, error) {
	var out map[string][]byte
	for i, p := range c.Spec.DiscoveryHandler.DiscoveryProperties {
		var v []byte
		switch {
		case p.Value != nil:
			v = []byte(*p.Value)
		case p.ValueFrom != nil && (p.ValueFrom.SecretKeyRef != nil || p.ValueFrom.ConfigMapKeyRef != nil):
			kind, ref := "secrets", p.ValueFrom.SecretKeyRef
			if ref == nil {
				kind, ref = "configmaps", p.ValueFrom.ConfigMapKeyRef
			}
			b, err := a.propertyFile(kind, ref)
			if errors.Is(err, fs.ErrNotExist) && ref.Optional != nil && *ref.Optional {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("discoveryProperties[%d] (%s): %w", i, p.Name, err)
			}
			v = b
		}
		if out == nil {
			out = map[string][]byte{}
		}
		if v == nil {
			v = []byte{}
		}
		out[p.Name] = v
	}
	return out, nil
}

// propertyFile reads one referenced key from the agent's mounted folder. The reference comes from
// a Configuration; it is checked before it becomes a path, so it cannot leave the folder.
func (a *Agent) propertyFile(kind string, ref *api.DiscoveryPropertyKeySelector) ([]byte, error) {
	ns := ref.Namespace
	if ns == "" {
		ns = akriPropertyNamespace
	}
	what := fmt.Sprintf("%s %s/%s key %q", strings.TrimSuffix(kind, "s"), ns, ref.Name, ref.Key)
	switch {
	case len(validation.IsDNS1123Label(ns)) > 0, len(validation.IsDNS1123Subdomain(ref.Name)) > 0, len(validation.IsConfigMapKey(ref.Key)) > 0:
		return nil, fmt.Errorf("%s: not a valid reference", what)
	case a.opts.PropertiesDir == "":
		return nil, fmt.Errorf("%s: the agent has no folder of discovery property values (--discovery-properties-dir): %w", what, fs.ErrNotExist)
	}
	path := filepath.Join(a.opts.PropertiesDir, kind, ns, ref.Name, ref.Key)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %s is not mounted into the agent's Pod (deploy/agent shows how): %w", what, path, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}
