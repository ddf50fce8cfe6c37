"""``torch.profiler.ExecutionTraceObserver``: record every op call (its inputs and outputs:
values, shapes, dtypes, strides, tensor and storage ids) into an execution trace, the Chakra
JSON torch writes (schema ``1.1.1-chakra.0.0.4``), for replay and performance modelling tools.

It sits on ``dispatch.hooks.profiler`` while it runs (wrapping a profile already recording);
a profile started while it runs is refused, as profiles do not nest in ember.
"""
import contextlib
import gzip
import itertools
import json
import os
import tempfile
import time
import warnings
import weakref

from .._ops.dispatch import hooks

_TYPES = {bool: "Bool", int: "Int", float: "Double", str: "String", type(None): "None"}


class _Event:
    """One node of the trace while it is open (``sequence_nr`` as a profiler event's)."""

    def __init__(self, node):
        self.node, self.sequence_nr = node, -1


class _Recorder:
    """The dispatch hook of a running observer."""

    def __init__(self, prev):
        self.prev, self.nodes, self.ids = prev, [], itertools.count(3)
        self.tensors, self.storages, self.stack, self.obj_ids = {}, {}, [2], itertools.count(1)

    def _tid(self, table, obj):
        entry = table.get(id(obj))
        if entry is None or entry[0]() is not obj:      # (a freed object's id came back)
            entry = table[id(obj)] = (weakref.ref(obj), next(self.obj_ids))
        return entry[1]

    def _value(self, v):
        """(value, shape, type, strides) of one argument, as torch writes them."""
        if hasattr(v, "_data") and hasattr(v, "dtype"):
            st = v.untyped_storage() if v.device.type != "meta" else v
            return ([self._tid(self.tensors, v), self._tid(self.storages, st),
                     v.storage_offset(), v.numel(), v.element_size(), str(v.device)],
                    list(v.shape), f"Tensor({_C_TYPES.get(v.dtype.name, v.dtype.name)})",
                    list(v.stride()))
        if isinstance(v, (list, tuple)):
            parts = [self._value(x) for x in v]
            return ([p[0] for p in parts], [p[1] for p in parts],
                    f"GenericList[{','.join(p[2] for p in parts)}]", [p[3] for p in parts])
        if type(v).__name__ == "device":
            return str(v), [], "Device", []
        if type(v).__name__ == "dtype":
            return str(v), [], "ScalarType", []
        kind = _TYPES.get(type(v))
        return ("<None>" if v is None else v if kind else str(v)), [], kind or type(v).__name__, []

    def _io(self, values):
        parts = [self._value(v) for v in values]
        return {k: [p[i] for p in parts] for i, k in enumerate(("values", "shapes", "types",
                                                                  "strides"))}

    def begin(self, name, category="cpu_op", shapes=None, nest=True, args=()):
        node = {"id": next(self.ids), "name": name, "ctrl_deps": self.stack[-1],
                "inputs": self._io(args), "outputs": self._io(()), "attrs": None}
        self.nodes.append(node)
        if nest:
            self.stack.append(node["id"])
        return _Event(node)

    def end(self, ev, outs=()):
        node = ev.node
        if self.stack[-1] == node["id"]:
            self.stack.pop()
        node["outputs"] = self._io(outs)
        node["attrs"] = [{"name": "rf_id", "type": "uint64", "value": node["id"] - 3},
                         {"name": "fw_parent", "type": "uint64", "value": 0},
                         {"name": "seq_id", "type": "int64", "value": ev.sequence_nr},
                         {"name": "scope", "type": "uint64", "value": 0},
                         {"name": "tid", "type": "uint64", "value": 1},
                         {"name": "fw_tid", "type": "uint64", "value": 0},
                         {"name": "op_schema", "type": "string", "value": ""}]

    def __call__(self, opdef, args, kwargs, run):
        ev = self.begin("aten::" + opdef.name, args=tuple(args) + tuple(kwargs.values()))
        out = ()
        try:
            out = run(opdef, args, kwargs) if self.prev is None else \
                self.prev(opdef, args, kwargs, run)
            grad_fn = getattr(out, "grad_fn", None)
            if grad_fn is not None:
                ev.sequence_nr = grad_fn.seq
            return out
        finally:
            self.end(ev, out if isinstance(out, tuple) else (out,))

    @contextlib.contextmanager
    def backward(self, node):
        ev = self.begin(node.name())
        seq = getattr(node, "seq", -1)
        ev.sequence_nr = seq if seq != float("inf") else -1
        try:
            with (self.prev.backward(node) if self.prev is not None else contextlib.nullcontext()):
                yield
        finally:
            self.end(ev)


