"""``torch.utils.benchmark``'s fuzzer: random parameters (sizes, flags) drawn from stated
distributions, and tensors built from them (sizes, strides, layouts), for benchmarking an op
over many shapes. Parameters are drawn with NumPy's ``RandomState`` exactly as torch draws
them, so a seed gives torch's parameters, shapes and layouts; the tensors' values come from
``ember.rand`` after ``manual_seed``, as torch's from ``torch.rand``."""
import functools
import itertools
import math

import numpy as np

import ember

__all__ = ["Fuzzer", "FuzzedParameter", "ParameterAlias", "FuzzedTensor", "FuzzedSparseTensor"]


class FuzzedParameter:
    """A parameter drawn each step: ``distribution`` "loguniform" or "uniform" between
    ``minval`` and ``maxval`` (integers if both are ints), or a dict ``{value: probability}``.
    A ``strict`` one keeps its first draw while the fuzzer resamples the rest.

    Example:
        >>> import numpy as np
        >>> from ember.utils.benchmark import FuzzedParameter
        >>> FuzzedParameter("n", 1, 1024, distribution="loguniform").sample(
        ...     np.random.RandomState(0))
        44
    """

    def __init__(self, name, minval=None, maxval=None, distribution=None, strict=False):
        self._name, self._minval, self._maxval = name, minval, maxval
        self._distribution, self.strict = self._check_distribution(distribution), strict

    name = property(lambda self: self._name)

    def sample(self, state):
        if self._distribution == "loguniform":
            return self._loguniform(state)
        if self._distribution == "uniform":
            if isinstance(self._minval, int) and isinstance(self._maxval, int):
                return int(state.randint(low=self._minval, high=self._maxval + 1))
            return state.uniform(low=self._minval, high=self._maxval)
        return list(self._distribution)[state.choice(
            np.arange(len(self._distribution)), p=tuple(self._distribution.values()))]

    def _check_distribution(self, distribution):
        if not isinstance(distribution, dict):
            if distribution not in ("loguniform", "uniform"):
                raise AssertionError(f"Unknown distribution: {distribution}")
        else:
            # NOTE: torch 2.13 inverts the normalization test (it refuses every dict whose
            # probabilities sum to one, and takes those that don't, which NumPy's choice then
            # refuses); ember refuses the unnormalized ones, with torch's message
            if any(i < 0 for i in distribution.values()):
                raise AssertionError("Probabilities cannot be negative")
            if abs(sum(distribution.values()) - 1) > 1e-5:
                raise AssertionError("Distribution is not normalized")
            if self._minval is not None:
                raise AssertionError("When passing a custom distribution, 'minval' must be None")
            if self._maxval is not None:
                raise AssertionError("When passing a custom distribution, 'maxval' must be None")
        return distribution

    def _loguniform(self, state):
        lo, hi = self._minval, self._maxval
        out = int(2 ** state.uniform(low=np.log2(lo) if lo is not None else None,
                                     high=np.log2(hi) if hi is not None else None))
        return lo if lo is not None and out < lo else hi if hi is not None and out > hi else out


class ParameterAlias:
    """A parameter value that takes another parameter's (``alias_to``), e.g. in a custom
    distribution, so that fuzzed tensors sometimes broadcast."""

    def __init__(self, alias_to):
        self.alias_to = alias_to

    def __repr__(self):
        return f"ParameterAlias[alias_to: {self.alias_to}]"


def _itemsize(dtype):
    return 1 if dtype is ember.bool else dtype.itemsize


def _prod(values, base=1):
    # (in Python: NumPy's product could overflow and let an oversized tensor through)
    return functools.reduce(lambda x, y: int(x) * int(y), values, base)


