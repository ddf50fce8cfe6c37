"""`import ember` is light: no torch, no optional extras, and fast."""
import subprocess
import sys

OPTIONAL = ("torch", "onnx", "onnxruntime", "cupy", "mpi4py", "safetensors", "tqdm", "scipy",
            "numba", "matplotlib")


def _loaded_after_import():
    code = "import sys, ember; print(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    return set(out.split(","))


def test_import_does_not_load_torch():
    assert "torch" not in _loaded_after_import()


def test_import_loads_no_optional_package():
    mods = _loaded_after_import()
    loaded = [m for m in OPTIONAL if m in mods]
    assert not loaded, f"import ember loaded optional packages: {loaded}"
