"""How much of PyTorch's public API ember implements, per namespace, measured against torch.

    python tools/api_coverage.py [--json] [--without AREA ...] [--no-missing]

The list of public names is PyTorch's own: every function ``torch.overrides`` knows
(``get_testing_overrides()``, placed in its namespace by ``get_overridable_functions()``):
``torch.*``, ``torch.nn.functional.*``, ``torch.linalg``, ``torch.fft``, ``torch.special`` and
the ``Tensor`` methods and properties, plus every public name in ``dir(torch.Tensor)``. A name
counts as implemented only when it resolves in ember: ``hasattr`` on the matching ember
namespace (``ember``, ``ember.Tensor``, ``ember.nn.functional``, ``ember.linalg`` ...).

Names for parts ember deliberately leaves out (quantization, vendor kernels, other device
backends, named tensors, compressed sparse formats, private names ...) are dropped first by the
``EXCLUDE`` rules below; the report prints each rule, its reason and how many names it dropped.
``AREAS`` groups the remaining names by topic (linear algebra, fft, sparse ...) so totals can be
given with an area left out (``--without linalg``), e.g. while another branch works on it.

torch is a test-only dependency of ember; this tool imports it, ember never does.
"""
import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name regex, reason[, namespaces]). A name matching a rule is not counted, in every namespace
# or only in the namespaces the rule lists.
EXCLUDE = [
    (r"^_", "private names and Python protocol methods (operators are tested on their own)"),
    (r"quantiz|^q_|^(de)?quantize|int_repr|qscheme|qparams|_per_(channel|tensor)|fake_quant",
     "quantized tensors and quantization"),
    (r"mkldnn|cudnn|miopen|fbgemm|^nnpack|_nnpack|xnnpack", "vendor kernel libraries"),
    (r"(^|_)(xpu|mps|hpu|ipu|vulkan|xla|mtia|maia|metal|ort|ve|privateuseone)($|_)",
     "device backends ember does not target (ember has cpu, cuda, meta)"),
    (r"nested|^to_padded_tensor$", "nested (jagged) tensors"),
    (r"sparse_(csr|csc|bsr|bsc|compressed)|^(crow|ccol|col|row)_indices(_copy)?$|^to_sparse_",
     "compressed sparse formats (ember's sparse support is COO)"),
    (r"^(refine_names|align_to|align_as|align_tensors|rename_?|has_names|names)$",
     "named tensors (a prototype torch feature)"),
    (r"^native_|_backward$|^batch_norm_(stats|elemt|gather_stats|update_stats|backward)",
     "aten-level kernels that programs reach through torch.nn.functional"),
    (r"^sym_|^(is_)?(compil|fork$|wait$)", "symbolic shapes and TorchScript plumbing"),
    (r"^(volatile|output_nr|is_set_to|set_$|storage_offset_|untyped_storage_)$",
     "legacy or storage-swapping internals"),
    (r"^index$", "functorch first-class dimensions (Tensor.index binds Dim objects; prototype)",
     ("torch.Tensor",)),
    (r"^(eig|symeig|lstsq|solve|reinforce)$",
     "removed from torch: the Tensor methods only raise, pointing to torch.linalg",
     ("torch.Tensor",)),
]

# (area, name regex): topics, so totals can be reported with an area left out. The first match
# wins; a name in no area is "core".
AREAS = [
    ("linalg", r"^(linalg_|einsum$|kron$|tensordot$|cdist$|cross$|trace$|addbmm_?$|addmv_?$|"
               r"vdot$|inner$|det$|logdet$|slogdet$|inverse$|svd|qr$|pinverse$|cholesky|lu|"
               r"matrix_(power|exp)$|chain_matmul$|ger$|addr_?$|orgqr$|ormqr$|geqrf$|"
               r"triangular_solve$|"
               r"lstsq$|eig|symeig$|pca_lowrank$|svd_lowrank$|lobpcg$|householder_product$|"
               r"frobenius_norm$|nuclear_norm$|norm_except_dim$)"),
    ("fft", r"^fft_|^(stft|istft)$|_window$"),
    ("special+complex", r"^special_|^(complex|polar|real|imag|angle|view_as_real|"
                        r"view_as_complex|view_as_real_copy|view_as_complex_copy|conj|"
                        r"conj_physical_?|resolve_conj|resolve_neg|is_conj|is_neg|isreal|chalf|"
                        r"adjoint|H|mH|sgn_?|cfloat|cdouble|"
                        r"lgamma_?|digamma_?|polygamma_?|mvlgamma_?|i0_?|igammac?_?|sinc_?|"
                        r"logit_?|erfinv_?|xlogy_?|erfc?_?|expit|ndtri|log_ndtr)$"),
    ("sparse", r"sparse|^(coalesce|is_coalesced|indices|values|_?nnz|dense_dim|sparse_dim|"
               r"smm|dsmm|hsmm|spmm|saddmm|sspaddmm|hspmm|to_dense|indices_copy|values_copy|"
               r"sparse_resize_?.*)$"),
]

# ember's namespace for each torch namespace, as a dotted path under ``ember``.
NAMESPACES = {"torch": "", "torch.Tensor": "Tensor", "torch.nn.functional": "nn.functional",
              "torch.linalg": "linalg", "torch.fft": "fft", "torch.special": "special"}


