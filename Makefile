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
