# Developer tasks. Run `make help` for the list.

SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help
help: ## List the available targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Regenerate gen/ from proto/ (needs protoc; see scripts/generate.sh)
	bash scripts/generate.sh

.PHONY: checkgenerate
checkgenerate: ## Fail if committed gen/ differs from a fresh generation
	bash scripts/generate.sh --check

.PHONY: spec
spec: ## Fetch the MACP spec at the pinned commit into .spec/ (fixtures and protos for the tests; needs github.com)
	bash scripts/fetch-spec.sh

# Two test commands (README "Tests"):
#   make test      the everyday run, at most a few minutes on 2 CPUs: vet, the
#                  format check, the docs/scripts checks and every package's
#                  tests with -short, plus the race detector on RACE_QUICK.
#   make test-all  what CI runs (.ci/run): every package under the race
#                  detector without -short (full property counts, soak, crash
#                  loops, cluster process kills, binaries built and run),
#                  the allocation tests without -race, fuzzing, the
#                  stream-memory bounds, the GOARCH=386 snapshot ids, the SDK
#                  property at its full count and the black-box conformance run.
# A long test or a long configuration checks testing.Short() and, under
# -short, skips (t.Skip with the reason) or runs a smaller count:
#	if testing.Short() { t.Skip("crash loop: make test-all") }
# Nothing else is needed: make test passes -short, make test-all does not.

# RACE_QUICK: packages with concurrency of their own that stay quick under the
# race detector; make test-all runs the detector on every package.
RACE_QUICK := ./internal/bus/... ./internal/limits/... ./internal/enccache/... ./internal/jsonrpc/... \
	./internal/store/memstore/... ./internal/admin/... ./internal/auth/... ./internal/clikit/...

.PHONY: test
test: lint ## Everyday tests: vet, format, docs checks, every package with -short, race on RACE_QUICK (a few minutes)
	go test -short -count=1 ./...
	go test -short -race -count=1 $(RACE_QUICK)

.PHONY: lint
lint: ## The format check, go vet and scripts/check-docs.sh (README, Makefile and script checks)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	bash scripts/check-docs.sh

.PHONY: test-all
test-all: lint ## Everything CI runs (.ci/run): race on every package without -short (full counts, soak, crash loops, cluster kills, browser and outside clients), fuzzing, conformance
	go test -race -count=1 -timeout 15m ./...
	@# Tests that skip under the race detector (allocation counts: it allocates) run here without it.
	set -o pipefail; go test -count=1 -v -run 'Alloc' $$(grep -rl --include='*_test.go' 'if raceEnabled' . | xargs -n1 dirname | sort -u) | grep -E '^(--- |ok|FAIL|PASS)'
	bash scripts/test-extra.sh

.PHONY: sim
sim: ## Deterministic simulation (internal/sim), no race detector: SEEDS=N seeds from FIRST=1 (default 120), or SEED=N to rerun one with its trace
	@# -v for the summary (seeds, failures, simulated hours); the line per passing seed is left out.
	set -o pipefail; go test -count=1 -timeout 0 -v ./internal/sim -run 'TestSim$$|TestSimBudget$$' $(if $(SEED),-seed $(SEED) -simtrace,-seeds $(or $(SEEDS),120) -first $(or $(FIRST),1)) $(if $(SEED),,| grep -v ': end: ')

.PHONY: nemesis
nemesis: ## Randomized nemesis on 3 nats-server and 3 macpd processes (internal/cluster TestNemesis): DURATION=30m (default 60s), SEED=N to replay one
	MACP_NEMESIS_DURATION=$(or $(DURATION),60s) $(if $(SEED),MACP_NEMESIS_SEED=$(SEED)) go test -count=1 -timeout 0 -v -run 'TestNemesis$$' ./internal/cluster/

.PHONY: build
build: ## Build bin/macpd, bin/macpctl, bin/macpbench and the benchmark ceilings (echo-bench, disksync)
	go build -o bin/ ./cmd/...

.PHONY: install
install: ## Install macpd and macpctl into $(GOBIN) or, if unset, $(go env GOPATH)/bin (put it on PATH)
	go install ./cmd/macpd ./cmd/macpctl
	@bin=$$(go env GOBIN); bin=$${bin:-$$(go env GOPATH)/bin}; echo "installed macpd and macpctl in $$bin"; \
	  case ":$$PATH:" in *":$$bin:"*) ;; *) echo "note: $$bin is not on PATH; add it: export PATH=\"$$bin:\$$PATH\"";; esac

.PHONY: release
release: ## Static macpd and macpctl for linux and darwin on amd64 and arm64, image tarballs, SHA256SUMS in dist/ (docs/deploy.md)
	bash scripts/release.sh

.PHONY: image
image: ## The container image for this machine's architecture as dist/macpd-image-linux-ARCH.tar (no daemon, no registry)
	TARGETS="linux/$$(go env GOARCH)" IMAGES="linux/$$(go env GOARCH)" bash scripts/release.sh

.PHONY: image-smoke
image-smoke: ## Check the image tarball: user, entrypoint, revision label; run macpd --version from its layer
	cd deploy/image && go run . verify --tar ../../dist/macpd-image-linux-$$(go env GOARCH).tar --revision $$(git rev-parse HEAD)

.PHONY: run
run: ## Run macpd for local development: plaintext, dev identities, history durable in ./.macp-data (MACP_MEMORY_ONLY=1: in memory)
	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd

.PHONY: examples
examples: ## Run every program in examples/ against a running macpd (MACP_ADDR, default 127.0.0.1:50051); examples/polyglot has its own run.sh
	@set -e; for d in examples/*/; do [ -f $$d/main.go ] || continue; echo "--- $$d"; go run ./$$d; done
