// Package e2e is gitbroker's end-to-end suite: the whole loop against a
// real Kubernetes API server with the real Flux controllers applying the
// rendered repository.
//
// It owns the test cluster: etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler, kwok's fake nodes, and Flux's source-controller and
// kustomize-controller, all built from their Go modules by
// e2e/tools/build.sh, started as processes on loopback and stopped when the
// suite ends. The git server, the agents, the renderer and the recorder are
// started by the tests. It also owns the real node (node.go): kubelet and
// containerd, built the same way, with Debian's runc, in a mount namespace of
// their own, running the images images.go builds (make image's, and
// testimages') imported with no registry (docs/DEPLOYING.md's tests pull
// gitbroker's from one the test serves on loopback), and the stand-in for what that
// node lacks that a cluster has, for gitbroker's own Pods (podnetwork.go: a
// mutating admission webhook giving them the host's network, the API
// server's address, the renderer's Service and the fixture sysfs), so that
// deploy/ applies as docs/DEPLOYING.md writes it.
//
// The tests carry the e2e build tag; run them with `make e2e`, which builds
// (or reuses) the programs and points GITBROKER_E2E_BIN at them.
package e2e
