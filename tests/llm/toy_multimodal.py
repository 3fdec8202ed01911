"""A toy multimodal program for runner-plumbing tests of ExecuTorch's own
MultimodalRunner: `vision_encoder` (image [1, 3, 8, 8] -> 4 embeddings),
`audio_encoder` (features [1, 8, 16] -> 4 embeddings), `token_embedding`
(tokens [1, S] -> [1, S, D]) and `text_decoder` (embeddings [1, S, D],
cache positions [S] -> logits [1, S, V]) with the runner's constant methods.

Lowered with ExecuTorch's plain `to_edge_transform_and_lower` (portable
kernels, no TensorRT): it checks how `generate` feeds the runner, not a
delegate. The decoder keeps every embedding it has seen in a mutable buffer
and mixes their running mean into each position, so the image and the audio
change the tokens (a stand-in for a KV cache), and `eager_tokens` replays the
runner's schedule on the eager module for the expected tokens.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from runner_helpers import BOS, EOS, VOCAB, encode

DIM, MAX_SEQ, MAX_CONTEXT = 16, 40, 48
IMAGE_SHAPE = (1, 3, 8, 8)     # NCHW float32: 4 patches of 4x4
AUDIO_SHAPE = (1, 8, 16)       # (batch, bins, frames): 4 groups of 4 frames
MEDIA_TOKENS = 4


class ToyMultimodal(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng():  # the same weights each time, the caller's RNG untouched
            torch.manual_seed(7)
            self.patch = nn.Linear(3 * 4 * 4, DIM)
            self.audio = nn.Linear(8 * 4, DIM)
            self.embed = nn.Embedding(VOCAB, DIM)
            self.mix = nn.Linear(DIM, DIM)
            self.head = nn.Linear(DIM, VOCAB)
            # Media embeddings as large as the text's, mixed in strongly: another
            # image or sound changes the tokens.
            for layer, std in ((self.patch, 0.3), (self.audio, 0.3), (self.mix, 0.3),
                               (self.head, 2.0)):
                nn.init.normal_(layer.weight, std=std)
        self.register_buffer("memory", torch.zeros(MAX_CONTEXT, DIM))

    def vision(self, image: torch.Tensor) -> torch.Tensor:
        patches = image.reshape(1, 3, 2, 4, 2, 4).permute(0, 2, 4, 1, 3, 5).reshape(1, 4, 48)
        return self.patch(patches)

    def hear(self, features: torch.Tensor) -> torch.Tensor:
        groups = features.reshape(1, 8, 4, 4).permute(0, 2, 1, 3).reshape(1, 4, 32)
        return self.audio(groups)

    def decode(self, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.memory.index_copy_(0, positions, embeddings[0])
        seen = (torch.arange(MAX_CONTEXT)[None, :] <= positions[:, None]).float()
        context = (seen @ self.memory) / seen.sum(dim=1, keepdim=True)
        return self.head(torch.tanh(embeddings[0] + self.mix(context)))[None]


class _Method(nn.Module):
    """One method of the model as a module of its own (torch.export takes modules)."""

    def __init__(self, model: ToyMultimodal, name: str):
        super().__init__()
        self.model, self.name = model, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model, self.name)(x)


class _Decoder(_Method):
    def forward(self, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model.decode(embeddings, positions)


def write_program(folder: Path, audio: bool = False, vision: bool = True,
                  drop: tuple[str, ...] = (), rename: dict[str, str] | None = None,
                  name: str = "toy_multimodal.pte", constants: dict | None = None) -> Path:
    """The program with the methods asked for, less those in `drop`, some
    under other names (`rename`), with more constant methods (`constants`)."""
    from executorch.exir import to_edge_transform_and_lower

    model = ToyMultimodal().eval()
    seq = torch.export.Dim("seq", min=1, max=MAX_SEQ)
    programs = {
        "token_embedding": torch.export.export(
            _Method(model, "embed"), (torch.tensor([[1, 2]]),),
            dynamic_shapes=({1: seq},)),
        "text_decoder": torch.export.export(
            _Decoder(model, "decode"), (torch.zeros(1, 2, DIM), torch.tensor([0, 1])),
            dynamic_shapes=({1: seq}, {0: seq})),
    }
    if vision:
        programs["vision_encoder"] = torch.export.export(
            _Method(model, "vision"), (torch.rand(IMAGE_SHAPE),))
    if audio:
        programs["audio_encoder"] = torch.export.export(
            _Method(model, "hear"), (torch.rand(AUDIO_SHAPE),))
    constants = {**(constants or {}),
                 "get_max_seq_len": MAX_SEQ, "get_max_context_len": MAX_CONTEXT,
                 "get_vocab_size": VOCAB, "use_kv_cache": True, "enable_dynamic_shape": True,
                 "get_bos_id": BOS, "get_eos_ids": [EOS]}
    programs = {(rename or {}).get(k, k): v for k, v in programs.items() if k not in drop}
    constants = {k: v for k, v in constants.items() if k not in drop}
    manager = to_edge_transform_and_lower(programs, constant_methods=constants).to_executorch()
    path = folder / name
    path.write_bytes(manager.buffer)
    return path


def eager_tokens(prompt: str, n: int, image: torch.Tensor | None = None,
                 audio: torch.Tensor | None = None) -> list[int]:
    """Greedy tokens of the eager module fed as MultimodalRunner feeds the
    program: each input (image, audio, then the prompt's tokens) prefilled at
    the next positions, the last logits' argmax, then one token per step,
    stopping after EOS."""
    model = ToyMultimodal().eval()
    chunks = ([model.vision(image.reshape(IMAGE_SHAPE))] if image is not None else []) + \
             ([model.hear(audio.reshape(AUDIO_SHAPE))] if audio is not None else []) + \
             [model.embed(torch.tensor([encode(prompt)]))]
    pos, tokens = 0, []
    with torch.no_grad():
        for chunk in chunks:
            logits = model.decode(chunk, torch.arange(pos, pos + chunk.shape[1]))
            pos += chunk.shape[1]
        tokens.append(int(logits[0, -1].argmax()))
        while len(tokens) < n and tokens[-1] != EOS:
            logits = model.decode(model.embed(torch.tensor([[tokens[-1]]])), torch.tensor([pos]))
            pos += 1
            tokens.append(int(logits[0, -1].argmax()))
    return tokens
