PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,learn]'
	touch $(STAMP)

install: $(STAMP)

demo: install node_modules
	$(BIN)/motionmatch demo

test: install node_modules browser-deps
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache

# Browser app: three.js and playwright-core from package-lock.json; Debian chromium for the browser tests.
node_modules: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch node_modules

.PHONY: browser-deps
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then apt-get update && apt-get install -y chromium chromium-driver; fi
