# The demo and the binaries: owned by the worker/enqueue work (issue 5).
# `make build` builds bin/worker (with the llama.cpp backend, so it needs the
# cgo flags and headers of mk/inference.mk) and bin/enqueue. `make demo` runs
# testdata/demo/demo.sh: a real lint job end to end on an embedded NATS server
# with the generated random-weight model. When the llama.cpp headers are
# missing it falls back, loudly, to the scripted backend
# (DEMO_BACKEND=scripted forces that). The prerequisites are named here:
# mk/monty.mk appends to DEMO_DEPS only after this file is read.

BIN ?= bin

.PHONY: build demo demo-deps

# Every Debian package the first `make demo` needs, for root on a machine
# that lacks some (mk/demo-deps.sh): the llama.cpp build's headers, the
# graders and the Python sources the lint tasks come from in one apt call;
# PyTorch, most of the download, in the background while llama.cpp
# compiles (make train-deps waits for it).
DEMO_APT = $(LLAMA_APT) python3 python3-pycodestyle python3-pyflakes python3-pytest \
	python3-toolz python3-boltons libpython3.11-stdlib

demo-deps: ## install the Debian packages `make demo` needs that are missing (root; PyTorch in the background)
	@bash mk/demo-deps.sh $(DEMO_APT) -- $(TRAIN_PY_APT)

build: llama-headers monty ## build bin/worker (llama.cpp backend included) and bin/enqueue
	$(GO) build -tags llama -o $(BIN)/worker ./cmd/worker
	$(GO) build -o $(BIN)/enqueue ./cmd/enqueue

demo: demo-deps monty ## run a real lint job end to end: worker + embedded NATS + llama.cpp, the lint agent fleet trained (trained on the first run), enqueue, diff
	@if [ -z "$${FLEET_MODEL_PATH:-}" ] && [ "$${DEMO_MODEL:-trained}" != random ] && [ "$${DEMO_BACKEND:-llama}" = llama ]; then \
		$(MAKE) --no-print-directory lint-model || { echo "demo: training the lint agent failed (see above)" >&2; exit 1; }; \
	fi
	@if [ -z "$${FLEET_MODEL_PATH:-}" ] && [ "$${DEMO_MODEL:-trained}" = random ] && ! $(MAKE) --no-print-directory model; then \
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

# bench-jobrun: the worker's processor (jobrun) on the real agents,
# Cairn and Monty with the scripted model: the no-op job (submit_result only)
# and a one-turn lint job (run_linter, then submit_result), one at a time
# and on 2 slots; FLEET_BENCH_JOBS jobs per run (default 500), 3 runs, then
# the ranges and where the lint job's time goes.
bench-jobrun: monty ## one job in the worker's processor: no-op and one-turn lint job p50/p99, jobs/s on 2 slots, phases
	@echo "jobrun: machine load before the run: $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	@set -o pipefail; out=$$(mktemp); trap 'rm -f '"$$out" EXIT; \
	$(GO) test -run '^$$' -bench 'BenchmarkProcess' -benchtime $${FLEET_BENCH_JOBS:-500}x -count 3 ./jobrun/ | tee "$$out"; \
	echo "jobrun: machine load after the run: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	echo "jobrun: ranges over the 3 runs (p50/p99 per job; cpu-ms: this process and its Monty children):"; \
	awk -v UNITS="p50-ms p99-ms jobs/s cpu-ms load" -f mk/benchrange.awk "$$out"; \
	echo "jobrun: where the one-turn lint job's time goes (ms per job):"; \
	awk -v ONLY='LintOneTurn$$' -v UNITS="prepare-ms run_linter-ms submit_result-ms tail-ms loop-ms monty-wall-ms monty-interp-ms monty-cpu-ms" -f mk/benchrange.awk "$$out"
