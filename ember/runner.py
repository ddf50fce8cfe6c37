"""``ember run script.py``: run an unmodified PyTorch script on ember.

An import hook maps ``torch`` and ``torch.<sub>`` to ``ember`` and ``ember.<sub>``. Errors keep
Python's behaviour (tracebacks, exit codes), except that an API ember lacks is reported in one
line naming the API and the script line that used it.
"""
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys
import traceback


class TorchAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serve ``import torch...`` with ember's modules."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        target = "ember" + spec.name[len("torch"):]
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name and (e.name == target or target.startswith(e.name + ".")):
                raise ModuleNotFoundError(f"ember has no module '{target}' (the script "
                                          f"imports '{spec.name}')", name=spec.name) from None
            raise

    def exec_module(self, module):
        """Nothing to run: ``create_module`` returned the ember module, already loaded."""


def install():
    """Put the torch -> ember import hook first on sys.meta_path (idempotent)."""
    if not any(isinstance(f, TorchAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchAlias())


def _missing_api(exc, script):
    """'script.py:LINE: <api> ...' when ``exc`` says ember lacks something, else None."""
    msg = str(exc)
    missing = isinstance(exc, (AttributeError, ModuleNotFoundError)) and (
        "module 'ember" in msg or "ember has no module" in msg or
        ("'Tensor' object has no attribute" in msg))
    if not missing:
        return None
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(script)]
    where = f"{script}:{frames[-1].lineno}: " if frames else f"{script}: "
    code = f"\n    {frames[-1].line}" if frames and frames[-1].line else ""
    if isinstance(exc, AttributeError):
        msg = msg.replace("module 'ember", "module 'torch")
    return f"ember run: {where}the script uses an API ember does not implement yet: {msg}{code}"


def run(script, args):
    """Run ``script`` as ``__main__`` with ``sys.argv = [script, *args]``; returns the exit
    code Python would give."""
    if not os.path.exists(script):
        print(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: [Errno 2] No "
              "such file or directory", file=sys.stderr)
        return 2
    install()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:   # noqa: BLE001 -- report like the interpreter would
        msg = _missing_api(exc, script)
        if msg:
            print(msg, file=sys.stderr)
            return 1
        tb = traceback.extract_tb(exc.__traceback__)
        # drop ember's runner and runpy frames so the traceback starts in the script
        start = next((i for i, f in enumerate(tb)
                      if os.path.abspath(f.filename) == os.path.abspath(script)), 0)
        lines = ["Traceback (most recent call last):\n"] if not isinstance(exc, SyntaxError) \
            or start else []
        if lines:
            lines += traceback.format_list(tb[start:])
        lines += traceback.format_exception_only(type(exc), exc)
        sys.stderr.write("".join(lines))
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    return 0
