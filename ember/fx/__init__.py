"""``torch.fx``: symbolic tracing into the graph IR, graph editing, and generated modules.

``symbolic_trace`` runs a module's Python code on ``Proxy`` objects and records module calls,
method calls and function calls as nodes of the same ``Graph`` class ember's other graph tools
use (ember/_graph; see docs/graphs.md). An fx graph lowers to the op level, where every node
calls an OpDef, by tracing its ``GraphModule`` through the dispatch: ``ember.jit.trace(gm, x)``.
"""
from .._graph.codegen import CodeGen
from .._graph.ir import Graph, Node, has_side_effect, map_arg
from . import passes  # noqa: F401
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .proxy import Attribute, Proxy, TraceError
from ._symbolic_trace import ProxyableClassMeta, Tracer, symbolic_trace, wrap
from .subgraph_rewriter import replace_pattern
from .passes import shape_prop  # noqa: F401
from . import subgraph_rewriter  # noqa: F401

__all__ = ["Graph", "GraphModule", "Node", "Proxy", "Attribute", "TraceError", "Tracer",
           "symbolic_trace", "wrap", "Interpreter", "Transformer", "replace_pattern", "map_arg",
           "CodeGen", "ProxyableClassMeta", "has_side_effect"]
