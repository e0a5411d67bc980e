# Evals (issue 22): task suites built from Debian's Python sources, graded
# with the real tools (eval/, docs/EVALS.md). `make eval-suite` builds the
# suite (never committed; rebuilt when the builder changes); `make eval`
# runs each operation's dev split through the fleet with the expert
# policies and with the 270M random-weights model on llama.cpp (strict
# decoding); `make eval-agreement` compares run_linter with pycodestyle and
# pyflakes over the whole standard library. A small suite runs in
# `make test` (eval/, internal/e2e/eval_test.go). `make eval` takes
# EVAL_LIMIT=N (the first N dev tasks of each operation), EVAL_SLOTS
# (worker slots, default 2) and EVAL_TIMEOUT (default 60m).

EVAL_DIR   := .build/evals
EVAL_SEED  ?= 1
EVAL_SUITE := $(EVAL_DIR)/debian-py-v1-seed$(EVAL_SEED).jsonl
# Every suite build (the eval suite and the training suites of mk/train.mk
# and mk/trained-agents.mk) runs one enqueue binary and shares one survey
# cache: other seeds survey the same upstream files (the suites are the same
# with or without it).
EVAL_BUILD := $(BIN)/enqueue eval build --survey-cache $(EVAL_DIR)/survey-cache

.PHONY: enqueue-bin
enqueue-bin:
	@$(GO) build -o $(BIN)/enqueue ./cmd/enqueue

.PHONY: eval eval-suite eval-agreement eval-expert

eval-suite: $(EVAL_SUITE) ## build the eval suite from Debian's python3.11, python3-toolz and python3-boltons (seed EVAL_SEED)

$(EVAL_SUITE): $(wildcard eval/py/*.py) eval/build.go eval/build_pick.go eval/suite.go | enqueue-bin
	@mkdir -p $(EVAL_DIR)
	$(EVAL_BUILD) --seed $(EVAL_SEED) -o $@

eval: monty llama-headers model eval-suite ## dev split of every op through the fleet: expert policies, then the 270M random model (strict)
	GO=$(GO) EVAL_SUITE=$(EVAL_SUITE) EVAL_OUT=$(EVAL_DIR)/out bash testdata/eval/eval.sh

eval-expert: monty eval-suite ## the expert policies on the dev and test splits, in process
	$(GO) run ./cmd/enqueue eval local $(EVAL_SUITE) --split dev
	$(GO) run ./cmd/enqueue eval local $(EVAL_SUITE) --split test

eval-agreement: monty ## run_linter vs pycodestyle/pyflakes over python3.11's standard library, per code
	$(GO) run ./cmd/enqueue eval agreement
