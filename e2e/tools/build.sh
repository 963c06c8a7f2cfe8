#!/usr/bin/env bash
# build.sh builds the programs the e2e suite runs, from Go modules, into a
# cache outside the clone, and prints the folder that holds them.
#
#   e2e/tools/build.sh kube|kubelet|kubectl|node|etcd|kwok|source-controller|kustomize-controller|notification-controller|argocd|kustomize|helm
#   e2e/tools/build.sh all
#
# helm runs docs/DEPLOYING.md's Akri migration (helm upgrade of Akri's chart) and make
# bench-helm.
#
# "all" builds every component and prints a folder of links to all their
# programs, kwok's stages (kwok.yaml), Flux's CRDs (crds/) and Argo CD's
# (argocd/): what the suite reads from GITBROKER_E2E_BIN.
#
# Each component is a small module under e2e/tools/<component> whose
# go.mod pins the versions; the version in the cache key is read from
# there. Argo CD needs Go 1.27, which the go command fetches from the
# module proxy (GOTOOLCHAIN) for that build only. The cache folder is keyed by the component, its
# version and a digest of its go.mod and go.sum, so a change of version
# builds anew and an unchanged one is reused. A build goes to a temporary
# folder first and is renamed into place only when it is complete, so an
# interrupted build is never taken for a finished one.
set -euo pipefail

component=${1:?usage: build.sh kube|kubelet|kubectl|node|etcd|kwok|source-controller|kustomize-controller|notification-controller|argocd|kustomize|helm|all}
here=$(cd "$(dirname "$0")" && pwd)
cache=${GITBROKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitbroker}/e2e
mod=$here/$component
# Every program is built without cgo (none needs it: they are the static builds their projects
# ship), so the packages that several of them share (Kubernetes' client and API machinery above
# all: the API server, kubelet and kubectl are one release) compile once in Go's build cache
# instead of once per cgo setting.
export CGO_ENABLED=0
components=(etcd kube kubelet kubectl node kwok source-controller kustomize-controller notification-controller argocd kustomize helm)

