#!/usr/bin/env bash
# make flywheel's last step: the trained model through the fleet. One
# embedded NATS server in $OUT/nats (started afresh), two worker runs on it:
#   1. a worker serving the repository's agents from its folder, long
#      enough for `enqueue agents push agents` (the fleet's agents as
#      version 1: the lint agent names no model, so it runs on the workers'
#      own model, the base);
#   2. a llama worker serving only pushed agents, with the base model
#      ($BASE) as its own, and `enqueue eval canary` against it: the trained
#      model pushed, the lint agent pushed with a canary share naming it,
#      the test split through the worker as one batch, the runs split by
#      the model each job recorded, the gate (exit 1 with the reason on a
#      regression, the canary removed) and the promotion (the agent's
#      model: the new version).
# The arms' runs are written to $OUT/base.json and $OUT/canary.json.
set -euo pipefail

GO=${GO:-go}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
SUITE=${SUITE:?SUITE: the eval suite}
MODEL=${MODEL:?MODEL: the trained GGUF}
NAME=${NAME:-$(basename "$MODEL" .gguf)}
BASE=${BASE:?BASE: the workers own model (the base)}
OUT=${OUT:-.build/train/canary}
LIMIT=${LIMIT:-0}
BASE_LIMIT=${BASE_LIMIT:-0}
SLOTS=${SLOTS:-2}
TIMEOUT=${TIMEOUT:-120m}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

mkdir -p bin "$OUT"
rm -rf "$OUT/nats" "$OUT/ws" "$OUT/pushed" "$OUT/no-local-agents" "$OUT/cache"
mkdir -p "$OUT/no-local-agents"
say "building bin/worker (llama.cpp) and bin/enqueue"
"$GO" build -tags llama -o bin/worker ./cmd/worker
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

# start_worker NAME AGENTS_DIR PUSHED: a worker on the store in $OUT/nats.
start_worker() {
	local name=$1 agents=$2 pushed=$3
	rm -f "$OUT/ready"
	cat >"$OUT/fleet-$name.yaml" <<YAML
nats:
  embedded:
    listen: 127.0.0.1:0
    store_dir: $OUT/nats
worker:
  slots: $SLOTS
  name: flywheel-$name
  agents_dir: $agents
  pushed_agents: $pushed
  pushed_agents_dir: $OUT/pushed
  workspace_dir: $OUT/ws
model:
  backend: llama
  path: $BASE
  strict: true
  context_size: 8192
  cache_dir: $OUT/cache
monty:
  binary: $ROOT/.build/monty/monty
queue:
  drain_grace: 20s
YAML
	FLEET_MODEL_PATH= bin/worker -config "$OUT/fleet-$name.yaml" -ready-file "$OUT/ready" -log-format text \
		>"$OUT/worker-$name.log" 2>&1 &
	WORKER_PID=$!
	for _ in $(seq 1200); do
		[ -f "$OUT/ready" ] && break
		kill -0 "$WORKER_PID" 2>/dev/null || { cat "$OUT/worker-$name.log" >&2; exit 1; }
		sleep 0.1
	done
	[ -f "$OUT/ready" ] || { echo "flywheel: the $name worker is not ready after 120s" >&2; exit 1; }
	URL=$(cat "$OUT/ready")
}

say "the fleet's agents, version 1 (the lint agent on the workers' own model, $(basename "$BASE"))"
start_worker setup "$ROOT/agents" false
bin/enqueue --nats-url "$URL" agents push agents --by flywheel
stop_worker

say "canary: $(basename "$MODEL") against $(basename "$BASE") on the lint test split ($(cut -d' ' -f1-3 /proc/loadavg) load, $(nproc) CPUs)"
start_worker fleet "$OUT/no-local-agents" true
set +e
bin/enqueue --nats-url "$URL" eval canary "$SUITE" --model "$NAME=$MODEL" --op lint --split test \
	--limit "$LIMIT" --base-limit "$BASE_LIMIT" --timeout "$TIMEOUT" --out "$OUT" --by flywheel
code=$?
set -e
bin/enqueue --nats-url "$URL" agents list || true
stop_worker
exit $code
