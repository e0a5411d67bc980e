#!/usr/bin/env bash
# make eval: each operation's dev split of the eval suite, run through the
# fleet twice on one embedded NATS server: with the expert policies
# (model.backend: expert, the ceiling of the tools) and with the generated
# 270M random-weights model on local llama.cpp with strict decoding. Prints
# both reports and their task-by-task comparison; the runs stay in the
# fleet_evals bucket of the store in $EVAL_OUT/nats and as JSON in $EVAL_OUT.
set -euo pipefail

GO=${GO:-go}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SUITE=${EVAL_SUITE:?EVAL_SUITE: the suite file}
OUT=${EVAL_OUT:-.build/evals/out}
SPLIT=${EVAL_SPLIT:-dev}
LIMIT=${EVAL_LIMIT:-0}
SLOTS=${EVAL_SLOTS:-2}
MODEL=${FLEET_MODEL_PATH:-$ROOT/models/functiongemma-270m-random-q8_0.gguf}
TIMEOUT=${EVAL_TIMEOUT:-60m}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

mkdir -p bin "$OUT"
rm -rf "$OUT/nats" "$OUT/ws"
say "building bin/worker (llama.cpp), bin/worker-nollama and bin/enqueue"
"$GO" build -tags llama -o bin/worker ./cmd/worker
"$GO" build -o bin/worker-nollama ./cmd/worker
"$GO" build -o bin/enqueue ./cmd/enqueue

WORKER_PID=""
stop_worker() {
	if [ -n "$WORKER_PID" ] && kill -0 "$WORKER_PID" 2>/dev/null; then
		kill -TERM "$WORKER_PID" 2>/dev/null || true
		wait "$WORKER_PID" 2>/dev/null || true
	fi
	WORKER_PID=""
}
trap stop_worker EXIT

# start_worker BIN BACKEND: one worker on the shared store, $SLOTS slots.
start_worker() {
	local bin=$1 backend=$2
	rm -f "$OUT/ready"
	cat >"$OUT/fleet-$backend.yaml" <<EOF
nats:
  embedded:
    listen: 127.0.0.1:0
    store_dir: $OUT/nats
worker:
  slots: $SLOTS
  agents_dir: $ROOT/agents
  workspace_dir: $OUT/ws
  name: eval-$backend
model:
  backend: $backend
  path: $MODEL
  strict: true
monty:
  binary: $ROOT/.build/monty/monty
queue:
  drain_grace: 20s
EOF
	FLEET_MODEL_PATH= "$bin" -config "$OUT/fleet-$backend.yaml" -ready-file "$OUT/ready" -log-format text \
		>"$OUT/worker-$backend.log" 2>&1 &
	WORKER_PID=$!
	for _ in $(seq 1200); do
		[ -f "$OUT/ready" ] && break
		kill -0 "$WORKER_PID" 2>/dev/null || { cat "$OUT/worker-$backend.log" >&2; exit 1; }
		sleep 0.1
	done
	[ -f "$OUT/ready" ] || { echo "eval: the $backend worker is not ready after 120s" >&2; exit 1; }
	URL=$(cat "$OUT/ready")
}

# run_eval BACKEND MODEL_REF: the split through the worker; the run id is
# the last line of $OUT/<backend>.id.
run_eval() {
	local backend=$1 ref=$2
	say "eval $SPLIT split with model.backend $backend ($(cut -d' ' -f1-3 /proc/loadavg) load, $(nproc) CPUs)"
	bin/enqueue --nats-url "$URL" eval "$SUITE" --split "$SPLIT" --limit "$LIMIT" --model "$ref" \
		--timeout "$TIMEOUT" --no-progress --json >"$OUT/$backend.json"
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/$backend.json" >"$OUT/$backend.id"
	python3 - "$OUT/$backend.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("run", r["id"], "on", ", ".join(f"{m} ({n} jobs)" for m, n in r.get("models", {}).items()))
for s in r["summary"]:
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(s["reasons"].items(), key=lambda kv: -kv[1]))
    print(f'  {s["op"]:10} {s["passed"]:4}/{s["tasks"]:<4} {100*s["rate"]:5.1f}%  95% CI {100*s["low"]:.1f}-{100*s["high"]:.1f}%'
          f'  turns {s["mean_turns"]:.1f}  tokens {s["mean_prompt_tokens"]+s["mean_completion_tokens"]:.0f}'
          f'  wall {s["mean_wall_ms"]:.0f} ms  failures: {reasons or "none"}')
PY
}

start_worker bin/worker-nollama expert
run_eval expert expert
stop_worker

if [ ! -f "$MODEL" ]; then
	echo "eval: $MODEL is missing (make model): the random-model run is skipped" >&2
	exit 1
fi
start_worker bin/worker llama
run_eval llama functiongemma-270m-random
stop_worker

start_worker bin/worker-nollama expert
say "expert vs random model, task by task"
bin/enqueue --nats-url "$URL" eval compare "$(cat "$OUT/expert.id")" "$(cat "$OUT/llama.id")" | tail -n 12
stop_worker
