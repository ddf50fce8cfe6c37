"""Builds ember's optional CPU kernels (ember/_C/kernels.c, see docs/kernels.md) and the C fast
path of dispatch (ember/_C/_dispatch.c); everything else about the package is in pyproject.toml.

The kernels are a plain C shared library that ember loads with ctypes. Building them is best
effort: without OpenMP they build single-threaded, and without a working C compiler the install
goes on (the extension is ``optional``) and ember runs its NumPy path (the reference the
kernels are tested against).
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# NOTE: no -march: the library must run on any x86_64/aarch64 (AVX-512 and AVX2 copies of the
# hot loops are picked at load time via target_clones). No -ffast-math: the vector exp relies on
# IEEE rounding, and the NumPy path is the reference. -fno-trapping-math and -fno-math-errno
# change no result; they let gcc if-convert the branch-free selects and inline sqrt, i.e.
# vectorise. -ffp-contract=fast lets the AVX-512 copy use fma (~1.4x on exp-heavy loops); Adam's
# loop opts out (NOCONTRACT in kernels.c) to stay bit-identical to its NumPy passes.
FLAGS = ["-O3", "-g0", "-std=c99", "-fno-trapping-math", "-fno-math-errno", "-ffp-contract=fast",
         "-fvisibility=hidden"]

LIB = "ember._C._kernels"


class OptionalBuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # NOTE: a conventional shared-library name, not a Python module suffix (.so, .pyd), so
        # import machinery and pkgutil.walk_packages never take it for an importable module.
        # (distutils asks with the last name part, setuptools with the full dotted name)
        if fullname in (LIB, LIB.rpartition(".")[2]):
            return os.path.join(*fullname.split(".")[:-1], "libember_kernels.so.1")
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name != LIB:         # the dispatch module: plain C against Python.h, no OpenMP
            try:
                return super().build_extension(ext)
            except Exception as e:
                print(f"ember: {ext.name} not built ({e}); dispatch runs in Python",
                      file=sys.stderr)
                return
        base = list(ext.extra_compile_args)
        for omp in (["-fopenmp"], ["-fopenmp-simd"], []):
            ext.extra_compile_args = base + omp
            ext.extra_link_args = omp if omp == ["-fopenmp"] else []
            try:
                return super().build_extension(ext)
            except Exception as e:             # compiler missing or flag refused: try less
                err = e
        print(f"ember: C kernels not built ({err}); the NumPy path will be used",
              file=sys.stderr)


setup(
    ext_modules=[Extension(LIB, ["ember/_C/kernels.c"], extra_compile_args=FLAGS,
                           depends=["ember/_C/rowops.h", "ember/_C/vecmath.h",
                                    "ember/_C/winograd.h", "ember/_C/attention.h",
                                    "ember/_C/attention_small.h",
                                    "ember/_C/scan.h", "ember/_C/gather.h",
                                    "ember/_C/im2col.h", "ember/_C/lstm.h",
                                    "ember/_C/gemm.h", "ember/_C/half.h",
                                    "ember/_C/blas_gemm.h", "ember/_C/sgemm.h",
                                    "ember/_C/select.h"],
                           libraries=["m"], optional=True),
                 # dispatch's fast path as a CPython extension (ember/_ops/dispatch.py)
                 Extension("ember._C._dispatch", ["ember/_C/_dispatch.c"],
                           depends=["ember/_C/record.h", "ember/_C/engine.h",
                                    "ember/_C/tensor.h", "ember/_C/operator.h",
                                    "ember/_C/nodes.h", "ember/_C/opattr.h"],
                           extra_compile_args=["-O2", "-g0"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
