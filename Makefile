.DEFAULT_GOAL := help
GO       ?= go
FUZZTIME ?= 20s
BENCHTIME ?= 3s
# make bench-compare: the revision compared with, how many interleaved rounds, where runs and table go.
BASE     ?= HEAD
ROUNDS   ?= 6
BENCHOUT ?= bench-compare
# Tests run with the race detector, shuffled, with a per-package timeout.
TESTFLAGS ?= -race -shuffle=on -count=1 -timeout=15m
# make install: where the binary and the systemd units go (DESTDIR for packaging).
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system
UNITS   := meshagent.service meshagent-relay.service
# make scale: the sizes measured, where the CSV and plots go, and the bound of each waiting step;
# SCALEPROCS=1 runs each agent in a process of its own (its CSV and plots go to docs/scale/procs).
SCALEN    ?= 10,25
SCALEPROCS ?=
SCALEOUT  ?= $(if $(filter 1,$(SCALEPROCS)),docs/scale/procs,$(if $(filter mock sim,$(SCALENET)),docs/scale/$(SCALENET),docs/scale))
SCALESTEP ?= 60s
SCALERUNS ?= 1
# SCALEJOIN=K starts the in-process agents K at a time (1: one after another), for large N;
# SCALEJOINGAP=10s starts a batch every 10 s, so that agents arrive at a pace (virtual with SCALESYNCTEST=1).
SCALEJOIN ?= 1
SCALEJOINGAP ?= 0s
SCALETIMEOUT ?= 60m
# SCALENET=mock runs the in-process agents on go-libp2p's in-memory mocknet (no sockets), each link
# with SCALELATENCY one way (e.g. 50ms) and SCALEBW bytes/s (e.g. 12.5M; empty: unlimited);
# SCALENET=sim runs them on go-libp2p's simulated packet network instead: QUIC over per-agent
# access links of SCALEBW each way (empty: 12.5M) with SCALELATENCY per packet, which pipelines
# as a WAN does (mocknet's latency is a window of one write); SCALERATE is the publish rate in messages/s.
SCALENET  ?= loopback
SCALELATENCY ?= 0s
SCALEBW   ?=
SCALERATE ?= 20
# SCALESYNCTEST=1 (with SCALENET=sim) runs each cluster on virtual time (testing/synctest): figures
# independent of the machine's load, with CPU taken as free.
SCALESYNCTEST ?=
# SCALECONNS=LOW:HIGH (SCALENET=sim) sets the connection manager's watermarks of every agent of both
# kinds (empty: the harness's 32:64; libp2p: go-libp2p's default 160:192, the behaviour before it).
SCALECONNS ?=
# SCALESETTLE=30s waits that long after discovery, both kinds alike, before the publish window: a mesh
# started at once heartbeats at the configured pace until its agents have heard each other.
SCALESETTLE ?= 0s
# SCALEPAYLOAD=256 pads each published message's payload to that many bytes (0: some 10 bytes).
SCALEPAYLOAD ?= 0
# SCALEKINDS=raw,mesh measures the baseline first (the mesh is the long run at N = 1,000).
SCALEKINDS ?= mesh,raw
# make scale-plot SCALECSV=a.csv,b.csv SCALEOUT=dir merges earlier runs' CSVs into dir's scale.csv and plots.
SCALECSV  ?=
comma := ,
space := $(subst ,, )
# make chaos runs each scenario within 3 minutes and all of them within this.
CHAOSTIMEOUT ?= 18m

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-10s %s\n",$$1,$$2}'

build: ## Build ./bin/meshagent
	$(GO) build -o bin/meshagent ./cmd/meshagent

run: build ## Run a node on embedded defaults (identity and state in ~/.meshagent)
	./bin/meshagent node

test: ## Every test: unit, multi-node, end-to-end (race detector on; the TestAllocs tests again without it, as allocation counts hold only there)
	$(GO) test $(TESTFLAGS) ./...
	$(GO) test -count=1 -run '^TestAllocs' ./bus ./protocol

