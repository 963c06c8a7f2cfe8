// Package render owns the expansion of Configurations x node inventory into plain Deployment,
// Job and Service manifests, the rendered/ and history/ layout, the Job lifecycle, each shared
// device's split among the nodes that see it (shares.go) and the safety rules.
//
// It is a pure function of one repository snapshot: files in (a Tree), files and a plan out. It
// does no I/O, reads no clock and speaks no git. A Renderer may be reused across renders; it then
// memoizes parsed inputs and built objects by content, each Configuration's instances by what
// they were made of, and its last output's object index and files by Configuration, so a
// re-render on top of its own output is scoped to the Configurations a change reaches and
// carries the others over (scope.go). Neither changes the result.
//
// A render is a pass (pass.go) through stages in files named after them, each returning what it
// made: load (load.go, records.go, status.go), place (instances.go), brokers, jobs, history,
// layout (layout.go, flux.go), metadata (metadata.go, shares.go), changes (the plan) and safety.
// Objects are written by internal/yamlcodec, byte for byte as sigs.k8s.io/yaml writes them.
package render
