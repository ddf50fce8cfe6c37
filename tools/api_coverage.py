"""How much of PyTorch's public API ember implements, per namespace, measured against torch.

    python tools/api_coverage.py [--json] [--without AREA ...] [--no-missing]

The list of public names is PyTorch's own, for ``torch``, ``torch.Tensor`` and every public
namespace programs import (``NAMESPACES``): a namespace's ``__all__`` where it has one, else its
public functions and classes (those torch defines, not ``typing``'s or the standard library's);
plus, since torch's ``__all__`` lists are incomplete, the public functions and classes a
namespace defines itself (``torch.overrides.TorchFunctionMode``); for ``torch`` also every
public non-module attribute that is torch's (``torch.unique``, ``torch.HalfTensor``) and for
``torch.Tensor`` every public name in ``dir(torch.Tensor)``. A name counts as implemented only
when it resolves in ember: ``hasattr`` on the matching ember namespace (``ember``,
``ember.Tensor`` or a tensor, ``ember.nn.functional``, ``ember.utils.tensorboard`` ...). A
namespace ember lacks counts all its names as missing.

Names for parts ember deliberately leaves out (quantization, vendor kernels, other device
backends, nested and named tensors, aten-internal kernels, private names) are dropped first by
the ``EXCLUDE`` rules below; the report prints each rule, its reason and how many names it
dropped. Names are grouped into areas (``AREAS`` for ``torch``/``Tensor`` names, the namespace
itself elsewhere) so totals can be given with an area left out (``--without distributions``),
e.g. while another branch works on it.

torch is a test-only dependency of ember; this tool imports it, ember never does.
"""
import argparse
import functools
import json
import re
import sys
import types
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The namespaces measured, as torch names them; ember's is the same path under ``ember``.
NAMESPACES = ["torch", "torch.Tensor"] + ["torch." + n for n in """
    nn nn.functional nn.init nn.utils nn.utils.rnn nn.utils.parametrize nn.utils.parametrizations
    nn.utils.prune nn.utils.stateless nn.attention nn.attention.flex_attention
    linalg fft special autograd autograd.functional autograd.forward_ad autograd.graph
    optim optim.lr_scheduler optim.swa_utils amp func random serialization
    utils.data utils.checkpoint utils.hooks utils.benchmark utils.dlpack utils.tensorboard
    distributions distributed multiprocessing jit onnx fx export compiler hub profiler testing
    sparse masked library overrides quasirandom signal.windows cuda cpu""".split()]

# (name regex, reason[, namespaces[, kind]]). A name matching a rule is not counted, in every
# namespace or only in the namespaces the rule lists, and only if its object's type is named
# ``kind`` where the rule gives one.
EXCLUDE = [
    (r"^_", "private names and Python protocol methods (operators are tested on their own)"),
    (r"quantiz|^q_|^(de)?quantize|int_repr|qscheme|qparams|_per_(channel|tensor)|fake_quant|"
     r"^Q(U)?Int|^qu?int|^per_(channel|tensor)_(affine|symmetric)",
     "quantized tensors and quantization"),
    (r"mkldnn|cudnn|miopen|fbgemm|^nnpack|_nnpack|xnnpack|onednn", "vendor kernel libraries"),
    (r"(^|_)(xpu|mps|hpu|ipu|vulkan|xla|mtia|maia|metal|ort|ve|privateuseone)($|_)",
     "device backends ember does not target (ember has cpu, cuda, meta)"),
    (r"nested|^to_padded_tensor$|^jagged$", "nested (jagged) tensors"),
    (r"triton", "Triton kernels (a GPU kernel compiler ember does not use: its CUDA kernels are "
     "CuPy RawKernels, registered through torch.library's custom_op)"),
    (r"[Ss]emi_?[Ss]tructured", "2:4 semi-structured sparsity, which exists only as CUTLASS and "
     "cuSPARSELt GPU kernels"),
    (r"^(refine_names|align_to|align_as|align_tensors|rename_?|has_names|names)$",
     "named tensors (a prototype torch feature)"),
    (r"^native_|_backward$|^batch_norm_(stats|elemt|gather_stats|update_stats|backward)",
     "aten-level kernels that programs reach through torch.nn.functional", ("torch",)),
    (r"^(sym_|Sym)", "symbolic shapes (torch.compile's tracing types)", ("torch",)),
    (r"", "C++ classes torch re-exports at the top level (pybind11 types): the TorchScript IR "
     "and runtime (Graph, Node, ScriptModule, the JIT type objects), dispatcher keys, the "
     "monitor and serializer classes; programs reach them through torch.jit, torch.library, "
     "torch.serialization", ("torch",), "pybind11_type"),
    (r"^(parse_ir|parse_schema|parse_type_comment|import_ir_module(_from_buffer)?|cpp|"
     r"merge_type_from_type_comment|unify_type_list|fork|wait|AVG|SUM)$",
     "TorchScript's functions at the top level (torch.jit.fork/wait are counted in torch.jit)",
     ("torch",)),
    (r"^(u?int[1-7]|bits?\d*(x\d)?)$",
     "sub-byte and bit-packed shell dtypes: torch names them but has no kernels for them",
     ("torch",)),
    (r"^(TYPE_CHECKING|USE_GLOBAL_DEPS|USE_RTLD_GLOBAL_WITH_LIBTORCH|classproperty|LoggerBase|"
     r"get_file_path|prepare_multiprocessing_environment|compiled_with_cxx11_abi|is_fbcode)$",
     "torch's own build and import plumbing"),
    (r"^(volatile|output_nr|is_set_to|set_$|storage_offset_|untyped_storage_)$",
     "legacy or storage-swapping internals", ("torch.Tensor",)),
    (r"^index$", "functorch first-class dimensions (Tensor.index binds Dim objects; prototype)",
     ("torch.Tensor",)),
    (r"^(eig|symeig|lstsq|solve|reinforce|matrix_rank)$",
     "removed from torch: they only raise, pointing to torch.linalg",
     ("torch", "torch.Tensor")),
]

