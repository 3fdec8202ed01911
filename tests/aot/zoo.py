"""Model zoo: small, download-free architectures for coverage and agreement tests.

Each entry names a model, a factory (returns the model in eval mode), a seeded
input maker, the absolute tolerance the .pte must meet against eager PyTorch
(fp32), and a coverage floor: the share of compute ops (edge call_function
nodes, getitem excluded) that TensorRT must take. Floors are what TensorRT-RTX's
parser takes today (tools/release/coverage_table.py measures it; docs/coverage.md).

Imported by tests/aot/test_zoo.py and tools/release/coverage_table.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree as pytree

from executorch_tensorrt.examples.models import CosErfinvTanh


# -- models -------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(),
                                 nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(16 * 4 * 4, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = x.flatten(1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


class ResNetBasicBlock(nn.Module):
    """Two 3x3 convs with batch norm and a strided 1x1 projection shortcut."""

    def __init__(self, cin=16, cout=32, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        # Non-trivial running statistics so batch norm is not an identity.
        with torch.no_grad():
            for bn in (self.bn1, self.bn2, self.down[1]):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.down(x))


class MobileNetBlock(nn.Module):
    """Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, ReLU6, residual."""

    def __init__(self, c=16, expand=4):
        super().__init__()
        h = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h),
                                nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.project(self.dw(self.expand(x)))


class TransformerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class TokenClassifier(nn.Module):
    """int64 token ids -> embedding (+ learned positions) -> layer norm -> linear head."""

    def __init__(self, vocab=100, dim=32, seq=16, classes=7):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.1)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.norm(self.tok(ids) + self.pos))


class UNetBlock(nn.Module):
    """Encoder conv, downsample, bottleneck, upsample (nearest and bilinear), skip concat."""

    def __init__(self, c=8):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec = nn.Sequential(nn.Conv2d(3 * c, c, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e = self.enc(x)
        m = self.mid(F.max_pool2d(e, 2))
        u = torch.cat([self.up(m), e], dim=1)
        d = self.dec(u)
        return self.out(d) + F.interpolate(self.out(F.avg_pool2d(d, 2)), scale_factor=2,
                                           mode="bilinear", align_corners=False)


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=1, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


class GRUModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 32, num_layers=1, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        y, h = self.gru(x)
        return self.head(y[:, -1]) + h[-1].sum(-1, keepdim=True)


class ArgmaxTopkHead(nn.Module):
    """Linear logits -> argmax (int64) and top-3 values/indices."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 20)

    def forward(self, x):
        logits = self.fc(x)
        values, indices = torch.topk(logits, 3, dim=-1)
        return logits.argmax(dim=-1), values, indices


class ElementwiseMath(nn.Module):
    def forward(self, x):
        a = torch.erf(x) + torch.pow(x, 2) * 0.5 - torch.pow(x.abs() + 1, 0.5)
        b = torch.log(torch.exp(x.clamp(-3, 3)) + 1.0)
        c = torch.where(x > 0, a, b)
        return torch.clamp(c * torch.rsqrt(x * x + 1.0), min=-1.5, max=2.0)


class MultiOutput(nn.Module):
    """A shared trunk with three heads of different shapes; returns a tuple."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.Tanh())
        self.cls = nn.Linear(32, 5)
        self.reg = nn.Linear(32, 2)

    def forward(self, x):
        h = self.trunk(x)
        return torch.softmax(self.cls(h), -1), self.reg(h), h.mean(-1)


# -- registry -----------------------------------------------------------------
@dataclass(frozen=True)
class ZooEntry:
    name: str
    factory: Callable[[], nn.Module]
    make_inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]
    atol: float = 1e-4
    coverage_floor: float = 1.0
    note: str = ""
    source: str = "torch"  # "transformers": a Hugging Face model class, used as is

    def build(self, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The model in eval mode (weights seeded) and seeded example inputs."""
        torch.manual_seed(seed)
        model = self.factory().eval()
        gen = torch.Generator().manual_seed(seed + 1)
        return model, self.make_inputs(gen)


