"""Which build of the kernel library a process loads (ember/_C/kernels/__init__.py: the x86-64-v3 copy
on an AVX2 + FMA CPU without AVX-512, else the baseline with its target clones), and that the
two builds compute the same results."""
import os
import subprocess
import sys

import numpy as np
import pytest

from ember._C import kernels

V3 = os.path.join(os.path.dirname(kernels.__file__), "libember_kernels_v3.so.1")
BASE = os.path.join(os.path.dirname(kernels.__file__), "libember_kernels.so.1")
HAS_V3 = os.path.exists(V3) and os.path.exists(BASE)
AVX2_FMA = {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"}


@pytest.mark.parametrize("flags, env, want", [
    (AVX2_FMA, None, V3),
    (AVX2_FMA | {"avx512f"}, None, BASE),       # the baseline's avx512f clones serve it
    (AVX2_FMA - {"fma"}, None, BASE),
    (set(), None, BASE),
    (AVX2_FMA, "baseline", BASE)])
def test_library_choice(monkeypatch, flags, env, want):
    if not HAS_V3:
        pytest.skip("no x86-64-v3 build here (not x86_64 Linux, or it did not compile)")
    monkeypatch.setattr(kernels, "_cpu_flags", lambda: set(flags))
    monkeypatch.delenv("EMBER_KERNELS", raising=False)
    if env:
        monkeypatch.setenv("EMBER_KERNELS", env)
    assert kernels.library_path() == want


def test_cpu_flags_read_from_proc():
    flags = kernels._cpu_flags()
    if os.path.exists("/proc/cpuinfo") and os.uname().machine == "x86_64":
        assert {"sse2", "fpu"} <= flags
    assert isinstance(flags, set)


_PROBE = """
import numpy as np, ember, ember.nn.functional as F
from ember._C import kernels
rng = np.random.default_rng(0)
x = ember.tensor(rng.standard_normal((64, 300)).astype(np.float32), requires_grad=True)
w = ember.tensor(rng.standard_normal(300).astype(np.float32))
y = F.gelu(x) + F.softmax(x, 1) + F.layer_norm(x, (300,), w) + x.exp() * 0
y = y + F.cross_entropy(x, ember.tensor(rng.integers(0, 300, 64)), reduction="none")[:, None]
y.sum().backward()
np.save(__import__("sys").argv[1], np.stack([y.detach().numpy(), x.grad.numpy()]))
print(kernels.library_path())
"""


@pytest.mark.skipif(not HAS_V3, reason="no x86-64-v3 build here")
def test_builds_agree(tmp_path):
    """The row kernels through each build (the v3 copy fuses multiply-adds the baseline's
    default and avx2 clones do not): equal to float32 rounding. On a CPU without AVX2 + FMA
    the v3 copy cannot run, and both runs load the baseline."""
    out = {}
    for which in ("default", "baseline"):
        env = dict(os.environ, EMBER_KERNELS=which)
        path = str(tmp_path / f"{which}.npy")
        r = subprocess.run([sys.executable, "-c", _PROBE, path], env=env, capture_output=True,
                           text=True, check=True)
        out[which] = (np.load(path), r.stdout.strip())
    assert out["baseline"][1] == BASE
    np.testing.assert_allclose(out["default"][0], out["baseline"][0], rtol=2e-5, atol=2e-5)