if [[ $component == all ]]; then
	dirs=()
	for c in "${components[@]}"; do
		dirs+=("$("$0" "$c")")
	done
	key=$(printf '%s\n' "${dirs[@]}" | sha256sum | cut -c1-12)
	bin=$cache/bin-$key
	if [[ ! -d $bin ]]; then
		tmp=$(mktemp -d "$cache/.bin-XXXXXX")
		mkdir "$tmp/crds"
		for d in "${dirs[@]}"; do
			for f in "$d"/*; do
				[[ -d $f ]] || ln -s "$f" "$tmp/"
			done
			if [[ -d $d/crds ]]; then
				ln -s "$d"/crds/* "$tmp/crds/"
			fi
			if [[ -d $d/stages ]]; then
				ln -s "$d"/stages/* "$tmp/"
			fi
			if [[ -d $d/argocd-crds ]]; then
				ln -s "$d/argocd-crds" "$tmp/argocd"
			fi
		done
		mv "$tmp" "$bin"
	fi
	echo "$bin"
	exit 0
fi

case $component in
kube)
	module=k8s.io/kubernetes
	pkgs=(k8s.io/kubernetes/cmd/kube-apiserver
		k8s.io/kubernetes/cmd/kube-controller-manager
		k8s.io/kubernetes/cmd/kube-scheduler)
	;;
kubelet | kubectl)
	# The real node's kubelet, and kubectl to run docs/DEPLOYING.md's shell steps as a user types
	# them, from the same release as the API server.
	module=k8s.io/kubernetes
	pkgs=("k8s.io/kubernetes/cmd/$component")
	want=$(cd "$here/kube" && go list -m -f '{{.Version}}' "$module")
	have=$(cd "$mod" && go list -m -f '{{.Version}}' "$module")
	if [[ $want != "$have" ]]; then
		echo "build.sh: $component pins $module $have, the API server $want" >&2
		exit 2
	fi
	;;
node)
	# containerd and its runc shim, ctr to import images, and the CNI plugins.
	module=github.com/containerd/containerd/v2
	pkgs=("$module/cmd/containerd" "$module/cmd/containerd-shim-runc-v2" "$module/cmd/ctr"
		github.com/containernetworking/plugins/plugins/main/bridge
		github.com/containernetworking/plugins/plugins/ipam/host-local
		github.com/containernetworking/plugins/plugins/main/loopback)
	;;
etcd)
	module=go.etcd.io/etcd/server/v3
	pkgs=("$module")
	;;
kwok)
	module=sigs.k8s.io/kwok
	pkgs=(sigs.k8s.io/kwok/cmd/kwok)
	;;
source-controller | kustomize-controller | notification-controller)
	module=github.com/fluxcd/$component
	pkgs=("$module")
	;;
argocd)
	# One multicall program: application-controller, repo-server and
	# applicationset-controller, chosen by ARGOCD_BINARY_NAME.
	module=github.com/argoproj/argo-cd/v3
	pkgs=("$module/cmd")
	export GOTOOLCHAIN=go1.27.3
	;;
kustomize)
	# Argo CD's repo-server runs kustomize build on every rendered folder.
	module=sigs.k8s.io/kustomize/kustomize/v5
	pkgs=("$module")
	;;
helm)
	# The Akri migration's helm upgrade (e2e), and helm template on the fleet's chart, next to
	# gitbroker render (make bench-helm).
	module=helm.sh/helm/v3
	pkgs=("$module/cmd/helm")
	;;
*)
	echo "build.sh: unknown component $component" >&2
	exit 2
	;;
esac
version=$(cd "$mod" && go list -m -f '{{.Version}}' "$module")
ldflags="-s -w"
case $component in
kube | kubelet | kubectl)
	minor=${version#v1.}
	minor=${minor%%.*}
	# Some clients read the server's version; an unstamped build says v0.0.0.
	ldflags+="
		-X k8s.io/component-base/version.gitVersion=$version
		-X k8s.io/component-base/version.gitMajor=1
		-X k8s.io/component-base/version.gitMinor=$minor
		-X k8s.io/component-base/version.gitTreeState=clean
		-X k8s.io/client-go/pkg/version.gitVersion=$version
		-X k8s.io/client-go/pkg/version.gitMajor=1
		-X k8s.io/client-go/pkg/version.gitMinor=$minor"
	;;
kwok)
	ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=$version"
	;;
node)
	ldflags+=" -X $module/version.Version=$version"
	;;
esac
digest=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-12)
out=$cache/$component-$version-$digest
if [[ -f $out/.complete ]]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.$component-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "build.sh: building $component $version into $out (cold; this takes minutes)" >&2
src=$mod
if [[ $component == argocd ]]; then
	# The application controller binds its metrics listener to 0.0.0.0 with no flag to
	# change it; the suite keeps every listener on loopback, so it builds a copy of the
	# module with that one address changed, and fails if the line is not there.
	src=$tmp/mod
	mkdir "$src"
	cp "$mod/go.mod" "$mod/go.sum" "$src/"
	dir=$(cd "$mod" && go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	cp -r "$dir" "$src/argo-cd"
	chmod -R u+w "$src/argo-cd"
	file=$src/argo-cd/controller/appcontroller.go
	grep -q 'fmt.Sprintf("0.0.0.0:%d", metricsPort)' "$file"
	sed -i 's/fmt.Sprintf("0.0.0.0:%d", metricsPort)/fmt.Sprintf("127.0.0.1:%d", metricsPort)/' "$file"
	(cd "$src" && go mod edit -replace "$module=./argo-cd")
	ldflags+=" -X github.com/argoproj/argo-cd/v3/common.version=${version#v}"
fi
(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
if [[ $component == argocd ]]; then
	mv "$tmp/cmd" "$tmp/argo-cd"
	mkdir "$tmp/argocd-crds"
	for f in application-crd.yaml applicationset-crd.yaml appproject-crd.yaml; do
		cp "$src/argo-cd/manifests/crds/$f" "$tmp/argocd-crds/"
	done
	# The repo-server runs gpg and verifies signatures through these scripts, found on PATH
	# (Argo CD's image puts them in /usr/local/bin).
	for f in git-verify-wrapper.sh gpg-wrapper.sh; do
		cp "$src/argo-cd/hack/$f" "$tmp/$f"
		chmod 755 "$tmp/$f"
	done
	chmod 644 "$tmp"/argocd-crds/*.yaml
	rm -rf "$src"
fi
# go names the etcd server's program after its module path, without /v3.
if [[ $component == etcd ]]; then
	mv "$tmp/server" "$tmp/etcd"
fi
# Flux's CRDs come from the same module as its controller.
if [[ $component == *-controller ]]; then
	src=$(cd "$mod" && go list -m -f '{{.Dir}}' "$module")
	mkdir "$tmp/crds"
	cp "$src"/config/crd/bases/*.yaml "$tmp/crds/"
	chmod 644 "$tmp"/crds/*.yaml
fi
# kwok moves nodes and pods through stages given as configuration: nodes
# become ready and keep a lease, pods become ready, Job pods complete.
if [[ $component == kwok ]]; then
	src=$(cd "$mod" && go list -m -f '{{.Dir}}' "$module")/kustomize/stage
	mkdir "$tmp/stages"
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		cat "$src/$f"
		echo ---
	done >"$tmp/stages/kwok.yaml"
fi
echo "$version" >"$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "build.sh: built $component in $(($(date +%s) - start))s" >&2
echo "$out"
