# Training (package train, cmd/fleet-train; docs/TRAINING.md "Training in
# fleet"). The trainer's arithmetic runs in Debian's PyTorch
# (python3-torch, with OpenBLAS); tokenization and the GGUF are Go.
# `make test` runs a tiny training run (train/).
#
# `make lint-model` trains the demo's lint agent (`make demo` needs it; the
# first run trains it, later runs find it up to date):
#   1. the expert policies over the lint train split of the eval suite
#      (one defect per task) and of two training suites with several
#      defects per task (eval build --extra), their passed runs as records
#      (fleet-train expert-data),
#   2. a small Gemma 3 trained from scratch on them (fleet-train; cached in
#      models/ by the records' and settings' digest),
#   3. the model on the suite's held-out test split with llama.cpp and
#      strict decoding, graded; the score goes into its metadata.
# `make flywheel` goes on from there through the fleet
# (testdata/flywheel/canary.sh): a llama worker whose own model is the random
# 270M one (the base) serves the pushed lint agent; `enqueue eval canary`
# pushes the trained model, pushes the agent with a canary share naming it,
# runs the test split through the worker as one batch, splits the results
# by the model each job recorded and gates them as `enqueue eval compare
# --gate` does: a regression exits 1 saying why and removes the canary, a
# pass makes the new version the agent's model:.

TRAIN_DIR     := .build/train
TRAIN_DATA    := $(TRAIN_DIR)/lint-train.jsonl
TRAIN_MODEL   := models/fleet-lint-small.gguf
# The training suites with several defects per task (train split only;
# their seeds differ from the eval suite's, and a module's split never
# depends on the seed, so no test module is trained on).
TRAIN_MULTI_SEEDS ?= 7 8 9
TRAIN_MULTI   := $(foreach s,$(TRAIN_MULTI_SEEDS),$(TRAIN_DIR)/lint-multi-seed$(s).jsonl)
# More single-defect training suites. docs/TRAINING.md: with these, 2,253
# records and one epoch the model passed 43/45 test tasks (about 7 min of
# training on an idle machine) and fixes all four issues of the demo file;
# with seeds 2-4 only (1,727 records, 378 steps) 42/45, but on the demo
# file it fixed F401 and then repeated a code the file did not have; with
# TRAIN_SINGLE_SEEDS= TRAIN_MULTI_SEEDS="7 8" and 3 epochs (698 records),
# 40/45.
TRAIN_SINGLE_SEEDS ?= 2 3 4 5 6
TRAIN_SINGLE  := $(foreach s,$(TRAIN_SINGLE_SEEDS),$(TRAIN_DIR)/lint-single-seed$(s).jsonl)
TRAIN_SUITES  := $(EVAL_SUITE) $(TRAIN_SINGLE) $(TRAIN_MULTI)
# Shape and budget of the lint model (fleet-train flags; docs/TRAINING.md).
TRAIN_FLAGS   ?= -embedding 64 -blocks 6 -window 64 -ff 192 -heads 2 -max-len 3072 -batch-tokens 8192 -lr 3e-3 -epochs 1 -eval-every 100 -patience 6 -dev 0.03
# The random 270M model runs every turn to the limit (minutes per task on two
# cores): FLYWHEEL_BASE_LIMIT=N gives the base's share the first N test tasks
# only (0: all 45); compare then pairs those N. FLYWHEEL_LIMIT=N runs the
# canary's share on the first N (0: all).
FLYWHEEL_BASE_LIMIT ?= 0
FLYWHEEL_LIMIT ?= 0
TRAIN_PY_APT  := python3-torch python3-numpy libopenblas0-pthread

.PHONY: train-deps train-deps-pending flywheel flywheel-canary fleet-train lint-model lint-suites