class FuzzedTensor:
    """A tensor made each step: ``size`` (ints or parameter names) truncated or padded to
    ``dim_parameter``'s value, allocated ``steps`` times larger and sliced (strided memory),
    permuted to a non-contiguous layout with probability ``1 - probability_contiguous``;
    parameters giving more than ``max_elements`` (or fewer than ``min_elements``) elements, or
    an allocation above ``max_allocation_bytes``, are drawn again."""

    def __init__(self, name, size, steps=None, probability_contiguous=0.5, min_elements=None,
                 max_elements=None, max_allocation_bytes=None, dim_parameter=None,
                 roll_parameter=None, dtype=ember.float32, cuda=False, tensor_constructor=None):
        self._name, self._size, self._steps = name, size, steps
        self._probability_contiguous = probability_contiguous
        self._min_elements, self._max_elements = min_elements, max_elements
        self._max_allocation_bytes, self._dim_parameter = max_allocation_bytes, dim_parameter
        self._dtype, self._cuda, self._tensor_constructor = dtype, cuda, tensor_constructor

    name = property(lambda self: self._name)

    @staticmethod
    def default_tensor_constructor(size, dtype, **kwargs):
        if dtype.is_floating_point or dtype.is_complex:
            return ember.rand(size, dtype=dtype, device="cpu")
        return ember.randint(1, 127, size, dtype=dtype, device="cpu")

    def _make_tensor(self, params, state):
        size, steps, allocation_size = self._get_size_and_steps(params)
        raw = (self._tensor_constructor or self.default_tensor_constructor)(
            size=allocation_size, dtype=self._dtype, **params)
        if self._cuda:
            raw = raw.cuda()
        dim = len(size)
        order = np.arange(dim)
        if state.rand() > self._probability_contiguous:
            while dim > 1 and np.all(order == np.arange(dim)):
                order = state.permutation(raw.dim())
            raw = raw.permute(tuple(order)).contiguous().permute(tuple(np.argsort(order)))
        tensor = raw[tuple(slice(0, n * s, s) for n, s in zip(size, steps))]
        return tensor, {"numel": int(tensor.numel()), "order": order, "steps": steps,
                        "is_contiguous": tensor.is_contiguous(), "dtype": str(self._dtype)}

    def _get_size_and_steps(self, params):
        dim = params[self._dim_parameter] if self._dim_parameter is not None else len(self._size)

        def resolve(values):
            values = tuple(params.get(i, i) for i in values)[:dim]
            return values + (1,) * (dim - len(values))
        size, steps = resolve(self._size), resolve(self._steps or ())
        return size, steps, tuple(n * s for n, s in zip(size, steps))

    def satisfies_constraints(self, params):
        size, _, allocation_size = self._get_size_and_steps(params)
        n = _prod(size)
        if n < 0:
            raise AssertionError("Computed number of elements is negative")
        nbytes = _prod(allocation_size, base=_itemsize(self._dtype))

        def above(left, right):
            return left is not None and right is not None and left > right
        return not (above(n, self._max_elements) or above(self._min_elements, n) or
                    above(nbytes, self._max_allocation_bytes))


class FuzzedSparseTensor(FuzzedTensor):
    """A sparse COO tensor made each step: ``nnz`` = ceil(sum(size) * the ``density``
    parameter), the ``sparse_dim`` and ``coalesced`` parameters' values (an uncoalesced one
    repeats each index)."""

    def __init__(self, name, size, min_elements=None, max_elements=None, dim_parameter=None,
                 sparse_dim=None, nnz=None, density=None, coalesced=None, dtype=ember.float32,
                 cuda=False):
        super().__init__(name=name, size=size, min_elements=min_elements, max_elements=max_elements,
                         dim_parameter=dim_parameter, dtype=dtype, cuda=cuda)
        self._density, self._coalesced, self._sparse_dim = density, coalesced, sparse_dim

    @staticmethod
    def sparse_tensor_constructor(size, dtype, sparse_dim, nnz, is_coalesced):
        if isinstance(size, (int, float)):
            size = [size] * sparse_dim
        if all(size[d] <= 0 for d in range(sparse_dim)) and nnz != 0:
            raise AssertionError("invalid arguments")
        v_size = [nnz] + list(size[sparse_dim:])
        v = ember.rand(v_size, dtype=dtype) if dtype.is_floating_point else \
            ember.randint(1, 127, v_size, dtype=dtype)
        i = ember.rand(sparse_dim, nnz)
        i.mul_(ember.tensor(size[:sparse_dim]).unsqueeze(1).to(i))
        i = i.to(ember.long)
        if not is_coalesced:
            v, i = ember.cat([v, ember.randn_like(v)], 0), ember.cat([i, i], 1)
        x = ember.sparse_coo_tensor(i, v, ember.Size(size))
        return x.coalesce() if is_coalesced else x

    def _make_tensor(self, params, state):
        size, _, _ = self._get_size_and_steps(params)
        density = params["density"]
        nnz = math.ceil(sum(size) * density)
        if nnz > sum(size):
            raise AssertionError("nnz cannot exceed total number of elements")
        sparse_dim = min(params["sparse_dim"] if self._sparse_dim else len(size), len(size))
        tensor = self.sparse_tensor_constructor(size, self._dtype, sparse_dim, nnz,
                                                params["coalesced"])
        if self._cuda:
            tensor = tensor.cuda()
        sparse_dim = tensor.sparse_dim()
        return tensor, {"numel": int(tensor.numel()), "shape": tensor.size(),
                        "is_coalesced": tensor.is_coalesced(), "density": density,
                        "sparsity": 1.0 - density, "sparse_dim": sparse_dim,
                        "dense_dim": tensor.dense_dim(), "is_hybrid": len(size[sparse_dim:]) > 0,
                        "dtype": str(self._dtype)}


