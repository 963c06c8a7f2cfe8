//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// Objects decodes a multi-document YAML stream into objects.
func Objects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// resource finds the API resource of an object; a namespaced object that
// names no namespace is in default.
func (c *Cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.Mapper.Reset()
		mapping, err = c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		return c.Dynamic.Resource(mapping.Resource), nil
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	return c.Dynamic.Resource(mapping.Resource).Namespace(ns), nil
}

// Apply server-side applies every object in a YAML stream.
func (c *Cluster) Apply(ctx context.Context, data []byte) error {
	objs, err := Objects(data)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.ApplyObject(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// ApplyObject server-side applies obj, as the e2e field manager, with
// strict field validation.
func (c *Cluster) ApplyObject(ctx context.Context, obj *unstructured.Unstructured) error {
	return c.apply(ctx, obj, nil)
}

// DryRun is ApplyObject as a dry run: the API server checks obj against
// its schema (a CRD's OpenAPI schema included) and admission, without
// storing it.
func (c *Cluster) DryRun(ctx context.Context, obj *unstructured.Unstructured) error {
	return c.apply(ctx, obj, []string{metav1.DryRunAll})
}

func (c *Cluster) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun []string) error {
	ri, err := c.resource(obj)
	if err != nil {
		return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		DryRun: dryRun, FieldManager: "e2e", Force: &force, FieldValidation: "Strict",
	})
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// WaitForKinds waits until the API server serves each Kind.group.
func (c *Cluster) WaitForKinds(ctx context.Context, kinds ...string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c.Mapper.Reset()
		for _, k := range kinds {
			kind, group, _ := strings.Cut(k, ".")
			if _, err := c.Mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}
