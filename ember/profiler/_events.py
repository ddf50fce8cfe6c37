"""Profiler results: one ``FunctionEvent`` per op call or range, ``EventList`` to average and
print them as torch's table, and the Chrome trace format that Perfetto and chrome://tracing
open. Names, fields and the table layout follow ``torch.autograd.profiler_util`` so code that
reads torch's results reads these.
"""
import json
import os


def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    return f"{us / 1e3:.3f}ms" if us >= 1e3 else f"{us:.3f}us"


def _format_share(us, total_us):
    return "NaN" if total_us == 0 else f"{us * 100.0 / total_us:.2f}%"


def _format_memory(nbytes):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


class _Times:
    """Formatted views of the times, as torch's FormattedTimesMixin offers."""
    device_time_total = self_device_time_total = device_memory_usage = 0
    self_device_memory_usage = 0
    is_async = False

    @property
    def cpu_time(self):
        """Average CPU time per call, in microseconds."""
        return self.cpu_time_total / max(self.count, 1)

    cpu_time_str = property(lambda self: _format_time(self.cpu_time))
    cpu_time_total_str = property(lambda self: _format_time(self.cpu_time_total))
    self_cpu_time_total_str = property(lambda self: _format_time(self.self_cpu_time_total))
    # torch <2.4 called the device columns cuda_*; programs still read them
    cuda_time_total = self_cuda_time_total = property(lambda self: 0)


class FunctionEvent(_Times):
    """One op call or ``record_function`` range: times in microseconds from the profile's start.

    Attributes:
        name (str): ``aten::<op>`` for ops, the label for ranges, the node's name for backward.
        input_shapes (list): the shape of each argument (``[]`` for non-tensors) when
            ``record_shapes`` was on.
        cpu_children (list[FunctionEvent]): the events that ran inside this one.
        cpu_memory_usage (int): bytes of new tensors it and its children made (when
            ``profile_memory``; frees are not tracked).
    """

    count = 1

    def __init__(self, id, name, thread, start_us, input_shapes=None, stack=None,
                 sequence_nr=-1, category="cpu_op"):
        self.id, self.name, self.thread = id, name, thread
        self.start_us, self.end_us = start_us, start_us
        self.input_shapes, self.stack = input_shapes or [], stack or []
        self.sequence_nr, self.category = sequence_nr, category
        self.cpu_children, self.cpu_parent = [], None
        self.cpu_memory_usage = 0
        self.is_user_annotation = category == "user_annotation"

    key = property(lambda self: self.name)
    cpu_time_total = property(lambda self: self.end_us - self.start_us)

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def self_cpu_memory_usage(self):
        return self.cpu_memory_usage - sum(c.cpu_memory_usage for c in self.cpu_children)

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} cpu_time={self.cpu_time_str} "
                f"start_us={self.start_us:.3f} end_us={self.end_us:.3f} "
                f"cpu_children={[c.id for c in self.cpu_children]} thread={self.thread} "
                f"input_shapes={self.input_shapes} cpu_memory_usage={self.cpu_memory_usage}>")


class FunctionEventAvg(_Times):
    """The events of one key (name, and input shapes or stack when grouped by them), summed."""

    def __init__(self, key, input_shapes=None, stack=None):
        self.key, self.input_shapes, self.stack = key, input_shapes, stack or []
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = self.self_cpu_memory_usage = 0
        self.cpu_parent = None
        self._top_level = False

    def add(self, evt):
        self.count += evt.count
        self.cpu_time_total += evt.cpu_time_total
        self.self_cpu_time_total += evt.self_cpu_time_total
        self.cpu_memory_usage += evt.cpu_memory_usage
        self.self_cpu_memory_usage += evt.self_cpu_memory_usage
        self._top_level = self._top_level or evt.cpu_parent is None
        return self

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str}"
                f" cpu_time={self.cpu_time_str} count={self.count} "
                f"input_shapes={self.input_shapes} cpu_memory_usage={self.cpu_memory_usage}>")


