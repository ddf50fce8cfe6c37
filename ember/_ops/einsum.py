"""einsum: parsed to label lists, then contracted pairwise in a greedy order, each pair as one
batched GEMM (transpose + reshape + matmul) so BLAS does the work."""

import math

import numpy as np

import ember

from .linalg import _check_dtypes, matmul
from .tangents import PRODUCT
from .registry import op
from .samples import ErrorSample, Sample, const, make

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # (no `import string`)


def _error(msg):
    return RuntimeError(f"einsum(): {msg}")


def _parse(equation, shapes):
    """(one label list per operand, output labels). Labels are letters; the dims an ellipsis
    covers get the labels -1, -2, ... counted from the right, so they line up across operands
    as broadcasting does."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(shapes):
        raise _error("fewer operands were provided than specified in the equation")
    if len(terms) < len(shapes):
        raise _error("more operands were provided than specified in the equation")
    ops, n_ell = [], 0
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        head, ell, tail = term.partition("...")
        for c in head + tail:
            if c not in _LETTERS:
                raise _error(f"invalid subscript given at index {eq.index(c)} in the "
                             f"equation string, subscripts must be in [a-zA-Z]")
        k = len(shape) - len(head) - len(tail)
        if (k != 0 and not ell) or k < 0:
            raise _error(f"the number of subscripts in the equation ({len(head + tail)}) "
                         f"{'is more than' if ell else 'does not match'} the number of "
                         f"dimensions ({len(shape)}) for operand {i}"
                         f"{'' if ell else ' and no ellipsis was given'}")
        n_ell = max(n_ell, k)
        ops.append(list(head) + list(range(-k, 0)) + list(tail))
    if arrow:
        head, ell, tail = rhs.partition("...")
        out = list(head) + (list(range(-n_ell, 0)) if ell else []) + list(tail)
        seen = {l for o in ops for l in o}
        for c in head + tail:
            if c not in seen:
                raise _error(f"output subscript {c} does not appear in the equation for any "
                             "input operand")
            if (head + tail).count(c) > 1:
                raise _error(f"output subscript {c} appears more than once in the output")
    else:
        # NOTE: as torch (and NumPy), the implicit output is the broadcast dims, then the
        # letters seen exactly once, in alphabetical order with upper case first
        counts = {}
        for o in ops:
            for l in o:
                counts[l] = counts.get(l, 0) + 1
        out = list(range(-n_ell, 0)) + sorted(l for l, c in counts.items()
                                              if isinstance(l, str) and c == 1)
    return ops, out


def _sizes(ops, shapes):
    """The size of each label, with torch's error where two sizes do not broadcast."""
    sizes = {}
    for i, (labels, shape) in enumerate(zip(ops, shapes)):
        for l, s in zip(labels, shape):
            old = sizes.get(l, 1)
            if s != old and 1 not in (s, old):
                name = "ellipsis dimension" if isinstance(l, int) else f"subscript {l}"
                raise _error(f"{name} has size {s} for operand {i} which does not broadcast "
                             f"with previously seen size {old}")
            sizes[l] = max(s, old)
    return sizes


def _prepare(xp, a, labels, sizes, needed):
    """Make each label appear once in ``a``: take diagonals of repeated labels, drop size-1
    dims that broadcast against a larger size elsewhere, and sum labels nobody else needs."""
    labels = list(labels)
    for l in set(labels):
        while labels.count(l) > 1:
            i = labels.index(l)
            j = labels.index(l, i + 1)
            a = xp.diagonal(a, axis1=i, axis2=j)        # the diagonal moves to the end
            labels = [x for k, x in enumerate(labels) if k not in (i, j)] + [l]
    drop = [i for i, l in enumerate(labels) if a.shape[i] == 1 and sizes[l] > 1]
    if drop:
        a = a.reshape([s for i, s in enumerate(a.shape) if i not in drop])
        labels = [l for i, l in enumerate(labels) if i not in drop]
    axes = tuple(i for i, l in enumerate(labels) if l not in needed)
    if axes:
        a = a.sum(axis=axes)
        labels = [l for i, l in enumerate(labels) if i not in axes]
    return a, labels


