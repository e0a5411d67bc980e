# The demo and the binaries: owned by the worker/enqueue work (issue 5).
# `make build` builds bin/worker (with the llama.cpp backend, so it needs the
# cgo flags and headers of mk/inference.mk) and bin/enqueue. `make demo` runs
# testdata/demo/demo.sh: a real lint job end to end on an embedded NATS server
# with the generated random-weight model. When the llama.cpp headers are
# missing it falls back, loudly, to the scripted backend
# (DEMO_BACKEND=scripted forces that). The prerequisites are named here:
# mk/monty.mk appends to DEMO_DEPS only after this file is read.

BIN ?= bin

.PHONY: build demo

build: llama-headers monty ## build bin/worker (llama.cpp backend included) and bin/enqueue
	$(GO) build -tags llama -o $(BIN)/worker ./cmd/worker
	$(GO) build -o $(BIN)/enqueue ./cmd/enqueue

demo: monty ## run a real lint job end to end: worker + embedded NATS + llama.cpp, enqueue, diff
	@if [ -z "$${FLEET_MODEL_PATH:-}" ] && ! $(MAKE) --no-print-directory model; then \
		echo "demo: THE REAL GEMMA 3 VOCABULARY COULD NOT BE FETCHED (see above): building the model with the SYNTHETIC vocabulary" >&2; \
		$(MAKE) --no-print-directory model VOCAB=synthetic; \
	fi
	@backend=$${DEMO_BACKEND:-llama}; \
	if [ "$$backend" = llama ] && ! $(MAKE) --no-print-directory llama-headers; then \
		echo "demo: the llama.cpp build cannot work here (see above): USING THE SCRIPTED BACKEND INSTEAD" >&2; \
		backend=scripted; \
	fi; \
	GO=$(GO) DEMO_BACKEND=$$backend bash testdata/demo/demo.sh

BENCH_TARGETS += bench-jobrun

.PHONY: bench-jobrun

bench-jobrun: ## per-job lifecycle cost around the loop (workspace, overlay, Monty submit, diff)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./internal/jobrun/
