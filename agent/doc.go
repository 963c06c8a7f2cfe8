// Package agent owns one node's view of its devices: it reads the
// Configurations at the branch head, runs the discovery handlers they name
// (the built-in debugEcho and udev, and any handler that registers over
// Akri's gRPC discovery protocol), keeps vanished devices for a grace
// period, writes inventory/<node>.yaml through a gitsync.Store when,
// and only when, what the node sees has changed, and gives what it sees now
// to the node's device plugin (agent/deviceplugin), or in DRA mode to its
// DRA kubelet plugin (agent/dra), which serve it to kubelet. discoveryProperties[].valueFrom are resolved from files the
// agent's Pod mounts, never from git.
//
// The inventory is a function of the agent's state alone: sorted, without
// timestamps, so a flapping device or a restart writes nothing.
package agent
