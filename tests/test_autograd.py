"""The autograd engine, hooks, grad modes, anomaly mode and custom ``Function``s, each scenario
run once with torch and once with ember (``lib`` is the module) and compared: same values,
same error types, same key part of the message."""
import random
import re
import warnings

import numpy as np
import pytest

import ember
from helpers import function
from oracle import same, torch

def x3(lib, **kw):
    return lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, **kw)


# ---- backward / grad basics -------------------------------------------------------------------


def test_backward_accumulates_and_grad_does_not():
    def f(lib):
        x = x3(lib, requires_grad=True)
        (x * x).sum().backward()
        (x ** 3).sum().backward()
        g = lib.autograd.grad((x.sin()).sum(), x)
        return x.grad, g
    same(f)


def test_retain_graph_and_second_backward_error():
    def twice(lib, retain):
        x = x3(lib, requires_grad=True)
        y = (x.exp() * x).sum()
        y.backward(retain_graph=retain)
        y.backward()
        return x.grad
    same(lambda lib: twice(lib, True))
    same(lambda lib: twice(lib, False), "Trying to backward through the graph a second time")


def test_backward_inputs():
    def f(lib):
        x, w = x3(lib, requires_grad=True), x3(lib, requires_grad=True)
        y = (x * w * w).sum()
        y.backward(inputs=[w], retain_graph=True)
        g1 = (x.grad, w.grad.clone())
        lib.autograd.backward(y, inputs=x)
        return g1[0] is None, g1[1], x.grad, w.grad
    same(f)
    same(lambda lib: (x3(lib, requires_grad=True) * 2).sum().backward(inputs=[]),
         "cannot be empty")


def test_backward_inputs_non_leaf():
    def f(lib):
        x = x3(lib, requires_grad=True)
        h = x * 2
        (h * h).sum().backward(inputs=[h])
        return h.grad, x.grad is None
    same(f)


def test_grad_allow_unused_and_materialize():
    def f(lib, **kw):
        x, z = x3(lib, requires_grad=True), x3(lib, requires_grad=True)
        return lib.autograd.grad((x * 2).sum(), [x, z], **kw)
    same(lambda lib: f(lib), "The differentiated Tensor at index 1 appears to not have been used "
                             "in the graph")
    e = same(lambda lib: f(lib, allow_unused=True))
    assert e[1] is None
    same(lambda lib: f(lib, materialize_grads=True))
    same(lambda lib: f(lib, allow_unused=False, materialize_grads=True),
         "allow_unused")


def test_grad_create_graph_and_grad_outputs():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x ** 3
        (g,) = lib.autograd.grad(y, x, grad_outputs=lib.ones_like(y), create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        return g, g.requires_grad, gg
    same(f)
    same(lambda lib: lib.autograd.grad(x3(lib, requires_grad=True) * 2,
                                       x3(lib, requires_grad=True)),
         "grad can be implicitly created only for scalar outputs")
    same(lambda lib: lib.autograd.grad(x3(lib).sum(), x3(lib)), "does not require grad")


@pytest.mark.parametrize("expr", ["x ** 4", "x.sin() * x", "x.exp() / (1 + x * x)",
                                  "(x * x).tanh()", "x.sigmoid().log()"])
def test_third_order_gradients(expr):
    def f(lib):
        x = lib.tensor([0.3, -1.2, 2.0], dtype=lib.float64, requires_grad=True)
        y = eval(expr, {"x": x})
        out = []
        for _ in range(3):
            (y,) = lib.autograd.grad(y.sum(), x, create_graph=True)
            out.append(y)
        return out
    same(f)


def test_fan_out_and_diamond():
    def f(lib):
        x = x3(lib, requires_grad=True)
        a = x * 2
        b, c = a.sin(), a.cos()
        (b * c + a).sum().backward()
        return x.grad
    same(f)


def test_shared_leaf_grad_not_aliased():
    def f(lib):
        x, w = x3(lib, requires_grad=True), x3(lib, requires_grad=True)
        (x + w).sum().backward()
        x.grad.mul_(3)
        return x.grad, w.grad
    same(f)


@pytest.mark.parametrize("seed", ["ones_like", "ones"])
@pytest.mark.parametrize("view", [
    "x.view(-1)", "x.reshape(6, 4)", "x.unsqueeze(1)", "x.unsqueeze(0).squeeze(0)", "x.flatten(1)",
    "x.unflatten(2, (2, 2))", "x.permute(2, 0, 1)", "x.transpose(0, 2)", "x.movedim(0, -1)",
    "x.flatten(1).t()", "x.transpose(0, 1)[:, :1]", "x.rot90(1, (0, 2))", "x.flip(1)"])
def test_leaf_grad_of_a_view_layout_and_memory_as_torch(view, seed):
    """A view's gradient becomes ``.grad`` uncopied where torch takes it (laid out as the
    leaf): the same strides, sharing memory with the gradient given to backward or not."""
    def f(lib):
        x = lib.arange(24.0).reshape(2, 3, 4).requires_grad_()
        y = eval(view)                                              # noqa: S307 (a table)
        g = lib.ones_like(y) if seed == "ones_like" else lib.ones(y.shape)
        y.backward(g)
        return [list(g.stride()), list(x.grad.stride()), int(x.grad.data_ptr() == g.data_ptr()),
                x.grad]
    same(f)


def test_grad_sharing_memory_accumulates_out_of_place():
    # NOTE: torch's second backward adds in place into the memory a.grad shares with b.grad
    # and with the seed (3s, and the seed changed); ember's first .grad is not written into
    a, b = (ember.zeros(3, 4, requires_grad=True) for _ in range(2))
    seed = ember.ones(12)
    for _ in range(2):
        (a.view(12) + b.view(12)).backward(seed)
    assert a.grad.tolist() == b.grad.tolist() == [[2.0] * 4] * 3 and seed.tolist() == [1.0] * 12
    a.grad.mul_(2)                                  # now a.grad's own: b.grad is left alone
    assert b.grad.tolist() == [[2.0] * 4] * 3


# ---- leaf rules and requires_grad -------------------------------------------------------------


def test_requires_grad_rules():
    same(lambda lib: lib.tensor([1, 2]).requires_grad_(),
         "nly Tensors of floating point.*dtype can require gradients")
    same(lambda lib: lib.tensor([1, 2], requires_grad=True), "floating point")
    same(lambda lib: (x3(lib, requires_grad=True) * 2).requires_grad_(False),
         "you can only change requires_grad flags of leaf variables")

    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * 2
        return x.is_leaf, y.is_leaf, y.requires_grad, x.detach().requires_grad, \
            x3(lib).is_leaf
    same(f)


def test_leaf_in_place_errors():
    same(lambda lib: x3(lib, requires_grad=True).add_(1),
         "a leaf Variable that requires grad is being used in an in-place operation")
    same(lambda lib: x3(lib, requires_grad=True)[:2].mul_(2),
         "a view of a leaf Variable that requires grad is being used in an in-place operation")

    def under_no_grad(lib):
        x = x3(lib, requires_grad=True)
        with lib.no_grad():
            x.mul_(2)
        (x * x).sum().backward()
        return x, x.grad
    same(under_no_grad)


def test_modified_saved_tensor_errors():
    def input_saved(lib):
        x = x3(lib, requires_grad=True)
        a = x * 1
        b = a * a
        a.add_(1)
        b.sum().backward()
    same(input_saved, r"modified by an inplace operation: \[torch.DoubleTensor \[3\]\], which is "
                      r"output 0 of Add, is at version 1; expected version 0 instead")

    def output_saved(lib):
        x = x3(lib, requires_grad=True)
        b = (x * 1).exp()
        b.mul_(2)
        b.sum().backward()
    same(output_saved, r"\[torch.DoubleTensor \[3\]\], which is output 0 of Exp, is at version "
                       r"1; expected version 0")

    def not_saved_is_fine(lib):
        x = x3(lib, requires_grad=True)
        a = x * 1
        b = a + 1           # add saves nothing
        a.mul_(5)
        b.sum().backward()
        return x.grad
    same(not_saved_is_fine)


# ---- in-place ops on views of non-leaf tensors (CopySlices) -----------------------------------


@pytest.mark.parametrize("case", ["slice_mul", "select_add", "setitem", "view_of_view",
                                  "transpose_copy", "base_after"])
def test_inplace_on_views(case):
    def f(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lib.float64,
                       requires_grad=True)
        w = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        a = x * 1
        if case == "slice_mul":
            a[:, 1:].mul_(3)
        elif case == "select_add":
            a[1].add_(w)
        elif case == "setitem":
            a[0] = w * w
        elif case == "view_of_view":
            a[1][1:].mul_(w[1:])
        elif case == "transpose_copy":
            a.t()[0].copy_(w[:2].exp())
        elif case == "base_after":
            v = a[0]
            v.mul_(2)
            a = a * a
        (a * lib.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], dtype=lib.float64)).sum().backward()
        return a, x.grad, w.grad, \
            type(a.grad_fn).__name__ if case not in ("base_after", "setitem") else ""
    same(f)