# (area, name regex): topics of torch.* and Tensor names. The first match wins; a name in no
# area is "core". Names of other namespaces are in the namespace's own area ("nn.functional").
AREAS = [
    ("linalg", r"^(linalg_|einsum$|kron$|tensordot$|cdist$|cross$|trace$|addbmm_?$|addmv_?$|"
               r"vdot$|inner$|det$|logdet$|slogdet$|inverse$|svd|qr$|pinverse$|cholesky|lu|"
               r"matrix_(power|exp|rank)$|chain_matmul$|ger$|addr_?$|orgqr$|ormqr$|geqrf$|"
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
               r"(crow|ccol|col|row)_indices(_copy)?)$"),
]
_NS_AREA = {"torch.linalg": "linalg", "torch.fft": "fft", "torch.special": "special+complex",
            "torch.sparse": "sparse"}


def _is_torch_api(obj):
    """A function, class or torch value (dtype, layout, memory format) torch defines."""
    if isinstance(obj, types.ModuleType):
        return False
    import torch
    if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format)):
        return True
    return callable(obj) and (getattr(obj, "__module__", None) or "").startswith("torch")


def _defined_in(obj, ns, private_too):
    """Whether ``obj`` is ``ns``'s own: defined in it or a module under it, a C binding, or
    (``private_too``) from a private module (``torch._jit_internal``), not imported from
    another public namespace (``torch.nn.functional.Tensor`` is ``torch``'s)."""
    mod = getattr(obj, "__module__", None) or ""
    return (mod == ns or mod.startswith(ns + ".") or isinstance(obj, types.BuiltinFunctionType)
            or private_too and mod.startswith("torch._"))


def _namespace_names(ns, mod):
    # __all__ where there is one, plus what the namespace defines that its __all__ forgets
    # (torch.overrides.TorchFunctionMode); all of torch's own for torch (unique, HalfTensor)
    names = set(getattr(mod, "__all__", ()))
    for n in dir(mod):
        if n.startswith("_"):
            continue
        try:
            obj = getattr(mod, n)
        except Exception:       # lazy attributes that fail to load
            continue
        if _is_torch_api(obj) and (ns == "torch" or
                                   _defined_in(obj, ns, not hasattr(mod, "__all__"))):
            names.add(n)
    return {n for n in names if hasattr(mod, n)}


@functools.cache
def torch_names():
    """``{namespace: {name: type name of its object}}`` of PyTorch's public API (see the module
    docstring); a namespace torch cannot import here (an optional dependency missing) maps to
    None."""
    import importlib
    import warnings

    import torch
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ns in NAMESPACES:
            if ns == "torch.Tensor":
                mod, names = torch.Tensor, [n for n in dir(torch.Tensor) if n[0] != "_"]
            else:
                try:
                    mod = importlib.import_module(ns)
                except ImportError:
                    out[ns] = None
                    continue
                names = _namespace_names(ns, mod)
            out[ns] = {n: type(getattr(mod, n, None)).__name__ for n in names}
    return out


