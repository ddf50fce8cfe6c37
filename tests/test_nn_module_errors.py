"""A shape error inside a model names the failing layer by its path from the model called,
keeps its exception type, and layers check their input shapes (STYLE.md: errors a person can
act on)."""
import pytest

import ember
from ember import nn


class Block(nn.Module):
    def __init__(self, d_in):
        super().__init__()
        self.linear1 = nn.Linear(d_in, 512)

    def forward(self, x):
        return self.linear1(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(128) for _ in range(4)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x[..., :96] if i == 3 else x[..., :128])
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()

    def forward(self, x):
        return self.encoder(x)


def test_message_names_the_module_path_and_layer():
    with pytest.raises(RuntimeError) as info:
        Model()(ember.ones(16, 64, 128))
    assert str(info.value) == ("model.encoder.layers.3.linear1 (Linear(in_features=128, "
                               "out_features=512, bias=True)): expected input with last "
                               "dimension 128, got shape (16, 64, 96)")


def test_the_same_layer_called_alone_and_from_a_sub_model():
    lin = nn.Linear(4, 2)
    with pytest.raises(RuntimeError, match=r"^Linear\(in_features=4, out_features=2, bias=True"
                                           r"\): expected input with last dimension 4"):
        lin(ember.ones(3, 5))
    m = Model()
    with pytest.raises(RuntimeError, match=r"^model\.layers\.3\.linear1 \(Linear"):
        m.encoder(ember.ones(2, 128))             # the path is from the module called


@pytest.mark.parametrize("layer,x,exc,msg", [
    (nn.LayerNorm(4), ember.ones(2, 3), RuntimeError,
     r"model\.1 \(LayerNorm\(\(4,\).*\): expected input with last dimension 4, got shape "
     r"\(2, 3\)"),
    (nn.LayerNorm((2, 4)), ember.ones(2, 3), RuntimeError,
     r"expected input with last dimensions 2, 4, got shape \(2, 3\)"),
    (nn.Embedding(10, 3), ember.tensor([1, 12]), IndexError,
     r"model\.1 \(Embedding\(10, 3\)\): embedding: expected indices in \[0, 10\), got 12"),
    (nn.Embedding(10, 3), ember.tensor([-1]), IndexError, r"got -1"),
    (nn.Conv2d(3, 4, 3), ember.ones(1, 2, 8, 8), RuntimeError,
     r"model\.1 \(Conv2d\(3, 4, kernel_size=\(3, 3\).*\): .*expected input\[1, 2, 8, 8\] to "
     r"have 3 channels"),
])
def test_layers_check_their_input(layer, x, exc, msg):
    with pytest.raises(exc, match=msg):
        nn.Sequential(nn.Identity(), layer)(x)


def test_hooks_path_and_non_string_errors():
    m = nn.Sequential(nn.Linear(3, 3))
    m[0].register_forward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match=r"^model\.0 \(Linear"):
        m(ember.ones(2, 4))

    class Odd(nn.Module):
        def forward(self, x):
            raise KeyError("k", 1)
    with pytest.raises(KeyError) as info:
        nn.Sequential(Odd())(1)
    assert info.value.args == ("k", 1)            # not one string: left as it is


def test_error_in_the_model_itself_and_repeated_calls():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            raise ValueError("bad input")
    with pytest.raises(ValueError, match=r"^Bad\(\): bad input$"):
        Bad()(1)
    with pytest.raises(ValueError, match=r"^model\.0 \(Bad\(\)\): bad input$"):
        nn.Sequential(Bad())(1)