class EventList(list):
    """A list of events with torch's summaries: ``key_averages``, ``table``,
    ``export_chrome_trace``, ``total_average``."""

    def __init__(self, events=(), profile_memory=False):
        super().__init__(events)
        self._profile_memory = profile_memory

    @property
    def self_cpu_time_total(self):
        """Sum of the self CPU time of every event, in microseconds."""
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        """One ``FunctionEventAvg`` per name (and per input shapes / top stack frames)."""
        groups = {}
        for e in self:
            key = (e.key, str(e.input_shapes) if group_by_input_shape else None,
                   tuple(e.stack[:group_by_stack_n]) if group_by_stack_n else None)
            avg = groups.get(key)
            if avg is None:
                avg = groups[key] = FunctionEventAvg(
                    e.key, e.input_shapes if group_by_input_shape else None,
                    e.stack[:group_by_stack_n] if group_by_stack_n else None)
            avg.add(e)
        return EventList(groups.values(), self._profile_memory)

    def total_average(self):
        """Every event summed into one ``FunctionEventAvg`` keyed "Total"."""
        total = FunctionEventAvg("Total")
        for e in self:
            total.add(e)
        return total

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75, max_name_column_width=55,
              max_shapes_column_width=80, header=None, top_level_events_only=False, time_unit=None):
        """The events as torch's fixed-width table, optionally sorted (descending) by an
        attribute such as ``"cpu_time_total"`` or ``"self_cpu_memory_usage"``."""
        return _build_table(self, sort_by, row_limit, max_src_column_width,
                            max_name_column_width, max_shapes_column_width, header,
                            top_level_events_only, time_unit, self._profile_memory)

    def __str__(self):
        return self.table()

    def export_chrome_trace(self, path):
        """Write the events as a Chrome trace (JSON, "X" events with µs timestamps)."""
        with open(path, "w") as fh:
            json.dump(chrome_trace(self), fh)


def chrome_trace(events, base_us=0.0):
    """The Chrome trace-event document for ``events`` (every event, nested ones included)."""
    pid = os.getpid()
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}}]
    for t in sorted({e.thread for e in events}):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
                    "args": {"name": f"thread {t} (python)"}})
    for e in events:
        args = {"External id": e.id}
        if e.input_shapes:
            args["Input Dims"] = e.input_shapes
        if e.sequence_nr >= 0:
            args["Sequence number"] = e.sequence_nr
        if e.stack:
            args["Call stack"] = ";".join(e.stack)
        if e.cpu_memory_usage:
            args["Memory"] = e.cpu_memory_usage
        out.append({"ph": "X", "cat": e.category, "name": e.name, "pid": pid, "tid": e.thread,
                    "ts": base_us + e.start_us, "dur": e.cpu_time_total, "args": args})
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": out}


def _build_table(events, sort_by, row_limit, max_src_width, max_name_width, max_shapes_width,
                 header, top_level_only, time_unit, profile_memory):
    if not events:
        return ""
    if sort_by is not None:
        events = sorted(events, key=lambda e: getattr(e, sort_by.replace("cuda", "device")),
                        reverse=True)
    has_shapes = any(e.input_shapes for e in events)
    stacks = [e.stack for e in events if e.stack]
    name_w = min(max(len(e.key) for e in events) + 4, max_name_width or 1 << 30)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
    headers.append("# of Calls")
    widths, align = [name_w] + [12] * (len(headers) - 1), [">"] * len(headers)
    if has_shapes:
        headers.append("Input Shapes")
        widths.append(min(max(len(str(e.input_shapes)) for e in events) + 4,
                          max_shapes_width or 1 << 30))
        align.append(">")
    if stacks:
        headers.append("Source Location")
        widths.append(min(max(len(s) for st in stacks for s in st) + 4, max_src_width or 1 << 30))
        align.append("<")
    row = "".join(f"{{:{a}{w}}}  " for a, w in zip(align, widths))
    sep = "".join("-" * w + "  " for w in widths)
    line_len = sum(widths) + 2 * len(widths) - 2
    total = sum(e.self_cpu_time_total for e in events)

    def fmt_time(us):
        scale = {"s": (1e6, "s"), "ms": (1e3, "ms"), "us": (1.0, "us")}.get(time_unit)
        return f"{us / scale[0]:.3f}{scale[1]}" if scale else _format_time(us)

    lines = []
    if header is not None:
        lines += ["=" * line_len, header]
    if top_level_only:
        lines += ["=" * line_len, "This report only display top-level ops statistics"]
    lines += [sep, row.format(*headers), sep]
    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level_only and (e.cpu_parent is not None or not getattr(e, "_top_level", True)):
            continue
        shown += 1
        name = e.key
        if max_name_width is not None and len(name) >= max_name_width - 3:
            name = name[:max_name_width - 3] + "..."
        vals = [name, _format_share(e.self_cpu_time_total, total), fmt_time(e.self_cpu_time_total),
                _format_share(e.cpu_time_total, total), fmt_time(e.cpu_time_total),
                fmt_time(e.cpu_time)]
        if profile_memory:
            vals += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        vals.append(e.count)
        if has_shapes:
            vals.append(str(e.input_shapes)[:widths[len(vals)]])
        if stacks:
            src = e.stack[0] if e.stack else ""
            w = widths[len(vals)]
            vals.append(src if len(src) <= w else "..." + src[len(src) - w + 3:])
        lines.append(row.format(*vals))
    lines += [sep, f"Self CPU time total: {fmt_time(total)}", ""]
    return "\n".join(lines)