def test_inplace_on_view_grad_fn_is_copyslices():
    def f(lib):
        a = x3(lib, requires_grad=True) * 1
        a[1:].mul_(2)
        return a.grad_fn.name()
    same(f)


# ---- hooks ----------------------------------------------------------------------------------


def test_tensor_hooks_leaf_and_non_leaf():
    def f(lib):
        seen = []
        x = x3(lib, requires_grad=True)
        x.register_hook(lambda g: seen.append(g.clone()))
        x.register_hook(lambda g: g * 10)      # replaces the gradient that reaches .grad
        y = x * x
        y.register_hook(lambda g: g + 1)
        h = y.register_hook(lambda g: g * 1000)
        h.remove()
        y.sum().backward()
        return seen, x.grad
    same(f)
    same(lambda lib: x3(lib).register_hook(lambda g: g),
         "cannot register a hook on a tensor that doesn't require gradient")


def test_retain_grad():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: g * 3)      # registered after retain_grad: not in y.grad
        z = y * y
        z.retain_grad()
        z.sum().backward(retain_graph=True)
        g1 = y.grad.clone()
        z.sum().backward()
        return g1, y.grad, z.grad, x.grad, y.retains_grad, x.retains_grad
    same(f)
    same(lambda lib: x3(lib).retain_grad(), "can't retain_grad on Tensor that has "
                                            "requires_grad=False")


def test_node_hooks_and_prehooks():
    def f(lib):
        log = []
        x = x3(lib, requires_grad=True)
        y = x * x
        y.grad_fn.register_prehook(lambda go: (go[0] * 2,))
        y.grad_fn.register_hook(lambda gi, go: log.append((list(gi), list(go))))
        z = y.exp()
        h = z.grad_fn.register_hook(lambda gi, go: (gi[0] * 0,))
        h.remove()
        z.sum().backward()
        return log, x.grad
    same(f)

    def replace(lib):
        x = x3(lib, requires_grad=True)
        y = x.sin()
        y.grad_fn.register_hook(lambda gi, go: (gi[0] + 1,))
        y.sum().backward()
        return x.grad
    same(replace)


def test_grad_fn_names_and_next_functions():
    def f(lib):
        x, w = x3(lib, requires_grad=True), x3(lib)
        y = (x * w + x.exp()).sum()
        fn = y.grad_fn
        names = [fn.name()]
        for nxt, nr in fn.next_functions:
            names.append((nxt.name() if nxt is not None else None, nr))
        add = fn.next_functions[0][0]
        mul, exp = add.next_functions[0][0], add.next_functions[1][0]
        return names, add.name(), [None if n is None else n.name()
                                   for n, _ in mul.next_functions], \
            exp.next_functions[0][0].variable is x
    same(f)


def test_post_accumulate_grad_hook():
    def f(lib):
        seen = []
        x = x3(lib, requires_grad=True)
        x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.clone()))
        (x * x).sum().backward()
        (x * 3).sum().backward()
        return seen
    same(f)
    same(lambda lib: (x3(lib, requires_grad=True) * 2).register_post_accumulate_grad_hook(
        lambda t: None), "post accumulate grad hooks cannot be registered on non-leaf tensors")


