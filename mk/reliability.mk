# Reliability (issue 7): worker crashes, server restarts, node loss, hostile
# input, NATS permissions. The tests live in internal/reliability and run in
# `make test` at the CI size; FLEET_RELIABILITY_SCALE multiplies their jobs
# and faults. docs/RELIABILITY.md holds the figures of the last soak.

SOAK_SCALE        ?= 10
SOAK_TIMEOUT      ?= 60m
FUZZTIME          ?= 60s
RELIABILITY_LOG   ?= .build/reliability.log

.PHONY: soak reliability-report fuzz-reliability

soak: monty ## reliability tests at SOAK_SCALE (default 10x the CI size), then their figures
	@mkdir -p $(dir $(RELIABILITY_LOG))
	FLEET_RELIABILITY_SCALE=$(SOAK_SCALE) $(GO) test -race -count=1 -v -timeout $(SOAK_TIMEOUT) ./internal/reliability/ 2>&1 | tee $(RELIABILITY_LOG); \
	status=$${PIPESTATUS[0]}; \
	echo; echo "figures (FLEET_RELIABILITY_SCALE=$(SOAK_SCALE)):"; \
	grep -o 'RELIABILITY test=.*' $(RELIABILITY_LOG) || true; \
	exit $$status

reliability-report: monty ## reliability tests at the CI size (or FLEET_RELIABILITY_SCALE); print one figures line per test
	@mkdir -p $(dir $(RELIABILITY_LOG))
	@$(GO) test -race -count=1 -v -timeout 30m ./internal/reliability/ > $(RELIABILITY_LOG) 2>&1; \
	status=$$?; \
	grep -o 'RELIABILITY test=.*' $(RELIABILITY_LOG) || true; \
	grep -E '^(--- FAIL|FAIL|ok)' $(RELIABILITY_LOG) || true; \
	echo "full log: $(RELIABILITY_LOG)"; \
	exit $$status

fuzz-reliability: ## run the request-decoding (and its UTF-8 field finder) and FunctionGemma call-parser fuzzers for FUZZTIME each
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRunRequest$$' -fuzztime $(FUZZTIME) ./queue/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzJSONInvalidUTF8$$' -fuzztime $(FUZZTIME) ./queue/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCalls$$' -fuzztime $(FUZZTIME) ./inference/functiongemma/
