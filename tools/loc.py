"""Count code lines per file and package, as tinygrad's sz.py does.

    python tools/loc.py [PATH ...]        (default: ember)

A line counts when it holds a code token; blank lines, comments and docstrings (a string that
is a statement on its own) are free, so explaining costs nothing. Also prints the number of
OpDefs in ember's registry. No caps are enforced yet.
"""
import argparse
import io
import sys
import token
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LAYOUT = {token.NEWLINE, token.NL, token.INDENT, token.DEDENT, token.COMMENT,
           token.ENCODING, token.ENDMARKER}


def code_lines(source):
    """The number of lines of ``source`` that hold a code token."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (token.NL, token.COMMENT)]
    lines = set()
    for i, t in enumerate(toks):
        if t.type in _LAYOUT or _is_docstring(toks, i):
            continue
        lines.update(range(t.start[0], t.end[0] + 1))
    return len(lines)


def _is_docstring(toks, i):
    """A string token that is a whole statement: it follows a statement boundary and a NEWLINE
    follows it (adjacent strings concatenated on one statement count as one)."""
    if toks[i].type != token.STRING:
        return False
    j = i
    while j > 0 and toks[j - 1].type == token.STRING:
        j -= 1
    k = i
    while k + 1 < len(toks) and toks[k + 1].type == token.STRING:
        k += 1
    before = toks[j - 1].type if j > 0 else token.ENCODING
    after = toks[k + 1].type if k + 1 < len(toks) else token.ENDMARKER
    return before in (token.NEWLINE, token.INDENT, token.DEDENT, token.ENCODING) and \
        after in (token.NEWLINE, token.ENDMARKER)


def count(paths):
    """``{file: code lines}`` for every .py file under ``paths``, relative to the repo root."""
    out = {}
    for p in paths:
        p = Path(p).resolve()
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            rel = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
            out[str(rel)] = code_lines(f.read_text())
    return out


def n_opdefs():
    sys.path.insert(0, str(ROOT))
    from ember._ops.registry import all_ops
    return len(all_ops())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", default=[str(ROOT / "ember")])
    args = p.parse_args(argv)
    files = count(args.paths)
    packages = defaultdict(int)
    width = max(map(len, files), default=10)
    print(f"{'file':<{width}}  lines")
    for f, n in sorted(files.items(), key=lambda kv: -kv[1]):
        print(f"{f:<{width}}  {n:5d}")
        packages[str(Path(f).parent)] += n
    print(f"\n{'package':<{width}}  lines")
    for pkg, n in sorted(packages.items()):
        print(f"{pkg:<{width}}  {n:5d}")
    print(f"\ntotal: {sum(files.values())} code lines in {len(files)} files, "
          f"{n_opdefs()} OpDefs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
