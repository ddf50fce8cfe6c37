"""Op families that load on first use, so ``import ember`` pays only for the common ops.

A family listed in ``FAMILIES`` is imported the first time one of its names is reached:
``ember.<name>`` (ember's module ``__getattr__``), ``Tensor.<name>`` (a stub method that
loads the family and puts the real methods in its place), ``registry.get(name)``, or the
``ember.special`` / ``ember.linalg`` / ``ember.fft`` / ``ember.sparse`` namespaces, which
import their families themselves. ``registry.all_ops()`` loads them all, so the tests and
tools see every op.

Which names each family defines is read off the families themselves and kept in
``_lazy_index.py``; after adding an op to a lazy family, rewrite it with
``python -c "from ember._ops import lazy; lazy.write_index()"`` (tests/test_import.py fails
while it is out of date).
"""
import _thread
import importlib
import sys
import textwrap

from . import install_methods, public_functions
from ._lazy_index import INDEX as _INDEX
from .registry import get

# in dependency order (a family imports those it builds on: bessel and polynomials use special,
# decompositions uses solvers...), so each name is indexed under the family defining it.
# "._numerics" is ember._numerics: compositions of ops, with FUNCTIONS and METHODS tables, as
# are "._composites" (torch's plain functions and methods besides the ops) and "._aten_nn".
FAMILIES = ("._composites", "scatter", "selection", "reorder",
            "pointwise_math", "special", "bessel", "polynomials", "solvers", "decompositions",
            "eigen", "ldl", "linalg_functions", "fft", "spectral", "sparse", "sorting",
            "statistics", "scans", "counting", "nn", "losses", "activations", "nn_rows",
            "normalization", "conv", "pooling", "recurrent", "einsum", "pointwise_numeric",
            "closeness", "complex", "._numerics", "._aten_nn")

_installed = set()
_lock = _thread.RLock()     # (re-entrant: a family's import may reach another's ops)


def module_name(family):
    """The module of ``family``: ``ember._ops.<family>``, or ``ember.<name>`` for ``.<name>``."""
    if family.startswith("."):
        return __package__.rpartition(".")[0] + family
    return f"{__package__}.{family}"


# the index file keeps each list as one string of names, so it reads as a table
INDEX = {fam: {kind: names.split() for kind, names in entry.items()}
         for fam, entry in _INDEX.items()}


def _where(kind):
    """``{name: family}`` for the functions, methods or ops of the lazy families."""
    return {n: fam for fam, entry in INDEX.items() for n in entry[kind]}


FUNCTIONS, METHODS, OPS = _where("functions"), _where("methods"), _where("ops")


class _LazyMethod:
    """``Tensor.<name>`` of a family not loaded yet: the first access loads the family, which
    replaces every stub of that family by the real method."""
    __slots__ = ("family", "name")

    def __init__(self, family, name):
        self.family, self.name = family, name

    def __get__(self, obj, owner=None):
        load(self.family)
        owner = owner or type(obj)
        for klass in owner.__mro__:
            if klass.__dict__.get(self.name) is self:     # stale index: no such method after all
                delattr(klass, self.name)
                raise AttributeError(f"'{owner.__name__}' object has no attribute '{self.name}'")
        return getattr(owner if obj is None else obj, self.name)


def install_stubs(Tensor):
    """Put a stub on ``Tensor`` for each method of a family not loaded yet."""
    for name, family in METHODS.items():
        if family not in _installed and name not in Tensor.__dict__:
            setattr(Tensor, name, _LazyMethod(family, name))


def _methods(mod):
    """A family's ``METHODS`` table ``{name: function}`` for the names Tensor does not have yet
    (the compositions' tables; sparse's tuple lists methods it sets itself)."""
    methods = getattr(mod, "METHODS", None)
    return methods if isinstance(methods, dict) else {}