_C_TYPES = {"float32": "float", "float64": "double", "float16": "c10::Half",
            "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int", "int16": "short int",
            "int8": "signed char", "uint8": "unsigned char", "bool": "bool",
            "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}


class ExecutionTraceObserver:
    """Record an execution trace of the ops run between ``start()`` and ``stop()``, written to
    the path given to ``register_callback`` (gzip-compressed when it ends in ``.gz``) when
    the observer is unregistered.

    Example:
        >>> import ember, json, os, tempfile
        >>> from ember.profiler import ExecutionTraceObserver
        >>> path = os.path.join(tempfile.mkdtemp(), "et.json")
        >>> et = ExecutionTraceObserver().register_callback(path)
        >>> et.start(); y = ember.ones(2, 3) * 2; et.stop(); et.unregister_callback()
        >>> [n["name"] for n in json.load(open(path))["nodes"]][2:]
        ['aten::mul']
    """

    def __init__(self):
        self._registered = self._execution_trace_running = False
        self.extra_resources_collection = False
        self.resources_dir = self.output_file_path = self.output_file_path_observer = ""
        self._rec = None
        self._start_ts = None

    def __del__(self):
        self.unregister_callback()

    @staticmethod
    def build_execution_trace_obs_from_env():
        """An observer registered to a temporary file when ``ENABLE_PYTORCH_EXECUTION_TRACE``
        is 1 (collecting extra resources with ``ENABLE_PYTORCH_EXECUTION_TRACE_EXTRAS=1``),
        else None."""
        if os.environ.get("ENABLE_PYTORCH_EXECUTION_TRACE", "0") != "1":
            return None
        with tempfile.NamedTemporaryFile("w+t", suffix=".et.json", delete=False) as fp:
            filename = fp.name
        et = ExecutionTraceObserver().register_callback(filename)
        et.set_extra_resource_collection(
            os.environ.get("ENABLE_PYTORCH_EXECUTION_TRACE_EXTRAS", "0") == "1")
        return et

    def set_extra_resource_collection(self, val):
        """Whether to collect the resources a replay needs (a directory next to the trace;
        ember generates no kernels to put there)."""
        self.extra_resources_collection = val
        if val:
            self.get_resources_dir(can_create=True)

    def register_callback(self, output_file_path):
        """Set the trace's file; returns the observer."""
        if not self._registered:
            self.output_file_path = self.output_file_path_observer = output_file_path
            with open(output_file_path, "w"):       # fails now on a path it cannot write
                pass
            self._registered, self._rec = True, None
        return self

    def get_resources_dir(self, can_create=False):
        if not self.extra_resources_collection:
            return None
        if not self.resources_dir:
            self.resources_dir = self.get_resources_dir_for_et_path(
                self.output_file_path, create_dir=can_create) or ""
        return self.resources_dir or None

    @staticmethod
    def get_resources_dir_for_et_path(trace_path, create_dir=False):
        work_dir, file_name = os.path.split(trace_path)
        resource_dir = os.path.join(work_dir, os.path.splitext(file_name)[0] + "_resources")
        if not os.path.exists(resource_dir):
            if not create_dir:
                return None
            try:
                os.mkdir(resource_dir)
            except OSError:
                warnings.warn(f"Execution trace exception when creating {resource_dir}",
                              stacklevel=2)
                return None
        return resource_dir

    def unregister_callback(self):
        """Stop, and write the trace."""
        if not self._registered:
            return
        self.stop()
        self._registered = False
        rec = self._rec
        nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|process]",
                  "ctrl_deps": 1}, {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]",
                                    "ctrl_deps": 1}]
        for n in nodes:
            n.update(inputs=rec._io(()) if rec else _EMPTY_IO, outputs=_EMPTY_IO, attrs=[])
        trace = {"schema": "1.1.1-chakra.0.0.4", "pid": os.getpid(),
                 "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "start_ts": self._start_ts or 0, "nodes": nodes + (rec.nodes if rec else []),
                 "finish_ts": int(time.monotonic() * 1e3)}
        opener = gzip.open if self.output_file_path.endswith(".gz") else open
        with opener(self.output_file_path, "wt") as f:
            json.dump(trace, f)

    is_registered = property(lambda self: self._registered)

    def is_running(self):
        return self._execution_trace_running

    def start(self):
        """Start recording (the observer must be registered)."""
        if self._registered and not self._execution_trace_running:
            if self._rec is None:
                self._rec, self._start_ts = _Recorder(None), int(time.monotonic() * 1e3)
            self._rec.prev, hooks.profiler = hooks.profiler, self._rec
            self._execution_trace_running = True

    def stop(self):
        """Stop recording (the trace is kept for ``unregister_callback``)."""
        if self._execution_trace_running:
            hooks.profiler = self._rec.prev
            self._execution_trace_running = False

    def cleanup(self):
        self.unregister_callback()

    def get_output_file_path(self):
        return self.output_file_path or None


_EMPTY_IO = {"values": [], "shapes": [], "types": [], "strides": []}