def torch_names():
    """``{namespace: set(name)}`` of PyTorch's public API (see the module docstring).

    Each namespace's names are its attributes that ``get_testing_overrides()`` lists (so
    ``torch.linalg.inv`` is ``inv``, not its ``__name__`` ``linalg_inv``), plus every public name
    of ``torch.Tensor`` (its properties included).
    """
    import importlib
    import warnings

    import torch
    overridable = set(torch.overrides.get_testing_overrides())
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ns in NAMESPACES:
            mod = torch.Tensor if ns == "torch.Tensor" else importlib.import_module(ns)
            names = set()
            for n in dir(mod):
                try:
                    obj = getattr(mod, n)
                    names.update([n] * (obj in overridable))
                except Exception:       # unhashable attributes, lazy imports that fail
                    pass
            out[ns] = names
    out["torch.Tensor"].update(n for n in dir(torch.Tensor) if not n.startswith("_"))
    return out


def excluded_by(name, namespace):
    """The index of the first ``EXCLUDE`` rule ``name`` matches in ``namespace``, or None."""
    for i, (rx, _, *where) in enumerate(EXCLUDE):
        if re.search(rx, name) and (not where or namespace in where[0]):
            return i
    return None


def area_of(name):
    for area, rx in AREAS:
        if re.search(rx, name):
            return area
    return "core"


def _ember_namespace(path):
    import ember
    obj = ember
    for part in filter(None, path.split(".")):
        try:
            obj = getattr(obj, part)
        except (AttributeError, ImportError):   # a namespace ember lacks, or fails to load
            return None
    return obj


def measure(without=()):
    """The coverage report as a dict (what ``--json`` prints)."""
    sys.path.insert(0, str(ROOT))
    names = torch_names()
    report = {"namespaces": {}, "exclusions": [], "areas_left_out": list(without)}
    dropped = defaultdict(int)
    totals = {"implemented": 0, "total": 0}
    by_area = defaultdict(lambda: {"implemented": 0, "total": 0})
    for ns, path in NAMESPACES.items():
        target = _ember_namespace(path)
        # attributes set per tensor (dtype, grad...) resolve on an instance only
        instance = target([0.0]) if ns == "torch.Tensor" and target else None
        have, missing = [], []
        for name in sorted(names.get(ns, ())):
            rule = excluded_by(name, ns)
            if rule is not None:
                dropped[rule] += 1
                continue
            # functions in torch.linalg/fft/special count under their own area, whatever
            # their names
            area = {"torch.linalg": "linalg", "torch.fft": "fft",
                    "torch.special": "special+complex"}.get(ns) or area_of(name)
            if area in without:
                continue
            ok = target is not None and (hasattr(target, name) or
                                         instance is not None and hasattr(instance, name))
            (have if ok else missing).append(name)
            by_area[area]["total"] += 1
            by_area[area]["implemented"] += ok
        n = len(have) + len(missing)
        report["namespaces"][ns] = {"implemented": len(have), "total": n,
                                    "percent": round(100 * len(have) / n, 1) if n else 100.0,
                                    "missing": missing}
        totals["implemented"] += len(have)
        totals["total"] += n
    totals["percent"] = round(100 * totals["implemented"] / max(totals["total"], 1), 1)
    report["totals"] = totals
    report["areas"] = dict(sorted(by_area.items()))
    report["exclusions"] = [{"regex": rx, "reason": why, "names_dropped": dropped[i],
                             "namespaces": where[0] if where else "all"}
                            for i, (rx, why, *where) in enumerate(EXCLUDE)]
    return report


def markdown(report, show_missing=True):
    lines = ["# ember API coverage against PyTorch", ""]
    if report["areas_left_out"]:
        lines += [f"Areas left out: {', '.join(report['areas_left_out'])}.", ""]
    lines += ["| namespace | implemented | total | % |", "|---|---:|---:|---:|"]
    for ns, r in report["namespaces"].items():
        lines.append(f"| {ns} | {r['implemented']} | {r['total']} | {r['percent']} |")
    t = report["totals"]
    lines += [f"| **all** | **{t['implemented']}** | **{t['total']}** | **{t['percent']}** |",
              "", "| area | implemented | total |", "|---|---:|---:|"]
    lines += [f"| {a} | {r['implemented']} | {r['total']} |" for a, r in report["areas"].items()]
    lines += ["", "## Exclusion rules", "", "| regex | reason | in | names dropped |",
              "|---|---|---|---:|"]
    lines += [f"| `{e['regex'].replace('|', chr(92) + '|')}` | {e['reason']} | "
              f"{e['namespaces'] if e['namespaces'] == 'all' else ', '.join(e['namespaces'])} | "
              f"{e['names_dropped']} |" for e in report["exclusions"]]
    if show_missing:
        lines += ["", "## Missing", ""]
        for ns, r in report["namespaces"].items():
            if r["missing"]:
                lines += [f"**{ns}** ({len(r['missing'])}): " + ", ".join(r["missing"]), ""]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--without", nargs="*", default=[], choices=[a for a, _ in AREAS] + ["core"],
                   help="leave these areas out of the totals")
    p.add_argument("--no-missing", action="store_true", help="do not list the missing names")
    args = p.parse_args(argv)
    report = measure(args.without)
    print(json.dumps(report, indent=1) if args.json else
          markdown(report, not args.no_missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
