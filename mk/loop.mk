# The turn loop's own overhead (scripted model, fake tools).
BENCH_TARGETS += bench-loop

.PHONY: bench-loop fuzz-loop

bench-loop: ## loop overhead: one no-op submit_result run, and a ten-turn run
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./loop/

fuzz-loop: ## fuzz the loop's tool-argument decoding and validation for 60s
	$(GO) test -run '^$$' -fuzz FuzzValidateArgs -fuzztime 60s ./loop/
