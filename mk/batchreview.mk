# Batch review (issue 21): `enqueue batch accept` on a finished 1,000-job
# batch over 50 files (lint and docstring jobs of every function, merged
# per file, records and reviews written): jobs/s, repeated, with the
# machine's load before and after.
BENCH_TARGETS += bench-batch-accept

.PHONY: bench-batch-accept

BENCH_BATCH_ACCEPT_OUT ?= $(CURDIR)/.build/bench-batch-accept.txt

bench-batch-accept: ## batch accept: jobs/s accepting a 1,000-job batch (read, merge, write, 1,000 records and reviews)
	@echo "batch accept: machine load before the run: $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	@mkdir -p $(dir $(BENCH_BATCH_ACCEPT_OUT))
	set -o pipefail; $(GO) test -run '^$$' -bench 'BenchmarkBatchAccept' -benchtime 3x -count 3 -timeout 30m ./cmd/enqueue/ | tee $(BENCH_BATCH_ACCEPT_OUT)
	@awk -v UNITS="jobs/s" -f mk/benchrange.awk $(BENCH_BATCH_ACCEPT_OUT)
	@echo "batch accept: machine load after the run: $$(cut -d' ' -f1-3 /proc/loadavg)"
