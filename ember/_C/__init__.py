"""ember's two optional C parts, each with the Python code it copies as its reference:

- ``kernels/``: the kernel library, plain C loops (row ops, GEMM, attention, LSTM, gather...)
  built as a shared library and loaded with ctypes (``ember._C.kernels``); an op asks it for a
  kernel beside its NumPy code. tests/test_kernels*.py compare the two.
- ``dispatch/``: the dispatch extension, a CPython module (``ember._C.dispatch.ext``) holding
  dispatch's fast path, graph recording, the backward loop and Tensor's fields in C.
  tests/test_dispatch_equivalence.py compares it with the Python dispatch on every registry
  sample.

``EMBER_NO_C=1`` turns both off; docs/kernels.md says how they are built and why.
"""
