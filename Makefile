# Meridian — the two commands that matter: `make dev` runs a local 3-node
# cluster, `make test` runs the test suite (what CI runs).
GO ?= go
TOOLS := $(CURDIR)/.tools
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

.PHONY: all build dev test test-short vet proto tools clean kazoo-test chaos fuzz bench-deps bench-report bench-quick

all: build

build:
	$(GO) build -o bin/meridian ./cmd/meridian

dev: build
	./bin/meridian dev --nodes 3

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# The chaos battery runs on its own after the other packages: it keeps
# three server processes busy for minutes, and next to the in-process
# cluster tests (20 ms raft ticks) that starves them into spurious elections.
test: vet
	$(GO) test -race -count=1 -timeout 14m $$($(GO) list ./... | grep -v /internal/chaos$$)
	$(GO) test -race -count=1 -timeout 10m ./internal/chaos
	cd bench && $(GO) test -count=1 ./...
	./scripts/pyenv.sh
	./scripts/install-zookeeper.sh
	MERIDIAN_PYTHON=$(CURDIR)/.venv/bin/python ZKCLI=/usr/share/zookeeper/bin/zkCli.sh \
		$(GO) test -tags compat -count=1 -run 'TestKazoo|TestZkCli' ./cmd/meridian
	./scripts/kazoo-test.sh

# kazoo's own test suite against Meridian (part of `make test`).
kazoo-test:
	./scripts/kazoo-test.sh

# Fault injection against real server processes (docs/reliability.md):
# COUNT scenarios with seeds SEED..SEED+COUNT-1, DURATION of load under
# faults each, fault kinds from FAULTS (comma-separated, or all). A failing
# scenario prints its seed; rerun it with SEED=that COUNT=1 and the same
# DURATION and FAULTS (same schedule and workload choices, not the same timing).
SEED ?= 1
COUNT ?= 30
DURATION ?= 20s
FAULTS ?= all
chaos:
	$(GO) run ./cmd/meridian-chaos --seed $(SEED) --count $(COUNT) --duration $(DURATION) --faults $(FAULTS)

# Every fuzz target (decoders of network and disk bytes) for FUZZTIME each;
# a finding stops the run and stays in testdata/fuzz as a regression case.
FUZZTIME ?= 60s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

# The benchmark peers (ZooKeeper, etcd, Redis) from Debian, pinned; needs root.
bench-deps:
	./scripts/bench-deps.sh

# The side-by-side benchmark suite (bench/, its own Go module; needs
# root for etcd's per-member network namespaces and make bench-deps).
# bench-report runs every workload on every topology in full and rewrites
# the generated part of docs/benchmarks.md and docs/bench/*.png;
# bench-quick runs everything in small form (a smoke run, not figures).
BENCH_TOPOLOGIES ?= topologies/loopback.yaml,topologies/1dc.yaml,topologies/2dc.yaml,topologies/3dc.yaml,topologies/5region.yaml
BENCH_SYSTEMS ?= meridian,zookeeper,etcd,redis
SEED000_GRID ?= topologies/seed000-u0-s0.yaml,topologies/seed000-u0-s100.yaml,topologies/seed000-u0-s250.yaml,topologies/seed000-u100-s0.yaml,topologies/seed000-u100-s100.yaml,topologies/seed000-u100-s250.yaml,topologies/seed000-u250-s0.yaml,topologies/seed000-u250-s100.yaml,topologies/seed000-u250-s250.yaml
SEED002_TOPOLOGIES ?= topologies/seed002-rtt0.yaml,topologies/seed002-rtt10.yaml,topologies/seed002-rtt30.yaml,topologies/seed002-rtt60.yaml,topologies/seed002-rtt100.yaml
bench-report:
	cd bench && $(GO) run ./cmd/meridian-bench --systems $(BENCH_SYSTEMS) --topologies $(BENCH_TOPOLOGIES) \
		--out ../docs/bench --plot-ref bench --report ../docs/benchmarks.md
	cd bench && $(GO) run ./cmd/meridian-bench --systems meridian,zookeeper,etcd --workloads seed002 --topologies $(SEED002_TOPOLOGIES) \
		--out ../docs/bench --plot-ref bench --report ../docs/benchmarks.md --section seed002
	cd bench && $(GO) run ./cmd/meridian-bench --systems meridian,zookeeper --workloads seed000-grid --topologies $(SEED000_GRID) \
		--out ../docs/bench --plot-ref bench --report ../docs/benchmarks.md --section seed000-grid
	cd bench && $(GO) run ./cmd/meridian-bench --systems meridian,zookeeper --workloads seed000-contention --topologies topologies/seed000-u0-s0.yaml,topologies/seed000-u100-s0.yaml \
		--out ../docs/bench --plot-ref bench --report ../docs/benchmarks.md --section seed000-contention
bench-quick:
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems $(BENCH_SYSTEMS) --topologies topologies/3dc.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian --workloads georead,localfirst,followsun --topologies topologies/5region.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper --workloads followsun --topologies topologies/3region.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper,etcd --workloads seed002 --topologies topologies/seed002-rtt0.yaml,topologies/seed002-rtt30.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper --workloads seed000-grid --topologies topologies/seed000-u0-s0.yaml

tools:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# Regenerates api/meridianpb from proto/; the generated code is committed.
proto: tools
	$(TOOLS)/buf lint
	$(TOOLS)/buf generate

clean:
	rm -rf bin
