# Deployment artefacts (deploy/, docs/DEPLOY.md). `make deploy-check` runs
# what can be checked without a container engine or a cluster: the
# Kubernetes manifests against their schemas, the Dockerfile's steps as a
# script, the systemd unit with systemd-analyze (deploy/check.sh). It takes
# about half a minute once the llama.cpp build is cached, so `make test`
# runs it too.
DEPLOY_CHECK_DIR := deploy/check

TEST_DEPS += deploy-check

.PHONY: deploy-check deploy-check-deps

deploy-check-deps: $(DEPLOY_CHECK_DIR)/node_modules/.package-lock.json

$(DEPLOY_CHECK_DIR)/node_modules/.package-lock.json: $(DEPLOY_CHECK_DIR)/package.json $(DEPLOY_CHECK_DIR)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "deploy-check: node and npm are required (apt-get install nodejs npm)"; exit 1; }
	cd $(DEPLOY_CHECK_DIR) && npm ci --no-audit --no-fund
	@touch $@

deploy-check: llama-headers monty deploy-check-deps ## check deploy/: manifests vs schemas, the Dockerfile's steps as a script, systemd-analyze verify
	bash deploy/check.sh
