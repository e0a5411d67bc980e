# The demo: owned by the queue/worker work (issue 5). Until the worker lands it
# says what it will do.
.PHONY: demo
demo: ## run a real demo job end to end on an embedded NATS server
	@echo "make demo will: generate the random-weight FunctionGemma-shaped model if missing,"
	@echo "start a worker with an embedded NATS server, enqueue a lint job on a sample file,"
	@echo "show the per-turn events and the result with its diff, then stop the worker."
	@echo "(the worker and queue are not built yet)"