def load(family):
    """Import the op family ``family`` and give ember and Tensor its functions and methods."""
    if family in _installed:
        return
    with _lock:
        if family in _installed:
            return
        mod = importlib.import_module(module_name(family))
        from .._tensor import Tensor
        # the real methods take the stubs' places (not deleted first: another thread may be
        # reading one, and it waits on the lock in load() for the method to be there)
        stubs = {n for n in INDEX[family]["methods"]
                 if isinstance(Tensor.__dict__.get(n), _LazyMethod)}
        ops = [get(n) for n in INDEX[family]["ops"]]
        install_methods(Tensor, ops, over=stubs)
        for name, f in _methods(mod).items():        # and those it lists itself
            if name in stubs or not hasattr(Tensor, name):
                setattr(Tensor, name, f)
        for name in stubs:                           # a stale index: no such method after all
            if isinstance(Tensor.__dict__.get(name), _LazyMethod):
                delattr(Tensor, name)
        namespace = vars(sys.modules[__package__.rpartition(".")[0]])      # ember's
        # with the plain functions a family adds (lu, svd, einsum, sparse_coo_tensor...)
        for name, f in {**public_functions(ops), **getattr(mod, "FUNCTIONS", {})}.items():
            namespace.setdefault(name, f)
        _installed.add(family)


def load_all():
    """Load every lazy family (the tests and tools want the whole registry)."""
    for family in FAMILIES:
        load(family)


def build_index():
    """``{family: {"ops", "functions", "methods"}}`` read off the families by importing them in
    order, in a fresh process (see :func:`write_index`), before anything else loads them."""
    from . import registry
    from .._tensor import Tensor
    index = {}
    for family in FAMILIES:
        if module_name(family) in sys.modules:
            raise RuntimeError(f"build_index: {family} is already loaded (use a fresh process)")
        ops0, methods0 = set(registry._REGISTRY), dict(Tensor.__dict__)
        mod = importlib.import_module(module_name(family))
        ops = [registry._REGISTRY[n] for n in sorted(set(registry._REGISTRY) - ops0)]
        functions = {n for d in ops if d.function for n in (d.name,) + tuple(d.aliases)}
        functions |= set(getattr(mod, "FUNCTIONS", {}))
        methods = {n for d in ops if d.method for n in (d.name,) + tuple(d.aliases)}
        methods |= {n + "_" for d in ops if d.inplace for n in (d.name,) + tuple(d.aliases)}
        # and those the module sets itself (new names, or in place of their stubs)
        methods |= {n for n, f in Tensor.__dict__.items() if methods0.get(n) is not f}
        methods |= {n for n in _methods(mod) if isinstance(
            Tensor.__dict__.get(n), _LazyMethod) or not hasattr(Tensor, n)}
        index[family] = {"ops": tuple(d.name for d in ops), "functions": tuple(sorted(functions)),
                         "methods": tuple(sorted(methods))}
    return index


def index_source(index):
    """The text of ``_lazy_index.py`` holding ``index``."""
    lines = ['"""The names each lazy op family defines (see lazy.py). Generated by',
             '``python -c "from ember._ops import lazy; lazy.write_index()"``: do not edit."""',
             "", "INDEX = {"]
    for family, entry in index.items():
        lines.append(f"    {family!r}: {{")
        for kind, names in entry.items():
            head = f"        {kind!r}: "
            chunks = textwrap.wrap(" ".join(names), 85, initial_indent=" " * (len(head) - 12),
                                   break_long_words=False, break_on_hyphens=False) or [""]
            pieces = [repr(c.lstrip() + " ") for c in chunks[:-1]] + [repr(chunks[-1].lstrip())]
            lines += [head + pieces[0]] + [" " * 12 + p for p in pieces[1:]]
            lines[-1] += ","
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_index():
    """Rewrite ``_lazy_index.py`` (``python -c "from ember._ops import lazy; lazy.write_index()"``
    in a fresh process)."""
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lazy_index.py")
    text = index_source(build_index())
    with open(path, "w") as f:
        f.write(text)
    return path
