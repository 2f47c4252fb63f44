PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install bench clean wheel

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,notebook]'
	touch $(STAMP)

install: $(STAMP)

demo: install node_modules
	$(BIN)/motionmatch demo

test: install node_modules browser-deps
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache build dist src/motionmatch/app/vendor

# A wheel that carries three.js (copied from node_modules by setup.py's build hook): pip install it, then
# `motionmatch serve` needs no node or npm.
wheel: install node_modules
	$(BIN)/python -m build --wheel --no-isolation -o dist .

# Browser app: three.js and playwright-core from package-lock.json; Debian chromium for the browser tests.
node_modules: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch node_modules

.PHONY: browser-deps
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then apt-get update && apt-get install -y chromium chromium-driver; fi
