"""Count code lines per package, as tinygrad's sz.py does, and enforce the line budget.

    python tools/loc.py [--files] [--base REF] [PATH ...]     (default: ember)

A Python line counts when it holds a code token; blank lines, comments and docstrings (a
string that is a statement on its own) are free, so explaining costs nothing. A C line (.c,
.h) counts when anything but a comment or blank is left on it. Lines are summed per package
(``ember/<first directory>``; modules directly under ``ember/`` are the package ``ember``),
compared with the same count at ``--base`` (``main`` by default; skipped where the ref does
not exist) and checked against the caps: ``CAPS`` holds each package's Python lines, ``C_CAP``
all C lines wherever they sit, ``TOTAL_CAP`` everything; the exit status is 1 above any. A
package with no cap of its own falls under ``OTHER_CAP``, so a new package never fails the
check by merely existing. Raising a cap needs a reason in the commit message
(docs/contributing.md).
"""
import argparse
import io
import re
import subprocess
import sys
import token
import tokenize
from collections import defaultdict
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".py", ".c", ".h")

# Today's size (Dec 2026) plus room for the open issues' work, in code lines. The room:
# distributed ~4k, graph capture/IR/compiler (fx, jit, export, onnx, _dynamo) ~5k,
# distributions ~3k, func/forward AD ~2k, the rest of torch's surface ~3k, CUDA ~2k.
CAPS = {                            # Python lines per package
    "ember": 4000,                  # the core modules + torch's top-level accelerator, hub...
    "ember/_C": 490,                # the kernel library and dispatch loaders; + kcall, nonzero, count.h, parloop
    "ember/_backends": 400,
    "ember/_ops": 15750,            # + jvp rules (#33), compressed sparse, lobpcg/ldl (#34), C paths (#35, two threads and small sizes)
    "ember/amp": 500,
    "ember/autograd": 2300,         # + forward-mode AD
    "ember/backends": 200,
    "ember/cuda": 1900,             # + streams, events, memory, graphs, pools, flash attention
    "ember/demo": 350,
    "ember/func": 1800,             # vmap, grad, jvp, functional_call
    "ember/nn": 7000,               # + parallel wrappers, lazy modules, prune, nn.attention
    "ember/optim": 2300,
    "ember/profiler": 700,          # + execution traces
    "ember/serialization": 1000,    # + compressed sparse, skip_data, packages
    "ember/sparse": 200,
    "ember/utils": 3800,            # + tensorboard, checkpoint (selective), DataPipes, fuzzer
    "ember/distributed": 4540,
    "ember/distributions": 3500,
    "ember/multiprocessing": 400,
    "ember/_graph": 2000,           # the graph IR fx, jit, export and onnx share
    "ember/fx": 2500,
    "ember/jit": 1000,
    "ember/export": 800,
    "ember/onnx": 1300,             # + custom symbolics, onnx.ops
    "ember/_dynamo": 1200,
    "ember/compiler": 1100,         # + dynamic shapes (#32): guards, mark_dynamic; attention nodes
    "ember/hub": 400,
}
OTHER_CAP = 1500                    # any package without its own cap
C_CAP = 8000                        # every .c/.h file: today's kernels + CUDA's ~2k + #35's threaded loops
TOTAL_CAP = 63700                   # + #35's remaining cliffs and #32's compile latency

_LAYOUT = {token.NEWLINE, token.NL, token.INDENT, token.DEDENT, token.COMMENT,
           token.ENCODING, token.ENDMARKER}


def code_lines(source):
    """The number of lines of Python ``source`` that hold a code token."""
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


# A C comment, or a string/char literal skipped whole so that "//" or "/*" inside it is kept.
_C_TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def c_code_lines(source):
    """The number of lines of C ``source`` with something left once comments are removed."""
    # a comment becomes its newlines alone, so that line numbers stay where they were
    text = _C_TOKEN.sub(lambda m: "\n" * m[0].count("\n") if m[0][0] == "/" else m[0], source)
    return sum(1 for line in text.splitlines() if line.strip() and line.strip() != "\\")


def lines_of(name, source):
    """Code lines of a file's ``source``, by the language its ``name`` says."""
    return code_lines(source) if name.endswith(".py") else c_code_lines(source)


def count(paths):
    """``{file: code lines}`` for every .py/.c/.h file under ``paths``, relative to the root."""
    out = {}
    for p in paths:
        p = Path(p).resolve()
        files = sorted(f for f in p.rglob("*") if f.suffix in SUFFIXES) if p.is_dir() else [p]
        for f in files:
            rel = f.relative_to(ROOT).as_posix() if f.is_relative_to(ROOT) else str(f)
            out[rel] = lines_of(f.name, f.read_text())
    return out


