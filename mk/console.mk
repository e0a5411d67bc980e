# The web console (ops/console): `make bench-console` prints each
# page's server time with 10,000 jobs in the stores (bound: 100 ms), next to
# ledger.ListStatus, what the job list would cost without the live index.
# The browser test runs in `make test` (cmd/enqueue, headless Chromium).
BENCH_TARGETS += bench-console

.PHONY: bench-console

bench-console: ## console: server time per page with 10,000 jobs stored, vs ledger.ListStatus
	$(GO) test -run '^$$' -bench BenchmarkConsolePages10k -benchtime 20x -count 1 -v ./ops/console/ | grep -v '^=== RUN'
