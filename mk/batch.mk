# Batches (issue 21): `enqueue run <op>,... <path>...` fans out one job per
# node and operation as one batch; `enqueue batch ...` reads and cancels it
# (docs/PROTOCOL.md §21). The end-to-end test over python3.11's standard
# library runs a small part of it in `make test` (internal/batche2e);
# `make test-batch-full` runs every module outside its tests (20,000+ jobs,
# two worker processes, one SIGKILLed). `make bench-batch` publishes a
# 10,000-job batch against 10,000 single `enqueue run --no-wait` calls in a
# shell loop, in the same run, and times `batch status` on it.
BENCH_TARGETS += bench-batch

.PHONY: test-batch-full bench-batch

test-batch-full: monty ## the batch end-to-end test over all of python3.11's standard library (20,000+ jobs)
	FLEET_BATCH_E2E_FULL=1 $(GO) test -count=1 -timeout 60m -run TestStdlibBatch -v ./internal/batche2e/

bench-batch: ## batches: a 10,000-job batch's publish jobs/s and peak RSS vs 10,000 single `enqueue run --no-wait`, and `batch status` time
	@echo "batch: machine load before the run: $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	$(GO) test -run '^$$' -bench 'BenchmarkBatchPublish' -benchtime 1x -count 3 -timeout 30m ./internal/batche2e/ | tee .build/bench-batch.txt
	$(GO) test -run '^$$' -bench 'BenchmarkSingleRunLoop' -benchtime 1x -count 1 -timeout 60m ./internal/batche2e/ | tee -a .build/bench-batch.txt
	@awk -v UNITS="jobs/s peak-RSS-MiB status-call-p50-ms status-cmd-ms" -f mk/benchrange.awk .build/bench-batch.txt
	@echo "batch: machine load after the run: $$(cut -d' ' -f1-3 /proc/loadavg)"