class Fuzzer:
    """Draws parameter sets (rejecting those ``constraints`` or the tensors refuse) and makes
    the tensors: ``take(n)`` yields ``(tensors, tensor_properties, params)`` n times. The seed
    seeds NumPy's ``RandomState`` and, through it, ``ember.manual_seed``.

    Example:
        >>> from ember.utils.benchmark import Fuzzer, FuzzedParameter, FuzzedTensor
        >>> fuzzer = Fuzzer(parameters=[FuzzedParameter("k", 1, 16, distribution="uniform")],
        ...                 tensors=[FuzzedTensor("x", size=("k", 4))], seed=0)
        >>> [(p["k"], tuple(t["x"].shape)) for t, _, p in fuzzer.take(2)]
        [(6, (6, 4)), (5, (5, 4))]
    """

    def __init__(self, parameters, tensors, constraints=None, seed=None):
        if seed is None:
            seed = int(np.random.RandomState().randint(0, 2 ** 32 - 1, dtype=np.int64))
        self._seed = seed
        self._parameters = Fuzzer._unpack(parameters, FuzzedParameter)
        self._tensors = Fuzzer._unpack(tensors, FuzzedTensor)
        self._constraints = constraints or ()
        overlap = {p.name for p in self._parameters} & {t.name for t in self._tensors}
        if overlap:
            raise ValueError(f"Duplicate names in parameters and tensors: {overlap}")
        self._rejections = self._total_generated = 0

    @staticmethod
    def _unpack(values, cls):
        return tuple(itertools.chain.from_iterable([[i] if isinstance(i, cls) else i
                                                    for i in values]))

    def take(self, n):
        state = np.random.RandomState(self._seed)
        ember.manual_seed(int(state.randint(low=0, high=2 ** 63, dtype=np.int64)))
        for _ in range(n):
            params = self._generate(state)
            made = {t.name: t._make_tensor(params, state) for t in self._tensors}
            yield ({k: v[0] for k, v in made.items()}, {k: v[1] for k, v in made.items()}, params)

    @property
    def rejection_rate(self):
        return self._rejections / self._total_generated if self._total_generated else 0.0

    def _generate(self, state):
        strict = {}
        for _ in range(1000):
            cand = {}
            for p in self._parameters:
                if p.strict and p.name in strict:
                    cand[p.name] = strict[p.name]
                else:
                    cand[p.name] = p.sample(state)
                    if p.strict:
                        strict[p.name] = cand[p.name]
            cand = self._resolve_aliases(cand)
            self._total_generated += 1
            if not all(f(cand) for f in self._constraints) or \
                    not all(t.satisfies_constraints(cand) for t in self._tensors):
                self._rejections += 1
                continue
            return cand
        raise ValueError("Failed to generate a set of valid parameters.")

    @staticmethod
    def _resolve_aliases(params):
        params, keys = dict(params), list(params)
        count = sum(isinstance(v, ParameterAlias) for v in params.values())
        while count:
            for k in keys:
                if isinstance(params[k], ParameterAlias):
                    params[k] = params[params[k].alias_to]
            new = sum(isinstance(v, ParameterAlias) for v in params.values())
            if new == count:
                raise ValueError(f"ParameterAlias cycle detected\n{params}")
            count = new
        return params
