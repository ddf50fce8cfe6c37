"""SobolEngine against torch: unscrambled sequences bit for bit (every shipped dimension),
the scramble step on identical random matrices, draw/draw_base2/fast_forward/reset, errors."""
import numpy as np
import pytest

import ember
from ember import quasirandom as Q

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dim", [1, 2, 7, 40, 1111])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unscrambled_draws_equal_torch(dim, dtype):
    e, t = ember.quasirandom.SobolEngine(dim), torch.quasirandom.SobolEngine(dim)
    assert repr(e) == repr(t)
    np.testing.assert_array_equal(e.sobolstate.numpy(), t.sobolstate.numpy())
    for n in (1, 5, 16, 3):
        a = e.draw(n, dtype=getattr(ember, dtype))
        b = t.draw(n, dtype=getattr(torch, dtype))
        assert str(a.dtype) == str(b.dtype)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    e.fast_forward(7), t.fast_forward(7)
    np.testing.assert_array_equal(e.draw(4).numpy(), t.draw(4).numpy())
    e.reset(), t.reset()
    e.fast_forward(3), t.fast_forward(3)
    np.testing.assert_array_equal(e.draw(2).numpy(), t.draw(2).numpy())
    assert e.num_generated == t.num_generated


def test_draw_base2_and_errors():
    e, t = ember.quasirandom.SobolEngine(3), torch.quasirandom.SobolEngine(3)
    np.testing.assert_array_equal(e.draw_base2(3).numpy(), t.draw_base2(3).numpy())
    for L, s in ((ember, e), (torch, t)):
        with pytest.raises(ValueError, match="require n to be a power of 2. 8 points"):
            s.draw_base2(2)
        with pytest.raises(ValueError, match=r"Supported range of dimensionality for "
                                             r"SobolEngine is \[1, 21201\]"):
            L.quasirandom.SobolEngine(0)
    with pytest.raises(ValueError, match="ships Joe & Kuo's direction numbers for 1111"):
        ember.quasirandom.SobolEngine(2000)


def test_scramble_step_equals_torchs():
    g = np.random.default_rng(0)
    dim = 6
    ltm = np.tril(g.integers(0, 2, (dim, 30, 30)))
    t_state = torch.quasirandom.SobolEngine(dim).sobolstate.clone()
    torch._sobol_engine_scramble_(t_state, torch.tensor(ltm), dim)
    e_state = Q._scramble(Q._table()[:dim].copy(), ltm)
    np.testing.assert_array_equal(e_state, t_state.numpy())


def test_scrambled_points_are_a_digital_net():
    e = ember.quasirandom.SobolEngine(4, scramble=True, seed=3)
    assert repr(e) == "SobolEngine(dimension=4, scramble=True, seed=3)"
    x = e.draw_base2(6).numpy()
    assert x.min() >= 0 and x.max() < 1
    # every 1/8-wide stratum of each coordinate holds 64/8 points (the net's balance)
    for j in range(4):
        assert np.bincount((x[:, j] * 8).astype(int), minlength=8).tolist() == [8] * 8
    again = ember.quasirandom.SobolEngine(4, scramble=True, seed=3).draw_base2(6).numpy()
    np.testing.assert_array_equal(x, again)
