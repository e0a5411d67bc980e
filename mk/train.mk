# Training (package train, cmd/fleet-train; docs/TRAINING.md "Training in
# fleet"). The trainer's arithmetic runs in Debian's PyTorch
# (python3-torch, with OpenBLAS); tokenization and the GGUF are Go.
# `make test` runs a tiny training run (train/); `make flywheel` runs the
# whole loop on the eval suite's lint split:
#   1. the expert policies over the train split, their passed runs as
#      training records (fleet-train expert-data),
#   2. a small Gemma 3 trained from scratch on them (fleet-train, cached
#      in models/ by the records' digest),
#   3. the trained model and the random 270M model on the test split with
#      llama.cpp and strict decoding, graded (fleet-train eval).

TRAIN_DIR     := .build/train
TRAIN_DATA    := $(TRAIN_DIR)/lint-train.jsonl
TRAIN_MODEL   := models/fleet-lint-small.gguf
# Shape and budget of the flywheel's model (fleet-train flags).
TRAIN_FLAGS   ?= -embedding 64 -blocks 4 -ff 192 -heads 2 -max-len 2048 -batch-tokens 4096 -lr 4e-3 -epochs 12 -eval-every 20 -patience 4
TRAIN_PY_APT  := python3-torch python3-numpy libopenblas0-pthread

.PHONY: train-deps flywheel fleet-train

train-deps: ## install PyTorch from Debian for fleet-train (root; python3-torch, OpenBLAS)
	@/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "fleet-train: installing $(TRAIN_PY_APT)" >&2; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TRAIN_PY_APT); } >/dev/null; \
	  /usr/bin/python3 -c 'import torch, numpy' && exit 0; \
	fi; \
	echo "fleet-train: PyTorch is missing: sudo apt-get install $(TRAIN_PY_APT)" >&2; exit 1

fleet-train: llama-headers ## build bin/fleet-train (trainer, expert data, eval on a suite split)
	$(GO) build -tags llama -o $(BIN)/fleet-train ./cmd/fleet-train

flywheel: train-deps fleet-train monty model model-tiny-gemma3 eval-suite ## expert runs -> records -> train a small lint model -> eval it and the random model on the test split
	@mkdir -p $(TRAIN_DIR)
	@echo "flywheel: machine load $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(BIN)/fleet-train expert-data -suite $(EVAL_SUITE) -split train -op lint -o $(TRAIN_DATA)
	$(BIN)/fleet-train -data $(TRAIN_DATA) -vocab $(MODEL_TINY_GEMMA3) -o $(TRAIN_MODEL) -name fleet-lint-small $(TRAIN_FLAGS)
	$(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split test -op lint -model $(TRAIN_MODEL) -record -json $(TRAIN_DIR)/eval-trained.json
	$(BIN)/fleet-train eval -suite $(EVAL_SUITE) -split test -op lint -model $(MODEL_FULL) -json $(TRAIN_DIR)/eval-random.json
TEST_DEPS += train-deps