def _contract(xp, a, la, b, lb, keep):
    """One pair as a batched GEMM: (batch, free_a, summed) @ (batch, summed, free_b)."""
    batch = [l for l in la if l in lb and l in keep]
    summed = [l for l in la if l in lb and l not in keep]
    fa = [l for l in la if l not in lb]
    fb = [l for l in lb if l not in la]
    size = dict(zip(la, a.shape)) | dict(zip(lb, b.shape))
    n = [math.prod(size[l] for l in g) for g in (batch, fa, summed, fb)]
    a2 = xp.transpose(a, [la.index(l) for l in batch + fa + summed]).reshape(n[0], n[1], n[2])
    b2 = xp.transpose(b, [lb.index(l) for l in batch + summed + fb]).reshape(n[0], n[2], n[3])
    out = matmul.fwd(xp, a2, b2).reshape([size[l] for l in batch + fa + fb])
    return out, batch + fa + fb


def _cost(la, lb, sizes):
    # greedy rule (opt_einsum's): the pair whose result is smallest next to its inputs
    def numel(ls):
        return float(math.prod(sizes[l] for l in ls))     # (np.prod: 10x the call cost)
    return numel(set(la) | set(lb)) - numel(la) - numel(lb)


# (equation, shapes) -> _pair_plan's plan: a small call's label work costs more than its GEMM
_PAIRS = {}


def _pair_plan(ops, out, sizes, operands):
    """For two operands whose labels each appear once, at their full size, and are all kept or
    contracted (no diagonal, broadcast or lone sum: _prepare has nothing to do), the loop
    below in shapes only: (a's transpose and 3-d shape, b's, the product's shape and the
    output transpose); None for any other call."""
    if len(ops) != 2 or len(set(out)) != len(out):
        return None
    (la, lb), (a, b) = ops, operands
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or not set(out) <= set(la) | set(lb) \
            or any(sizes[l] != n for l, n in zip(la + lb, a.shape + b.shape)) or \
            not set(la) <= set(out) | set(lb) or not set(lb) <= set(out) | set(la):
        return None
    keep = set(out)
    batch = [l for l in la if l in lb and l in keep]
    summed = [l for l in la if l in lb and l not in keep]
    fa, fb = [l for l in la if l not in lb], [l for l in lb if l not in la]
    n = [math.prod(sizes[l] for l in g) for g in (batch, fa, summed, fb)]
    got = batch + fa + fb
    perm = [got.index(l) for l in out]
    return ([la.index(l) for l in batch + fa + summed], (n[0], n[1], n[2]),
            [lb.index(l) for l in batch + summed + fb], (n[0], n[2], n[3]),
            [sizes[l] for l in got], None if perm == sorted(perm) else perm)


def _pair(xp, a, b, pa, sa, pb, sb, shape, perm):
    """_contract's GEMM and the final transpose, from a plan of _pair_plan."""
    out = matmul.fwd(xp, xp.transpose(a, pa).reshape(sa), xp.transpose(b, pb).reshape(sb))
    out = out.reshape(shape)
    return out if perm is None else xp.transpose(out, perm)


@op("einsum", method=False, function=False)
def einsum_op(xp, equation, operands):
    """Einstein summation over ``operands`` as ``equation`` spells it; see :func:`einsum`."""
    if not operands:
        raise _error("must provide at least one operand")
    for o in operands[1:]:
        _check_dtypes("einsum", operands[0], o)
    key = (equation,) + tuple(o.shape for o in operands)
    plan = _PAIRS.get(key)
    if plan is not None:
        return _pair(xp, *operands, *plan)
    ops, out = _parse(equation, [o.shape for o in operands])
    sizes = _sizes(ops, [o.shape for o in operands])
    plan = _pair_plan(ops, out, sizes, operands)
    if plan is not None:
        if len(_PAIRS) > 512:
            _PAIRS.clear()
        _PAIRS[key] = plan
        return _pair(xp, *operands, *plan)
    items = []
    for i, (a, labels) in enumerate(zip(operands, ops)):
        needed = set(out).union(*(ops[j] for j in range(len(ops)) if j != i))
        items.append(_prepare(xp, a, labels, sizes, needed))
    while len(items) > 1:
        best = None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                c = _cost(items[i][1], items[j][1], sizes)
                if best is None or c < best[0]:
                    best = (c, i, j)
        _, i, j = best
        (a, la), (b, lb) = items[i], items[j]
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        keep = set(out).union(*(ls for _, ls in rest))
        a, la = _prepare(xp, a, la, sizes, keep | set(lb))
        b, lb = _prepare(xp, b, lb, sizes, keep | set(la))
        rest.append(_contract(xp, a, la, b, lb, keep))
        items = rest
    a, la = _prepare(xp, *items[0], sizes, set(out))
    present = [l for l in out if l in la]
    a = xp.transpose(a, [la.index(l) for l in present])
    # a label that was size 1 everywhere it is left out by _prepare's broadcast: put it back
    return xp.ascontiguousarray(a).reshape([sizes[l] if l in la else 1 for l in out]) \
        if len(present) < len(out) else a


