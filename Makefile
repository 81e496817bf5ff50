# meshnode — see README.md. Every target works on a fresh machine with Go 1.26.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 2s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.7.0
# The revision the binary announces (meshnode version, /v1/members), for builds
# without Go's VCS stamping (-buildvcs=false); a stamped VERSION replaces the module
# version (make build VERSION=v1.4.0).
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo +dirty)
VERSION   ?=
LDFLAGS   := -X main.revision=$(REVISION) $(if $(VERSION),-X main.version=$(VERSION))

# A pipe fails when any command in it fails (go test | tee must not hide a failure).
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: run test chromium postgresql bench bench-once idle abuse chaos fuzz lint build cluster proto

## run: one meshnode on loopback with the sample app (tcp 7400, ws 7401, admin 9464)
run:
	$(GO) run -ldflags '$(LDFLAGS)' ./cmd/meshnode

## cluster: three local meshnodes joined together (Ctrl-C stops them)
cluster:
	./scripts/cluster.sh

## proto: regenerate the committed .pb.go files (needs protoc and protoc-gen-go)
proto:
	protoc --go_out=. --go_opt=paths=source_relative mesh/meshpb/meshpb.proto

## build: the binary in bin/
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/meshnode ./cmd/meshnode

## test: vet, the whole suite with the race detector, the contract suites again with
## the fast paths off, every benchmark once (so none rots); the short abuse suite runs
## last, alone and without the race detector, since it measures latencies against real
## processes (under -race its own clients are what it measures). Chromium is
## installed first when missing (the dashboard test drives a real browser), and so is
## PostgreSQL (the store's tests start throw-away servers of their own).
test: chromium postgresql
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list $(PKGS) | grep -v /test/abuse)
	MESHNODE_TEST_FAST_PATHS=off $(GO) test -race -count=1 -timeout 10m ./session/connector ./test/stream ./mesh ./test/binding
	$(MAKE) --no-print-directory bench-once
	$(GO) test -count=1 -timeout 10m ./test/abuse

## chromium: a Chromium on PATH for the dashboard's browser test (apt-get installs
## Debian's chromium when none is; fails, saying why, where it cannot)
chromium:
	@./scripts/ensure-chromium.sh

## postgresql: PostgreSQL's server binaries for the tests that start their own server
## (apt-get installs Debian's postgresql when they are missing)
postgresql:
	@./scripts/ensure-postgresql.sh

## bench: the benchmarks, with their baselines in the same run, then the report of
## docs/benchmarks.md's goals; fails when a benchmark fails, or a goal is missed or
## not measured (PostgreSQL is installed first when missing: the store benchmarks start a server)
bench: postgresql
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m ./session/... ./mesh/... ./actor/... ./test/... | tee bench.out
	$(GO) run ./test/benchreport < bench.out

## bench-once: every benchmark for one iteration: they build, run and finish
bench-once:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 15m $$($(GO) list $(PKGS) | grep -v /internal/protoactor) > bench-once.out 2>&1 || (cat bench-once.out; exit 1)
	@grep -c '^Benchmark' bench-once.out | sed 's/$$/ benchmarks ran once/'

## idle: idle STREAM sessions, as many as the open-files limit allows; prints the
## server's RSS, heap and goroutines per session
idle:
	MESHNODE_IDLE_SESSIONS=max $(GO) test -run '^$$' -bench IdleSessions -benchtime 1x -timeout 10m ./test/bench | tee idle.out
	$(GO) run ./test/benchreport -only '^IdleSessions$$' < idle.out

## chaos: the relocation chaos test in full (100 sessions, 20 counter Actors moving at
## random for 30 s, one node drained and restarted); make test runs it for 4 s
chaos:
	MESHNODE_CHAOS=full $(GO) test -race -count=1 -v -run Chaos -timeout 10m ./test/chaos | grep -E '^(--- |ok|FAIL|panic)|FIGURE|_test.go'

## abuse: the load-and-abuse suite in full (hostile clients against real meshnode
## processes, a few minutes); prints each scenario's figures. `make test` runs its
## short form.
abuse:
	@MESHNODE_ABUSE=full $(GO) test -count=1 -v -timeout 60m ./test/abuse > abuse.out 2>&1; rc=$$?; \
	  grep -E '^(--- |ok|FAIL|panic)|FIGURE|_test.go' abuse.out; exit $$rc

## fuzz: every fuzz target for FUZZTIME each
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## lint: gofmt, go vet, staticcheck
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt: run gofmt -w on the files gofmt -l lists"; exit 1)
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $$($(GO) list $(PKGS) | grep -v /internal/protoactor)