train-deps: ## install PyTorch from Debian for fleet-train (root; python3-torch, OpenBLAS)
	@bash mk/demo-deps.sh --wait; \
	/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null && exit 0; \
	bash mk/demo-deps.sh $(TRAIN_PY_APT) || exit 1; \
	/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null && exit 0; \
	echo "fleet-train: PyTorch is missing: sudo apt-get install $(TRAIN_PY_APT)" >&2; exit 1

# train-deps-pending: train-deps now, unless make demo's background install
# of PyTorch is still running (then train-deps waits for it later, just
# before training): a machine without PyTorch fails before the suites.
train-deps-pending:
	@bash mk/demo-deps.sh --pending || $(MAKE) --no-print-directory train-deps

fleet-train: llama-headers ## build bin/fleet-train (trainer, expert data, eval on a suite split)
	$(GO) build -tags llama -o $(BIN)/fleet-train ./cmd/fleet-train

$(TRAIN_DIR)/lint-multi-seed%.jsonl: eval/build.go eval/build_pick.go | enqueue-bin
	@mkdir -p $(TRAIN_DIR)
	$(EVAL_BUILD) --seed $* --ops lint --per-split train=1200,dev=0,test=0 --extra 3 -o $@

$(TRAIN_DIR)/lint-single-seed%.jsonl: eval/build.go eval/build_pick.go | enqueue-bin
	@mkdir -p $(TRAIN_DIR)
	$(EVAL_BUILD) --seed $* --ops lint --per-split train=1200,dev=0,test=0 -o $@

# The records: rebuilt when a suite changes (the expert's runs on a suite
# are deterministic, so the same suites give the same records and the
# trainer finds its model up to date).
$(TRAIN_DATA): $(TRAIN_SUITES) | fleet-train monty
	@echo "lint-model: machine load $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(BIN)/fleet-train expert-data -suite $(shell echo $(TRAIN_SUITES) | tr ' ' ',') -split train -op lint -o $@

# The suites are independent and each build is one Python process: build
# them a core each (a sub-make with -j), before the records need them.
lint-suites:
	@$(MAKE) --no-print-directory --output-sync=target -j$$(nproc) $(TRAIN_SUITES)

lint-model: train-deps-pending fleet-train monty model-tiny-gemma3 lint-suites $(TRAIN_DATA) train-deps ## train the demo's lint agent (cached in models/) and grade it on the test split
	$(BIN)/fleet-train -data $(TRAIN_DATA) -vocab $(MODEL_TINY_GEMMA3) -o $(TRAIN_MODEL) -name fleet-lint-small $(TRAIN_FLAGS)
	@if [ ! -f $(TRAIN_DIR)/eval-trained.json ] || [ $(TRAIN_MODEL) -nt $(TRAIN_DIR)/eval-trained.json ]; then \
	  $(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split test -op lint -model $(TRAIN_MODEL) -context 8192 -record -json $(TRAIN_DIR)/eval-trained.json; \
	else echo "lint-model: $(TRAIN_MODEL) was graded already ($(TRAIN_DIR)/eval-trained.json)"; fi

FLYWHEEL_CANARY = GO=$(GO) SUITE=$(EVAL_SUITE) MODEL=$(TRAIN_MODEL) BASE=$(MODEL_FULL) LIMIT=$(FLYWHEEL_LIMIT) \
	BASE_LIMIT=$(FLYWHEEL_BASE_LIMIT) OUT=$(TRAIN_DIR)/canary bash testdata/flywheel/canary.sh

flywheel: lint-model model monty llama-headers ## lint-model, then a canary share of the lint agent's jobs through a worker on the random 270M model, the gate and the promotion
	$(FLYWHEEL_CANARY)

flywheel-canary: model monty llama-headers eval-suite ## flywheel's last step alone, on the lint model already trained (models/fleet-lint-small.gguf)
	@test -f $(TRAIN_MODEL) || { echo "flywheel-canary: $(TRAIN_MODEL) is missing: make lint-model" >&2; exit 2; }
	$(FLYWHEEL_CANARY)

TEST_DEPS += train-deps