def _letters(ops, out):
    """Name every label (ellipsis dims included) with a letter, for explicit equations."""
    names, free = {}, iter(c for c in _LETTERS if c not in {l for o in ops for l in o})
    for l in [l for o in ops for l in o] + out:
        if l not in names:
            names[l] = l if isinstance(l, str) else next(free)
    return names


@einsum_op.vjp(save=("operands",))
def _(g, equation, operands):
    key = (equation,) + tuple(tuple(o.shape) for o in operands)
    if (plans := _GRADS.get(key)) is None:
        if len(_GRADS) > 512:
            _GRADS.clear()
        plans = _GRADS[key] = _grad_plans(equation, [k for k in key[1:]])
    grads = []
    for i, (a, (eq, dims, unsq, shape, diag)) in enumerate(zip(operands, plans)):
        if not a.requires_grad:
            grads.append(None)
            continue
        gi = einsum(eq, g, *[o.conj() if o.is_complex() else o
                             for j, o in enumerate(operands) if j != i])
        if dims:
            gi = gi.sum(dims, keepdim=True)
        for k in unsq:
            gi = gi.unsqueeze(k)
        if shape is not None:
            gi = gi.expand(shape)
        grads.append(_on_diagonals(gi, *diag) if diag else gi)
    return None, grads


_GRADS = {}     # (equation, shapes) -> _grad_plans': a small call's label work is most of it


def _grad_plans(equation, shapes):
    """Per operand, its gradient's (equation, dims to sum, dims to unsqueeze, shape to expand
    to or None, _on_diagonals' arguments or None). d/dA_i: the same contraction with g in
    place of the output and operand i's labels as the output; labels only operand i has come
    back by expansion, repeats by a diagonal."""
    ops, out = _parse(equation, shapes)
    sizes = _sizes(ops, shapes)
    name = _letters(ops, out)
    plans = []
    for i, (shape, labels) in enumerate(zip(shapes, ops)):
        others = [j for j in range(len(ops)) if j != i]
        avail = set(out).union(*(ops[j] for j in others))
        uniq = list(dict.fromkeys(labels))
        keep = [l for l in uniq if l in avail]
        terms = ["".join(name[l] for l in out)] + ["".join(name[l] for l in ops[j]) for j in others]
        eq = ",".join(terms) + "->" + "".join(name[l] for l in keep)
        own = {l: s for l, s in zip(labels, shape)}
        # sum where operand i broadcast a size-1 dim, expand where the others did
        dims = [k for k, l in enumerate(keep) if own[l] == 1 and sizes[l] > 1]
        got = [1 if l not in avail or own[l] == 1 else sizes[l] for l in uniq]
        want = [own[l] for l in uniq]
        plans.append((eq, dims, [k for k, l in enumerate(uniq) if l not in avail],
                      None if got == want else want,
                      (uniq, labels, name, own) if len(uniq) < len(labels) else None))
    return plans


def _on_diagonals(gi, uniq, labels, name, own):
    """Spread ``gi`` (dims: ``uniq``) over the diagonals of an operand whose labels repeat:
    each repeat gets a fresh letter tied to the first by an identity matrix."""
    free = iter(c for c in _LETTERS if c not in name.values())
    terms, eyes, full, seen = ["".join(name[l] for l in uniq)], [], [], set()
    for l in labels:
        if l in seen:
            f = next(free)
            terms.append(name[l] + f)
            eyes.append(ember.eye(own[l], dtype=gi.dtype, device=gi.device))
            full.append(f)
        else:
            seen.add(l)
            full.append(name[l])
    return einsum(",".join(terms) + "->" + "".join(full), gi, *eyes)


