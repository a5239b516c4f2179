# The command menu. CI runs `make test` (.ci/run); the README documents the rest.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXEMPLARS := matcher/data/safety_exemplars.npz
CHROMIUM := /usr/lib/chromium/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install chromium postgresql run test unit e2e lint eslint bench check bandit audit wrk dist clean

install: $(STAMP) $(EXEMPLARS)

# Reinstall when the dependency list changes; the stamp records a finished install.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

# The brand-safety margin's exemplars: MiniLM vectors of the training units the shipped model
# was fitted with, built from the labelled rows (~35 s on two cores) instead of kept in git (3.5 MB).
$(EXEMPLARS): $(STAMP) matcher/data/safety_model.npz tests/data/safety_labelled.jsonl \
		matcher/safety_train.py matcher/safety.py matcher/embeddings.py matcher/model_graph.py
	$(BIN)/python -m matcher.safety_train --exemplars-only

# Debian's Chromium drives the Playwright tests (browsers cannot be downloaded here).
chromium:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM) || { echo "chromium did not install at $(CHROMIUM)" >&2; exit 1; }

# Debian's PostgreSQL 15 server binaries: the store tests start a throwaway server from them
# (a temporary data folder, run as the postgres user), never the machine's own cluster.
PG_BIN := /usr/lib/postgresql/15/bin
postgresql:
	@test -x $(PG_BIN)/pg_ctl || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }
	@test -x $(PG_BIN)/pg_ctl || { echo "postgresql did not install at $(PG_BIN)" >&2; exit 1; }

run: install
	$(BIN)/edge demo

# The tests run in TEST_WORKERS processes (pytest-xdist): one per core, at most four. Many
# tests wait on a server, a browser or a timeout, so two processes on two cores take ~60%
# of one's time. `make test TEST_WORKERS=0` runs them in this process, one at a time.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/pytest --numprocesses $(TEST_WORKERS) --maxprocesses 4

test: install chromium postgresql lint bandit
	$(PYTEST)

unit: install postgresql
	$(PYTEST) tests

e2e: install chromium
	$(PYTEST) e2e

lint: install eslint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# ESLint for the browser tag, pinned by tools/eslint/package-lock.json and installed there by
# npm ci (Node 20 and npm from the machine; node_modules is ignored by git). The tag's files
# share one scope once built, so ESLint reads them joined (tag.builder.lint_source) on stdin.
ESLINT_DIR := tools/eslint
ESLINT := $(ESLINT_DIR)/node_modules/.bin/eslint
ESLINT_STAMP := $(ESLINT_DIR)/node_modules/.installed

$(ESLINT_STAMP): $(ESLINT_DIR)/package.json $(ESLINT_DIR)/package-lock.json
	npm ci --prefix $(ESLINT_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

eslint: install $(ESLINT_STAMP)
	set -o pipefail; $(BIN)/python -c "from tag.builder import lint_source; print(lint_source(), end='')" | \
	  $(ESLINT) --config $(ESLINT_DIR)/eslint.config.mjs --stdin --stdin-filename tag.js
	$(ESLINT) --config $(ESLINT_DIR)/eslint.config.mjs tag/demo/demo.js

# Security: bandit (offline, ~2 s, also part of `make test`) and pip-audit (needs the registry;
# reports "NOT audited" instead of failing when it cannot be reached).
check: bandit audit

bandit: install
	$(BIN)/bandit -q -c pyproject.toml -ll -r edge matcher tag geoip

audit: install
	$(BIN)/python -m bench.pip_audit

# Debian's wrk drives the HTTP benchmarks; without it bench falls back to a Python generator.
wrk:
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk >/dev/null || \
	  echo "wrk did not install: bench uses its Python load generator" >&2; }

bench: install wrk
	$(BIN)/python -m bench $(BENCH_ARGS)

# A wheel of the edge in dist/, for an install without a checkout (the QA kit). `install`
# builds the exemplars first; the check refuses a wheel that lacks any package data file.
dist: install
	rm -rf dist
	$(BIN)/pip wheel --quiet --disable-pip-version-check --no-deps -w dist .
	$(BIN)/python tools/check_wheel.py dist/*.whl

clean:
	rm -rf $(VENV) var dist build .pytest_cache .ruff_cache .mypy_cache *.egg-info $(ESLINT_DIR)/node_modules
