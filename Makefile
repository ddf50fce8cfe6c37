# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all bench loc kernels clean

# setup.py compiles ember's optional C kernels (docs/kernels.md) during the editable install
$(STAMP): pyproject.toml setup.py ember/_C/kernels.c ember/_C/rowops.h ember/_C/vecmath.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m ember demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --runslow

bench: $(STAMP)
	$(PY) -m ember bench

kernels: $(STAMP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

loc: $(STAMP)
	$(PY) tools/loc.py

clean:
	rm -rf $(VENV) build *.egg-info ember/_C/libember_kernels.so.1