def _einsum_meta(equation, operands):
    ops, out = _parse(equation, [o.shape for o in operands])
    sizes = _sizes(ops, [o.shape for o in operands])
    from .meta import empty
    return empty([sizes[l] for l in out], np.result_type(*operands))


einsum_op.meta = _einsum_meta
einsum_op.torch_fn = "einsum"


def einsum(equation, *operands):
    """Einstein summation: ``einsum("ij,jk->ik", a, b)`` is ``a @ b``. Operands may also come
    as one list; ``...`` stands for broadcast dims; without ``->`` the output is the broadcast
    dims then the letters seen once, sorted. Pairs are contracted in a greedy order, each as
    one batched matrix product. See https://pytorch.org/docs/stable/generated/torch.einsum.html

    Example:
        >>> a, b = ember.ones(2, 3), ember.ones(3, 4)
        >>> ember.einsum("ij,jk->ik", a, b).shape, ember.einsum("ii", ember.eye(3))
        (torch.Size([2, 4]), tensor(3.))
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    if len(operands) and not isinstance(equation, str):
        raise NotImplementedError("einsum: the sublist form is not supported; spell the "
                                  "equation as a string")
    return einsum_op(equation, list(operands))


def _samples(dev, dt):
    if dt.category < 1:
        return []

    def m(*shape, seed=0):
        return make(shape, dt, seed=seed)
    return [Sample("ij,jk->ik", [m(3, 4), m(4, 5, seed=1)]),
            Sample("bij,bjk", [m(2, 3, 4), m(2, 4, 5, seed=1)]),
            Sample("ii->i", [m(3, 3)]), Sample("ii", [m(3, 3)]), Sample("iji->j", [m(3, 2, 3)]),
            Sample("ij->", [m(3, 4)]), Sample("ij", [m(3, 4)]), Sample("ji", [m(3, 4)]),
            Sample("i,j->ij", [m(3), m(4, seed=1)]),
            Sample("...ij,...jk->...ik", [m(2, 1, 3, 4), m(5, 4, 2, seed=1)]),
            Sample("b...,b->...", [m(2, 3, 4), m(2, seed=1)]),
            Sample("i,i,i->i", [m(4), m(4, seed=1), m(4, seed=2)]),
            Sample("ab,bc,cd,de->ae", [m(2, 3), m(3, 6), m(6, 1), m(1, 4, seed=3)]),
            Sample("ijk,ikl,lm->jm", [m(2, 3, 4), m(2, 4, 5, seed=1), m(5, 2, seed=2)]),
            Sample("bhqd,bhkd->bhqk", [m(2, 2, 3, 4), m(2, 2, 5, 4, seed=1)]),
            Sample("ij,kj->ikj", [m(1, 4), m(3, 4, seed=1)]),
            Sample("iJ,Jk", [m(3, 4), m(4, 2, seed=1)])]


einsum_op.samples = _samples
einsum_op.errors = [
    ErrorSample(Sample("ij,jk", [const(2, 3), const(4, 5)]), RuntimeError,
                "subscript j has size 4 for operand 1 which does not broadcast with "
                "previously seen size 3"),
    ErrorSample(Sample("ij,jk->ik", [const(2, 3)]), RuntimeError,
                "fewer operands were provided than specified in the equation"),
    ErrorSample(Sample("ij->ik", [const(2, 3)]), RuntimeError,
                "output subscript k does not appear in the equation for any input operand"),
    ErrorSample(Sample("ij", [const(2, 3, 4)]), RuntimeError,
                r"the number of subscripts in the equation \(2\) does not match the number "
                r"of dimensions \(3\) for operand 0 and no ellipsis was given"),
    ErrorSample(Sample("i,i", [const(2), const(2, dtype=np.float64)]), RuntimeError,
                "expected m1 and m2 to have the same dtype|expected scalar type")]
einsum_op.tol = {"bfloat16": (3e-2, 6e-2)}       # intermediates round to bfloat16 per pair
FUNCTIONS = {"einsum": einsum}                     # ember.<name> (see lazy.py)

einsum_op.jvp = PRODUCT      # (forward mode: tangents.py)