def _hook_order_program(lib):
    """Every hook kind on one graph, each logging its tag and what it got, in call order."""
    log = []

    def rec(tag, scale=None):
        def h(*args):
            a = args[0]
            got = a.tolist() if isinstance(a, lib.Tensor) and tag.endswith("pre") else \
                a.grad.tolist() if isinstance(a, lib.Tensor) else \
                [[] if g is None else g.tolist() for g in a]
            log.append(f"{tag} {got}")
            return None if scale is None else a * scale
        return h
    a, b = x3(lib, requires_grad=True), x3(lib, requires_grad=True)
    a.register_hook(rec("a1.pre", 2.0)), a.register_post_accumulate_grad_hook(rec("a1.post"))
    a.register_hook(rec("a2.pre")), a.register_post_accumulate_grad_hook(rec("a2.post"))
    b.register_post_accumulate_grad_hook(rec("b.post")), b.register_hook(rec("b.pre"))
    b.retain_grad()
    b.grad = lib.ones(3, dtype=lib.float64)
    c = a * b
    c.register_hook(rec("c1.pre", 10.0)), c.retain_grad(), c.register_hook(rec("c2.pre"))
    c.grad_fn.register_prehook(rec("c.node.pre")), c.grad_fn.register_hook(rec("c.node.post"))
    acc = c.grad_fn.next_functions[0][0]
    acc.register_prehook(rec("acc.node.pre")), acc.register_hook(rec("acc.node.post"))
    (c * a + b).sum().backward(retain_graph=True)       # a used twice
    log.append(f"grads {a.grad.tolist()} {b.grad.tolist()} {c.grad.tolist()}")
    leaves = [lib.full((2,), float(i), dtype=lib.float64, requires_grad=True) for i in range(9)]
    for i, t in enumerate(leaves):      # nine AccumulateGrads ready at once
        t.register_hook(rec(f"l{i}.pre")), t.register_post_accumulate_grad_hook(rec(f"l{i}.post"))
    y = (lib.stack(leaves) * 2).sum() + (leaves[4] * leaves[7]).sum()
    y.backward(retain_graph=True)
    lib.autograd.grad(y, leaves[3:6], retain_graph=True)
    y.backward(inputs=leaves[::2])
    return log


@pytest.mark.parametrize("engine", ["c", "python"])
def test_hook_order_matches_torch(engine):
    """Tensor hooks on leaves and non-leaves, post-accumulate hooks, retain_grad and node
    hooks (AccumulateGrad's too) run in torch's order with torch's values, on either loop."""
    from ember._ops.dispatch import python_reference
    import contextlib
    with python_reference() if engine == "python" else contextlib.nullcontext():
        assert _hook_order_program(ember) == _hook_order_program(torch)


def test_hook_handle_context_manager():
    def f(lib):
        x = x3(lib, requires_grad=True)
        with x.register_hook(lambda g: g * 5):
            (x * 1).sum().backward()
        (x * 1).sum().backward()
        return x.grad
    same(f)


# ---- grad modes -------------------------------------------------------------------------------


def test_grad_mode_context_managers_and_decorators():
    def f(lib):
        x = x3(lib, requires_grad=True)
        out = []
        with lib.no_grad():
            out.append((x * 2).requires_grad)
            with lib.enable_grad():
                out.append((x * 2).requires_grad)
            out.append(lib.is_grad_enabled())
        with lib.set_grad_enabled(False):
            out.append((x * 2).requires_grad)
        lib.set_grad_enabled(False)
        out.append(lib.is_grad_enabled())
        lib.set_grad_enabled(True)
        with lib.inference_mode():
            out.append((x * 2).requires_grad)
            out.append(lib.is_inference_mode_enabled())
        with lib.inference_mode(False):
            out.append((x * 2).requires_grad)

        @lib.no_grad()
        def nog(t):
            return t * 2

        @lib.enable_grad()
        def eg(t):
            return t * 2

        @lib.inference_mode()
        def inf(t):
            return t * 2

        @lib.set_grad_enabled(False)
        def sge(t):
            return t * 2

        out.append([nog(x).requires_grad, inf(x).requires_grad, sge(x).requires_grad])
        with lib.no_grad():
            out.append(eg(x).requires_grad)
        out.append(lib.is_grad_enabled())
        return out
    same(f)


def test_grad_mode_on_generators_and_exceptions():
    def f(lib):
        x = x3(lib, requires_grad=True)

        @lib.no_grad()
        def gen():
            for i in range(2):
                yield (x * i).requires_grad, lib.is_grad_enabled()
        res = list(gen())
        try:
            with lib.no_grad():
                raise ValueError
        except ValueError:
            pass
        return res, lib.is_grad_enabled()
    same(f)


# ---- anomaly mode -----------------------------------------------------------------------------


def test_detect_anomaly_nan_names_the_op():
    def f(lib):
        with lib.autograd.detect_anomaly():
            x = lib.tensor([0.0, 1.0], dtype=lib.float64, requires_grad=True)
            (lib.sqrt(x) * 0).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(f, "Function 'SqrtBackward0' returned nan values in its 0th output.")

    def warned(lib):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                f(lib)
            except RuntimeError:
                pass
        return [str(m.message).split(":")[0].split(".")[0] for m in w
                if m.category is UserWarning]
    same(warned)

    def off(lib):
        x = lib.tensor([0.0, 1.0], dtype=lib.float64, requires_grad=True)
        with lib.autograd.set_detect_anomaly(True, check_nan=False):
            (lib.sqrt(x) * 0).sum().backward()
        return lib.is_grad_enabled(), np.isnan(x.grad.numpy()).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(off)


def test_detect_anomaly_warns_with_forward_traceback():
    for lib in (torch, ember):
        class Boom(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1

            @staticmethod
            def backward(ctx, g):
                raise ValueError("boom")

        def make_forward_call(x):
            return Boom.apply(x)

        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with lib.autograd.detect_anomaly():
                x = x3(lib, requires_grad=True)
                y = make_forward_call(x)
                with pytest.raises(ValueError, match="boom"):
                    y.sum().backward()
        msgs = [str(m.message) for m in w if "Error detected in" in str(m.message)]
        assert msgs and "BoomBackward" in msgs[0], (lib.__name__, [str(m.message) for m in w])
        assert "make_forward_call" in msgs[0], lib.__name__


# ---- custom Function --------------------------------------------------------------------------


def _functions(lib):
    F = lib.autograd.Function

    class Cube(F):
        @staticmethod
        def forward(ctx, x, k=1.0):
            ctx.save_for_backward(x)
            ctx.k = k
            return x ** 3 * k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2 * ctx.k, None

    class MulAdd(F):     # setup_context form, two outputs, a non-tensor output
        @staticmethod
        def forward(x, y, alpha):
            return x * y, x + alpha * y, "tag"

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, y, alpha = inputs
            ctx.save_for_backward(x, y)
            ctx.alpha = alpha

        @staticmethod
        def backward(ctx, g_mul, g_add, g_tag):
            x, y = ctx.saved_tensors
            return g_mul * y + g_add, g_mul * x + g_add * ctx.alpha, None

    return Cube, MulAdd


def test_function_forward_backward_double_backward():
    def f(lib):
        Cube, _ = _functions(lib)
        x = x3(lib, requires_grad=True)
        y = Cube.apply(x, 2.0)
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x, create_graph=True)
        (ggg,) = lib.autograd.grad(gg.sum(), x)
        return y, g, gg, ggg, y.grad_fn.name(), len(y.grad_fn.next_functions), \
            type(y.grad_fn).__name__
    same(f)


