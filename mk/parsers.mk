# Parsers (issue 16): Python nodes on tree-sitter (cairn/pym/pynode, also
# behind cairn/pym and the python_nodes external) and result diffs on
# go-gitdiff (cmd/enqueue accept). docs/PYNODE.md has the figures.
#
# tree-sitter and its Python grammar are C compiled by cgo from the Go
# module zips: they need only a C compiler (gcc comes with the g++ of
# .ci/apt-packages) and build with the CGO_CFLAGS mk/inference.mk exports;
# their headers ship in the modules. The first build costs about 9 s of CPU
# per build mode (vet/build, and -race), cached afterwards.
#
# The differential tests compare with Python's own ast (Debian's python3,
# installed here as root when missing; they skip without it) and with
# `git apply`.

PYTHON3_APT := python3

TEST_DEPS += check-python3

.PHONY: check-python3 fuzz-parsers soak-parsers

check-python3: ## make sure a python3 is there for pynode's differential test (installs Debian's as root)
	@command -v python3 >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "pynode: installing $(PYTHON3_APT) for the differential test against Python's ast" >&2; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PYTHON3_APT); } >/dev/null \
	    && exit 0; \
	fi; \
	echo "pynode: no python3: TestStdlibMatchesAST will skip (install it with: sudo apt-get install $(PYTHON3_APT))" >&2

fuzz-parsers: ## fuzz pynode.Parse, pym.Parse and accept's diff reading for FUZZTIME each (default 60s)
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $${FUZZTIME:-60s} ./cairn/pym/pynode/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $${FUZZTIME:-60s} ./cairn/pym/
	$(GO) test -run '^$$' -fuzz '^FuzzReadDiff$$' -fuzztime $${FUZZTIME:-60s} ./cmd/enqueue/

# SOAK_SEEDS seeds of GITAPPLY_CASES random edit sets each against git apply;
# FLEET_PYTHON picks another interpreter's standard library for the ast test.
GITAPPLY_CASES ?= 2000
SOAK_SEEDS     ?= 2 3 4

soak-parsers: check-python3 ## the differential tests at soak size: many seeds of diffs against git apply, the stdlib against ast
	set -o pipefail; $(GO) test -count=1 -v -run '^TestStdlibMatchesAST$$' ./cairn/pym/pynode/ -args -pystdlib.show=200 | grep -E 'PYSTDLIB|^(---|ok|FAIL)|stdlib_test'
	@set -o pipefail; for s in $(SOAK_SEEDS); do \
	  $(GO) test -count=1 -v -timeout 30m -run '^TestAcceptMatchesGitApply$$' ./cmd/enqueue/ -args -gitapply.cases=$(GITAPPLY_CASES) -gitapply.seed=$$s | grep -E 'GITAPPLY|^(---|ok|FAIL)' || exit 1; \
	done
