"""The examples in the ops' docstrings run and print what they say (read off the registry)."""
import doctest

import pytest

import ember
from ember._ops.registry import all_ops

DOCUMENTED = [d for d in all_ops() if d.__doc__ and ">>>" in d.__doc__]


@pytest.mark.parametrize("opdef", DOCUMENTED, ids=str)
def test_docstring_examples(opdef):
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in finder.find(opdef.__doc__, opdef.name, globs={"ember": ember}):
        result = runner.run(t, out=lambda s: pytest.fail(s))
        assert result.failed == 0


def test_every_public_op_has_a_summary():
    missing = [d.name for d in all_ops() if d.function and not (d.__doc__ or "").strip()]
    assert not missing, f"ops without a docstring: {missing}"