def _randn(*shape):
    return lambda g: (torch.randn(*shape, generator=g),)


ZOO: list[ZooEntry] = [
    ZooEntry("mlp", MLP, _randn(4, 32)),
    ZooEntry("lenet", LeNet, _randn(2, 1, 28, 28)),
    ZooEntry("resnet_block", ResNetBasicBlock, _randn(2, 16, 16, 16)),
    ZooEntry("mobilenet_block", MobileNetBlock, _randn(2, 16, 16, 16)),
    # Edge `select_copy.int` / `slice_copy.Tensor` (MHA's q/k/v select, the RNN
    # gate slices) translate through the view ops' ONNX functions; were that
    # mapping lost, these three would split and miss their floor of 1.0.
    ZooEntry("transformer_encoder", TransformerEncoder, _randn(2, 16, 64)),
    ZooEntry("causal_attention", CausalSelfAttention, _randn(2, 16, 64)),
    ZooEntry("token_classifier", TokenClassifier,
             lambda g: (torch.randint(0, 100, (2, 16), generator=g, dtype=torch.int64),)),
    ZooEntry("unet_block", UNetBlock, _randn(1, 3, 16, 16)),
    ZooEntry("lstm", LSTMModel, _randn(2, 6, 16)),
    ZooEntry("gru", GRUModel, _randn(2, 6, 16)),
    ZooEntry("argmax_topk", ArgmaxTopkHead, _randn(4, 32)),
    ZooEntry("elementwise", ElementwiseMath, _randn(4, 64)),
    ZooEntry("multi_output", MultiOutput, _randn(4, 16)),
    # erfinv: no torchlib translation and no PyPI runtime kernel (aot/onnx/extra_ops.py).
    ZooEntry("cos_erfinv_tanh", CosErfinvTanh, _randn(4, 64)),
]


# -- third-party models: transformers classes from tiny configs, random weights ----
# No wrapper code: each model is the library's own class, called with its own
# inputs, and returns its own ModelOutput (the program returns its tensor leaves
# in torch.utils._pytree order). Nothing is downloaded. `initializer_range`
# is raised where the default (0.02) makes the activations of a deep random
# network vanish, which would make the comparison with eager meaningless.
def _hf(name: str, config_name: str, **config):
    def make():
        import transformers

        return getattr(transformers, name)(getattr(transformers, config_name)(**config))
    return make


def _ids(vocab: int, n: int = 16):
    return lambda g: (torch.randint(0, vocab, (1, n), generator=g, dtype=torch.int64),)


