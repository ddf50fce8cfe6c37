"""Running a graph node by node (fx's ``Interpreter``). Op nodes call their OpDef, so the
replay goes through the dispatch and records autograd as eager code does."""
from .ir import map_arg


def fetch_attr(module, target):
    """``module.a.b`` for ``target`` ``"a.b"``, with fx's error for a missing one."""
    obj = module
    for i, part in enumerate(target.split(".")):
        if not hasattr(obj, part):
            raise RuntimeError("Node referenced nonexistent target "
                               f"{'.'.join(target.split('.')[:i + 1])}")
        obj = getattr(obj, part)
    return obj


class Interpreter:
    """Run ``module``'s graph (or ``graph``) on arguments, one node at a time; override the
    ``placeholder``/``get_attr``/``call_*``/``output`` methods to change what a node does.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> gm = fx.symbolic_trace(ember.nn.Sequential(ember.nn.ReLU()))
        >>> fx.Interpreter(gm).run(ember.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """

    def __init__(self, module, garbage_collect_values=True, graph=None):
        self.module = module
        self.graph = graph if graph is not None else module.graph
        self.garbage_collect_values, self.env = garbage_collect_values, {}
        self.submodules = dict(module.named_modules()) if hasattr(module, "named_modules") \
            else {}
        last, self.user_to_last_uses = {}, {}
        for n in self.graph._nodes:
            for a in n.all_input_nodes:
                last[a] = n
        for a, n in last.items():
            self.user_to_last_uses.setdefault(n, []).append(a)

    def run(self, *args, initial_env=None, enable_io_processing=True):
        self.env = dict(initial_env or {})
        cg = self.graph._codegen
        if enable_io_processing and cg is not None:
            args = cg.process_inputs(*args)
        self.args_iter = iter(args)
        for node in self.graph._nodes:
            if node in self.env:
                continue
            self.env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for d in self.user_to_last_uses.get(node, ()):
                    self.env.pop(d, None)
            if node.op == "output":
                out = self.env[node]
                return cg.process_outputs(out) if enable_io_processing and cg is not None else out
        return None

    def run_node(self, n):
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.meta.get("no_grad"):           # (recorded where the code turned grad off)
            from ..autograd.grad_mode import no_grad
            with no_grad():
                return getattr(self, n.op)(n.target, args, kwargs)
        return getattr(self, n.op)(n.target, args, kwargs)

    def placeholder(self, target, args, kwargs):
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one "
                               "was not passed in!") from None

    def get_attr(self, target, args, kwargs):
        return self.fetch_attr(target)

    def call_function(self, target, args, kwargs):
        return target(*args, **kwargs)

    def call_method(self, target, args, kwargs):
        self_obj, *rest = args
        return getattr(self_obj, target)(*rest, **kwargs)

    def call_module(self, target, args, kwargs):
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target, args, kwargs):
        return args[0]

    def fetch_attr(self, target):
        return fetch_attr(self.module, target)

    def fetch_args_kwargs_from_env(self, n):
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args, n):
        def load(a):
            if a not in self.env:
                raise RuntimeError(f"Node {n} referenced nonexistent value {a}! Run "
                                   "Graph.lint() to diagnose such issues")
            return self.env[a]
        return map_arg(args, load)
