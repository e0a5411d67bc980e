# Models through NATS (inference/modelstore, docs/PERFORMANCE.md "Models
# through NATS"): `make bench-models` pushes the 270M model (`make model`;
# when it is missing the benchmark generates the same shape with the
# synthetic vocabulary and says so) to a fleet_models bucket on an embedded
# nats-server, fetches it into a cold worker cache, and copies it locally
# in the same iteration: MB/s of each and the ratios to the local copy, for
# NATS's default chunk and fleet's, 3 runs.
BENCH_TARGETS += bench-models

.PHONY: bench-models

bench-models: ## models: push and cold fetch of the 270M model through NATS (MB/s) vs a local copy, ratios
	@echo "models: machine load before the run: $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	@set -o pipefail; out=$$(mktemp); trap 'rm -f '"$$out" EXIT; \
	$(GO) test -run '^$$' -bench 'BenchmarkModelTransfer' -benchtime 1x -count 3 -timeout 30m ./inference/modelstore/ | tee "$$out"; \
	echo "models: machine load after the run: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	echo "models: ranges over the 3 runs (ratios: 1 = as fast as the local copy):"; \
	awk -v UNITS="MB copy-MB/s push-MB/s fetch-MB/s push/copy fetch/copy load" -f mk/benchrange.awk "$$out"
