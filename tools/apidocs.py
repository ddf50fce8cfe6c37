"""Write the API reference to docs/api/ with pdoc (``make docs``).

Most of ember's public names are defined in private modules (ops generated from the registry
in ``ember._ops``, layers in ``ember.nn.modules.*``) and re-exported. pdoc documents a
re-exported name only when the module lists it in ``__all__``, so this script gives each public
namespace an ``__all__`` of its public names (for the docs build only; the package is left
alone) and leaves private modules out.
"""
import importlib
import pkgutil
import sys
import types
from pathlib import Path

NAMESPACES = ["ember", "ember.nn", "ember.nn.functional", "ember.nn.init", "ember.autograd",
              "ember.amp", "ember.optim", "ember.optim.lr_scheduler", "ember.utils.data",
              "ember.utils.checkpoint", "ember.serialization"]


def _public(mod):
    """Public names, public submodules included (pdoc lists only those in ``__all__``)."""
    names = {n for n in dir(mod) if not n.startswith("_")
             and not isinstance(getattr(mod, n), types.ModuleType)}
    for sub in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        if not sub.name.startswith("_"):
            importlib.import_module(f"{mod.__name__}.{sub.name}")
            names.add(sub.name)
    return sorted(names)


def _op_signatures():
    """Functions and Tensor methods generated from the registry take ``*args, **kwargs``; give
    each the signature of its op's forward (less the array-module parameter, and with ``self``
    for the tensor a method is called on). Done here, not at import: it costs milliseconds."""
    import inspect

    import ember

    def sig(opdef, method):
        params = list(inspect.signature(opdef.fwd).parameters.values())[1:]
        if method and params:
            params[0] = params[0].replace(name="self")
        return inspect.Signature(params)
    for n in dir(ember):
        f = getattr(ember, n)
        if callable(f) and hasattr(f, "opdef"):
            f.__signature__ = sig(f.opdef, False)
    for n, f in list(vars(ember.Tensor).items()):
        if callable(f) and hasattr(f, "opdef"):
            if vars(ember).get(n) is f:     # one function for both (see ember/_ops/__init__.py)
                f = _copy(f)
                setattr(ember.Tensor, n, f)
            f.__signature__ = sig(f.opdef, True)


def _copy(f):
    """A function like ``f`` (same code, closure and attributes), to hold its own signature."""
    import types
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__dict__.update(f.__dict__)
    g.__qualname__, g.__doc__, g.__kwdefaults__ = f.__qualname__, f.__doc__, f.__kwdefaults__
    return g


def main(out="docs/api"):
    import pdoc
    for name in NAMESPACES:
        mod = importlib.import_module(name)
        if not hasattr(mod, "__all__"):
            mod.__all__ = _public(mod)
    _op_signatures()
    pdoc.render.configure(docformat="google", search=True)
    pdoc.pdoc("ember", r"!.*\._.*", output_directory=Path(out))
    print(f"API reference: {out}/index.html")


if __name__ == "__main__":
    main(*sys.argv[1:])
