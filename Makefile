# The command menu. CI runs `make test` (.ci/run); the README documents the rest.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM := /usr/lib/chromium/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install chromium run test unit e2e lint bench check clean

install: $(STAMP)

# Reinstall when the dependency list changes; the stamp records a finished install.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

# Debian's Chromium drives the Playwright tests (browsers cannot be downloaded here).
chromium:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM) || { echo "chromium did not install at $(CHROMIUM)" >&2; exit 1; }

run: install
	$(BIN)/edge demo

test: install chromium lint
	$(BIN)/pytest

unit: install
	$(BIN)/pytest tests

e2e: install chromium
	$(BIN)/pytest e2e

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache *.egg-info
