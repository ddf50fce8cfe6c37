"""``GraphModule``: a module whose forward is generated from its ``Graph``."""
import copy

from .. import nn
from .._graph.codegen import compile_forward


def _copy_attr(src, dst, target):
    """Copy ``src.<target>`` (a dotted path) into ``dst``, making empty modules on the way."""
    *prefix, field = target.split(".")
    for item in prefix:
        f = getattr(src, item)
        t = getattr(dst, item, None)
        if t is f:          # (a parent already installed holds what is needed, as torch's)
            return
        if t is None:
            t = nn.Module()
            setattr(dst, item, t)
        src, dst = f, t
    v = getattr(src, field)
    if isinstance(v, nn.Module) or isinstance(v, nn.Parameter):
        setattr(dst, field, v)
    elif field in getattr(src, "_buffers", {}):
        dst.register_buffer(field, v, field not in src._non_persistent_buffers_set)
    else:
        setattr(dst, field, v)


class GraphModule(nn.Module):
    """``root``'s submodules, parameters and buffers that ``graph`` reads, with a forward
    generated from ``graph`` (``code``); call ``recompile()`` after editing the graph.

    Example:
        >>> import ember
        >>> from ember import fx
        >>> gm = fx.symbolic_trace(ember.nn.Sequential(ember.nn.ReLU()))
        >>> gm(ember.tensor([-1.0, 1.0]))
        tensor([0., 1.])
    """

    def __new__(cls, *args, **kwargs):
        # each instance gets its own class, so its generated forward is a method of it
        if not getattr(cls, "_graph_module_class", False):
            cls = type(cls.__name__, (cls,), {"_graph_module_class": True})
        return super().__new__(cls)

    def __init__(self, root, graph, class_name="GraphModule"):
        super().__init__()
        type(self).__name__ = class_name
        if isinstance(root, nn.Module):
            if hasattr(root, "training"):
                self.training = root.training
            for n in graph._nodes:
                if n.op in ("get_attr", "call_module"):
                    _copy_attr(root, self, n.target)
        elif isinstance(root, dict):
            for n in graph._nodes:
                if n.op in ("get_attr", "call_module"):
                    if n.target not in root:
                        raise RuntimeError(f"Node {n} referenced target {n.target} but that "
                                           "target was not provided in ``root``!")
                    *prefix, field = n.target.split(".")
                    dst = self
                    for p in prefix:
                        if not hasattr(dst, p):
                            setattr(dst, p, nn.Module())
                        dst = getattr(dst, p)
                    setattr(dst, field, root[n.target])
        else:
            raise RuntimeError("Unsupported type " + str(root) + " passed for root!")
        self.graph = graph

    graph = property(lambda self: self._graph)

    @graph.setter
    def graph(self, g):
        object.__setattr__(self, "_graph", g)
        g.owning_module = self
        self.recompile()

    code = property(lambda self: self._code)

    def recompile(self):
        """Regenerate ``forward`` from the graph (after editing it)."""
        fn, src = compile_forward(self._graph)
        object.__setattr__(self, "_code", src)
        type(self).forward = fn
        return src

    def print_readable(self, print_output=True, include_stride=False, include_device=False,
                       colored=False):
        """The generated module as a class definition."""
        body = "\n".join("    " + line for line in self._code.strip("\n").splitlines())
        src = f"class {type(self).__name__}(torch.nn.Module):\n{body}\n"
        if print_output:
            print(src)
        return src

    def add_submodule(self, target, m):
        """Install ``m`` at dotted path ``target``, making empty modules on the way."""
        *prefix, field = target.split(".")
        mod = self
        for item in prefix:
            sub = getattr(mod, item, None)
            if sub is None:
                sub = nn.Module()
                mod.add_module(item, sub)
            if not isinstance(sub, nn.Module):
                return False
            mod = sub
        mod.add_module(field, m)
        return True

    def delete_submodule(self, target):
        """Remove the submodule at ``target``; False if there is none."""
        *path, name = target.split(".")
        mod = self
        for item in path:
            if not hasattr(mod, item):
                return False
            mod = getattr(mod, item)
        if not hasattr(mod, name) or name not in mod._modules:
            return False
        delattr(mod, name)
        return True

    def delete_all_unused_submodules(self):
        """Remove the submodules no ``call_module``/``get_attr`` node reads."""
        used = set()
        for n in self._graph._nodes:
            if n.op in ("call_module", "get_attr"):
                parts = n.target.split(".")
                used.update(".".join(parts[:i + 1]) for i in range(len(parts)))
        for name, _ in list(self.named_modules()):
            if name and name not in used and not any(u.startswith(name + ".") for u in used):
                self.delete_submodule(name)

    def __deepcopy__(self, memo):
        res = nn.Module()
        memo[id(self)] = res
        res.__dict__ = copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "_graph"},
                                     memo)
        return GraphModule(res, copy.deepcopy(self._graph), type(self).__name__)

    def __str__(self):
        return super().__str__() + "\n\n" + self._code.strip("\n")
