# gitbroker: `make demo` runs the whole loop on the embedded repository; `make test` runs the tests.
SHELL := bash
GO ?= go
BIN := bin/gitbroker
AGENT_BIN := bin/gitbroker-agent
PKGS := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/gitbroker/gitbroker/cmd/internal/cli.version=$(VERSION) -X github.com/gitbroker/gitbroker/cmd/internal/cli.commit=$(COMMIT)

.PHONY: adversary bench-cluster all build image test e2e e2e-tools demo bench bench-cli bench-git bench-helm bench-100k vet fmt fmt-check fuzz golden generate clean

all: build

# bin/gitbroker holds every command; bin/gitbroker-agent only the agent, without Kubernetes
# clients, for edge nodes.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/gitbroker
	$(GO) build -ldflags "$(LDFLAGS)" -o $(AGENT_BIN) ./cmd/gitbroker-agent

# OCI images of gitbroker and gitbroker-agent for linux/amd64 and linux/arm64, without Docker:
# one OCI image layout each under bin/image. The same source gives the same digests. PUSH=1 also
# pushes both to IMAGE_REGISTRY (with docker's, podman's or crane's login) and prints
# deploy/kustomization.yaml's images: pinned by digest.
IMAGE_REGISTRY ?= ghcr.io/gitbroker
image:
	$(GO) run ./cmd/gitbroker-image -out bin/image -registry $(IMAGE_REGISTRY) -version $(VERSION) -commit $(COMMIT) $(if $(PUSH),-push)

# go test's own limit is 10 minutes per package binary; under the race detector on 2 busy cores
# cmd/gitbroker's tests have come close to it.
TEST_TIMEOUT ?= 30m
test: fmt-check vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# The adversary of docs/DESIGN.md ("Trust fails closed") at length: seeded random sequences of
# what one node's credential can push, with writer restarts, against the real git server (make
# test plays 4 sequences of 12 steps). GITBROKER_ADVERSARY_SEED=N replays one sequence.
ADVERSARY_SEQUENCES ?= 100
ADVERSARY_STEPS ?= 40
adversary:
	GITBROKER_ADVERSARY_SEQUENCES=$(ADVERSARY_SEQUENCES) GITBROKER_ADVERSARY_STEPS=$(ADVERSARY_STEPS) \
	$(GO) test -count=1 -timeout 240m -run '^TestAdversary$$' ./cmd/gitbroker

# The end-to-end suite (e2e/, build tag e2e): the whole loop on a real API server with Flux's
# controllers, and with Argo CD's on a second one, kwok nodes for scale and a real node (kubelet,
# containerd, Debian's runc) for what happens on a node. The programs are built from their Go
# modules by e2e/tools/build.sh into $$HOME/.cache/gitbroker/e2e, keyed by version: 30-45 minutes
# on 2 cores the first time (Argo CD with GOTOOLCHAIN=go1.27.3, for that build only), and reused
# after that. The real node needs root (mount namespaces, device nodes, runc).
E2E_TIMEOUT ?= 30m
e2e:
	@bin=$$(e2e/tools/build.sh all) && \
	GITBROKER_E2E_BIN=$$bin $(GO) test -tags e2e -count=1 -v -timeout $(E2E_TIMEOUT) ./e2e/

# The cluster side of fleet scale (docs/PERFORMANCE.md): fleet-10k on 1,000 kwok nodes, a
# server-side apply of the rendered objects, Flux's own requests for them replayed from the same
# client, the same objects through Flux, one device change, a minute of churn (a device
# every 2 s), and the server-side apply again once Flux's fleet is gone (this machine's speed
# drifts within a run). About 40-50 minutes at fleet-10k on this machine; not part of make e2e.
# kustomize-controller gets the flags Flux's vertical-scaling guide gives for large fleets
# (more workers, client-side limits lifted: the API server's priority and fairness is the
# limit, as in real clusters), and a worker for each folder (20 Configurations x BENCH_SHARDS), so that no folder
# waits for one on a first rollout: with 4 shards and 40 workers the last Pod shards started
# minutes late and Flux took 1.89x the server-side apply, with 80 workers 1.26x and 1.53x, with
# 8 shards and 160 workers 1.17x and 2.73x (a run whose machine slowed after the baseline).
# The Kustomizations get BENCH_INTERVAL between reconciles (for drift alone: a folder's source
# moving reconciles it at once). GITBROKER_BENCH_STORM=1 adds the
# same change with one source for every folder; GITBROKER_BENCH_DEVICES scales the fleet;
# GITBROKER_BENCH_SKIP_FLUX=1 stops before Flux; GITBROKER_BENCH_SKIP_BASELINE=1 measures only
# Flux, the change and the churn; GITBROKER_BENCH_PROFILE=file profiles
# kustomize-controller.
BENCH_CLUSTER_TIMEOUT ?= 240m
BENCH_SHARDS ?= 8
BENCH_INTERVAL ?= 1h
GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS ?= --concurrent=160 --requeue-dependency=5s --kube-api-qps=500 --kube-api-burst=1000
GITBROKER_E2E_SOURCE_CONTROLLER_ARGS ?= --concurrent=10 --kube-api-qps=500 --kube-api-burst=1000
# kube-controller-manager makes the broker Deployments' ReplicaSets and Pods: at its default 20
# requests a second fleet-10k's take over half an hour, so its limits are lifted as large
# clusters lift them.
GITBROKER_E2E_KUBE_CONTROLLER_MANAGER_ARGS ?= --kube-api-qps=300 --kube-api-burst=600 --concurrent-deployment-syncs=20 --concurrent-replicaset-syncs=20
bench-cluster:
	@bin=$$(e2e/tools/build.sh all) && \
	GITBROKER_E2E_BIN=$$bin GITBROKER_BENCH_SHARDS=$(BENCH_SHARDS) GITBROKER_BENCH_INTERVAL=$(BENCH_INTERVAL) \
	GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS='$(GITBROKER_E2E_KUSTOMIZE_CONTROLLER_ARGS)' \
	GITBROKER_E2E_SOURCE_CONTROLLER_ARGS='$(GITBROKER_E2E_SOURCE_CONTROLLER_ARGS)' \
	GITBROKER_E2E_KUBE_CONTROLLER_MANAGER_ARGS='$(GITBROKER_E2E_KUBE_CONTROLLER_MANAGER_ARGS)' \
	$(GO) test -tags e2e -count=1 -v -run '^$$' -bench BenchmarkClusterFleet10k -benchtime 1x -timeout $(BENCH_CLUSTER_TIMEOUT) ./e2e/