def test_function_setup_context_multiple_outputs():
    def f(lib):
        _, MulAdd = _functions(lib)
        x, y = x3(lib, requires_grad=True), x3(lib) * 0.5
        y.requires_grad_()
        m, a, tag = MulAdd.apply(x, y, 3.0)
        (m.sum() * 2).backward(retain_graph=True)   # a gets no gradient: materialized zeros
        g1 = (x.grad.clone(), y.grad.clone())
        a.sum().backward()
        return m, a, tag, g1, x.grad, y.grad, m.grad_fn is a.grad_fn
    same(f)


def test_function_needs_input_grad_and_non_tensor_args():
    def f(lib):
        seen = []

        class Scale(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, s, y):
                return x * s + y

            @staticmethod
            def backward(ctx, g):
                seen.append(ctx.needs_input_grad)
                return g * 2, None, g
        x = x3(lib, requires_grad=True)
        Scale.apply(x, 2, x3(lib)).sum().backward()
        return seen, x.grad
    same(f)


def test_function_no_grad_and_no_input_requiring_grad():
    def f(lib):
        Cube, _ = _functions(lib)
        x = x3(lib, requires_grad=True)
        with lib.no_grad():
            a = Cube.apply(x)
        b = Cube.apply(x3(lib))
        return a.requires_grad, a.grad_fn is None, b.requires_grad
    same(f)


