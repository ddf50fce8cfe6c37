"""Ops with several results return named tuples as ``torch.return_types`` does: a tuple subclass
of the same name, with the same field names, holding the same values (torch as the oracle)."""
import pickle

import numpy as np
import pytest

import ember
from ember._ops.registry import all_ops, get
from oracle import assert_close, torch

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])     # symmetric, SPD
W = np.array([[2.0, -1.0, 0.5, 1.0], [0.3, 1.5, -2.0, 0.2], [1.0, 0.4, 0.7, -0.6]])
B = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
X = np.array([[3.0, 1.0, 2.0, 1.0], [0.5, 5.0, 4.0, np.nan]])
U = np.triu(A)


def _svd_gauge(out):
    U_, S, V = out
    U_, S, Vh = get("linalg_svd").gauge((U_, S, V.mH))
    return U_, S, Vh.mH


# name: (call with the library L and the arrays as L tensors, gauge for outputs defined up to
# sign or phase); torch's type is named after the name before the first "."
CASES = {
    "max": (lambda L, t: L.max(t["x"], 1), None),
    "min": (lambda L, t: t["x"].min(1, keepdim=True), None),
    "median": (lambda L, t: L.median(t["x"], 1), None),
    "nanmedian": (lambda L, t: t["x"].nanmedian(0), None),
    "mode": (lambda L, t: L.mode(t["x"].floor(), 1), None),
    "kthvalue": (lambda L, t: L.kthvalue(t["x"], 2, 1), None),
    "sort": (lambda L, t: t["x"].sort(1, descending=True), None),
    "topk": (lambda L, t: L.topk(t["w"], 2), None),
    "cummax": (lambda L, t: L.cummax(t["x"], 1), None),
    "cummin": (lambda L, t: t["x"].cummin(0), None),
    "aminmax": (lambda L, t: L.aminmax(t["w"], dim=0), None),
    "frexp": (lambda L, t: L.frexp(t["w"]), None),
    "histogram": (lambda L, t: L.histogram(t["w"].reshape(-1), 4), None),
    "histogramdd": (lambda L, t: L.histogramdd(t["w"].T.contiguous()[:, :2], [2, 3]), None),
    "slogdet": (lambda L, t: L.slogdet(t["a"]), None),
    "linalg_slogdet": (lambda L, t: L.linalg.slogdet(t["a"]), None),
    "svd": (lambda L, t: L.svd(t["w"]), _svd_gauge),
    "svd.method": (lambda L, t: t["w"].mT.svd(), _svd_gauge),
    "linalg_svd": (lambda L, t: L.linalg.svd(t["w"], full_matrices=False),
                   get("linalg_svd").gauge),
    "qr": (lambda L, t: L.qr(t["w"].mT), get("linalg_qr").gauge),
    "linalg_qr": (lambda L, t: L.linalg.qr(t["w"]), get("linalg_qr").gauge),
    "geqrf": (lambda L, t: L.geqrf(t["w"].mT), None),
    "geqrf.method": (lambda L, t: t["w"].geqrf(), None),
    "histogram.method": (lambda L, t: t["x"][:, :3].reshape(-1).histogram(3, range=(0., 6.)),
                         None),
    "linalg_eigh": (lambda L, t: L.linalg.eigh(t["a"]), get("linalg_eigh").gauge),
    "linalg_eig": (lambda L, t: L.linalg.eig(t["a"]), get("linalg_eig").gauge),
    "linalg_lu_factor": (lambda L, t: L.linalg.lu_factor(t["w"]), None),
    "linalg_lu_factor_ex": (lambda L, t: L.linalg.lu_factor_ex(t["a"]), None),
    "linalg_lu": (lambda L, t: L.linalg.lu(t["w"]), None),
    "lu_unpack": (lambda L, t: L.lu_unpack(*L.linalg.lu_factor(t["a"])), None),
    "linalg_lstsq": (lambda L, t: L.linalg.lstsq(t["a"], t["b"]), None),
    "linalg_inv_ex": (lambda L, t: L.linalg.inv_ex(t["a"]), None),
    "linalg_cholesky_ex": (lambda L, t: L.linalg.cholesky_ex(t["a"]), None),
    "linalg_solve_ex": (lambda L, t: L.linalg.solve_ex(t["a"], t["b"]), None),
    "triangular_solve": (lambda L, t: L.triangular_solve(t["b"], t["u"]), None),
    "triangular_solve.method": (lambda L, t: t["b"].triangular_solve(t["u"], upper=True,
                                                                     transpose=True), None),
}


def _run(L, name):
    t = {k: L.tensor(v) for k, v in dict(a=A, w=W, b=B, x=X, u=U).items()}
    return CASES[name][0](L, t)


@pytest.mark.parametrize("name", CASES)
def test_named_tuple_like_torch(name):
    t, e = _run(torch, name), _run(ember, name)
    assert type(t) is not tuple and isinstance(t, tuple), f"torch's {name} is no structseq"
    assert isinstance(e, tuple) and type(e) is not tuple, f"{name}: a plain {type(e)}"
    assert type(e).__name__ == type(t).__name__
    assert e._fields == type(t).__match_args__          # (a structseq lists its fields there)
    for field in e._fields:                               # the fields read the tuple's items
        assert getattr(e, field) is e[e._fields.index(field)]
    gauge = CASES[name][1]
    if gauge is not None:
        t, e = gauge(t), gauge(e)
    assert_close(e, t, what=name)


def test_one_type_per_name_in_ember_return_types():
    a = ember.tensor(X)
    r = ember.max(a, 1)
    assert type(r) is ember.return_types.max is type(a.max(1))
    assert type(ember.svd(ember.tensor(W))) is ember.return_types.svd
    assert type(ember.linalg.slogdet(ember.tensor(A))) is ember.return_types.linalg_slogdet
    assert ember.return_types.max.__module__ == "ember.return_types"
    assert "linalg_svd" in dir(ember.return_types) and "aminmax" in dir(ember.return_types)
    # one name, one place: the compositions' table names no OpDef's result
    assert not set(ember.return_types.FIELDS) & {d.name for d in all_ops() if d.returns}
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ember.return_types.nope


def test_repr_and_pickle_like_torch():
    r = ember.sort(ember.tensor([2.0, 1.0]))
    assert repr(r) == ("ember.return_types.sort(\nvalues=tensor([1., 2.]),\n"
                       "indices=tensor([1, 0]))")
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is type(r) and back.indices.tolist() == [1, 0]


def test_import_makes_no_named_tuple():
    # the types are made on first use: ``import ember`` creates none of them
    import subprocess
    import sys
    code = ("import ember, sys; from ember import return_types as r; "
            "assert not r._TYPES, r._TYPES; ember.max(ember.ones(2, 2), 0); "
            "assert list(r._TYPES) == ['max'], r._TYPES")
    subprocess.run([sys.executable, "-c", code], check=True)
