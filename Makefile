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

.PHONY: test
test: ## Run vet, the format check and all tests (race detector on)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	go test -race -count=1 ./...
	@# Tests that skip under the race detector (allocation counts: it allocates) run here without it.
	set -o pipefail; go test -count=1 -v -run 'Alloc' $$(grep -rl --include='*_test.go' 'if raceEnabled' . | xargs -n1 dirname | sort -u) | grep -E '^(--- |ok|FAIL|PASS)'

.PHONY: sim
sim: ## Deterministic simulation (internal/sim), no race detector: SEEDS=N seeds from FIRST=1 (default 120), or SEED=N to rerun one with its trace
	@# -v for the summary (seeds, failures, simulated hours); the line per passing seed is left out.
	set -o pipefail; go test -count=1 -timeout 0 -v ./internal/sim -run 'TestSim$$' $(if $(SEED),-seed $(SEED) -simtrace,-seeds $(or $(SEEDS),120) -first $(or $(FIRST),1)) $(if $(SEED),,| grep -v ': end: ')

.PHONY: build
build: ## Build bin/macpd, bin/macpctl, bin/macpbench and the benchmark ceilings (echo-bench, disksync)
	go build -o bin/ ./cmd/...

.PHONY: run
run: ## Run macpd for local development: plaintext, dev identities, history durable in ./.macp-data (MACP_MEMORY_ONLY=1: in memory)
	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd

.PHONY: examples
examples: ## Run every program in examples/ against a running macpd (MACP_ADDR, default 127.0.0.1:50051)
	@set -e; for d in examples/*/; do echo "--- $$d"; go run ./$$d; done