lint: ## gofmt, go vet, and no function that no command or test reaches (deadcode -test); the import rules and the no-printing rule are tests: internal/archtest
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed:"; gofmt -l .; exit 1)
	$(GO) vet ./...
	$(GO) vet -tags chaos ./cmd/meshagent
	@dead=$$($(GO) run golang.org/x/tools/cmd/deadcode@v0.49.0 -test ./...) || exit 1; \
	test -z "$$dead" || { echo "no command or test reaches these: delete them, or test what they do"; echo "$$dead"; exit 1; }

chaos: ## Fault and abuse scenarios (relay kills, relay restarts with reconnecting subscribers, power loss of a relay and of a node, a hostile mailbox and keeper, a full disk on a node and a relay as root, node kills, a partition, malformed input, connection floods, hole punching behind NATs as root), each bounded, printing its figures
	@log=$$(mktemp); \
	$(GO) test -tags chaos -count=1 -timeout=$(CHAOSTIMEOUT) -v -run '^TestChaos' ./cmd/meshagent >$$log 2>&1; rc=$$?; \
	grep -E '^(chaos: |--- (FAIL|SKIP)|FAIL|ok )|^ +[a-z0-9_]+_test\.go:[0-9]+: ' $$log | grep -vE '_test\.go:[0-9]+: (chaos: |[a-z0-9-]+ std(out|err):$$)'; \
	if [ $$rc -ne 0 ]; then echo "make chaos failed; the end of its log:"; tail -n 200 $$log; fi; \
	rm -f $$log; exit $$rc

bench: ## Benchmarks with baselines side by side (signed call vs raw libp2p echo, direct messages/s and p99 from one sender vs raw libp2p echo, a local API client serving vs the built-in echo, directory vs raw kad-dht, topics vs raw GossipSub, durable catch-up from a keeper and to an answering client, bus vs nats-server, idle client memory, canonical JSON vs jcs)
	$(GO) test ./node -run '^$$' -bench RequestResponse -benchtime $(BENCHTIME)
	$(GO) test ./node -run '^$$' -bench DirectMessages -benchtime $(BENCHTIME)
	$(GO) test ./node -run '^$$' -bench CallAny -count 3
	$(GO) test ./dht -run '^$$' -bench FindProviders -benchtime 200x
	$(GO) test ./pubsub -run '^$$' -bench Fanout -benchtime 1x
	$(GO) test ./pubsub -run '^$$' -bench Catchup -benchtime 5x -count 3
	$(GO) test ./rpc -run '^$$' -bench DurableDelivery -benchtime 5x -count 3
	$(GO) test ./bus -run '^$$' -bench BusRoundTrip -benchtime 1x
	$(GO) test ./bus -run '^$$' -bench IdleClients -benchtime 1x
	$(GO) test ./cmd/meshagent -run '^$$' -bench Serve -benchtime 1x
	$(GO) test ./sign ./protocol -run '^$$' -bench . -benchtime 1s

bench-compare: ## CPU and allocations per bus round trip (in one process, and the relay process alone) and per signed call, this tree against BASE (a git revision), ROUNDS runs of each interleaved; benchstat's medians and p-values in BENCHOUT/benchstat.txt
	contrib/bench/compare.sh $(BASE) $(ROUNDS) $(BENCHOUT)

