// Package render owns the expansion of Configurations x node inventory into plain Pod, Job and
// Service manifests, the rendered/ and history/ layout, the Job lifecycle and the safety rules.
//
// It is a pure function of one repository snapshot: files in (a Tree), files and a plan out. It
// does no I/O, reads no clock and speaks no git. A Renderer may be reused across renders; it then
// memoizes parsed inputs and built objects by content, each Configuration's instances by what
// they were made of, and its last output's object index and files by Configuration, so a
// re-render on top of its own output is scoped to the Configurations a change reaches and
// carries the others over (scope.go). Neither changes the result. It also owns how objects are
// written: YAML byte for byte as sigs.k8s.io/yaml writes it, by an emitter of its own (emit.go).
package render
