PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install bench clean wheel docs

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,notebook,docs,learn]'
	touch $(STAMP)

install: $(STAMP)

demo: install node_modules
	$(BIN)/motionmatch demo --port $${PORT:-8000}

test: install node_modules browser-deps docs
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache build dist site docs/figures src/motionmatch/app/vendor

# The documentation site (site/), warnings as errors; the tutorial's figures are made by the library.
docs: install
	$(BIN)/python docs/make_figures.py docs/figures
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -q -d site

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
