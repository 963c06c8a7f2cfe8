// Package render owns the expansion of Configurations x node inventory into plain Pod, Job and
// Service manifests, the rendered/ and history/ layout, the Job lifecycle and the safety rules.
//
// It is a pure function of one repository snapshot: files in (a Tree), files and a plan out. It
// does no I/O, reads no clock and speaks no git. A Renderer may be reused across renders; it then
// memoizes parsed inputs and built objects by content, each Configuration's instances by what
// they were made of, and its last output's object index, so a re-render after a small change
// parses, groups and builds only what changed (it still passes over every instance and file to
// assemble the tree, diff it and plan). The memo never changes the result. It also owns how objects are
// written: YAML byte for byte as sigs.k8s.io/yaml writes it, by an emitter of its own (emit.go).
package render
