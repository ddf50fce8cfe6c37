"""tools/loc.py counts lines the way sz.py does: code counts, explanation is free."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from loc import code_lines  # noqa: E402

SRC = '''"""Module docstring."""
import os  # a comment after code still counts the line

def f(x):
    """A docstring
    over two lines."""
    s = """a string assigned is code"""
    # a comment line

    return ("implicitly"
            "joined")


class A:
    "one-quote docstring"
    x = 1
'''


def test_code_lines_skip_blanks_comments_and_docstrings():
    # import, def, s =, return (2 lines), class, x = 1
    assert code_lines(SRC) == 7


def test_empty_and_comment_only_files_count_zero():
    assert code_lines("") == 0
    assert code_lines("# only a comment\n\n") == 0
