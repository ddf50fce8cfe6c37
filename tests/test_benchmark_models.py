"""The model workloads of the benchmark suite run on ember, build the same model as torch
does, and the NumPy twin of the MLP step computes what ember computes; the memory and size
reports render. Nothing here is timed."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import footprint, models, run  # noqa: E402


@pytest.fixture
def small(monkeypatch):
    """Shrink the model configs so the workloads' code runs in a fraction of a second
    (seq 1024 still takes the blockwise attention path)."""
    for cfg, changes in ((models.GPT, dict(n_layer=1, batch=2, block=16)),
                         (models.LSTM, dict(seq=4, batch=2, hidden_size=16, input_size=8)),
                         (models.SDPA, dict(seq=1024, head_dim=8))):
        for k, v in changes.items():
            monkeypatch.setitem(cfg, k, v)


@pytest.mark.parametrize("w", models.WORKLOADS, ids=lambda w: w.name)
def test_model_workload_runs_on_ember(w, small):
    w.build(ember)()


def test_gpt_has_torchs_parameters():
    torch = pytest.importorskip("torch")
    shapes = [{k: tuple(v.shape) for k, v in models.gpt_model(T, **models.GPT).state_dict()
               .items()} for T in (ember, torch)]
    assert shapes[0] == shapes[1]
    assert len(shapes[0]) == 4 + 4 * 12 + 1     # embeddings, ln_f, head; 12 per block


def test_gpt_step_lowers_the_loss(small):
    ember.manual_seed(0)
    model = models.gpt_model(ember, **models.GPT)
    opt = ember.optim.AdamW(model.parameters(), lr=1e-3)
    idx = ember.randint(0, 65, (2, 16))
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = model(idx, idx)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_numpy_mlp_step_matches_ember():
    step = models.mlp_step_numpy(np)
    ws = [w.copy() for w in step.params]
    x, y = step.batch
    step()
    nn = ember.nn
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    with ember.no_grad():
        for p, w in zip(model.parameters(), ws):
            p.copy_(ember.from_numpy(w))
    opt = ember.optim.AdamW(model.parameters(), lr=1e-3)
    nn.functional.cross_entropy(model(ember.from_numpy(x)), ember.from_numpy(y)).backward()
    opt.step()
    for p, w in zip(model.parameters(), step.params):
        # AdamW's first step moves each weight by lr * g / (|g| + eps): where |g| is near eps,
        # float32 rounding of g (BLAS's order, or ember's GEMM's on several threads) shows
        # up at a few percent of lr
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-4, atol=5e-5)


def test_attention_memory_case_reports_a_rise():
    # in a fresh process, as the benchmark runs it: a test worker's lifetime peak RSS may lie
    # above anything this case allocates (and ember keeps freed memory mapped, see malloc.py)
    code = ("import json; from benchmarks import models, footprint; "
            "models.SDPA.update(seq=1024, head_dim=8); "
            "print(json.dumps(footprint._case('sdpa-fwd', 'ember')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=footprint.ROOT)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["peak_mb"] >= out["rise_mb"] > 0


def test_installed_size_follows_requirements():
    size, names = footprint.installed_size("ember")
    assert names[0] == "ember" and "numpy" in names and size > 0
    assert "torch" not in names


def test_report_renders_memory_and_size():
    mem = {c: {"ember": {"peak_mb": 100.0, "rise_mb": 10.0},
               "torch": {"peak_mb": 400.0, "rise_mb": 20.0}} for c in footprint.CASES}
    size = {"ember": {"mb": 50.0, "packages": ["ember", "numpy"]},
            "torch": {"mb": 800.0, "packages": ["torch"]}}
    out = run.table({"results": {}, "import_s": {"ember": 0.1, "torch": 1.0},
                     "memory": mem, "size": size})
    assert "| GPT step: peak RSS of the process | 100.0 | 400.0 | 0.25 |" in out
    assert "| ember SDPA / naive, fwd: memory ratio (target <= 0.125) | | | 1.00 |" in out
    assert "| ember / torch | 0.062 | |" in out
