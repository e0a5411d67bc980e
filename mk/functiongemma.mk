# FunctionGemma format and strict-mode grammar (pure Go, inference/functiongemma):
# the grammar's cost per candidate token, fast path (Allows on 40 candidates)
# against the full-vocabulary fallback (AllowedTokens over 262,144 pieces).
BENCH_TARGETS += bench-functiongemma

.PHONY: bench-functiongemma
bench-functiongemma: ## grammar cost per token: top-40 fast path vs full 262k vocabulary
	$(GO) test -run '^$$' -bench 'Grammar/(Allows|AllowedTokens)' -benchtime 2000x -count 1 ./inference/functiongemma/