def count_at(ref, paths):
    """The same count for the files under ``paths`` at git ``ref``, or None where the ref (or
    git) is not there, as in a shallow CI clone."""
    git = ["git", "-C", str(ROOT)]
    try:
        rels = [Path(p).resolve().relative_to(ROOT).as_posix() for p in paths]
        ls = subprocess.run(git + ["ls-tree", "-r", "--name-only", ref, "--", *rels],
                            capture_output=True, text=True, check=True).stdout.split()
    except (ValueError, OSError, subprocess.CalledProcessError):     # (ValueError: not ours)
        return None
    names = [n for n in ls if n.endswith(SUFFIXES)]
    # one `git cat-file --batch` for every file, not a process per file
    batch = subprocess.run(git + ["cat-file", "--batch"], capture_output=True, check=True,
                           input="".join(f"{ref}:{n}\n" for n in names).encode()).stdout
    out, pos = {}, 0
    for n in names:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        out[n] = lines_of(n, batch[header_end + 1:header_end + 1 + size].decode("utf-8"))
        pos = header_end + 1 + size + 1
    return out


def package(path):
    """``ember/<first directory>`` for a file in a subpackage, ``ember`` for a top module."""
    parts = PurePosixPath(path).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def by_package(files):
    """``{package: (Python lines, C lines)}``."""
    packages = defaultdict(lambda: [0, 0])
    for f, n in files.items():
        packages[package(f)][not f.endswith(".py")] += n
    return {k: tuple(v) for k, v in packages.items()}


def cap_of(pkg):
    return CAPS.get(pkg, OTHER_CAP)


def over_caps(packages):
    """``[(what, lines, cap)]`` for each package's Python, the C code and the total above
    its cap."""
    over = [(p, py, cap_of(p)) for p, (py, _) in sorted(packages.items()) if py > cap_of(p)]
    c = sum(c for _, c in packages.values())
    total = sum(map(sum, packages.values()))
    return over + [(what, n, cap) for what, n, cap in (("C", c, C_CAP), ("total", total,
                                                       TOTAL_CAP)) if n > cap]


def n_opdefs():
    sys.path.insert(0, str(ROOT))
    from ember._ops.registry import all_ops
    return len(all_ops())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", default=[str(ROOT / "ember")])
    p.add_argument("--files", action="store_true", help="also list every file")
    p.add_argument("--base", default="main", help="git ref to diff against (default: main)")
    args = p.parse_args(argv)
    files = count(args.paths)
    base = count_at(args.base, args.paths)
    if args.files:
        width = max(map(len, files), default=10)
        for f, n in sorted(files.items(), key=lambda kv: -kv[1]):
            delta = "" if base is None else f"  {n - base.get(f, 0):+6d}"
            print(f"{f:<{width}}  {n:6d}{delta}")
        print()
    packages, old = by_package(files), by_package(base or {})
    diff = base is not None
    print(f"{'package':<22} {'python':>6} {'cap':>6} {'C':>6}" +
          (f" {'vs ' + args.base:>10}" if diff else ""))
    for pkg in sorted(set(packages) | set(old)):
        py, c = packages.get(pkg, (0, 0))
        delta = f" {py + c - sum(old.get(pkg, (0, 0))):+10d}" if diff else ""
        flag = "  OVER" if py > cap_of(pkg) else ""
        print(f"{pkg:<22} {py:6d} {cap_of(pkg):6d} {c or '':>6}{delta}{flag}")
    sums = [sum(col) for col in zip(*packages.values())] or [0, 0]
    old_total = sum(map(sum, old.values()))
    print(f"{'C code':<22} {'':>6} {'':>6} {sums[1]:6d}  (cap {C_CAP})")
    print(f"{'total, Python + C':<22} {sum(sums):6d} {TOTAL_CAP:6d} {'':>6}" +
          (f" {sum(sums) - old_total:+10d}" if diff else ""))
    print(f"\n{len(files)} files, {n_opdefs()} OpDefs"
          + ("" if diff else f"; no ref {args.base!r} to diff against"))
    over = over_caps(packages)
    for name, n, cap in over:
        print(f"loc.py: {name} has {n} code lines, above its cap of {cap} (tools/loc.py CAPS; "
              "a cap raised needs a reason in the commit)", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
