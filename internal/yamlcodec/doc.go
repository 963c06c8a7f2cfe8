// Package yamlcodec reads and writes YAML exactly as sigs.k8s.io/yaml does, only faster for the
// documents gitbroker handles by the hundred thousand.
//
// Reading: BlockJSON reads the plain block YAML that gitbroker's own writers emit (inventories,
// records, rendered objects) straight to JSON; DocumentJSON does the same from a yaml.v3 node tree
// already parsed for line numbers; ToJSON falls back to sigs.k8s.io/yaml for anything else.
// Writing: Marshal writes an object as sigs.k8s.io/yaml.Marshal would, byte for byte, sending any
// value whose yaml.v2 form is not certain to yaml.v2 itself. Each fast path is compared with the
// library on the repository's files and on generated and fuzzed documents.
package yamlcodec
