"""``Interpreter`` (run a graph node by node) and ``Transformer`` (rebuild it while running)."""
from .._graph.interpreter import Interpreter
from .._graph.ir import Graph, map_arg
from .proxy import Proxy


class Transformer(Interpreter):
    """Run the graph on proxies to build a new one: override ``call_function`` & co. to change
    what each node becomes; ``transform()`` returns the new ``GraphModule``.

    Example:
        >>> import operator, ember
        >>> from ember import fx
        >>> class AddToMul(fx.Transformer):
        ...     def call_function(self, target, args, kwargs):
        ...         target = operator.mul if target is operator.add else target
        ...         return super().call_function(target, args, kwargs)
        >>> gm = AddToMul(fx.symbolic_trace(lambda x: x + 3)).transform()
        >>> gm(ember.tensor([2.0]))
        tensor([6.])
    """

    def __init__(self, module):
        super().__init__(module)
        from ._symbolic_trace import Tracer
        self.new_graph = Graph()
        self.tracer = Tracer()
        self.tracer.graph, self.tracer.root = self.new_graph, module

    def placeholder(self, target, args, kwargs):
        default = next(iter(args), None)
        n = self.new_graph.placeholder(target, default_value=default)
        return Proxy(n, self.tracer)

    def get_attr(self, target, args, kwargs):
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_function(self, target, args, kwargs):
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_method(self, target, args, kwargs):
        return self.tracer.create_proxy("call_method", target, args, kwargs)

    def call_module(self, target, args, kwargs):
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def transform(self):
        from .graph_module import GraphModule
        self.env, self.args_iter = {}, iter(())
        result = None
        for node in self.graph._nodes:
            if node.op == "output":
                result = self.map_nodes_to_values(node.args[0], node)
                break
            self.env[node] = self.run_node(node)
        self.new_graph.output(self.tracer.create_arg(result))
        return GraphModule(self.module, self.new_graph)


__all__ = ["Interpreter", "Transformer", "map_arg"]
