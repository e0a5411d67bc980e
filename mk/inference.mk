# Local inference: the cgo build of llama.cpp through github.com/ollama/ollama/llama
# (docs/INFERENCE.md §1) and the generated GGUF models.
#
# The vendored llama.cpp needs three headers the Go module zip leaves out:
# nlohmann/json.hpp and stb/stb_image.h come from apt (nlohmann-json3-dev,
# libstb-dev); miniaudio.h is copied from the malgo module into .build/include.
#
# The CGO_* variables are exported for every target of this Makefile so that
# `make test`, `make vet` and `make bench` share one Go build cache key: any
# difference recompiles all of llama.cpp (~2.5 min), and a build without
# -march gets kernels about 10x slower.

MALGO     := github.com/gen2brain/malgo@v0.11.24
# git-ignored; rebuilt on every fresh checkout
CGO_INC   := $(CURDIR)/.build/include
MINIAUDIO := $(CGO_INC)/miniaudio/miniaudio.h
# portable default; for the build host only: make ARCHFLAGS='-O3 -march=native'
# (on CPUs with AMX add -mno-amx-tile -mno-amx-int8 -mno-amx-bf16: the module
# build leaves out ggml's AMX sources and would not link; docs/PERFORMANCE.md)
ARCHFLAGS ?= -O3 -march=x86-64-v3
CXX       ?= g++

export CGO_ENABLED  := 1
export CGO_CPPFLAGS := -I$(CGO_INC)
# -w: llama.cpp's own compiler warnings are not ours to fix and would bury
# the output of `make demo` and `make test`.
export CGO_CFLAGS   := $(ARCHFLAGS) -w
export CGO_CXXFLAGS := $(ARCHFLAGS) -w
# Keep ggml's backend scan away from any installed Ollama libraries
# (docs/INFERENCE.md §1).
export OLLAMA_LIBRARY_PATH :=

MODELS_DIR  := models
MODEL_FULL  := $(MODELS_DIR)/functiongemma-270m-random-q8_0.gguf
MODEL_TINY  := $(MODELS_DIR)/tiny.gguf
GENMODEL    := $(GO) run ./internal/cmd/genmodel
# Weight type of `make model`: q8_0 (default), f16 or q4_0.
MODEL_TYPE  ?= q8_0

TEST_DEPS  += llama-headers model-tiny
BENCH_DEPS += llama-headers model model-tiny
BENCH_TARGETS += bench-inference

.PHONY: llama-headers check-llama-headers model model-tiny bench-inference

llama-headers: check-llama-headers $(MINIAUDIO) ## check/assemble the headers the llama.cpp cgo build needs

# On a fresh Debian/Ubuntu machine, root installs the missing packages here so
# that `make demo` and `make test` need no separate set-up step.
LLAMA_APT := nlohmann-json3-dev libstb-dev g++
HEADER_PROBE := printf '\#include <nlohmann/json.hpp>\n\#include <stb/stb_image.h>\nint main(){}\n' | $(CXX) -std=c++17 -fsyntax-only -x c++ - 2>/dev/null

check-llama-headers:
	@$(HEADER_PROBE) && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "llama.cpp build: installing $(LLAMA_APT)" >&2; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(LLAMA_APT); } >/dev/null; \
	  $(HEADER_PROBE) && exit 0; \
	fi; \
	echo "llama.cpp build: missing C++ headers nlohmann/json.hpp or stb/stb_image.h;" >&2; \
	echo "  install them with: sudo apt-get install $(LLAMA_APT)" >&2; exit 1

$(MINIAUDIO):
	$(GO) mod download $(MALGO)
	mkdir -p $(@D)
	cp "$$($(GO) list -m -f '{{.Dir}}' $(MALGO))/miniaudio.h" $@
	chmod u+w $@

model: ## generate the random-weight FunctionGemma-270M-shaped GGUF (MODEL_TYPE=q8_0|f16|q4_0)
	@if [ "$(MODEL_TYPE)" = q8_0 ]; then out=$(MODEL_FULL); \
	  else out=$(MODELS_DIR)/functiongemma-270m-random-$(MODEL_TYPE).gguf; fi; \
	  $(GENMODEL) -variant full -type $(MODEL_TYPE) -o $$out

model-tiny: ## generate the tiny test GGUF (same architecture and tokenizer, 0.6 MiB)
	@$(GENMODEL) -variant tiny -o $(MODEL_TINY)

bench-inference: llama-headers model model-tiny ## llama.cpp inference figures on the 270M Q8_0 model
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./inference/llama/ ./internal/membw/
