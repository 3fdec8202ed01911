"""Built-in example models (used by the CLI demo, the tests and the benchmark)."""
from __future__ import annotations

import torch
from torch import nn

from .names import EXAMPLE_SHAPES


class AddOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class SmallCNN(nn.Module):
    """conv, batch norm, relu, pooling, linear. Returns logits: a softmax over
    untrained classes squeezes every output into about 0.1 +- 0.02, where a
    wrong result would still pass an absolute tolerance."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class TransformerBlock(nn.Module):
    """Pre-norm block: layer norm, attention via matmul/softmax, GELU MLP."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        split = lambda z: z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class BitwiseMix(nn.Module):
    """An int32 bitwise_and (TensorRT's parser rejects BitwiseAnd) between float ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.sin(x) * 4
        bits = torch.bitwise_and((a * 100).to(torch.int32), 0x7F)
        return torch.cos(bits.to(torch.float32) / 127 + a)


class CosErfinvTanh(nn.Module):
    """cos(erfinv(tanh(x))): the PyPI runtime has no erfinv kernel, and torch's
    ONNX exporter no translation for it; aot/onnx/extra_ops.py gives TensorRT one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(torch.erfinv(torch.tanh(x)))


_FACTORIES = {"add": AddOne, "cnn": SmallCNN, "transformer": TransformerBlock,
              "bitwise": BitwiseMix, "erfinv": CosErfinvTanh}
# name -> (factory, example input shape)
class Mlp(nn.Module):
    """Three Linear layers (64 -> 256 -> 256 -> 16): the thread and dispatch benchmarks' model."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                    nn.Linear(256, 16))

    def forward(self, x):
        return self.layers(x)


EXAMPLES = {name: (_FACTORIES[name], shape) for name, shape in EXAMPLE_SHAPES.items()}


def example(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A built-in model in eval mode and a random example input."""
    if name not in EXAMPLES:
        raise KeyError(f"unknown example {name!r}; choose from {sorted(EXAMPLES)}")
    factory, shape = EXAMPLES[name]
    torch.manual_seed(seed)
    model = factory().eval()
    return model, (torch.randn(*shape),)
