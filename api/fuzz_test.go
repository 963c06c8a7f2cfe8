package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gitbroker/gitbroker/api"
)

func seed(f *testing.F, glob string) {
	files, _ := filepath.Glob(glob)
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("apiVersion: akri.sh/v0\nkind: Configuration\nmetadata: {name: x}\nspec: {discoveryHandler: {name: y}}\n---\n"))
	f.Add([]byte("a: [b\n"))
	f.Add([]byte("---\n---\n- 1\n"))
}

// FuzzParseConfigurations: any input gives configurations or located errors, never a panic.
func FuzzParseConfigurations(f *testing.F) {
	seed(f, "../fixtures/*/repo/configurations/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, errs := api.ParseConfigurations("configurations/fuzz.yaml", data, "default")
		if len(errs) == 0 && len(cs) == 0 {
			t.Fatal("neither Configurations nor errors")
		}
		for _, e := range errs {
			if e.File != "configurations/fuzz.yaml" {
				t.Fatalf("error without its file: %v", e)
			}
		}
	})
}

// FuzzParseInventory: any input gives an inventory or located errors, never a panic.
func FuzzParseInventory(f *testing.F) {
	seed(f, "../fixtures/*/repo/inventory/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, errs := api.ParseInventory("inventory/edge-a.yaml", data, "default")
		if (inv == nil) == (len(errs) == 0) {
			t.Fatal("exactly one of inventory and errors")
		}
		for _, e := range errs {
			if e.File != "inventory/edge-a.yaml" {
				t.Fatalf("error without its file: %v", e)
			}
		}
	})
}
