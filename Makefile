# Two commands do all the set-up on a fresh machine (see README.md):
#   make compare   the main job: every strategy on the embedded digits, one table
#   make test      the test suite
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: compare test install

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

compare: install
	$(BIN)/tfdist compare

test: install
	$(BIN)/python -m pytest
