"""Memory and footprint, ember against torch:

- peak RSS of the GPT training step (the whole process, and its rise over the RSS just
  before the first step), each framework in a fresh process;
- the rise in peak RSS while causal attention at sequence length 4096 runs, blockwise
  (``scaled_dot_product_attention``) and naive (the seq x seq matrix), forward and
  forward+backward, each case in a fresh process;
- installed size: the files of ember + numpy + ml_dtypes against torch and everything it
  requires, measured in site-packages.

    python -m benchmarks.footprint [--quick]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

MB = 1 << 20


def _peak_rss():
    """Peak resident set size of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _rss():
    """Resident set size now, in bytes (the peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _peak_rss()


# ---- memory cases, each run by a fresh worker process ----------------------------------------

def _case(name, fw):
    """Peak RSS (MB) of the process and the rise over the RSS before the measured work."""
    from benchmarks import models
    T = __import__(fw)
    if name == "gpt":
        step = models.gpt_step(T)
        before = _rss()
        for _ in range(3):
            step()
    else:
        kind, mode = name.split("-")               # sdpa|naive - fwd|train
        q, k, v = models.sdpa_inputs(T, requires_grad=mode == "train")
        before = _rss()
        if mode == "train":
            models.attention(T, q, k, v, naive=kind == "naive").sum().backward()
        else:
            with T.no_grad():
                models.attention(T, q, k, v, naive=kind == "naive")
    peak = _peak_rss()
    return {"peak_mb": peak / MB, "rise_mb": (peak - before) / MB}


CASES = {"gpt": "GPT step: peak RSS of the process",
         "sdpa-fwd": "SDPA causal 4096x64 fwd: peak rise",
         "naive-fwd": "naive attention 4096x64 fwd: peak rise",
         "sdpa-train": "SDPA causal 4096x64 fwd+bwd: peak rise",
         "naive-train": "naive attention 4096x64 fwd+bwd: peak rise"}


QUICK_CASES = ("gpt", "sdpa-fwd", "naive-fwd")


def _spawn(name, fw, env):
    cmd = [sys.executable, "-m", "benchmarks.footprint", "--case", name, "--fw", fw]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"footprint case {name} ({fw}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def memory(frameworks, env, cases=tuple(CASES)):
    """``{case: {framework: {"peak_mb", "rise_mb"}}}``, one fresh process per entry."""
    return {name: {fw: _spawn(name, fw, env) for fw in frameworks} for name in cases}


# ---- installed size --------------------------------------------------------------------------

def _requirements(dist):
    """Names of the distributions ``dist`` needs at runtime (no extras, markers evaluated)."""
    import re
    try:
        from packaging.requirements import Requirement
    except ImportError:                     # without packaging: unconditional ones only
        return [re.match(r"[\w.-]+", r).group() for r in dist.requires or () if ";" not in r]
    out = []
    for line in dist.requires or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def _dist_bytes(dist):
    """Bytes of a distribution's files; an editable install counts its source package."""
    files = [f for f in dist.files or () if not str(f).startswith("..")]
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        pkg = Path(__import__(dist.metadata["Name"]).__file__).parent
        return sum(p.stat().st_size for p in pkg.rglob("*") if p.is_file())
    total = 0
    for f in files:
        p = Path(dist.locate_file(f))
        if p.is_file():
            total += p.stat().st_size
    return total


def installed_size(root):
    """``(bytes, [names])`` of distribution ``root`` and everything it requires."""
    seen, todo, total = [], [root], 0
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen.append(key)
        total += _dist_bytes(dist)
        todo.extend(_requirements(dist))
    return total, seen


def sizes(frameworks):
    """``{framework: {"mb": size, "packages": [...]}}`` for ember and torch as installed."""
    out = {}
    for fw in frameworks:
        if fw in ("ember", "torch"):
            b, names = installed_size(fw)
            out[fw] = {"mb": b / MB, "packages": names}
    return out


def table(mem, size):
    """Markdown for the memory cases and the installed sizes."""
    lines = ["\n### memory (fresh process per entry, 1 thread)\n",
             "| what | ember MB | torch MB | ember/torch |", "|---|---:|---:|---:|"]
    for name, label in CASES.items():
        if name not in mem:
            continue
        key = "peak_mb" if name == "gpt" else "rise_mb"
        e, t = (mem.get(name, {}).get(fw, {}).get(key) for fw in ("ember", "torch"))
        lines.append(f"| {label} | {_mb(e)} | {_mb(t)} | {_ratio(e, t)} |")
        if name == "gpt":
            e, t = (mem["gpt"].get(fw, {}).get("rise_mb") for fw in ("ember", "torch"))
            lines.append(f"| GPT step: peak rise over the RSS before the first step | {_mb(e)} | "
                         f"{_mb(t)} | {_ratio(e, t)} |")
    for mode in ("fwd", "train"):
        if f"naive-{mode}" not in mem:
            continue
        s, n = (mem.get(f"{k}-{mode}", {}).get("ember", {}).get("rise_mb")
                for k in ("sdpa", "naive"))
        lines.append(f"| ember SDPA / naive, {mode}: memory ratio (target <= 0.125) | | | "
                     f"{_ratio(s, n)} |")
    lines += ["\n### installed size (site-packages, with runtime dependencies)\n",
              "| what | MB | packages |", "|---|---:|---|"]
    for fw, v in size.items():
        lines.append(f"| {fw} | {v['mb']:.1f} | {', '.join(v['packages'])} |")
    if "ember" in size and "torch" in size:
        lines.append(f"| ember / torch | {size['ember']['mb'] / size['torch']['mb']:.3f} | |")
    return "\n".join(lines)


def _mb(v):
    return "-" if v is None else f"{v:.1f}"


def _ratio(e, t):
    return "-" if e is None or t is None or t == 0 else f"{e / t:.2f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--fw", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(_case(args.case, args.fw)))
        return 0
    from benchmarks.run import _available, _env
    fws = [fw for fw in _available() if fw != "numpy"]
    print(table(memory(fws, _env(1)), sizes(fws)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
