"""Every registry op's samples, recorded into the graph IR, replayed through the dispatch and
replayed again after a JSON round trip, give what the op gave (generated from the registry)."""
import numpy as np
import pytest

import ember
from ember._graph import Interpreter, record
from ember._graph.record import flatten_tensors
from ember._graph.serialize import dumps, loads
from ember._ops.registry import all_ops
from helpers import accepted_samples

OPS = [d for d in all_ops() if d.samples is not None]


def _same(a, b):
    x, y = (np.asarray(t.detach().numpy(force=True)) for t in (a, b))
    return x.shape == y.shape and x.dtype == y.dtype and (
        np.array_equal(x, y) or (x.dtype.kind in "fc" and np.allclose(x, y, equal_nan=True,
                                                                         rtol=0, atol=0)))


@pytest.mark.parametrize("opdef", OPS, ids=str)
def test_record_replay_and_round_trip(opdef):
    samples = opdef.samples("cpu", ember.float32) or []
    if not samples:
        pytest.skip(f"{opdef.name} has no float32 samples")
    for s, args, kwargs, want in accepted_samples(opdef, ember.float32):
        ember.manual_seed(0)
        rec, _ = record(lambda *a, **k: opdef(*a, **k), args, kwargs)
        inputs = flatten_tensors((args, kwargs))
        ops = [n.target for n in rec.graph.nodes if n.op == "call_function"]
        assert opdef in ops, (opdef.name, s, ops)
        for g in (rec.graph, loads(dumps(rec.graph))):
            ember.manual_seed(0)
            got = Interpreter(_Holder(rec.constants), graph=g).run(*inputs)
            w, o = flatten_tensors(want), flatten_tensors(got)
            assert len(w) == len(o), (opdef.name, s)
            for a, b in zip(o, w):
                assert _same(a, b), (opdef.name, s)


class _Holder(ember.nn.Module):
    """The trace's constants as attributes, for get_attr."""

    def __init__(self, constants):
        super().__init__()
        for k, v in constants.items():
            self.register_buffer(k, v)
