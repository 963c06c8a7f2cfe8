// Package render owns the expansion of Configurations x node inventory into plain Pod, Job and
// Service manifests, the rendered/ and history/ layout, the Job lifecycle and the safety rules.
//
// It is a pure function of one repository snapshot: files in (a Tree), files and a plan out. It
// does no I/O, reads no clock and speaks no git. A Renderer may be reused across renders; it then
// memoizes parsed inputs and built objects by content, so a re-render after a small change does
// work in proportion to that change. The memo never changes the result.
package render
