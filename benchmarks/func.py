"""``torch.func`` workloads (registered with ``benchmarks.run``): per-sample gradients of the
784-512-512-10 MLP at batch 128 by ``vmap(grad(functional_call))``, the same model's ordinary
batched backward (the figure per-sample gradients should stay within 2x of), and ``jacrev``
of a 256 -> 256 MLP."""
from benchmarks.workloads import Workload


def _mlp(T, sizes):
    T.manual_seed(0)
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [T.nn.Linear(a, b), T.nn.ReLU()]
    return T.nn.Sequential(*layers[:-1])


def _per_sample(T):
    model = _mlp(T, (784, 512, 512, 10))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = T.randn(128, 784), T.randint(0, 10, (128,))

    def loss(p, xi, yi):
        out = T.func.functional_call(model, p, (xi.unsqueeze(0),))
        return T.nn.functional.cross_entropy(out, yi.unsqueeze(0))
    fn = T.func.vmap(T.func.grad(loss), in_dims=(None, 0, 0))
    return lambda: fn(params, x, y)


def _batched_backward(T):
    model = _mlp(T, (784, 512, 512, 10))
    x, y = T.randn(128, 784), T.randint(0, 10, (128,))

    def step():
        model.zero_grad()
        T.nn.functional.cross_entropy(model(x), y).backward()
    return step


def _jacrev(T):
    model = _mlp(T, (256, 256, 256))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = T.randn(256)
    fn = T.func.jacrev(lambda x: T.func.functional_call(model, params, (x,)))
    return lambda: fn(x)


WORKLOADS = [
    Workload("per-sample grads MLP 784-512-512-10 b128 (vmap(grad))", _per_sample, unit="ms"),
    Workload("MLP 784-512-512-10 b128 batched backward", _batched_backward, unit="ms"),
    Workload("jacrev MLP 256->256", _jacrev, unit="ms"),
]
