# One command per job: install, test (every gate), demo, bench.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install test lint demo bench clean

install: $(STAMP)

# .ci/constraints.txt pins the versions the suite last passed with (pip freeze of a working
# dev environment): a fresh install resolves nothing and cannot drift (an unpinned resolve of
# dagster + dlt + deltalake + moto backtracked for minutes). Refresh it after changing deps.
$(STAMP): pyproject.toml .ci/constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c .ci/constraints.txt -e '.[dev]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check connector tests bench examples
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -n 2 -q

demo: install
	$(BIN)/python -m connector.demo

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-out
