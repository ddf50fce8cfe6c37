"""quantile's backward for one q over one slice picks the stable order's entries by selection
(statistics._stable_at); a 2-element q takes the whole stable order: the same gradients."""
import numpy as np
import pytest

import ember


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("mode", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_one_q_backward_picks_what_the_stable_order_picks(name, mode):
    r = np.random.default_rng(4)
    x = r.integers(-3, 4, (6, 37)).astype(np.float32)       # (ties everywhere)
    x[0, :5], x[1, 3], x[2, 8] = -0.0, np.inf, -np.inf
    nan = x.copy()
    nan[3, ::5] = np.nan
    f = getattr(ember, name)
    for a, dim in [(x, None), (x[:, ::2].T, None), (x[2], 0), (nan, None), (nan[3], 0),
                   (np.full((2, 3), np.nan, np.float32), None), (x[:1, :1], None)]:
        for q in (0.0, 0.3, 0.5, 2 / 3, 1.0):
            t = ember.tensor(a, requires_grad=True)
            f(t, q, dim, interpolation=mode).sum().backward()
            two = ember.tensor(a, requires_grad=True)
            f(two, ember.tensor([q, q]), dim, interpolation=mode).sum().backward()
            np.testing.assert_array_equal(t.grad.numpy(), 0.5 * two.grad.numpy())
