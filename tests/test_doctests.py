"""Every docstring example in ember runs and prints what it says (STYLE.md: docstrings carry
runnable examples), and so do the examples in docs/*.md."""
import doctest
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import ember
from ember._ops.registry import all_ops

MODULES = sorted(m.name for m in pkgutil.walk_packages(ember.__path__, "ember.")
                 if not m.name.startswith(("ember._backends.cupy", "ember.__main__")))
DOCS = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_tests(name):
    finder = doctest.DocTestFinder(exclude_empty=True)
    return finder.find(importlib.import_module(name), name, globs={"ember": ember})


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in _module_tests(name):
        runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, f"{res.failed} docstring example(s) failed in {name}"


def _public_objects():
    """(qualified name, object) for the public API: the namespaces a user imports, their
    functions and classes, and the classes' methods."""
    import ember.amp
    import ember.nn.init
    import ember.optim.lr_scheduler
    import ember.serialization
    import ember.utils.checkpoint
    import ember.utils.data
    spaces = {"ember": ember, "ember.Tensor": ember.Tensor, "ember.nn": ember.nn,
              "ember.nn.functional": ember.nn.functional, "ember.nn.init": ember.nn.init,
              "ember.optim": ember.optim, "ember.optim.lr_scheduler": ember.optim.lr_scheduler,
              "ember.autograd": ember.autograd, "ember.amp": ember.amp,
              "ember.utils.data": ember.utils.data,
              "ember.utils.checkpoint": ember.utils.checkpoint,
              "ember.serialization": ember.serialization}
    for prefix, space in spaces.items():
        for attr in dir(space):
            if attr.startswith("_"):
                continue
            obj = getattr(space, attr, None)
            yield f"{prefix}.{attr}", obj
            if inspect.isclass(obj) and obj.__module__.startswith("ember"):
                for meth, fn in vars(obj).items():
                    if not meth.startswith("_"):
                        yield f"{prefix}.{attr}.{meth}", fn


def test_every_public_docstring_example_is_collected():
    # doctest's finder skips objects whose __module__ is not the module it walks (re-exports,
    # generated functions); ops are run from the registry by test_op_docs.py instead
    collected = {t.docstring for name in MODULES for t in _module_tests(name) if t.examples}
    collected |= {d.__doc__ for d in all_ops() if d.__doc__}
    missed = sorted(name for name, obj in _public_objects()
                    if (inspect.isroutine(obj) or inspect.isclass(obj))
                    and (getattr(obj, "__module__", None) or "").startswith("ember")
                    and ">>>" in (obj.__doc__ or "") and obj.__doc__ not in collected)
    assert not missed, f"docstring examples no test runs: {missed}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_markdown_examples(path):
    text = path.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {"ember": ember}, path.name, str(path), 0)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"an example in {path.name} failed"
