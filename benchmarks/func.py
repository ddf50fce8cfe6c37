"""``torch.func`` workloads (registered with ``benchmarks.run``): per-sample gradients by
``vmap(grad(functional_call))`` side by side with the same model's ordinary batched backward
(the figure per-sample gradients should stay within 2x of), for the 784-512-512-10 MLP at batch
128, a small MLP and a small CNN; the time to write a result the size of the large MLP's
per-sample gradients (342 MB, the floor of that workload); and ``jacrev`` of a 256 -> 256 MLP.

``python -m benchmarks.func`` prints ember's per-sample / batched ratios (min of repeats).
"""
import sys
import time

from benchmarks.workloads import Workload

_MODELS = {
    "MLP 784-512-512-10 b128": ((784, 512, 512, 10), (128, 784)),
    "MLP 64-64-10 b64": ((64, 64, 10), (64, 64)),
    "CNN conv8-conv16-fc b32": ("cnn", (32, 1, 16, 16)),
}


def _model(T, spec):
    T.manual_seed(0)
    nn = T.nn
    if spec == "cnn":
        return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3),
                             nn.ReLU(), nn.Flatten(), nn.Linear(16 * 5 * 5, 10))
    layers = []
    for a, b in zip(spec, spec[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _data(T, shape):
    return T.randn(*shape), T.randint(0, 10, (shape[0],))


def _per_sample(name):
    def build(T):
        spec, shape = _MODELS[name]
        model = _model(T, spec)
        params = {k: v.detach() for k, v in model.named_parameters()}
        x, y = _data(T, shape)

        def loss(p, xi, yi):
            out = T.func.functional_call(model, p, (xi.unsqueeze(0),))
            return T.nn.functional.cross_entropy(out, yi.unsqueeze(0))
        fn = T.func.vmap(T.func.grad(loss), in_dims=(None, 0, 0))
        return lambda: fn(params, x, y)
    return build


def _batched_backward(name):
    def build(T):
        spec, shape = _MODELS[name]
        model = _model(T, spec)
        x, y = _data(T, shape)

        def step():
            model.zero_grad()
            T.nn.functional.cross_entropy(model(x), y).backward()
        return step
    return build


def _result_fill(T):
    n = 128 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)
    return lambda: T.empty(n).fill_(1.0)


def _jacrev(T):
    model = _model(T, (256, 256, 256))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = T.randn(256)
    fn = T.func.jacrev(lambda x: T.func.functional_call(model, params, (x,)))
    return lambda: fn(x)


WORKLOADS = [w for name in _MODELS for w in (
    Workload(f"per-sample grads {name} (vmap(grad))", _per_sample(name), unit="ms"),
    Workload(f"{name} batched backward", _batched_backward(name), unit="ms"))] + [
    Workload("fill 342 MB (the MLP 784-512-512-10 per-sample result)", _result_fill, unit="ms"),
    Workload("jacrev MLP 256->256", _jacrev, unit="ms"),
]


def _best(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def ratios(T, repeats=7):
    """``{model: (per-sample ms, batched backward ms, ratio)}`` for module ``T``."""
    out = {}
    for name in _MODELS:
        a = _best(_per_sample(name)(T), repeats)
        b = _best(_batched_backward(name)(T), repeats)
        out[name] = (a * 1e3, b * 1e3, a / b)
    return out


if __name__ == "__main__":
    import ember
    for name, (a, b, r) in ratios(ember, int(sys.argv[1]) if len(sys.argv) > 1 else 7).items():
        print(f"{name}: per-sample {a:.2f} ms, batched backward {b:.2f} ms, ratio {r:.2f}")
