"""Every docstring example in ember runs and prints what it says (STYLE.md: docstrings carry
runnable examples)."""
import doctest
import importlib
import pkgutil

import pytest

import ember

MODULES = sorted(m.name for m in pkgutil.walk_packages(ember.__path__, "ember.")
                 if not m.name.startswith(("ember._backends.cupy", "ember.__main__")))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(mod, name, globs={"ember": ember}):
        runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, f"{res.failed} docstring example(s) failed in {name}"
