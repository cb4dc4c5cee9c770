# One command per job: install, test (every gate), demo, docs, bench.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# One environment grown in steps: `make demo` needs only the package and its core
# dependencies (~90 MB of wheels); `make install` / `make test` add the dev extra (the
# suite's extras, moto, pytest, linters, the docs' tools: ~1.4 GB) to the same .venv.
CORE    := $(VENV)/.core
STAMP   := $(VENV)/.installed
# Azurite, Azure Blob Storage's emulator, for the az:// tests (tests/fixtures/azurite.py:
# they fail, never skip, without it), from npm. 3.35 ignores a listing's startFrom, so
# deltalake misreads a table's log past its first version ("Invalid table version: 1");
# 3.37 honours it. 3.37 declares Node >= 22 and runs its blob service on Node 20 (npm warns).
AZURITE_VERSION ?= 3.37.0

# .ci/constraints.txt pins the versions the suite last passed with (pip freeze of a working
# dev environment, plus setuptools for the package's own build): a fresh install resolves
# nothing and cannot drift. PIP_CONSTRAINT, unlike -c, also reaches pip's isolated build of
# the package. --no-compile: byte-compiling every installed module took longer than
# downloading them (13 of 22 s of the core install); Python compiles what it imports.
# Refresh the pins after changing deps.
PIP     := PIP_CONSTRAINT=$(CURDIR)/.ci/constraints.txt $(BIN)/pip install --quiet \
           --no-compile --disable-pip-version-check

.PHONY: install check test lint demo docs bench azurite clean

# Python writes the bytecode of what it imports (a machine may say not to: CI's does), so a
# process of the suite, the demo or a benchmark does not compile pandas, pyarrow and
# SQLAlchemy from source again: 0.45 s of CPU a process, and the suite starts hundreds.
unexport PYTHONDONTWRITEBYTECODE

install: $(STAMP)

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(CORE): pyproject.toml .ci/constraints.txt | $(BIN)/python
	$(PIP) -e .
	touch $@

$(STAMP): $(CORE)
	$(PIP) -e '.[dev]'
	touch $@

lint: install
	$(BIN)/ruff check connector tests bench examples docs
	$(BIN)/mypy

# The site fails on any broken reference (--strict): a renamed module, a moved command.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The fast lane: lint, types and the tests that start no process: no reference server,
# PostgreSQL or emulator (marked needs_server from the fixtures they use), no command run as
# a process (marked slow); tests/fixtures/lanes.py fails a test that starts one unmarked.
check: lint
	$(BIN)/pytest -n 2 -q -m "not needs_server and not slow"

# Three workers on two cores: the tests wait on servers and subprocesses about half the time
# (1,789 tests on a quiet 2-core machine: 507 s with -n 2, 427 s with -n 3; 2,331 tests from a
# fresh clone on 2026-11-27: 526-575 s with -n 3, CPU-bound: 14-15.5 min of user time;
# 2,346 tests in one working copy on 2026-11-28, one run each: -n 3 600 s, -n 4 577 s,
# -n 6 625 s, no failure in any: within a run's noise, so -n 3 stays).
test: lint docs azurite
	$(BIN)/pytest -n 3 -q

demo: $(CORE)
	$(BIN)/python -m connector.demo

bench: install
	$(BIN)/python -m bench

# npm itself is a system package: .ci/run installs it with apt where it is missing.
azurite:
	@if [ "$$(azurite-blob --version 2>/dev/null)" != "$(AZURITE_VERSION)" ]; then \
	    command -v npm >/dev/null || { echo "error: Azurite (the az:// tests) needs npm: apt-get install nodejs npm, or run .ci/run"; exit 1; }; \
	    echo "installing azurite@$(AZURITE_VERSION) with npm"; \
	    npm install --global --no-audit --no-fund --loglevel=error "azurite@$(AZURITE_VERSION)" >/dev/null; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-out build
