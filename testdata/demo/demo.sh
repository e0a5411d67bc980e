#!/usr/bin/env bash
# The fleet demo (run it with `make demo`, which exports the llama.cpp cgo
# flags and fetches Monty): build the binaries, start a worker with an
# embedded NATS server on a free port in a temporary folder, enqueue a lint job
# on testdata/demo/src/inventory/stock.py, show its events and its result with
# the diff, then stop the worker with SIGTERM.
#
# The model is the lint agent fleet trained itself (models/fleet-lint-small.gguf:
# `make demo` runs `make lint-model` first, which trains it on the first run
# and finds it up to date after that).
#
# Environment: GO (go), DEMO_BACKEND (llama, or scripted to skip llama.cpp),
# DEMO_MODEL (trained, or random for the generated random-weight 270M model),
# FLEET_MODEL_PATH (a real FunctionGemma GGUF instead; absolute, or relative
# to the directory the demo was started from), DEMO_MAX_TURNS (8),
# DEMO_KEEP=1 keeps the temporary folder.
set -euo pipefail

GO=${GO:-go}
START_DIR=$PWD
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
if [ -n "${FLEET_MODEL_PATH:-}" ]; then
	case "$FLEET_MODEL_PATH" in
	/*) MODEL=$FLEET_MODEL_PATH ;;
	*) MODEL=$START_DIR/$FLEET_MODEL_PATH ;;
	esac
elif [ "${DEMO_MODEL:-trained}" = random ]; then
	MODEL=$ROOT/models/functiongemma-270m-random-q8_0.gguf
else
	MODEL=$ROOT/models/fleet-lint-small.gguf
fi
BACKEND=${DEMO_BACKEND:-llama}
MAX_TURNS=${DEMO_MAX_TURNS:-8}
SAMPLE=testdata/demo/src/inventory/stock.py

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
banner() {
	echo "################################################################################"
	for l in "$@"; do echo "# $l"; done
	echo "################################################################################"
}

mkdir -p bin
say "building bin/worker and bin/enqueue"
if [ "$BACKEND" = llama ]; then
	if ! "$GO" build -tags llama -o bin/worker ./cmd/worker; then
		BACKEND=scripted
		banner "THE LLAMA.CPP BACKEND DID NOT BUILD (see the errors above)." \
			"FALLING BACK TO THE SCRIPTED BACKEND: the 'model' replays testdata/demo/scripts/lint.yaml." \
			"Nothing below is model inference."
	fi
fi
if [ "$BACKEND" = scripted ]; then
	"$GO" build -o bin/worker ./cmd/worker
	banner "BACKEND: SCRIPTED. The worker is built without llama.cpp (no -tags llama) and its" \
		"'model' replays testdata/demo/scripts/lint.yaml: the tools, sandbox, workspace and queue" \
		"are real, the model turns are not. Install g++, nlohmann-json3-dev and libstb-dev for llama.cpp."
fi
"$GO" build -o bin/enqueue ./cmd/enqueue

TMP=$(mktemp -d "${TMPDIR:-/tmp}/fleet-demo.XXXXXX")
WORKER_PID=""
cleanup() {
	if [ -n "$WORKER_PID" ] && kill -0 "$WORKER_PID" 2>/dev/null; then
		kill -TERM "$WORKER_PID" 2>/dev/null || true
		wait "$WORKER_PID" 2>/dev/null || true
	fi
	if [ "${DEMO_KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

cat >"$TMP/fleet.yaml" <<EOF
nats:
  embedded:
    listen: 127.0.0.1:0        # any free port
    store_dir: $TMP/nats
worker:
  slots: 1
  agents_dir: $ROOT/agents
  workspace_dir: $TMP/workspaces
  name: demo-worker
model:
  backend: $BACKEND
  path: $MODEL
  scripted:
    script: $ROOT/testdata/demo/scripts/lint.yaml
monty:
  binary: $ROOT/.build/monty/monty
queue:
  drain_grace: 20s
EOF
if [ "$BACKEND" = llama ]; then
	[ -f "$MODEL" ] || { echo "demo: model $MODEL is missing: run make lint-model (or make model for DEMO_MODEL=random, or check FLEET_MODEL_PATH)" >&2; exit 1; }
	# What the file says it is (fleet's generator writes general.description).
	WHAT=$("$GO" run ./internal/cmd/genmodel -describe "$MODEL" 2>&1) || WHAT="(could not read the file: $WHAT)"
	case "$WHAT" in
	*"trained by fleet-train"*)
		RANDOM_WEIGHTS=0
		# the random 270M model's score on the same split, when make flywheel measured it here
		VS="the random 270M model: not measured on this machine (make flywheel measures it; docs/TRAINING.md has the figure)"
		RANDOM_RUN=.build/train/canary/base.json # make flywheel's base share
		[ -f "$RANDOM_RUN" ] || RANDOM_RUN=.build/train/eval-random.json # before the canary step
		if [ -f "$RANDOM_RUN" ]; then
			VS="the random 270M model: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(", ".join("%s %d/%d" % (s["op"], s["passed"], s["tasks"]) for s in r["summary"]), "on the", r["split"], "split")' "$RANDOM_RUN" 2>/dev/null || echo unreadable)"
		fi
		banner "MODEL: $MODEL" "  $WHAT" \
			"A small lint agent fleet trained itself (make lint-model): the expert policies' graded runs" \
			"on the eval suite's train split, a Gemma 3 trained from scratch on CPU, graded on the" \
			"held-out test split with llama.cpp and strict decoding (docs/TRAINING.md)." \
			"Compare: $VS." \
			"The random-weight 270M model stays for speed figures: DEMO_MODEL=random make demo" ;;
	*"random weights"*)
		RANDOM_WEIGHTS=1
		banner "MODEL: $MODEL" "  $WHAT" \
			"This GGUF was GENERATED with RANDOM WEIGHTS (make model): FunctionGemma-270M's shape" \
			"and the vocabulary named above. Strict mode keeps every tool call grammar-valid, but" \
			"its choices are MEANINGLESS: expect odd calls, a failed job or an empty diff. Watch the" \
			"machinery instead: the figures after the result say what was measured." \
			"For real answers point the worker at a real FunctionGemma GGUF:" \
			"  model.path in the worker's YAML config, or FLEET_MODEL_PATH=/path/model.gguf make demo" ;;
	*)
		RANDOM_WEIGHTS=0
		banner "MODEL: $MODEL (from FLEET_MODEL_PATH)" "  $WHAT" ;;
	esac
fi

say "starting the worker (backend $BACKEND, embedded NATS, data in $TMP)"
# The worker reads model.path from the config; FLEET_MODEL_PATH would also do.
FLEET_MODEL_PATH= bin/worker -config "$TMP/fleet.yaml" -ready-file "$TMP/ready" -log-format text >"$TMP/worker.log" 2>&1 &
WORKER_PID=$!
for _ in $(seq 600); do
	[ -f "$TMP/ready" ] && break
	if ! kill -0 "$WORKER_PID" 2>/dev/null; then
		echo "demo: the worker exited during start-up:" >&2
		cat "$TMP/worker.log" >&2
		WORKER_PID=""
		exit 1
	fi
	sleep 0.1
done
[ -f "$TMP/ready" ] || { echo "demo: the worker did not become ready in 60s" >&2; cat "$TMP/worker.log" >&2; exit 1; }
URL=$(cat "$TMP/ready")
grep -E 'embedded NATS|model backend ready|worker serving' "$TMP/worker.log" | sed 's/^/  worker: /' || true

say "enqueue run lint $SAMPLE --max-turns $MAX_TURNS"
set +e
bin/enqueue --nats-url "$URL" run lint "$SAMPLE" --max-turns "$MAX_TURNS" --timeout 4m
RC=$?
set -e
echo "(enqueue exit code $RC: 0 succeeded, 1 the job failed; the demo itself worked either way)"

say "stopping the worker (SIGTERM: drain, then exit)"
kill -TERM "$WORKER_PID"
wait "$WORKER_PID" || true
WORKER_PID=""
grep -E 'signal received|drained' "$TMP/worker.log" | sed 's/^/  worker: /' || true

if [ "$BACKEND" = llama ] && [ "${RANDOM_WEIGHTS:-0}" = 1 ]; then
	echo
	banner "Reminder: the model above has RANDOM WEIGHTS; its tool calls are valid but meaningless." \
		"Use a real FunctionGemma GGUF via model.path or FLEET_MODEL_PATH for real fixes."
fi
if [ "$BACKEND" = scripted ]; then
	banner "This run used the SCRIPTED backend, not llama.cpp."
fi
[ "$RC" -le 1 ] || exit "$RC"
