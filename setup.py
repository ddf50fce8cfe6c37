"""Builds ember's two optional C parts (docs/kernels.md): the kernel library
(ember/_C/kernels/kernels.c, loaded with ctypes) and the dispatch extension
(ember/_C/dispatch/_dispatch.c, a CPython module); everything else about the package is in
pyproject.toml.

The kernels are a plain C shared library that ember loads with ctypes. Building them is best
effort: without OpenMP they build single-threaded, and without a working C compiler the install
goes on (the extension is ``optional``) and ember runs its NumPy path (the reference the
kernels are tested against).
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# NOTE: no -march for the library every machine loads: it must run on any x86_64/aarch64
# (AVX-512 and AVX2 copies of the hot loops are picked at load time via target_clones). gcc's
# "avx2" clone has no fma, and target_clones cannot ask for both in one copy, so on x86_64
# Linux a second build of the same source for x86-64-v3 (AVX2 + FMA + F16C, the CPUs of most
# laptops and of AMD's EPYC/Ryzen) sits beside it; ember/_C/kernels/__init__.py loads it on a CPU that
# has those features and no AVX-512 (the baseline's own avx512f clones serve those).
# No -ffast-math: the vector exp relies on IEEE rounding, and the NumPy path is the reference.
# -fno-trapping-math and -fno-math-errno change no result; they let gcc if-convert the
# branch-free selects and inline sqrt, i.e. vectorise. -ffp-contract=fast lets the AVX-512 copy
# and the x86-64-v3 build use fma (~1.4x on exp-heavy loops); Adam's loop opts out (NOCONTRACT
# in kernels.c) to stay bit-identical to its NumPy passes.
FLAGS = ["-O3", "-g0", "-std=c99", "-fno-trapping-math", "-fno-math-errno", "-ffp-contract=fast",
         "-fvisibility=hidden"]

LIB = "ember._C.kernels._kernels"
LIB_V3 = "ember._C.kernels._kernels_v3"
FILES = {LIB: "libember_kernels.so.1", LIB_V3: "libember_kernels_v3.so.1"}
X86_LINUX = sys.platform.startswith("linux") and os.uname().machine == "x86_64"


class OptionalBuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # NOTE: a conventional shared-library name, not a Python module suffix (.so, .pyd), so
        # import machinery and pkgutil.walk_packages never take it for an importable module.
        # (distutils asks with the last name part, setuptools with the full dotted name)
        for name, file in FILES.items():
            if fullname in (name, name.rpartition(".")[2]):
                return os.path.join(*fullname.split(".")[:-1], file)
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name not in FILES:   # the dispatch module: plain C against Python.h, no OpenMP
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
        print(f"ember: C kernels not built ({err}); " + ("the NumPy path will be used"
              if ext.name == LIB else "the baseline build serves AVX2 CPUs"), file=sys.stderr)


KERNELS, DISPATCH = "ember/_C/kernels/", "ember/_C/dispatch/"


def sources(folder):
    """Every C file of ``folder``: an edited header rebuilds what includes it."""
    return sorted(folder + f for f in os.listdir(folder) if f.endswith((".c", ".h")))


def kernels(name, source, flags):
    return Extension(name, [KERNELS + source], extra_compile_args=FLAGS + flags,
                     depends=sources(KERNELS), libraries=["m"], optional=True)


setup(
    ext_modules=[kernels(LIB, "kernels.c", [])] + (
        [kernels(LIB_V3, "kernels_v3.c", ["-march=x86-64-v3"])] if X86_LINUX else []) + [
        # dispatch's fast path as a CPython extension (ember/_ops/dispatch.py)
        Extension("ember._C.dispatch._dispatch", [DISPATCH + "_dispatch.c"],
                  depends=sources(DISPATCH), extra_compile_args=["-O2", "-g0"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
