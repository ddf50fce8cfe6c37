"""One graph IR under ``ember.jit``, ``ember.fx`` and ``ember.onnx`` (see docs/graphs.md).

``ir`` holds Graph and Node, ``record`` builds graphs from the dispatch's tracer hook,
``codegen`` prints them as Python, ``interpreter`` replays them, ``passes`` rewrites them and
``serialize`` writes them as data.
"""
from .interpreter import Interpreter, fetch_attr
from .ir import Graph, Node, TensorMeta, map_arg
from .passes import PassManager, cse, dead_code, fold_constants, fusion_groups
from .record import TracerWarning, record

__all__ = ["Graph", "Node", "TensorMeta", "map_arg", "Interpreter", "fetch_attr", "PassManager",
           "cse", "dead_code", "fold_constants", "fusion_groups", "TracerWarning", "record"]
