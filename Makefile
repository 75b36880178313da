# Meridian — the two commands that matter: `make dev` runs a local 3-node
# cluster, `make test` runs the test suite (what CI runs). `make check` is
# the fast tier for the inner loop.
GO ?= go
TOOLS := $(CURDIR)/.tools
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
# staticcheck 2026.2.2
STATICCHECK_VERSION := v0.8.2

.PHONY: all build dev test check vet staticcheck proto tools clean kazoo-test chaos fuzz bench-deps bench-report bench-quick

all: build

build:
	$(GO) build -o bin/meridian ./cmd/meridian

dev: build
	./bin/meridian dev --nodes 3

vet:
	$(GO) vet ./...
	$(GO) vet -tags compat,browser ./cmd/meridian
	cd bench && $(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(TOOLS)/staticcheck
	$(TOOLS)/staticcheck ./...
	cd bench && $(TOOLS)/staticcheck ./...

# The inner loop: vet, gofmt, staticcheck, and every package's tests without
# the race detector, but not the real-process suites (the chaos battery,
# cmd/meridian's end-to-end and compatibility tests, kazoo). No root, no
# downloads beyond Go modules; the deterministic simulation runs its
# default seeds. `make test` is the full suite.
check: vet staticcheck
	$(GO) test -count=1 -timeout 10m $$($(GO) list ./... | grep -v -e /internal/chaos$$ -e /cmd/meridian$$)
	cd bench && $(GO) test -count=1 ./...

# The chaos battery runs on its own after the other packages: it keeps
# three server processes busy for minutes, and next to the in-process
# cluster tests (20 ms raft ticks) that starves them into spurious elections.
test: vet staticcheck
	$(GO) test -race -count=1 -timeout 14m $$($(GO) list ./... | grep -v /internal/chaos$$)
	$(GO) test -race -count=1 -timeout 10m ./internal/chaos
	cd bench && $(GO) test -count=1 ./...
	./scripts/pyenv.sh
	./scripts/install-zookeeper.sh
	MERIDIAN_PYTHON=$(CURDIR)/.venv/bin/python ZKCLI=/usr/share/zookeeper/bin/zkCli.sh \
		$(GO) test -tags compat -count=1 -run 'TestKazoo|TestZkCli' ./cmd/meridian
	./scripts/install-chromium.sh
	CHROMIUM=/usr/bin/chromium $(GO) test -tags browser -count=1 -run TestDashboardInChromium ./cmd/meridian
	./scripts/kazoo-test.sh
	MERIDIAN_KEYSPACE=/kazootests ./scripts/kazoo-test.sh -k '$(KAZOO_KEYSPACE_TESTS)'

# kazoo's tests `make test` runs again with their chroots in a regional
# keyspace (docs/compatibility.md, "Regional keyspaces"); the whole suite
# so: MERIDIAN_KEYSPACE=/kazootests ./scripts/kazoo-test.sh. Left out:
# test_request_queuing_session_recovered, which fails now and then only
# with a keyspace (open; docs/compatibility.md says how often).
KAZOO_KEYSPACE_TESTS ?= (test_client or test_lock or test_election or test_queue or test_barrier or test_watchers or test_counter or test_party or test_partitioner or test_cache or test_lease) and not test_request_queuing_session_recovered

# kazoo's own test suite against Meridian (part of `make test`).
kazoo-test:
	./scripts/kazoo-test.sh

# Fault injection against real server processes (docs/reliability.md):
# COUNT scenarios with seeds SEED..SEED+COUNT-1, DURATION of load under
# faults each, fault kinds from FAULTS (comma-separated, all, or keyspace:
# the *-ks-leader kinds); KEYSPACE=/eu adds a regional keyspace and its
# workload to any kinds (docs/reliability.md, Keyspaces). A failing
# scenario prints its seed; rerun it with SEED=that COUNT=1 and the same
# DURATION and FAULTS (same schedule and workload choices, not the same timing).
SEED ?= 1
COUNT ?= 30
DURATION ?= 20s
FAULTS ?= all
KEYSPACE ?=
chaos:
	$(GO) run ./cmd/meridian-chaos --seed $(SEED) --count $(COUNT) --duration $(DURATION) --faults $(FAULTS) --keyspace "$(KEYSPACE)"

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
# bench-report runs every workload on every topology in full and writes
# each report as a new file, docs/bench/runs/DATE-NAME.md (DATE: the day
# its first part started; NAME: main, cost-of-consensus-grid,
# cost-of-consensus-contention, dida-gstore), its plots into
# docs/bench/runs/DATE-NAME/ and its raw results into
# bench/results/DATE-NAME.json.gz; a report is never rewritten (a second
# run of the same day gets DATE-NAME-2). docs/benchmarks.md's claims are
# then updated by hand from the new reports. A full run takes hours, so
# it runs one topology at a time into BENCH_PARTS and merges the parts at
# the end: an interrupted bench-report run again resumes with the first
# topology not yet done (each part's time and commit are in the report);
# the parts are removed once the report is written. rm -rf .bench-parts
# to start afresh. A part in which a system or workload could not run is
# kept, listed in the report's "Could not run", and makes bench-report
# exit 2 after writing. BENCH_FLAGS go to every part (e.g. --quick to try
# the pipeline). bench-quick runs everything in small form (a smoke run,
# not figures) and prints its report: it writes nothing under docs/.
BENCH_TOPOLOGIES ?= topologies/loopback.yaml,topologies/1dc.yaml,topologies/2dc.yaml,topologies/3dc.yaml,topologies/5region.yaml
BENCH_SYSTEMS ?= meridian,zookeeper,etcd,redis
SEED000_GRID ?= topologies/seed000-u0-s0.yaml,topologies/seed000-u0-s100.yaml,topologies/seed000-u0-s250.yaml,topologies/seed000-u100-s0.yaml,topologies/seed000-u100-s100.yaml,topologies/seed000-u100-s250.yaml,topologies/seed000-u250-s0.yaml,topologies/seed000-u250-s100.yaml,topologies/seed000-u250-s250.yaml
SEED000_CONTENTION ?= topologies/seed000-u0-s0.yaml,topologies/seed000-u100-s0.yaml,topologies/seed000-u250-s0.yaml
SEED002_TOPOLOGIES ?= topologies/seed002-rtt0.yaml,topologies/seed002-rtt10.yaml,topologies/seed002-rtt30.yaml,topologies/seed002-rtt60.yaml,topologies/seed002-rtt100.yaml
BENCH_PARTS ?= $(CURDIR)/.bench-parts
comma := ,
parts = $(foreach t,$(subst $(comma), ,$(2)),$(BENCH_PARTS)/$(1)-$(basename $(notdir $(t))).json)
MAIN_PARTS := $(call parts,main,$(BENCH_TOPOLOGIES))
SEED002_PARTS := $(call parts,seed002,$(SEED002_TOPOLOGIES))
GRID_PARTS := $(call parts,seed000-grid,$(SEED000_GRID))
CONTENTION_PARTS := $(call parts,seed000-contention,$(SEED000_CONTENTION))
BENCH := cd bench && $(GO) run ./cmd/meridian-bench
# part WORKLOAD-ARGS: run one topology into $@ (kept when some system could
# not run, exit 2: the merge reports it).
part = @mkdir -p $(BENCH_PARTS); $(BENCH) $(BENCH_FLAGS) $(1) --topologies topologies/$*.yaml --part $@.tmp; rc=$$?; \
	if [ $$rc -eq 0 ] || [ $$rc -eq 2 ]; then mv $@.tmp $@; else exit $$rc; fi
# merge PARTS[,ARGS]: write the run report of these parts.
merge = ($(BENCH) --runs ../docs/bench/runs --results results --merge $(subst $(eval) ,$(comma),$(strip $(1))) $(2))
bench-report: $(MAIN_PARTS) $(SEED002_PARTS) $(GRID_PARTS) $(CONTENTION_PARTS)
	rc=0; \
	$(call merge,$(MAIN_PARTS)) || rc=$$?; \
	$(call merge,$(SEED002_PARTS),--section seed002) || rc=$$?; \
	$(call merge,$(GRID_PARTS),--section seed000-grid) || rc=$$?; \
	$(call merge,$(CONTENTION_PARTS),--section seed000-contention) || rc=$$?; \
	if [ $$rc -eq 0 ] || [ $$rc -eq 2 ]; then rm -rf $(BENCH_PARTS); fi; exit $$rc
$(BENCH_PARTS)/main-%.json:
	$(call part,--systems $(BENCH_SYSTEMS))
$(BENCH_PARTS)/seed002-%.json:
	$(call part,--systems meridian$(comma)zookeeper$(comma)etcd --workloads seed002)
$(BENCH_PARTS)/seed000-grid-%.json:
	$(call part,--systems meridian$(comma)zookeeper --workloads seed000-grid)
$(BENCH_PARTS)/seed000-contention-%.json:
	$(call part,--systems meridian$(comma)zookeeper --workloads seed000-contention)
# Parts run one at a time: they share the machine's cores and ports.
.NOTPARALLEL:
bench-quick:
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems $(BENCH_SYSTEMS) --topologies topologies/3dc.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian --workloads georead,localfirst,followsun --topologies topologies/5region.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper --workloads followsun --topologies topologies/3region.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian --workloads keyspaces --topologies topologies/3region-9.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper,etcd --workloads seed002 --topologies topologies/seed002-rtt0.yaml,topologies/seed002-rtt30.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --systems meridian,zookeeper --workloads seed000-grid --topologies topologies/seed000-u0-s0.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --keyspaces-idle 3 --keyspaces-idle-window 5s --topologies topologies/3region-9.yaml
	cd bench && $(GO) run ./cmd/meridian-bench --quick --sessions 200 --systems meridian

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
