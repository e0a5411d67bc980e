# The other agents' small models, trained as `make lint-model` trains the
# lint agent's (mk/train.mk; docs/TRAINING.md "The other agents"):
#
#   make docstring-model   the docstring agent: expert runs on the eval
#                          suite's docstring train split and on more
#                          docstring-only training suites (other seeds,
#                          other functions of the same train modules), a
#                          model trained on them, graded on the test split
#   make tests-model       a model each for the test and sample_data agents
#                          (few tasks exist: functions of packaged projects
#                          whose own tests use them), graded on their test
#                          and dev splits
#
# Both are cached like the lint model: the same suites give the same
# records, and fleet-train finds its model up to date. (This file is named to
# come after mk/train.mk, whose TRAIN_DIR it uses: the Makefile includes
# mk/*.mk in name order.)

DOC_SEEDS    ?= 11 12 13 14 15 16
DOC_SUITES   := $(EVAL_SUITE) $(foreach s,$(DOC_SEEDS),$(TRAIN_DIR)/docstring-seed$(s).jsonl)
DOC_DATA     := $(TRAIN_DIR)/docstring-train.jsonl
DOC_MODEL    := models/fleet-docstring-small.gguf
DOC_FLAGS    ?= -embedding 64 -blocks 6 -window 64 -ff 192 -heads 2 -max-len 3072 -batch-tokens 8192 -lr 3e-3 -epochs 1 -eval-every 100 -patience 6 -dev 0.03

TESTS_SEEDS  ?= 31 32 33 34 35 36 37 38 39 40
TESTS_SUITES := $(EVAL_SUITE) $(foreach s,$(TESTS_SEEDS),$(TRAIN_DIR)/tests-seed$(s).jsonl)
TESTS_OPS    := test sample_data
TESTS_DATA   := $(foreach o,$(TESTS_OPS),$(TRAIN_DIR)/$(o)-train.jsonl)
TESTS_FLAGS  ?= -embedding 64 -blocks 6 -window 64 -ff 192 -heads 2 -max-len 4096 -batch-tokens 8192 -lr 3e-3 -epochs 6 -eval-every 20 -patience 6 -dev 0.05

.PHONY: docstring-model tests-model docstring-suites

$(TRAIN_DIR)/docstring-seed%.jsonl: eval/build.go eval/build_pick.go | enqueue-bin
	@mkdir -p $(TRAIN_DIR)
	$(EVAL_BUILD) --seed $* --ops docstring --per-split train=1200,dev=0,test=0 -o $@

$(TRAIN_DIR)/tests-seed%.jsonl: eval/build.go eval/build_tests.go | enqueue-bin
	@mkdir -p $(TRAIN_DIR)
	$(EVAL_BUILD) --seed $* --ops test,sample_data --per-split train=1200,dev=0,test=0 -o $@

$(DOC_DATA): $(DOC_SUITES) | fleet-train monty
	@echo "docstring-model: machine load $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(BIN)/fleet-train expert-data -suite $(shell echo $(DOC_SUITES) | tr ' ' ',') -split train -op docstring -o $@

# one agent per file: the trainer refuses records of several agent versions
$(TRAIN_DIR)/test-train.jsonl $(TRAIN_DIR)/sample_data-train.jsonl: $(TRAIN_DIR)/%-train.jsonl: $(TESTS_SUITES) | fleet-train monty
	@echo "tests-model: machine load $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(BIN)/fleet-train expert-data -suite $(shell echo $(TESTS_SUITES) | tr ' ' ',') -split train -op $* -o $@

docstring-suites:
	@$(MAKE) --no-print-directory --output-sync=target -j$$(nproc) $(DOC_SUITES)

docstring-model: train-deps fleet-train monty model-tiny-gemma3 docstring-suites $(DOC_DATA) ## train the docstring agent's small model (cached in models/) and grade it on the test split
	$(BIN)/fleet-train -data $(DOC_DATA) -vocab $(MODEL_TINY_GEMMA3) -o $(DOC_MODEL) -name fleet-docstring-small $(DOC_FLAGS)
	@if [ ! -f $(TRAIN_DIR)/eval-docstring.json ] || [ $(DOC_MODEL) -nt $(TRAIN_DIR)/eval-docstring.json ]; then \
	  $(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split test -op docstring -model $(DOC_MODEL) -context 8192 -record -json $(TRAIN_DIR)/eval-docstring.json; \
	else echo "docstring-model: $(DOC_MODEL) was graded already ($(TRAIN_DIR)/eval-docstring.json)"; fi

tests-model: train-deps fleet-train monty model-tiny-gemma3 $(TESTS_DATA) ## train the test and sample_data agents' small models (cached in models/) and grade them on their test and dev splits
	@set -e; for op in $(TESTS_OPS); do \
	  m=models/fleet-$$op-small.gguf; \
	  $(BIN)/fleet-train -data $(TRAIN_DIR)/$$op-train.jsonl -vocab $(MODEL_TINY_GEMMA3) -o $$m -name fleet-$$op-small $(TESTS_FLAGS); \
	  if [ ! -f $(TRAIN_DIR)/eval-$$op.json ] || [ $$m -nt $(TRAIN_DIR)/eval-$$op.json ]; then \
	    $(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split dev -op $$op -model $$m -context 8192 -json $(TRAIN_DIR)/eval-$$op-dev.json; \
	    $(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split test -op $$op -model $$m -context 8192 -record -json $(TRAIN_DIR)/eval-$$op.json; \
	  else echo "tests-model: $$m was graded already ($(TRAIN_DIR)/eval-$$op.json)"; fi; \
	done
