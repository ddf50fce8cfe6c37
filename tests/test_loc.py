"""tools/loc.py counts lines the way sz.py does: code counts, explanation is free."""
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import loc  # noqa: E402
from loc import c_code_lines, code_lines  # noqa: E402

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


C_SRC = r'''/* a block comment
   over two lines */
#include <stdio.h>
int x = 1;  // code before a comment counts

char *s = "// not a comment /* nor this */";
#define F(a) \
    (a)
'''


def test_c_lines_skip_comments_but_not_strings():
    # include, int x, char *s, #define, (a)
    assert c_code_lines(C_SRC) == 5
    assert c_code_lines("// only\n/* comments */\n\n") == 0


def test_packages_are_first_directories_under_ember():
    assert loc.package("ember/_ops/pointwise.py") == "ember/_ops"
    assert loc.package("ember/nn/modules/linear.py") == "ember/nn"
    assert loc.package("ember/_tensor.py") == "ember"
    got = loc.by_package({"ember/_C/k.c": 10, "ember/_C/__init__.py": 3, "ember/x.py": 2})
    assert got == {"ember/_C": (3, 10), "ember": (2, 0)}


def test_a_new_package_falls_under_the_catch_all_cap():
    assert loc.cap_of("ember/not_yet_written") == loc.OTHER_CAP
    assert loc.over_caps({"ember/not_yet_written": (loc.OTHER_CAP, 0)}) == []
    over = loc.over_caps({"ember/not_yet_written": (loc.OTHER_CAP + 1, 0)})
    assert over == [("ember/not_yet_written", loc.OTHER_CAP + 1, loc.OTHER_CAP)]
    assert loc.over_caps({"ember/_C": (0, loc.C_CAP + 1)})[0][0] == "C"


def test_the_tree_is_within_its_caps():
    packages = loc.by_package(loc.count([loc.ROOT / "ember"]))
    assert "ember/_ops" in packages and loc.over_caps(packages) == []
    assert sum(map(sum, packages.values())) <= loc.TOTAL_CAP


def test_count_at_a_ref_matches_the_files_there():
    assert loc.count_at("no-such-ref-here", [loc.ROOT / "tools"]) is None
    at_head = loc.count_at("HEAD", [loc.ROOT / "tools"])
    if at_head is None:
        pytest.skip("not a git checkout")
    changed = subprocess.run(["git", "-C", str(loc.ROOT), "status", "--porcelain", "tools"],
                             capture_output=True, text=True).stdout
    now = loc.count([loc.ROOT / "tools"])
    same = [f for f in at_head if f not in changed]
    assert same and all(at_head[f] == now[f] for f in same)


def test_main_prints_the_table_and_fails_above_a_cap(capsys, monkeypatch):
    assert loc.main(["--base", "HEAD", str(loc.ROOT / "ember" / "_C")]) == 0
    out = capsys.readouterr().out
    assert "ember/_C" in out and "vs HEAD" in out and "C code" in out
    monkeypatch.setitem(loc.CAPS, "ember/_C", 1)
    assert loc.main(["--base", "no-such-ref-here", str(loc.ROOT / "ember" / "_C")]) == 1
    captured = capsys.readouterr()
    assert "no ref 'no-such-ref-here'" in captured.out
    assert "ember/_C has" in captured.err and "above its cap of 1" in captured.err
