"""Model-sized workloads, written once against a torch-shaped module ``T`` (ember or torch):
an MLP training step, a small GPT training step, an LSTM forward+backward and causal
scaled-dot-product attention at sequence length 4096 (blockwise and the naive seq x seq path).

Each ``build(T)`` returns a zero-argument callable that ``run.py`` times; ``T.manual_seed(0)``
fixes the weights so both frameworks start from the same kind of model.
"""
from benchmarks.workloads import Workload

# ---- MLP 784-512-512-10, batch 128, AdamW -----------------------------------------------------

MLP_SIZES, MLP_BATCH = (784, 512, 512, 10), 128


def mlp_step(T):
    T.manual_seed(0)
    nn = T.nn
    d0, d1, d2, d3 = MLP_SIZES
    model = nn.Sequential(nn.Linear(d0, d1), nn.ReLU(), nn.Linear(d1, d2), nn.ReLU(),
                          nn.Linear(d2, d3))
    opt = T.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = T.randn(MLP_BATCH, d0), T.randint(0, d3, (MLP_BATCH,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def mlp_step_numpy(np):
    """The same step with a hand-written backward and AdamW: the floor of the arithmetic."""
    rng = np.random.default_rng(0)
    ws = []
    for fan_in, fan_out in zip(MLP_SIZES, MLP_SIZES[1:]):
        bound = 1 / fan_in ** 0.5
        ws += [rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
               rng.uniform(-bound, bound, fan_out).astype(np.float32)]
    m, v = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]
    x = rng.standard_normal((MLP_BATCH, MLP_SIZES[0])).astype(np.float32)
    y = rng.integers(0, MLP_SIZES[-1], MLP_BATCH)
    state = {"t": 0}

    def step():
        acts, h = [x], x
        for i in range(0, len(ws), 2):                      # forward, keeping activations
            h = h @ ws[i].T + ws[i + 1]
            if i + 2 < len(ws):
                h = np.maximum(h, 0)
            acts.append(h)
        p = np.exp(h - h.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(MLP_BATCH), y] -= 1
        g, grads = p / MLP_BATCH, [None] * len(ws)
        for i in range(len(ws) - 2, -1, -2):                # backward
            grads[i], grads[i + 1] = g.T @ acts[i // 2], g.sum(0)
            if i:
                g = (g @ ws[i]) * (acts[i // 2] > 0)
        state["t"] += 1
        t, lr, b1, b2, eps, wd = state["t"], 1e-3, 0.9, 0.999, 1e-8, 1e-2
        for w, gw, mw, vw in zip(ws, grads, m, v):          # AdamW, in place
            w *= 1 - lr * wd
            mw *= b1
            mw += (1 - b1) * gw
            vw *= b2
            vw += (1 - b2) * gw * gw
            w -= lr / (1 - b1 ** t) * mw / (np.sqrt(vw / (1 - b2 ** t)) + eps)
    step.params, step.batch = ws, (x, y)         # for the test that checks it against ember
    return step


# ---- a small GPT: vocab 65, block 64, 4 layers, 4 heads, 128 dim, batch 16, AdamW -----------

GPT = dict(vocab=65, block=64, n_layer=4, n_head=4, n_embd=128, batch=16)


def gpt_model(T, vocab, block, n_layer, n_head, n_embd, **_):
    """A nanoGPT-style decoder, written with nn modules only."""
    nn, F = T.nn, T.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd))

        def forward(self, x):
            B, L, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, L, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, L, C))
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
            self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
            self.ln_f, self.head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab, bias=False)

        def forward(self, idx, targets):
            x = self.tok(idx) + self.pos(T.arange(idx.shape[1]))
            logits = self.head(self.ln_f(self.blocks(x)))
            return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    return Model()


def gpt_step(T):
    T.manual_seed(0)
    model = gpt_model(T, **GPT)
    opt = T.optim.AdamW(model.parameters(), lr=3e-4)
    shape = (GPT["batch"], GPT["block"])
    idx, targets = T.randint(0, GPT["vocab"], shape), T.randint(0, GPT["vocab"], shape)

    def step():
        opt.zero_grad()
        model(idx, targets).backward()
        opt.step()
    return step


# ---- LSTM: 2 layers, hidden 256, seq 64, batch 32, forward + backward ------------------------

LSTM = dict(input_size=256, hidden_size=256, num_layers=2, seq=64, batch=32)


def lstm_fwd_bwd(T):
    T.manual_seed(0)
    c = LSTM
    lstm = T.nn.LSTM(c["input_size"], c["hidden_size"], num_layers=c["num_layers"])
    x = T.randn(c["seq"], c["batch"], c["input_size"])

    def step():
        lstm.zero_grad()
        out, _ = lstm(x)
        out.sum().backward()
    return step


# ---- causal attention at sequence length 4096, head dim 64 -----------------------------------

SDPA = dict(batch=1, heads=1, seq=4096, head_dim=64)


def sdpa_inputs(T, requires_grad=False):
    T.manual_seed(0)
    shape = (SDPA["batch"], SDPA["heads"], SDPA["seq"], SDPA["head_dim"])
    return [T.randn(*shape, requires_grad=requires_grad) for _ in range(3)]


def naive_attention(T, q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v with the (seq, seq) matrix in memory."""
    L = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = T.ones(L, L, dtype=T.bool).tril()
    return T.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v


def attention(T, q, k, v, naive=False):
    if naive:
        return naive_attention(T, q, k, v)
    return T.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _sdpa(train):
    def build(T):
        q, k, v = sdpa_inputs(T, requires_grad=train)

        def fwd():
            with T.no_grad():
                return attention(T, q, k, v)

        def fwd_bwd():
            for t in (q, k, v):
                t.grad = None
            attention(T, q, k, v).sum().backward()
        return fwd_bwd if train else fwd
    return build


WORKLOADS = [
    Workload("MLP 784-512-512-10 step (b128, AdamW)", mlp_step, mlp_step_numpy, unit="ms"),
    Workload("GPT step (4L, 4H, 128d, b16, AdamW)", gpt_step, unit="ms"),
    Workload("LSTM 2x256 seq64 b32 fwd+bwd", lstm_fwd_bwd, unit="ms"),
    Workload("SDPA causal seq 4096 d 64 fwd", _sdpa(False), unit="ms"),
    Workload("SDPA causal seq 4096 d 64 fwd+bwd", _sdpa(True), unit="ms"),
]
