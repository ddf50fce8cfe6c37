"""``add_graph``'s ``GraphDef``: the model traced by ``ember.jit.trace`` (ember's graph IR, see
docs/graphs.md), written as torch writes its TorchScript trace.

As torch: one ``IO Node`` per input (``input/...``) and output (``output/output.<i>``), a
``prim::GetAttr`` node per parameter or buffer, an ``aten::<op>`` node per op, each named
under its module scope (``Sequential/Linear[0]/...``) with its ``_output_shapes``; the trace runs
in eval mode. Node names come from ember's trace, not TorchScript's debug names (``input.1``),
so they differ from torch's there.
"""
from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.config_pb2 import RunMetadata
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.step_stats_pb2 import DeviceStepStats, StepStats
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.versions_pb2 import VersionDef


def _node(name, op, inputs, shape, attr):
    attrs = {"attr": AttrValue(s=attr.encode())}
    if shape is not None:
        attrs["_output_shapes"] = AttrValue(list=AttrValue.ListValue(shape=[TensorShapeProto(
            dim=[TensorShapeProto.Dim(size=d) for d in shape])]))
    return NodeDef(name=name, op=op, input=inputs, attr=attrs)


def _shape(node):
    # (meta["val"] describes the value traced: a shape for tensors, nothing for the rest)
    shape = getattr(node.meta.get("val"), "shape", None)
    return None if shape is None else tuple(shape)


def _scope(model, path):
    """``Sequential/Linear[0]`` for the module at dotted ``path`` of ``model``."""
    parts, mod, out = [p for p in path.split(".") if p], model, [type(model).__name__]
    for p in parts:
        mod = mod.get_submodule(p) if hasattr(mod, "get_submodule") else getattr(mod, p)
        out.append(f"{type(mod).__name__}[{p}]")
    return "/".join(out)


def graph(model, args, verbose=False, use_strict_trace=True):
    """``(GraphDef, RunMetadata)`` of ``model`` traced on ``args``."""
    import ember
    args = args if isinstance(args, tuple) else (args,)
    training = getattr(model, "training", None)
    if training is not None:
        model.train(False)
    try:
        g = ember.jit.trace(model, args, strict=use_strict_trace).graph
    finally:
        if training is not None:
            model.train(training)
    if verbose:
        print(g)
    names, nodes = {}, []
    for n in g.nodes:
        shape = _shape(n)
        inputs = [names[a] for a in n.all_input_nodes]
        if n.op == "placeholder":
            names[n] = f"input/{n.name}"
            nodes.append(_node(names[n], "IO Node", [], shape, ""))
        elif n.op == "get_attr":
            path, _, attr = str(n.target).rpartition(".")
            names[n] = f"{_scope(model, path)}/{attr}/{attr}"
            nodes.append(_node(names[n], "prim::GetAttr", [], None, f"{{ name :  {attr} }}"))
        elif n.op == "output":
            for i, src in enumerate(n.all_input_nodes):
                nodes.append(_node(f"output/output.{i + 1}", "IO Node", [names[src]],
                                   _shape(src), ""))
        else:
            target = getattr(n.target, "name", None) or getattr(n.target, "__name__", str(n.target))
            names[n] = f"{_scope(model, n.meta.get('scope', ''))}/{n.name}"
            nodes.append(_node(names[n], f"aten::{target}", inputs, shape, "{}"))
    # NOTE: torch too records the device as the CPU whatever the model ran on
    stats = RunMetadata(step_stats=StepStats(dev_stats=[DeviceStepStats(device="/device:CPU:0")]))
    return GraphDef(node=nodes, versions=VersionDef(producer=22)), stats