_TINY_TEXT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=32)
HF_ZOO: list[ZooEntry] = [
    ZooEntry("hf_bert", _hf("BertModel", "BertConfig", **_TINY_TEXT), _ids(100),
             atol=5e-6, source="transformers"),
    ZooEntry("hf_gpt2", _hf("GPT2Model", "GPT2Config", vocab_size=100, n_embd=32, n_layer=1,
                            n_head=2, n_positions=32, use_cache=False, bos_token_id=0,
                            eos_token_id=0), _ids(100), atol=4e-6, source="transformers"),
    ZooEntry("hf_llama", _hf("LlamaModel", "LlamaConfig", **_TINY_TEXT, num_key_value_heads=1,
                             use_cache=False), _ids(100), atol=5e-6, source="transformers"),
    ZooEntry("hf_wav2vec2", _hf("Wav2Vec2Model", "Wav2Vec2Config", hidden_size=32,
                                num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                num_feat_extract_layers=2, num_conv_pos_embeddings=16,
                                num_conv_pos_embedding_groups=2),
             _randn(1, 800), atol=2e-5, source="transformers"),
    ZooEntry("hf_whisper_encoder", _hf("WhisperForAudioClassification", "WhisperConfig",
                                       d_model=32, encoder_layers=1, encoder_attention_heads=2,
                                       encoder_ffn_dim=64, num_mel_bins=16,
                                       max_source_positions=30, num_labels=3,
                                       init_std=0.5),
             _randn(1, 16, 60), atol=1e-4, source="transformers"),
    ZooEntry("hf_resnet", _hf("ResNetModel", "ResNetConfig", embedding_size=8,
                              hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"),
             _randn(1, 3, 32, 32), atol=3e-5, source="transformers"),
    ZooEntry("hf_convnext", _hf("ConvNextModel", "ConvNextConfig", hidden_sizes=[8, 16],
                                depths=[1, 1], num_stages=2), _randn(1, 3, 32, 32),
             atol=5e-6, source="transformers"),
    # Swin fills its attention mask by assigning scalars to slices (aten.copy).
    ZooEntry("hf_swin", _hf("SwinModel", "SwinConfig", image_size=32, patch_size=2, embed_dim=8,
                            depths=[1, 1], num_heads=[1, 2], window_size=4),
             _randn(1, 3, 32, 32), atol=1e-5, source="transformers"),
    ZooEntry("hf_mobilenet_v2", _hf("MobileNetV2Model", "MobileNetV2Config", image_size=32,
                                    depth_multiplier=0.25, initializer_range=0.3),
             _randn(1, 3, 32, 32), atol=4e-4, source="transformers"),
    ZooEntry("hf_regnet", _hf("RegNetModel", "RegNetConfig", embedding_size=8,
                              hidden_sizes=[8, 16], depths=[1, 1], groups_width=8),
             _randn(1, 3, 32, 32), atol=5e-6, source="transformers"),
    ZooEntry("hf_segformer", _hf("SegformerForSemanticSegmentation", "SegformerConfig",
                                 num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                 hidden_sizes=[8, 16], num_attention_heads=[1, 2],
                                 decoder_hidden_size=16, num_labels=3, patch_sizes=[7, 3],
                                 strides=[4, 2], mlp_ratios=[2, 2], initializer_range=0.5),
             _randn(1, 3, 32, 32), atol=2e-4, source="transformers"),
    ZooEntry("hf_detr", _hf("DetrForObjectDetection", "DetrConfig", use_timm_backbone=False,
                            use_pretrained_backbone=False,
                            backbone_config={"model_type": "resnet", "embedding_size": 8,
                                             "hidden_sizes": [8, 16], "depths": [1, 1],
                                             "layer_type": "basic",
                                             "out_features": ["stage2"]},
                            d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2,
                            encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5,
                            num_labels=3),
             _randn(1, 3, 64, 64), atol=2e-5, source="transformers"),
]
ZOO += HF_ZOO

BY_NAME = {e.name: e for e in ZOO}


# -- measurement helpers (shared by tests/aot/test_zoo.py and tools/release/coverage_table.py) --
def eager(model: nn.Module, inputs) -> tuple[torch.Tensor, ...]:
    """The model's outputs as the program returns them: its pytree's tensor leaves."""
    with torch.no_grad():
        return tuple(pytree.tree_leaves(model(*inputs)))


def coverage(report) -> tuple[float, int, int]:
    """(share, taken, total) of compute ops TensorRT took, from a PartitionReport:
    edge call_function nodes other than getitem (the keys of `ops_of`) that are in a
    partition, over all of them."""
    total = set(report.ops_of)
    taken = {n for part in report.partitions for n in part} & total
    return (len(taken) / len(total) if total else 0.0), len(taken), len(total)


def max_abs_diff(got, want) -> float:
    """Largest |got - want| over all outputs; integer outputs compared exactly (as float)."""
    got, want = list(got), list(want)
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, expected {len(want)}")
    worst = 0.0
    for g, w in zip(got, want):
        g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(w.shape):
            raise AssertionError(f"output shape {tuple(g.shape)}, expected {tuple(w.shape)}")
        if g.numel():
            worst = max(worst, (g.double() - w.double()).abs().max().item())
    return worst
