# Any-language examples (issue 6): examples/node runs a job with the `nats`
# npm package; internal/examples_test drives it against a real worker, and
# the batch examples (examples/node/batch.mjs, examples/python/batch.py, the
# latter with Python's standard library only) against the worker binary.
EXAMPLES_NODE_DIR := examples/node

TEST_DEPS += examples-deps

.PHONY: examples-deps test-examples

examples-deps: $(EXAMPLES_NODE_DIR)/node_modules/.package-lock.json ## install examples/node's npm packages (when missing or the lock changed)

# npm writes node_modules/.package-lock.json on install; reinstall only when
# it is missing or older than the lock file.
$(EXAMPLES_NODE_DIR)/node_modules/.package-lock.json: $(EXAMPLES_NODE_DIR)/package.json $(EXAMPLES_NODE_DIR)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "examples-deps: node and npm are required (apt-get install nodejs npm)"; exit 1; }
	cd $(EXAMPLES_NODE_DIR) && npm ci --no-audit --no-fund
	@touch $@

test-examples: examples-deps ## run the Node example against a real worker
	$(GO) test -race -count=1 ./internal/examples_test/

# Observability overhead: the metrics event sink, per loop event.
BENCH_TARGETS += bench-metrics

.PHONY: bench-metrics

bench-metrics: ## metrics: cost of turning loop events into Prometheus metrics (ns/event)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./ops/metrics/
