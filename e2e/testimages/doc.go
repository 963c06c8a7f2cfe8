// Package testimages holds the programs of the images the e2e suite's real node runs besides
// gitbroker's own (which come from cmd/gitbroker-image, as make image builds them): broker, an
// unprivileged device broker; pause, the Pods' sandbox; handler, an Akri-style discovery handler
// container that registers with the agent over Akri's gRPC protocol. Each is a static binary in an
// image of its own, imported into the node's containerd with no registry.
package testimages
