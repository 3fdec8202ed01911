"""What the tests of ExecuTorch's LLM runner over our programs share: a tiny
HF tokenizer.json written on the spot (one printable ASCII character per
token, a byte-level BPE with no merges, which ExecuTorch's tokenizer library
reads), tiny random configs, and a runner call that returns token ids.

Also used by tools/bench/llm_runner_architectures.py (the 6-architecture run).
"""
from __future__ import annotations

import json
from pathlib import Path

CHARS = [chr(c) for c in range(33, 127)]  # 94 characters ByteLevel maps to themselves
VOCAB = len(CHARS) + 2                    # + <s>, </s>
BOS, EOS = VOCAB - 2, VOCAB - 1


def write_char_tokenizer(folder: Path, extra: dict[str, int] | None = None) -> Path:
    """tokenizer.json (+ tokenizer_config.json naming BOS/EOS) in `folder`;
    `extra`: more special tokens (content -> id, ids from VOCAB on), e.g. a
    vision model's image placeholder."""
    extra = dict(extra or {})
    vocab = {c: i for i, c in enumerate(CHARS)} | extra
    special = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}
               for i, s in ((BOS, "<s>"), (EOS, "</s>"), *((i, s) for s, i in extra.items()))]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": False}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {**vocab, "<s>": BOS, "</s>": EOS}, "merges": []}}
    path = folder / "tokenizer.json"
    path.write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return path


def encode(text: str) -> list[int]:
    return [CHARS.index(c) for c in text]


def runner_tokens(runner, prompt: str, n: int) -> list[int]:
    """Greedy (temperature 0) generation through TextLLMRunner, as token ids."""
    from executorch.extension.llm.runner import GenerationConfig

    pieces: list[str] = []
    runner.generate(prompt, GenerationConfig(echo=False, max_new_tokens=n, temperature=0.0),
                    token_callback=pieces.append)
    ids = {c: i for i, c in enumerate(CHARS)} | {"<s>": BOS, "</s>": EOS, "": EOS}
    return [ids[p] for p in pieces]


# Tiny random configs of the 6 architectures (transformers model_type + fields).
_COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
               bos_token_id=BOS, eos_token_id=EOS, use_cache=True)
CONFIGS = {
    "llama": {"model_type": "llama", **_COMMON},
    "qwen2": {"model_type": "qwen2", **_COMMON},
    "qwen3": {"model_type": "qwen3", **_COMMON, "head_dim": 8},
    "mistral": {"model_type": "mistral", **_COMMON, "sliding_window": None},
    "phi3": {"model_type": "phi3", **_COMMON, "pad_token_id": 0},
    "gemma2": {"model_type": "gemma2", **_COMMON, "head_dim": 8, "sliding_window": 16},
    "gemma3": {"model_type": "gemma3_text", **_COMMON, "head_dim": 8, "sliding_window": 16},
    "gpt2": {"model_type": "gpt2", "vocab_size": VOCAB, "n_embd": 32, "n_layer": 2,
             "n_head": 4, "n_positions": 64, "bos_token_id": BOS, "eos_token_id": EOS,
             "initializer_range": 0.5,  # GPT-2's 0.02 gives one repeated token here
             "use_cache": True},
}
# The tiny Llama program shared by the runner and generate tests (conftest's tiny_llama_pte).
TINY_MAX_SEQ, TINY_MAX_CONTEXT = 4, 48