def test_function_saved_tensor_errors():
    def modified(lib):
        Cube, _ = _functions(lib)
        x = x3(lib, requires_grad=True)
        h = x * 1
        y = Cube.apply(h)
        h.add_(1)
        y.sum().backward()
    same(modified, r"modified by an inplace operation: \[torch.DoubleTensor \[3\]\], which is "
                   r"output 0 of Add, is at version 1; expected version 0")

    def freed(lib):
        Cube, _ = _functions(lib)
        x = x3(lib, requires_grad=True)
        y = Cube.apply(x)
        y.sum().backward()
        return y.grad_fn.saved_tensors
    same(freed, "Trying to backward through the graph a second time")

    def saved_output(lib):
        class Exp(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                r = x.exp()
                ctx.save_for_backward(r)
                return r

            @staticmethod
            def backward(ctx, g):
                (r,) = ctx.saved_tensors
                return g * r
        x = x3(lib, requires_grad=True)
        y = Exp.apply(x)
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        y2 = Exp.apply(x)
        y2.mul_(2)
        try:
            y2.sum().backward()
        except RuntimeError as e:
            msg = re.search(r"which is output 0 of \w+", str(e)).group()
        return g, gg, msg
    same(saved_output)


def test_function_mark_dirty():
    def make(lib):
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 2
        return Double

    def non_leaf(lib):
        x = x3(lib, requires_grad=True)
        a = x * 1
        b = make(lib).apply(a)
        a.sum().backward()
        return b is a, a.grad_fn.name(), a._version, x.grad

    def view(lib):
        x = x3(lib, requires_grad=True)
        a = x * 1
        make(lib).apply(a[1:])
        (a * a).sum().backward()
        return type(a.grad_fn).__name__, x.grad
    same(non_leaf)
    same(view)
    same(lambda lib: make(lib).apply(x3(lib, requires_grad=True)),
         "a leaf Variable that requires grad has been used in an in-place operation")


def test_function_mark_non_differentiable_and_materialize():
    def f(lib, materialize):
        seen = []

        class Sort(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                v = x * 2
                i = x * 0 + 1
                ctx.mark_non_differentiable(i)
                return v, i

            @staticmethod
            def backward(ctx, gv, gi):
                seen.append([gv, gi])
                return gv * 2
        x = x3(lib, requires_grad=True)
        v, i = Sort.apply(x)
        v.sum().backward()
        return i.requires_grad, v.requires_grad, seen, x.grad
    same(lambda lib: f(lib, True))
    same(lambda lib: f(lib, False))


def test_function_returns_input_and_int_output():
    def f(lib):
        Ident = function(lib, "Ident", lambda ctx, x: (x, x.long()), lambda ctx, g, gi: g * 3)
        x = x3(lib, requires_grad=True)
        y, i = Ident.apply(x)
        y.sum().backward()
        return y is x, y.grad_fn.name(), i.requires_grad, x.grad
    same(f)


def test_function_bad_backward_results():
    def make(lib, backward, n=1):
        class Bad(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x.sum() * k
        Bad.backward = staticmethod(backward)
        return Bad.apply(x3(lib, requires_grad=True), 2).backward()

    same(lambda lib: make(lib, lambda ctx, g: (g, g, g)),
         r"function BadBackward returned an incorrect number of gradients \(expected 2, got 3\)")
    same(lambda lib: make(lib, lambda ctx, g: (g.expand(3), g)),
         "function BadBackward returned a gradient different than None at position 2, but the "
         "corresponding forward input was not a Variable")
    same(lambda lib: make(lib, lambda ctx, g: (lib.ones(2, dtype=lib.float64), None)),
         r"Function BadBackward returned an invalid gradient at index 0 - got \[2\] but "
         r"expected shape compatible with \[3\]")
    same(lambda lib: make(lib, lambda ctx, g: (lib.ones(1, 1, dtype=lib.float64),)))

    def no_backward(lib):
        class NoBackward(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2
        NoBackward.apply(x3(lib, requires_grad=True)).sum().backward()
    same(no_backward, "You must implement either the backward or vjp method")

    def legacy(lib):
        _, MulAdd = _functions(lib)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MulAdd()(x3(lib))
    same(legacy, "Legacy autograd function with non-static forward method is deprecated")


def test_once_differentiable():
    def make(lib):
        from_mod = torch.autograd.function if lib is torch else ember.autograd.function

        class Sq(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            @from_mod.once_differentiable
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * g * x
        return Sq

    def first(lib):
        x = x3(lib, requires_grad=True)
        (g,) = lib.autograd.grad(make(lib).apply(x).sum(), x, create_graph=True)
        return g, g.requires_grad

    def second(lib):
        x = x3(lib, requires_grad=True)
        y = make(lib).apply(x)
        (g,) = lib.autograd.grad(y, x, lib.ones_like(y).requires_grad_(), create_graph=True)
        g.sum().backward()
    same(first)
    same(second, "trying to differentiate twice a function that was marked with "
                 "@once_differentiable")


def test_function_export():
    assert ember.autograd.Function is ember.autograd.function.Function
    assert ember.autograd.graph.Node is ember.autograd.Node


# ---- more engine cases -----------------------------------------------------------------------


def test_inputs_accumulate():
    def f(lib):
        x = x3(lib, requires_grad=True)
        seen = []
        x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.clone()))
        for _ in range(2):
            (x * x).sum().backward(inputs=[x])
        h = x * 2
        for _ in range(2):
            (h * h).sum().backward(inputs=[h], retain_graph=True)
        return x.grad, seen, h.grad
    same(f)


def test_zero_base_copy():
    def f(lib):
        w = x3(lib, requires_grad=True)
        a = lib.zeros(4, dtype=lib.float64)
        a[1:].copy_(w * 2)
        (a * a).sum().backward()
        return a.requires_grad, w.grad, a.grad_fn.name()
    same(f)


def test_acc_prehook():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * 2
        acc = y.grad_fn.next_functions[0][0]
        acc.register_prehook(lambda go: (go[0] * 10,))
        y.sum().backward()
        return x.grad
    same(f)


def test_shape_mismatch_msg():
    def f(lib):
        x = x3(lib, requires_grad=True)
        lib.autograd.backward([x * 2], [lib.ones(2, dtype=lib.float64)])
    same(f, r"Mismatch in shape: grad_output\[0\] has a shape of torch.Size\(\[2\]\) and "
            r"output\[0\] has a shape of torch.Size\(\[3\]\)")


def test_grad_self():
    same(lambda lib: lib.autograd.grad(x3(lib, requires_grad=True).sum(),
                                       [x3(lib, requires_grad=True)], allow_unused=True))

    def f(lib):
        x = x3(lib, requires_grad=True)
        return lib.autograd.grad(x, x, lib.ones(3, dtype=lib.float64))
    same(f)


def test_hook_create_graph():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * x
        y.register_hook(lambda g: g * x)
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        return g, gg
    same(f)


def test_nonleaf_grad_capture_hooks():
    def f(lib):
        x = x3(lib, requires_grad=True)
        h = x * 2
        h.register_hook(lambda g: g * 100)
        return lib.autograd.grad((h * h).sum(), h)
    same(f)


def test_retain_grad_leaf_and_twice():
    def f(lib):
        x = x3(lib, requires_grad=True)
        x.retain_grad()
        y = x * 2
        y.retain_grad()
        y.retain_grad()
        (y * y).sum().backward()
        return x.grad, y.grad, x.retains_grad
    same(f)


def test_grad_accum_create_graph():
    def f(lib):
        x = x3(lib, requires_grad=True)
        (x ** 3).sum().backward(create_graph=True)
        g = x.grad
        (x ** 2).sum().backward(create_graph=True)
        return g.requires_grad, x.grad.requires_grad, x.grad, x.grad is g
    same(f)


def test_nan_anomaly_function():
    def f(lib):
        N = function(lib, "N", lambda ctx, x: x * 1, lambda ctx, g: g * float("nan"))
        with lib.autograd.detect_anomaly():
            N.apply(x3(lib, requires_grad=True)).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(f, "Function 'NBackward' returned nan values in its 0th output.")


def test_view_grad_fn_chain():
    def f(lib):
        x = x3(lib, requires_grad=True)
        v = x[1:]
        return v._base is x, v.is_leaf, v.requires_grad
    same(f)


def test_detach_inplace_view():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * 2
        z = y.detach()
        z.mul_(2)
        y.sum().backward()
        return x.grad, y
    same(f)


def test_modify_detached_saved():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * 2
        z = y.exp()
        y.detach().zero_()
        z.sum().backward()
    same(f, "modified by an inplace operation")


# ---- autograd.functional ----------------------------------------------------------------------


def _fn_inputs(lib):
    return (lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64),
            lib.tensor([[0.5, -1.0], [2.0, 0.1]], dtype=lib.float64))


_FN = {
    "f1": lambda a: a.sin() * a,
    "f2": lambda a, b: ((a[:2] * b).sum(0), a.exp()),
    "s1": lambda a: (a ** 3).sum() * a[0],
    "s2": lambda a, b: (a[:2] * b.sum(1)).sum() ** 2,
    "lin": lambda a, b: a * 2,
}

_FUNCTIONAL_CASES = {
    "jacobian": lambda F, x, y: F.jacobian(_FN["f1"], x),
    "jacobian_tuple": lambda F, x, y: F.jacobian(_FN["f2"], (x, y)),
    "jacobian_vectorize": lambda F, x, y: F.jacobian(_FN["f2"], (x, y), vectorize=True),
    "jacobian_unused": lambda F, x, y: F.jacobian(_FN["lin"], (x, y)),
    "jacobian_unused_vectorize": lambda F, x, y: F.jacobian(_FN["lin"], (x, y), vectorize=True),
    "jacobian_strict_vectorize": lambda F, x, y: F.jacobian(_FN["lin"], (x, y), strict=True,
                                                            vectorize=True),
    "hessian_vectorize": lambda F, x, y: F.hessian(_FN["s2"], (x, y), vectorize=True),
    "jacobian_strict": lambda F, x, y: F.jacobian(_FN["lin"], (x, y), strict=True),
    "hessian": lambda F, x, y: F.hessian(_FN["s1"], x),
    "hessian_tuple": lambda F, x, y: F.hessian(_FN["s2"], (x, y)),
    "hessian_not_scalar": lambda F, x, y: F.hessian(_FN["f1"], x),
    "vjp": lambda F, x, y: F.vjp(_FN["f1"], x, x * 2),
    "vjp_tuple": lambda F, x, y: F.vjp(_FN["f2"], (x, y), (x[:2] * 0 + 1, x)),
    "vjp_v_none": lambda F, x, y: F.vjp(_FN["f1"], x),
    "vjp_scalar": lambda F, x, y: F.vjp(_FN["s1"], x),
    "vjp_bad_v": lambda F, x, y: F.vjp(_FN["f1"], x, x[:2]),
    "vjp_strict": lambda F, x, y: F.vjp(lambda a: x * 2, x, x, strict=True),
    "vjp_not_tensor": lambda F, x, y: F.vjp(_FN["f1"], 3, x),
    "vjp_output_not_tensor": lambda F, x, y: F.vjp(lambda a: 3, x, x),
    "jvp": lambda F, x, y: F.jvp(_FN["f1"], x, x * 2),
    "jvp_tuple": lambda F, x, y: F.jvp(_FN["f2"], (x, y), (x, y * 3)),
    "jvp_bad_len": lambda F, x, y: F.jvp(_FN["f2"], (x, y), (x,)),
    "vhp": lambda F, x, y: F.vhp(_FN["s2"], (x, y), (x, y)),
    "hvp": lambda F, x, y: F.hvp(_FN["s2"], (x, y), (x, y)),
    "vhp_single": lambda F, x, y: F.vhp(_FN["s1"], x, x),
    "hvp_single": lambda F, x, y: F.hvp(_FN["s1"], x, x),
    "hvp_strict_linear": lambda F, x, y: F.hvp(lambda a: a.sum(), x, x, strict=True),
}

_MSG = {"jacobian_strict": "Output 0 of the user-provided function is independent of input 1",
        "jacobian_strict_vectorize": "not supported together",
        "hessian_not_scalar": "should contain a single element",
        "vjp_v_none": "The vector v can only be None if the user-provided function returns a "
                      "single Tensor with a single element.",
        "vjp_bad_v": r"v has invalid size: should be torch.Size\(\[3\]\) but got",
        "vjp_strict": "Output 0 of the user-provided function does not require gradients",
        "vjp_not_tensor": "The inputs given to vjp must be either a Tensor or a tuple of Tensors "
                          "but the given inputs has type",
        "vjp_output_not_tensor": "The outputs of the user-provided function given to vjp must be",
        "jvp_bad_len": "v is a tuple of invalid length: should be 2 but got 1.",
        "hvp_strict_linear": "found that the jacobian of the user-provided function with respect "
                             "to input 0 is independent of the input"}


@pytest.mark.parametrize("case", list(_FUNCTIONAL_CASES))
def test_functional_matches_torch(case):
    def f(lib):
        F = torch.autograd.functional if lib is torch else ember.autograd.functional
        return _FUNCTIONAL_CASES[case](F, *_fn_inputs(lib))
    same(f, _MSG.get(case))


@pytest.mark.parametrize("name", ["vjp", "jvp", "hessian", "hvp", "vhp", "jacobian",
                                  "jacobian_vectorize"])
def test_functional_create_graph(name):
    def f(lib):
        F = torch.autograd.functional if lib is torch else ember.autograd.functional
        x = _fn_inputs(lib)[0].requires_grad_()
        v = _fn_inputs(lib)[0] * 0.5
        call = {"vjp": lambda: F.vjp(_FN["f1"], x, v, create_graph=True)[1],
                "jvp": lambda: F.jvp(_FN["f1"], x, v, create_graph=True)[1],
                "hessian": lambda: F.hessian(_FN["s1"], x, create_graph=True),
                "hvp": lambda: F.hvp(_FN["s1"], x, v, create_graph=True)[1],
                "vhp": lambda: F.vhp(_FN["s1"], x, v, create_graph=True)[1],
                "jacobian": lambda: F.jacobian(_FN["f1"], x, create_graph=True),
                "jacobian_vectorize": lambda: F.jacobian(_FN["f1"], x, create_graph=True,
                                                         vectorize=True)}[name]
        r = call()
        no_graph = {"vjp": lambda: F.vjp(_FN["f1"], x, v)[1],
                    "hessian": lambda: F.hessian(_FN["s1"], x)}.get(name, call)()
        return r, r.requires_grad, lib.autograd.grad(r.sum(), x), no_graph.requires_grad
    same(f)


@pytest.mark.parametrize("case", ["view_after_base_write", "view_after_sibling_write",
                                  "exp_on_view", "double_backward", "view_shape_change",
                                  "setitem_on_view", "saving_op_on_stale_view",
                                  "result_saving_op_on_stale_view"])
def test_views_see_later_inplace_writes(case):
    # a view taken before an in-place write through its base (or a sibling view) must
    # differentiate through that write, as torch's regenerated view grad_fn does
    def f(lib):
        x, w = x3(lib, requires_grad=True), x3(lib, requires_grad=True)
        a = x * 1
        if case == "view_after_base_write":
            v = a[:2]
            a.mul_(2)
            out = v
        elif case == "view_after_sibling_write":
            v, v2 = a[:2], a[1:]
            v.mul_(w[:2])
            out = v2 * a[:2]
        elif case == "exp_on_view":
            a[1:].exp_()
            out = a
        elif case == "double_backward":
            a[:2].mul_(w[:2])
            (g,) = lib.autograd.grad((a * a).sum(), w, create_graph=True)
            return lib.autograd.grad(g.sum(), [x, w])
        elif case == "view_shape_change":
            b = a.view(3, 1)
            b.mul_(w.view(3, 1))
            out = a * b.squeeze()
        elif case == "setitem_on_view":
            v = a[1:]
            v[0] = w[0] * 3
            out = a
        elif case == "saving_op_on_stale_view":
            v = a[:2]
            a.mul_(2)
            v.mul_(w[:2])
            out = a * v.sum()
        elif case == "result_saving_op_on_stale_view":
            v = a[:2]
            a[1:].mul_(w[1:])
            v.exp_()
            out = a * v.sum()
        out.sum().backward()
        return x.grad, w.grad
    same(f)


def test_function_misuse_errors():
    def save_int(lib):
        class S(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x, 3)
                return x * 2
        S.apply(x3(lib, requires_grad=True))
    same(save_int, "save_for_backward can only save variables, but argument 1 is of type int")

    def dirty_not_returned(lib):
        class D(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)
                ctx.mark_dirty(x)
                return x * 1
        D.apply(x3(lib, requires_grad=True) * 1)
    same(dirty_not_returned, "Some elements marked as dirty during the forward method were not "
                             "returned as output")

    def view_output_then_inplace(lib):
        V = function(lib, "V", lambda ctx, x: x[:2], lambda ctx, g: lib.cat([g * 5, g[:1] * 0]))
        a = x3(lib, requires_grad=True) * 1
        v = V.apply(a)
        fine = lib.autograd.grad(v.sum(), a, retain_graph=True)
        with lib.no_grad():
            a.add_(1)
        return fine, v.sum()
    same(view_output_then_inplace, "Output 0 of V is a view and its base or another view of its "
                                   "base has been modified inplace")


def test_grad_is_grads_batched():
    def f(lib):
        x = x3(lib, requires_grad=True)
        y = x * x
        z = lib.zeros(2, dtype=lib.float64, requires_grad=True)
        return lib.autograd.grad(y, [x, z], lib.eye(3, dtype=lib.float64), allow_unused=True,
                                 is_grads_batched=True)
    same(f)

    def mlp(lib):       # one backward batched by vmap's rules, differentiable again
        x = x3(lib, requires_grad=True)
        w = lib.tensor(np.random.default_rng(1).standard_normal((4, 3)), requires_grad=True)
        y = (w @ x).relu().softmax(0) * x.sum()
        gx, gw = lib.autograd.grad(y, [x, w], lib.eye(4, dtype=lib.float64)[:, [0, 2, 1, 3]],
                                   create_graph=True, is_grads_batched=True)
        return gx, gw, lib.autograd.grad((gx.sin().sum() + gw.pow(2).sum()), [x, w])
    same(mlp)


# ---- end to end ------------------------------------------------------------------------------


def test_mlp():
    def f(lib):
        rng = np.random.default_rng(0)
        W1 = lib.tensor(rng.standard_normal((4, 3)), requires_grad=True)
        W2 = lib.tensor(rng.standard_normal((2, 4)), requires_grad=True)
        X = lib.tensor(rng.standard_normal((5, 3)))
        h = (X @ W1.t()).tanh()
        h.register_hook(lambda g: g * 0.5)
        out = (h @ W2.t()).sigmoid()
        loss = ((out - 0.5) ** 2).mean()
        loss.backward()
        return loss, W1.grad, W2.grad
    same(f)


def test_checkpoint_like():
    def f(lib):
        class Ckpt(lib.autograd.Function):
            @staticmethod
            def forward(ctx, fn, x):
                ctx.fn = fn
                ctx.save_for_backward(x)
                return fn(x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                x = x.detach().requires_grad_()
                with lib.enable_grad():
                    y = ctx.fn(x)
                (gx,) = lib.autograd.grad(y, x, g)
                return None, gx
        x = x3(lib, requires_grad=True)
        y = Ckpt.apply(lambda t: t.sin() * t.exp(), x)
        y.sum().backward()
        return y, x.grad
    same(f)


def test_kwargs_and_nested():
    def f(lib):
        Inner = function(lib, "Inner", lambda ctx, x: x * 3, lambda ctx, g: g * 3)

        class Outer(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale=1.0):
                ctx.scale = scale
                return Inner.apply(x) * scale

            @staticmethod
            def backward(ctx, g):
                return g * 3 * ctx.scale, None
        x = x3(lib, requires_grad=True)
        y = Outer.apply(x, 2.0)
        y.sum().backward()
        return y, x.grad, y.grad_fn.name()
    same(f)


# ---- saved tensor hooks -----------------------------------------------------------------------


def test_saved_tensors_hooks():
    def f(lib):
        G = lib.autograd.graph
        Cube, _ = _functions(lib)
        packed = []

        def pack(t):
            packed.append(tuple(t.shape))
            return t.detach() * 1          # a copy: later in-place writes do not reach it

        x = x3(lib, requires_grad=True)
        b = x * 1
        with G.saved_tensors_hooks(pack, lambda t: t):
            y = (b.sin() * b).exp()
            c = Cube.apply(b, 2.0)
        b.add_(1)                          # no version error: the hooks own the saved values
        y.sum().backward(retain_graph=True)
        g1 = x.grad.clone()
        c.sum().backward()
        return g1, x.grad, len(packed) > 0

    def double_backward(lib):
        x = x3(lib, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: (t, 0), lambda p: p[0]):
            y = (x.exp() * x).sum()
            (g,) = lib.autograd.grad(y, x, create_graph=True)
        return g, lib.autograd.grad(g.sum(), x)

    def on_cpu(lib):
        x = x3(lib, requires_grad=True)
        with lib.autograd.graph.save_on_cpu():
            y = (x.tanh() * x).sum()
        y.backward()
        return x.grad

    def disabled(lib):
        G = lib.autograd.graph
        with G.disable_saved_tensors_hooks("no saved tensor hooks in here"):
            with G.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    same(f)
    same(double_backward)
    same(on_cpu)
    same(disabled, "no saved tensor hooks in here")


@pytest.mark.parametrize("expr", ["(x.abs() ** 2).sum()", "(x * x.conj()).real.sum()",
                                  "(x * w).abs().sum()", "(x.exp() * w).imag.sum()",
                                  "(x / w).abs().sum()"])
def test_complex_gradients(expr):
    def f(lib):
        x = lib.tensor([1 + 2j, -0.5 + 1j], dtype=lib.complex128, requires_grad=True)
        w = lib.tensor([0.3, 2.0], dtype=lib.float64, requires_grad=True)
        y = eval(expr)
        y.backward()
        return x.grad, w.grad
    same(f)


def test_function_returning_a_one_tuple():
    def f(lib):
        T = function(lib, "T", lambda ctx, x: (x * 2,), lambda ctx, g: g * 2)
        x = x3(lib, requires_grad=True)
        (y,) = T.apply(x)
        y.sum().backward()
        return x.grad
    same(f)


def test_function_input_returned_as_is_then_modified():
    def f(lib):
        Ident = function(lib, "Ident", lambda ctx, x: x, lambda ctx, g: g * 3)
        a = x3(lib, requires_grad=True) * 1
        y = Ident.apply(a)
        fine = lib.autograd.grad(y.sum(), a, retain_graph=True)
        with lib.no_grad():
            a.mul_(2)
        return fine, y, (y * 1).sum()
    same(f, "Output 0 of Ident is a view and its base or another view of its base has been "
            "modified inplace")


_SAVED_BY_NEED = {
    "mul_scalar": lambda lib, a: a * 2, "rmul": lambda lib, a: 3 * a,
    "div_scalar": lambda lib, a: a / 2,
    "mul_const": lambda lib, a: a * lib.ones(3, 3, dtype=lib.float64),
    "div_by_self": lambda lib, a: lib.ones(3, 3, dtype=lib.float64) / a,
    "mm_const_right": lambda lib, a: a @ lib.ones(3, 2, dtype=lib.float64),
    "mm_const_left": lambda lib, a: lib.ones(2, 3, dtype=lib.float64) @ a,
    "mm_both": lambda lib, a: a @ a.t(),
    "addmm": lambda lib, a: lib.addmm(lib.zeros(3, 3, dtype=lib.float64), a,
                                      lib.ones(3, 3, dtype=lib.float64)),
}


@pytest.mark.parametrize("case", list(_SAVED_BY_NEED))
def test_inplace_after_save_only_errors_when_the_value_is_needed(case):
    # torch saves an operand only for the gradients that read it: a * 2 keeps nothing of a
    def f(lib):
        x = lib.tensor(np.arange(1.0, 10.0).reshape(3, 3) / 4, requires_grad=True)
        a = x * 1
        y = _SAVED_BY_NEED[case](lib, a)
        a.add_(1)
        y.sum().backward()
        return x.grad
    same(f, "modified by an inplace operation")


@pytest.mark.parametrize("expr", ["(x + 1).sum()", "(x * 2).sum()", "(x * lib.ones(3)).sum()",
                                  "x.exp().sum()", "x.view(3, 1).t().sum()"])
def test_second_backward_only_fails_where_something_was_saved(expr):
    def f(lib):
        x = lib.ones(3, requires_grad=True)
        y = eval(expr, {"x": x, "lib": lib})
        y.backward()
        y.backward()
        return x.grad
    same(f, "Trying to backward through the graph a second time")


# ---- random graphs ------------------------------------------------------------------------------


def _random_graph(lib, seed):
    """A seeded random program over two leaves: pointwise ops, products, views, in-place writes
    through views, custom Functions, tensor hooks and retain_grad; returns the loss."""
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    Cube, MulAdd = _functions(lib)
    x = lib.tensor(rng.uniform(-1, 1, (4, 4)), requires_grad=True)
    w = lib.tensor(rng.uniform(-1, 1, (4,)), requires_grad=True)
    vals, kept = [x * 1, x.sin()], []
    steps = [
        lambda a, b: a * b, lambda a, b: a / (b * b + 1), lambda a, b: (a * w).tanh(),
        lambda a, b: a.t() @ b * 0.1, lambda a, b: a.sum(0, keepdim=True) * b,
        lambda a, b: Cube.apply(a * 0.5, 2.0), lambda a, b: MulAdd.apply(a, b, 0.5)[0],
        lambda a, b: MulAdd.apply(a, b * 0.5, 2.0)[1].exp(),
    ]
    writes = [lambda t: t.mul_(1.5), lambda t: t[1:].add_(w[1:]), lambda t: t[:, 0].mul_(w[0]),
              lambda t: t[0].copy_(w.exp()), lambda t: t.t()[1].sub_(w.sin())]
    for _ in range(10):
        r, a, b = rnd.random(), rnd.choice(vals), rnd.choice(vals)
        if r < 0.55:
            vals.append(rnd.choice(steps)(a, b))
        elif r < 0.65:
            vals.append(a[rnd.randrange(4)])            # a view, maybe stale later
        elif r < 0.75:
            v = a * w
            v.retain_grad()
            kept.append(v)
            vals.append(v)
        elif r < 0.85:
            v = (a + b).tanh()
            v.register_hook(lambda g: g * 0.5)
            vals.append(v)
        elif a.grad_fn is not None and a._base is None:
            rnd.choice(writes)(a)
    return x, w, kept, sum((v * v).sum() for v in vals)


@pytest.mark.parametrize("seed", range(24))
def test_random_graphs_match_torch(seed):
    def f(lib):
        x, w, kept, loss = _random_graph(lib, seed)
        gx, gw = lib.autograd.grad(loss, [x, w], create_graph=True, retain_graph=True)
        gg = lib.autograd.grad(gx.cos().sum() + (gw ** 2).sum(), [x, w], allow_unused=True,
                               retain_graph=True)
        loss.backward()
        return loss, gx, gw, gg, x.grad, w.grad, [k.grad for k in kept]
    same(f)


def test_retain_grad_follows_inplace_writes():
    def f(lib):
        seen = []
        x = x3(lib, requires_grad=True)
        a = x * 2
        a.retain_grad()
        a.register_hook(lambda g: seen.append(g))    # stays with the value before mul_
        a.mul_(3)
        b = x * 1
        b.retain_grad()
        b[1:].mul_(5)
        (a * a).sum().backward(retain_graph=True)
        (b * b).sum().backward()
        return a.grad, b.grad, x.grad, seen
    same(f)


def test_sign_gradient_is_zero_where_the_incoming_gradient_is_nan():
    # torch's sign/sgn (and rounding ops') backward of a real input is zeros_like(grad), not
    # grad * 0
    for fn in (ember.sign, ember.sgn, ember.floor, ember.ceil, ember.trunc, ember.round,
               lambda t: ember.round(t, decimals=1)):
        x = ember.tensor([1.0, -2.0, 0.0], requires_grad=True)
        fn(x).backward(ember.tensor([float("nan"), 1.0, float("inf")]))
        assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_pow_saves_its_output_only_for_the_exponents_gradient():
    """pow's backward reads its saved output (the exponent's gradient, x ** t * log(x)) only
    when the exponent's gradient is computed: then an in-place change of it is an error, as in
    torch; with a number exponent (or one needing no grad here) it is not saved at all."""
    x, t = ember.rand(5, requires_grad=True), ember.rand(5, requires_grad=True)
    y = x ** t
    y.sum().backward()
    with ember.no_grad():
        assert torch.allclose(torch.tensor(t.grad.numpy()), torch.tensor(
            (x ** t * ember.log(x)).numpy()))
    y = x ** t
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    for y in (x ** 2, x ** t.detach()):
        x.grad = None
        y.add_(1)
        y.sum().backward()
        assert x.grad is not None
