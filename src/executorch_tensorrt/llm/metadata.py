"""The LLM runner's metadata: the constant methods `llm.export` writes
(`get_max_seq_len`, `get_max_context_len`, ...; the names ExecuTorch's
TextLLMRunner reads) as one typed value, and reading them back from a loaded
program. Kept apart from llm/exporter.py so that decoding needs no AOT code."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LLMMetadata:
    """The values the runner reads from the program's constant methods."""

    max_seq_len: int
    max_context_len: int
    vocab_size: int
    bos_id: int | None
    eos_ids: tuple[int, ...]
    enable_dynamic_shape: bool = True
    use_kv_cache: bool = True

    @classmethod
    def for_config(cls, text_config, max_seq_len: int, max_context_len: int,
                   bos_id: int | None = None, eos_ids=None) -> "LLMMetadata":
        """The limits given, the vocabulary of a transformers text config, and
        the BOS / EOS ids given or else the config's."""
        eos = eos_ids if eos_ids is not None else getattr(text_config, "eos_token_id", None)
        return cls(max_seq_len=max_seq_len, max_context_len=max_context_len,
                   vocab_size=int(text_config.vocab_size),
                   bos_id=bos_id if bos_id is not None else getattr(text_config, "bos_token_id",
                                                                    None),
                   eos_ids=tuple(int(v) for v in (eos if isinstance(eos, (list, tuple))
                                                  else [] if eos is None else [eos])))

    def constant_methods(self) -> dict[str, Any]:
        methods: dict[str, Any] = {
            "get_max_seq_len": self.max_seq_len,
            "get_max_context_len": self.max_context_len,
            "get_vocab_size": self.vocab_size,
            "use_kv_cache": self.use_kv_cache,
            "enable_dynamic_shape": self.enable_dynamic_shape,
            "use_sdpa_with_kv_cache": False,
        }
        # Absent ids are left out: the runner then uses its tokenizer's.
        if self.bos_id is not None:
            methods["get_bos_id"] = self.bos_id
        if self.eos_ids:
            methods["get_eos_ids"] = list(self.eos_ids)
        return methods


def read_metadata(program) -> LLMMetadata:
    """LLMMetadata from a program loaded with executorch.runtime (its
    constant methods); a program without them is refused by name."""
    names = set(program.method_names)
    missing = [n for n in ("get_max_seq_len", "get_max_context_len", "get_vocab_size")
               if n not in names]
    if missing:
        raise ValueError(f"the program has no {', '.join(missing)} method: not written by "
                         "executorch_tensorrt.llm.export (or export_llm); pass the limits "
                         "yourself")

    def value(name: str):
        return [v.item() if hasattr(v, "item") else v
                for v in program.load_method(name).execute([])]

    def one(name: str) -> int:
        (v,) = value(name)
        return int(v)

    return LLMMetadata(
        max_seq_len=one("get_max_seq_len"), max_context_len=one("get_max_context_len"),
        vocab_size=one("get_vocab_size"),
        bos_id=one("get_bos_id") if "get_bos_id" in names else None,
        eos_ids=tuple(int(v) for v in value("get_eos_ids")) if "get_eos_ids" in names else (),
        enable_dynamic_shape=bool(one("enable_dynamic_shape"))
        if "enable_dynamic_shape" in names else False,
        use_kv_cache=bool(one("use_kv_cache")) if "use_kv_cache" in names else True)
