"""Call a module with parameters and buffers swapped in for one call (``functional_call``),
as ``torch.nn.utils.stateless`` and ``torch.func``."""
import contextlib
import warnings

from ..._tensor import Tensor

_MISSING = object()


def _swap(module, path, value):
    """Put ``value`` at dotted ``path`` in ``module``; return what was there (or _MISSING).
    Parameters are replaced in ``_parameters`` directly, so a plain tensor may stand in for
    one, as torch allows here."""
    prefix, _, name = path.rpartition(".")
    mod = module.get_submodule(prefix)
    for store in (mod._parameters, mod._buffers):
        if name in store:
            old = store[name]
            if value is _MISSING:
                del store[name]
            else:
                store[name] = value
            return old
    old = getattr(mod, name, _MISSING)
    if old is not _MISSING and not isinstance(old, Tensor):
        raise TypeError(f"attribute `{name}`: {old} is not an instance of torch.Tensor")
    if value is not _MISSING:
        setattr(mod, name, value)
    elif old is not _MISSING:
        delattr(mod, name)
    return old


def _untie(module, values):
    """Extend ``values`` so every name tied to a given one (the same tensor under two
    names) gets the given value too."""
    groups = {}
    for name, t in list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False)):
        groups.setdefault(id(t), set()).add(name)
    tied = {n: g for g in groups.values() if len(g) > 1 for n in g}
    out = dict(values)
    for name in values:
        if name not in tied:
            continue
        given = [values[n] for n in tied[name] if n in values]
        if len({id(v) for v in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(tied[name])}, "
                             f"which are tied. Consider using tie_weights=False")
        out.update({n: values[name] for n in tied[name]})
    return out


def _check_keys(module, values):
    names = {n for n, _ in module.named_parameters(remove_duplicate=False)} | \
        {n for n, _ in module.named_buffers(remove_duplicate=False)}
    errors = []
    unexpected = sorted(set(values) - names)
    missing = sorted(names - set(values))
    if unexpected:
        errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if errors:
        raise RuntimeError(f"Error(s) in reparametrizing for {module._get_name()}:\n\t" +
                           "\n\t".join(errors))


@contextlib.contextmanager
def _reparametrize_module(module, values, tie_weights=False, strict=False):
    untied = _untie(module, values) if tie_weights else values
    if strict:
        _check_keys(module, untied)
    originals = {}
    try:
        for path, value in untied.items():
            originals[path] = _swap(module, path, value)
        yield
    finally:
        for path, old in originals.items():
            now = _swap(module, path, old)
            if path in values:
                # NOTE: as torch, the caller's dict sees what the call left there (e.g. a
                # buffer a module reassigned in forward).
                values[path] = now


def _functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                     tie_weights=True, strict=False):
    args = () if args is None else (args if isinstance(args, tuple) else (args,))
    with _reparametrize_module(module, parameters_and_buffers, tie_weights, strict):
        return module(*args, **(kwargs or {}))


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """Deprecated spelling of :func:`ember.func.functional_call` with one dict."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 "
                  "and will be removed in a future version of PyTorch. Please use "
                  "`torch.func.functional_call` instead which is a drop-in replacement.",
                  FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)
