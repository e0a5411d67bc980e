# Monty: the sandboxed Python interpreter the .pym tools run on
# (docs/MONTY.md §1). `make monty` fetches the pinned npm package,
# verifies the tarball's and the binary's sha256 and leaves the executable at
# .build/monty/monty (git-ignored). It is idempotent: nothing is fetched when
# the binary is already there with the right hash.

MONTY_VERSION     := 0.0.23
MONTY_NPM_PKG     := @pydantic/monty-linux-x64-gnu@$(MONTY_VERSION)
MONTY_TGZ_NAME    := pydantic-monty-linux-x64-gnu-$(MONTY_VERSION).tgz
MONTY_TGZ_SHA256  := ab57ed8a7e7b1b7bc033276a4d66e299a0ed4a50e6ac4adb4cb8050afe2c0920
MONTY_BIN_SHA256  := b634e4fe49bdd2f933e2f5ecf32633db4273107a3a693946a4e3c9b0d01ba45a
MONTY_DIR         := .build/monty
MONTY_BIN         := $(MONTY_DIR)/monty

TEST_DEPS  += monty
BENCH_DEPS += monty
DEMO_DEPS  += monty

.PHONY: monty

monty: ## fetch the pinned Monty binary into .build/monty/monty (sha256-verified)
	@set -euo pipefail; \
	bin="$(MONTY_BIN)"; \
	if [ -x "$$bin" ] && [ "$$(sha256sum "$$bin" | cut -d' ' -f1)" = "$(MONTY_BIN_SHA256)" ]; then \
		exit 0; \
	fi; \
	command -v npm >/dev/null || { echo "monty: npm is required to fetch $(MONTY_NPM_PKG)" >&2; exit 1; }; \
	mkdir -p "$(MONTY_DIR)"; \
	tmp="$$(mktemp -d "$(MONTY_DIR)/fetch.XXXXXX")"; \
	trap 'rm -rf "$$tmp"' EXIT; \
	echo "monty: npm pack $(MONTY_NPM_PKG)"; \
	( cd "$$tmp" && npm pack --silent "$(MONTY_NPM_PKG)" >/dev/null ); \
	tgz="$$tmp/$(MONTY_TGZ_NAME)"; \
	[ -f "$$tgz" ] || { echo "monty: npm pack did not produce $(MONTY_TGZ_NAME)" >&2; exit 1; }; \
	got="$$(sha256sum "$$tgz" | cut -d' ' -f1)"; \
	if [ "$$got" != "$(MONTY_TGZ_SHA256)" ]; then \
		echo "monty: TARBALL SHA256 MISMATCH: got $$got, want $(MONTY_TGZ_SHA256)" >&2; exit 1; \
	fi; \
	tar -xzf "$$tgz" -C "$$tmp" package/monty; \
	got="$$(sha256sum "$$tmp/package/monty" | cut -d' ' -f1)"; \
	if [ "$$got" != "$(MONTY_BIN_SHA256)" ]; then \
		echo "monty: BINARY SHA256 MISMATCH: got $$got, want $(MONTY_BIN_SHA256)" >&2; exit 1; \
	fi; \
	chmod 0755 "$$tmp/package/monty"; \
	mv -f "$$tmp/package/monty" "$$bin"; \
	echo "monty: installed $$bin ($$("$$bin" --version))"
