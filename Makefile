PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check install bench clean wheel docs blender test-blender

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,notebook,docs,learn,usd]'
	touch $(STAMP)

install: $(STAMP)

demo: install node_modules
	$(BIN)/motionmatch demo --port $${PORT:-8000}

# Every test, on two worker processes (pytest-xdist; --dist loadfile keeps a file's module fixtures, its
# trained models and servers, in one worker). One file alone: .venv/bin/python -m pytest FILE (serial).
test: install node_modules browser-deps docs blender
	$(BIN)/python -m pytest -n 2 --dist loadfile
	$(MAKE) test-blender

# The inner loop before each commit (CONTRIBUTING.md): everything not marked `slow`, under 2 minutes.
check: install node_modules
	$(BIN)/python -m pytest -n 2 --dist loadfile -m 'not slow and not blender'

# Blender's Python module (FBX in, the interop checks) pins numpy < 2: its own environment, beside ours,
# where io/fbx.py looks for it. About 1 GB; measured 57 s to install here.
BLENDER_VENV := .venv-blender
$(BLENDER_VENV)/.installed:
	python3.11 -m venv $(BLENDER_VENV)
	$(BLENDER_VENV)/bin/pip install -q bpy==5.0.1
	touch $@

blender: $(BLENDER_VENV)/.installed

test-blender: install blender
	$(BIN)/python -m pytest -m blender

clean:
	rm -rf $(VENV) $(BLENDER_VENV) .cache build dist site docs/figures src/motionmatch/app/vendor

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