def excluded_by(name, namespace, kind=None):
    """The index of the first ``EXCLUDE`` rule ``name`` (an object of type ``kind``) matches
    in ``namespace``, or None."""
    for i, (rx, _, *rest) in enumerate(EXCLUDE):
        where, of_kind = (rest + [None, None])[:2]
        if (re.search(rx, name) and (where is None or namespace in where) and
                (of_kind is None or of_kind == kind)):
            return i
    return None


def area_of(name, namespace="torch"):
    """The area ``name`` of ``namespace`` is counted in (see ``AREAS``)."""
    if namespace not in ("torch", "torch.Tensor"):
        return _NS_AREA.get(namespace, namespace[len("torch."):])
    for area, rx in AREAS:
        if re.search(rx, name):
            return area
    return "core"


def all_areas():
    return [a for a, _ in AREAS] + ["core"] + sorted(
        {area_of("", ns) for ns in NAMESPACES[2:]} - {a for a, _ in AREAS})


def _ember_namespace(ns):
    import ember
    obj = ember
    for part in ns.split(".")[1:]:
        try:
            obj = getattr(obj, part)
        except (AttributeError, ImportError):   # a namespace ember lacks, or fails to load
            return None
    return obj


def measure(without=()):
    """The coverage report as a dict (what ``--json`` prints)."""
    sys.path.insert(0, str(ROOT))
    names = torch_names()
    report = {"namespaces": {}, "exclusions": [], "areas_left_out": list(without),
              "torch_unavailable": sorted(ns for ns, v in names.items() if v is None)}
    dropped = defaultdict(int)
    by_area = defaultdict(lambda: {"implemented": 0, "total": 0})
    for ns in NAMESPACES:
        target = _ember_namespace(ns)
        # attributes set per tensor (dtype, grad...) resolve on an instance only
        instance = target([0.0]) if ns == "torch.Tensor" and target else None
        have, missing = [], []
        for name, kind in sorted((names[ns] or {}).items()):
            rule = excluded_by(name, ns, kind)
            if rule is not None:
                dropped[rule] += 1
                continue
            area = area_of(name, ns)
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
                                    "in_ember": target is not None, "missing": missing}
    totals = {k: sum(r[k] for r in report["namespaces"].values())
              for k in ("implemented", "total")}
    totals["percent"] = round(100 * totals["implemented"] / max(totals["total"], 1), 1)
    report["totals"] = totals
    report["areas"] = dict(sorted(by_area.items()))
    report["exclusions"] = [{"regex": rx, "reason": why, "names_dropped": dropped[i],
                             "namespaces": rest[0] if rest and rest[0] else "all",
                             "kind": rest[1] if len(rest) > 1 else None}
                            for i, (rx, why, *rest) in enumerate(EXCLUDE)]
    return report


def markdown(report, show_missing=True):
    lines = ["# ember API coverage against PyTorch", ""]
    if report["areas_left_out"]:
        lines += [f"Areas left out: {', '.join(report['areas_left_out'])}.", ""]
    if report["torch_unavailable"]:
        lines += ["Not measured (torch cannot import them here): "
                  f"{', '.join(report['torch_unavailable'])}.", ""]
    lines += ["| namespace | implemented | total | % |", "|---|---:|---:|---:|"]
    for ns, r in report["namespaces"].items():
        absent = "" if r["in_ember"] else " (not in ember)"
        lines.append(f"| {ns}{absent} | {r['implemented']} | {r['total']} | {r['percent']} |")
    t = report["totals"]
    lines += [f"| **all** | **{t['implemented']}** | **{t['total']}** | **{t['percent']}** |",
              "", "| area | implemented | total |", "|---|---:|---:|"]
    lines += [f"| {a} | {r['implemented']} | {r['total']} |" for a, r in report["areas"].items()]
    lines += ["", "## Exclusion rules", "", "| regex | reason | in | names dropped |",
              "|---|---|---|---:|"]
    lines += [f"| `{e['regex'].replace('|', chr(92) + '|')}`"
              f"{' (' + e['kind'] + ')' if e['kind'] else ''} | {e['reason']} | "
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
    p.add_argument("--without", nargs="*", default=[], choices=all_areas(),
                   help="leave these areas out of the totals")
    p.add_argument("--no-missing", action="store_true", help="do not list the missing names")
    args = p.parse_args(argv)
    report = measure(args.without)
    print(json.dumps(report, indent=1) if args.json else
          markdown(report, not args.no_missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
