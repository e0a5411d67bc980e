# fleet's Makefile. `make help` lists the targets.
#
# Component-specific targets live in mk/*.mk (one file per area) and add
# their prerequisites to TEST_DEPS / BENCH_DEPS / DEMO_DEPS.
SHELL := /bin/bash
.DEFAULT_GOAL := help
GO ?= go

TEST_DEPS :=
BENCH_DEPS :=
# Targets `make bench` runs in order; each mk/*.mk appends its own.
BENCH_TARGETS :=
# Extra flags for `go test` (for example GOTESTFLAGS=-short).
GOTESTFLAGS ?=

include $(sort $(wildcard mk/*.mk))

.PHONY: help test vet bench fmt clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Packages that link llama.cpp sit behind the llama build tag (beside
# inference/llama): cmd/worker's llama backend, the ollama peer, and the
# trainer (it tokenizes with llama.cpp). `go vet ./...` and `go test ./...`
# without the tag leave them out; these lines take them in.
LLAMA_PKGS := ./cmd/worker ./internal/ollamapeer ./train/... ./cmd/fleet-train

vet: $(TEST_DEPS) ## go vet every package (and the llama-tagged ones with llama.cpp)
	$(GO) vet ./...
	$(GO) vet -tags llama $(LLAMA_PKGS)

test: $(TEST_DEPS) ## vet, then run every test with the race detector
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags llama $(LLAMA_PKGS)
	$(GO) test -race -count=1 $(GOTESTFLAGS) ./...
	$(GO) test -race -count=1 $(GOTESTFLAGS) -tags llama -run Llama ./cmd/worker
	$(GO) test -race -count=1 $(GOTESTFLAGS) -tags llama ./train/... ./cmd/fleet-train

bench: $(BENCH_DEPS) ## run the benchmarks and print their figures (ratios against in-process baselines)
	@for t in $(BENCH_TARGETS); do $(MAKE) --no-print-directory $$t || exit 1; done

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

clean: ## remove build outputs, fetched binaries and generated models
	rm -rf bin .build