# Build (or find in the cache) the e2e suite's programs and print their folder.
e2e-tools:
	@e2e/tools/build.sh all

demo:
	$(GO) run ./cmd/gitbroker demo

# Benchmarks (docs/PERFORMANCE.md): the full render of a 10,000-device fleet and the re-render
# after one change (fleet-100k has its own target, bench-100k); one
# changed file committed and pushed on a 50,000-file branch; 50 agents pushing at once; the
# remote render of one changed device on the rendered 10,000-device fleet.
bench:
	$(GO) test -run '^$$' -bench 10k -benchmem -benchtime 5x ./render/
	$(MAKE) bench-cli
	$(MAKE) bench-git

# fleet-100k: 100,000 devices on 10,000 nodes, 166,788 files. The full render, the re-render of
# one changed device by a kept Renderer, and the daemon's render, commit and push of one changed
# device with 10,000 node refs (its first render pushes the whole fleet: about a minute), with
# the node refs in the rendered branch's repository and then in one of their own
# (--inventory-git). About 10 minutes.
bench-100k:
	$(GO) test -run '^$$' -bench '100k' -benchmem -benchtime 3x ./render/
	GITBROKER_BENCH_DEVICES=100000 $(GO) test -run '^$$' -bench RemoteRenderOneDevice -benchmem -benchtime 6x -timeout 30m ./cmd/gitbroker/
	GITBROKER_BENCH_DEVICES=100000 GITBROKER_BENCH_INVENTORY_REPO=1 $(GO) test -run '^$$' -bench RemoteRenderOneDevice -benchmem -benchtime 6x -timeout 30m ./cmd/gitbroker/

# gitbroker next to helm on the same fleet, in the same run: the CPU time of reading and rendering
# the 10,000-device fleet against `helm template` on fixtures/helm's chart (helm v3.22.0, built
# once by e2e/tools/build.sh helm into the cache, about 2 minutes), and the time to write the
# rendered tree to an empty folder against `cp -r` of the same tree.
bench-helm:
	@helm=$$(e2e/tools/build.sh helm)/helm && \
	GITBROKER_HELM=$$helm $(GO) test -run '^$$' -bench 'RenderVsHelm|WriteFleet' -benchtime 5x ./cmd/gitbroker/

bench-git:
	$(GO) test -run '^$$' -bench UpdateOneFileIn50k -benchmem -benchtime 50x ./gitsync/
	$(GO) test -count=1 -run TestConcurrentAgents -v ./agent/ | grep -E 'agents x|^(ok|FAIL)'
	$(GO) test -run '^$$' -bench RemoteRenderOneDevice -benchmem -benchtime 10x ./cmd/gitbroker/

# The command on the same fleet written to a new directory: read 1,020 inputs, render, write
# 16,686 files, then check them. DEVICES=100000 does it for fleet-100k (10,020 inputs, 166,788
# files).
bench-cli: build
	@dir=$$(mktemp -d) && \
	GITBROKER_FLEET_DIR=$$dir GITBROKER_FLEET_DEVICES=$(DEVICES) $(GO) test -count=1 -run TestWriteFleet ./render/ >/dev/null && \
	echo "render:" && time $(BIN) render --dir $$dir >/dev/null 2>&1 && \
	echo "check:" && time $(BIN) check --dir $$dir && \
	rm -rf $$dir

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e/

fmt:
	gofmt -w $$(git ls-files '*.go')

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Short fuzzing runs of the parsers (they must never panic) and of the fast YAML readers and
# emitter against yaml.v3, sigs.k8s.io/yaml and yaml.v2 (they must agree).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseConfigurations -fuzztime 30s ./api/
	$(GO) test -run '^$$' -fuzz FuzzParseInventory -fuzztime 30s ./api/
	$(GO) test -run '^$$' -fuzz FuzzBlockJSON -fuzztime 30s ./internal/yamlcodec/
	$(GO) test -run '^$$' -fuzz FuzzNodeJSON -fuzztime 30s ./internal/yamlcodec/
	$(GO) test -run '^$$' -fuzz FuzzEmit -fuzztime 30s ./internal/yamlcodec/

# Rewrite the golden files under fixtures/ from the current renderer.
golden:
	$(GO) test ./render/ -run TestGolden -update

# Regenerate agent/akripb from discovery.proto (needs protoc: apt-get install protobuf-compiler).
generate:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH=$(CURDIR)/bin:$$PATH $(GO) generate ./agent/akripb/

clean:
	rm -rf bin
