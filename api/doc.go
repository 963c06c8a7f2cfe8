// Package api owns gitbroker's input formats: the Akri-compatible Configuration (akri.sh/v0 and
// its gitbroker.dev/v1alpha1 superset), NodeInventory, JobRecord and the optional gitbroker.yaml
// Settings. It decodes them strictly (unknown or mistyped fields are errors naming the file, line
// and field path) and validates them. YAML means what it means to kubectl (sigs.k8s.io/yaml); the
// block YAML gitbroker itself writes is read by a faster reader that gives the same JSON
// (blockyaml.go, yamljson.go). It does no I/O: callers pass file names and bytes.
package api
