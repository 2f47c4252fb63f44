PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/motionmatch demo

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache
