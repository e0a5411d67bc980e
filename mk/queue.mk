# The JetStream queue and worker engine (queue/, docs/PROTOCOL.md).
# `make bench-queue` prints, in one run, no-op jobs/s through the whole path
# against raw JetStream publish+consume+ack (and their ratio) and against the
# protocol floor (the durable operations a job needs, written directly with
# nats.go, without and with a one-turn run's five events: fleet÷floor), then
# the single-job dispatch latency p50/p99 (split into pickup, run and out)
# next to a raw JetStream round trip; a high job's dispatch latency behind
# 10,000 low jobs ÷ on an idle queue (BenchmarkPriorityDispatch, target
# <= 2); then a real agent job through the whole worker path (BenchmarkRealAgentJobs: Cairn, Monty, the lint agent, a
# scripted model): p50/p99 one at a time and jobs/s with 2 slots.
# Beside CPU per job it prints heap allocations and the server's messages in/out per job
# (fleet and floor must match there) and the CPU-bound ceilings next to the peers'.
# FLEET_BENCH_SLOTS sets the worker's slots in the throughput run (default 8);
# FLEET_BENCH_OPS=n serves n operations (the multi-operation pull path);
# FLEET_BENCH_EVENTS=none|finished (worker config) or header-none|header-finished
# (the requests' Fleet-Events header) and FLEET_BENCH_MEMORY=1 are the other variants;
# FLEET_BENCH_BASELINES=0 runs the fleet alone (for -cpuprofile).
# BenchmarkProtocolFloor runs the floor alone (FLEET_BENCH_FLOOR_EVENTS=n,
# FLEET_BENCH_FLOOR_CONNS=1 for a connection per slot).
# BenchmarkTierCost: the same no-op jobs through a worker pulling every
# priority tier and through one pulling the normal tier only (the
# priority tiers' cost). The run ends with a table of the four figures the
# engine is held to (mk/queue-summary.awk): fleet ÷ asynq + Redis, fleet ÷
# its floor with events, dispatch p99, the tiers' cost.
# bench-queue starts with bench-peers: the same no-op job on asynq + Redis and
# River + PostgreSQL (bench/peers, its own Go module; bench/peers/README.md),
# with servers from Debian packages that it installs as root when missing and
# starts on loopback; their figures also go to FLEET_PEERS_OUT as JSON.

BENCH_TARGETS += bench-queue

.PHONY: bench-queue bench-peers fuzz-queue

FLEET_PEERS_OUT ?= $(CURDIR)/.build/peers.json
# Where bench-queue keeps the output its summary reads.
BENCH_QUEUE_OUT ?= $(CURDIR)/.build/bench-queue.txt

bench-queue: ## queue figures: no-op jobs/s vs raw JetStream, the protocol floor and the peers, dispatch p50/p99, the tiers' cost, a real agent job; then the engine's four target figures
	@$(MAKE) --no-print-directory bench-peers
	@mkdir -p $(dir $(BENCH_QUEUE_OUT)); load0="$$(cut -d' ' -f1-3 /proc/loadavg)"; \
	echo "queue: machine load before the run: $$load0 on $$(nproc) CPUs" | tee $(BENCH_QUEUE_OUT); \
	set -o pipefail; \
	FLEET_PEERS_OUT='$(FLEET_PEERS_OUT)' \
	$(GO) test -run '^$$' -bench 'BenchmarkNoopJobs' -benchtime 20000x -count 1 -timeout 20m ./queue/ | tee -a $(BENCH_QUEUE_OUT) && \
	echo "queue: machine load: $$(cut -d' ' -f1-3 /proc/loadavg)" && \
	FLEET_PEERS_OUT='$(FLEET_PEERS_OUT)' \
	$(GO) test -run '^$$' -bench 'BenchmarkDispatchLatency' -benchtime 3000x -count 1 -timeout 20m ./queue/ | tee -a $(BENCH_QUEUE_OUT) && \
	echo "queue: machine load: $$(cut -d' ' -f1-3 /proc/loadavg)" && \
	$(GO) test -run '^$$' -bench 'BenchmarkTierCost' -benchtime 10000x -count 1 -timeout 20m ./queue/ | tee -a $(BENCH_QUEUE_OUT) && \
	echo "queue: machine load: $$(cut -d' ' -f1-3 /proc/loadavg)" && \
	$(GO) test -run '^$$' -bench 'BenchmarkPriorityDispatch' -benchtime 300x -count 1 -timeout 20m ./queue/ && \
	echo "queue: machine load: $$(cut -d' ' -f1-3 /proc/loadavg)" && \
	$(GO) test -run '^$$' -bench 'BenchmarkRealAgentJobs' -benchtime 300x -count 1 -timeout 20m ./jobrun/ && \
	load1="$$(cut -d' ' -f1-3 /proc/loadavg)" && \
	echo "queue: machine load after the run: $$load1" && \
	awk -v LOAD="$$load0 before, $$load1 after" -f mk/queue-summary.awk $(BENCH_QUEUE_OUT)

bench-peers: ## the same no-op job on asynq + Redis and River + PostgreSQL: jobs/s, single-job p50/p99 (FLEET_PEERS_OUT)
	CGO_ENABLED=0 $(GO) -C bench/peers build -o $(CURDIR)/.build/peers-bench .
	FLEET_PEERS_OUT='$(FLEET_PEERS_OUT)' $(CURDIR)/.build/peers-bench

fuzz-queue: ## fuzz the run-request decoders (JSON and msgpack) for FUZZTIME (default 60s)
	$(GO) test -run '^$$' -fuzz FuzzDecodeRunRequest -fuzztime $${FUZZTIME:-60s} ./queue/wire/