scale: ## Scale harness: N in-process nodes (SCALEN=10,25; e.g. SCALEN=10,25,50,100 SCALERUNS=3 for medians of three; SCALEPROCS=1 for one process per node; SCALENET=sim SCALELATENCY=50ms for a simulated WAN, SCALENET=mock for mocknet; SCALECONNS=LOW:HIGH the agents' connection watermarks on sim, 32:64 unset; SCALESETTLE=30s a quiet window before publishing, for a settled mesh; SCALEJOIN=20 starts agents 20 at a time, SCALEJOINGAP=10s with a pause between batches), discovery, topics, gossip overhead, idle CPU and memory, against raw kad-dht and GossipSub; writes SCALEOUT/scale.csv and plots
	@log=$$(mktemp); \
	ulimit -n 131072 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	$(GO) test ./internal/scale -run '^TestScale$$' -count=1 -timeout=$(SCALETIMEOUT) -v -args -scale $(if $(filter 1,$(SCALEPROCS)),-scale.procs) -scale.n $(SCALEN) -scale.out $(abspath $(SCALEOUT)) -scale.step $(SCALESTEP) -scale.runs $(SCALERUNS) -scale.join $(SCALEJOIN) -scale.joingap $(SCALEJOINGAP) -scale.net $(SCALENET) -scale.latency $(SCALELATENCY) -scale.bw '$(SCALEBW)' -scale.rate $(SCALERATE) $(if $(filter 1,$(SCALESYNCTEST)),-scale.synctest) $(if $(SCALECONNS),-scale.conns $(SCALECONNS)) -scale.settle $(SCALESETTLE) -scale.payload $(SCALEPAYLOAD) -scale.kinds $(SCALEKINDS) >$$log 2>&1; rc=$$?; \
	grep -E '(scale|cluster|local|procs)_test\.go:|^(--- |FAIL|ok )' $$log; \
	if [ $$rc -ne 0 ]; then echo "make scale failed; the end of its log:"; tail -n 100 $$log; fi; \
	rm -f $$log; exit $$rc

scale-plot: ## Merge earlier runs' CSVs into one with its plots (SCALECSV=docs/scale/a/scale.csv,docs/scale/b/scale.csv SCALEOUT=docs/scale/curves): curves across sizes measured apart
	@test -n "$(SCALECSV)" || { echo "make scale-plot needs SCALECSV=a.csv,b.csv"; exit 2; }
	@log=$$(mktemp); \
	$(GO) test ./internal/scale -run '^TestMergeRuns$$' -count=1 -v -args -scale.merge '$(subst $(space),$(comma),$(abspath $(subst $(comma),$(space),$(SCALECSV))))' -scale.out $(abspath $(SCALEOUT)) >$$log 2>&1; rc=$$?; \
	grep -E 'scale_test\.go:|^(--- |FAIL|ok )' $$log; rm -f $$log; exit $$rc

fuzz: ## Run every fuzz target of every package for FUZZTIME (CI: 10s each; node's, rpc's, bus's and lobby's drive whole paths: serve, hello, topics, local API, bus, lobby)
	@for pkg in $$(grep -rlE --include='*_test.go' --exclude-dir=node_modules '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$($(GO) test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; out=$$($(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s 2>&1); rc=$$?; echo "$$out" | tail -n 3; \
	    if [ $$rc -ne 0 ]; then \
	      if echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	        echo "   (Go 1.26's fuzz coordinator reported its own deadline at the end of -fuzztime, golang/go#75804: no failing input, not a failure)"; \
	      else echo "$$out"; exit 1; fi; \
	    fi; \
	  done; \
	done

vectors: ## Regenerate golden vectors (review the diff: it is a protocol change)
	$(GO) test ./sign -run TestVectors -update
	$(GO) test ./protocol -run Golden -update

install: build ## Install the binary in $(PREFIX)/bin and the systemd units in $(PREFIX)/lib/systemd/system
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)"
	install -m 0755 bin/meshagent "$(DESTDIR)$(BINDIR)/meshagent"
	@for u in $(UNITS); do \
	  sed 's|/usr/local/bin/meshagent|$(BINDIR)/meshagent|g' contrib/systemd/$$u > "$(DESTDIR)$(UNITDIR)/$$u" && \
	  chmod 0644 "$(DESTDIR)$(UNITDIR)/$$u" && echo "installed $(DESTDIR)$(UNITDIR)/$$u"; \
	done

uninstall: ## Remove what install installed
	rm -f "$(DESTDIR)$(BINDIR)/meshagent"
	@for u in $(UNITS); do rm -f "$(DESTDIR)$(UNITDIR)/$$u"; done

clean: ## Remove build output
	rm -rf bin

.PHONY: help build run test chaos lint bench scale scale-plot fuzz vectors install uninstall clean
