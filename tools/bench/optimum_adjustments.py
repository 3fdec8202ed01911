"""What optimum-executorch 1.1.0's own modules need, against the transformers
installed here, for its `xnnpack` recipe to export and run the models of
tools/bench/optimum_multimodal.py. Applied in that benchmark's xnnpack child
only (our `tensorrt` recipe takes optimum's modules as they are); each one is
named in ADJUSTMENTS, which the evidence file quotes.
"""
from __future__ import annotations

ADJUSTMENTS = {
    "example-inputs": (
        "VisionExportableModule / AudioExportableModule.prepare_export_inputs build their "
        "example input with the model's processor from an image / audio URL (a download); "
        "the adjusted one returns a random input of the shape the processor gives "
        "(pixels [1, 3, 32, 32], Idefics3/SmolVLM [1, 1, 3, 32, 32]; Voxtral log-mel "
        "[2, 8, 32] with optimum's own dynamic batch)"),
    "encoder-output": (
        "VisionExportableModule.forward / AudioExportableModule.forward return "
        "`get_image_features(...)` / `get_audio_features(...)`, which transformers 5 returns "
        "as an output object; the adjusted forwards return its `pooler_output` (the "
        "projected features merged into the prompt), as [1, N, D]"),
    "hooks-run-once": (
        "transformers' output-capture hooks (`can_return_tuple` / `check_model_inputs`) do "
        "not trace under torch.export's strict mode until the module has run once: the "
        "encoder wrapper runs once eagerly on the example input before export"),
    "whisper-static-cache": (
        "Seq2SeqLMDecoderExportableModuleWithStaticCache builds transformers' StaticCache "
        "with `max_batch_size=` and sizes it from `num_hidden_layers` (Whisper's encoder "
        "layer count); the adjusted wrapper builds the self-attention StaticCache as "
        "transformers now takes it (`config, max_cache_len`) for the decoder's layers, and "
        "registers each layer's `cumulative_length` (which the cache's update mutates) as a "
        "buffer beside its keys and values; transformers' StaticLayer now writes at that "
        "running length, not at `cache_position`, so the adjusted forward sets it to "
        "`cache_position` (self-attention) and 0 (cross-attention, whose keys and values "
        "the traced graph recomputes from the encoder output on every call) first"),
}


def adjust_optimum(kind: str, *, nested_images: bool = False, n_mels: int = 0,
                   frames: int = 0) -> list[str]:
    """Adjusts optimum's modules for one model `kind` ("vision", "audio",
    "whisper"); returns the names of the ADJUSTMENTS applied."""
    import torch
    from optimum.exporters.executorch import integrations

    if kind == "vision":
        vision = integrations.VisionExportableModule

        def vision_inputs(self):
            pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
            pixels = (pixels[None] if nested_images else pixels).to(self.model.dtype)
            with torch.no_grad():
                self(pixels)  # hooks-run-once
            return pixels, None

        def vision_forward(self, input_features):
            features = self.model.get_image_features(input_features)
            features = getattr(features, "pooler_output", features)
            if isinstance(features, (list, tuple)):
                features = torch.cat(list(features), dim=0)
            return features.reshape(1, -1, features.shape[-1])

        vision.prepare_export_inputs, vision.forward = vision_inputs, vision_forward
        return ["example-inputs", "encoder-output", "hooks-run-once"]
    if kind == "audio":
        audio = integrations.AudioExportableModule

        def audio_inputs(self):
            features = torch.randn(2, n_mels, frames, generator=torch.Generator().manual_seed(0))
            features = features.to(self.model.dtype)
            with torch.no_grad():
                self(features)  # hooks-run-once
            # optimum's own dynamic batch (one batch entry per audio chunk)
            dims = {"input_features": {0: torch.export.Dim("enc_batch_size_dim", min=1,
                                                            max=10)}}
            return features, dims

        def audio_forward(self, input_features):
            features = self.model.get_audio_features(input_features)
            return getattr(features, "pooler_output", features).unsqueeze(0)

        audio.prepare_export_inputs, audio.forward = audio_inputs, audio_forward
        return ["example-inputs", "encoder-output", "hooks-run-once"]
    if kind == "whisper":
        _adjust_whisper_decoder(integrations)
        return ["whisper-static-cache"]
    raise ValueError(f"no adjustments for {kind!r}")


def _adjust_whisper_decoder(integrations) -> None:
    import copy

    from transformers import EncoderDecoderCache, StaticCache

    wrapper = integrations.Seq2SeqLMDecoderExportableModuleWithStaticCache

    def init(self, model, max_static_cache_length, batch_size):
        import torch
        torch.nn.Module.__init__(self)
        self.decoder = model.get_decoder()
        self.proj_out = model.proj_out
        config = copy.deepcopy(model.config)
        config.num_hidden_layers = config.decoder_layers
        self.config = model.config
        heads = config.decoder_attention_heads
        self.self_attention_cache = StaticCache(config=config,
                                                max_cache_len=max_static_cache_length)
        self.self_attention_cache.early_initialization(
            batch_size, heads, config.d_model // heads, model.dtype, model.device)
        self.cross_attention_cache = StaticCache(config=config,
                                                 max_cache_len=config.max_source_positions)
        self.cross_attention_cache.early_initialization(
            batch_size, heads, config.d_model // heads, model.dtype, model.device)
        for kind, cache in (("self", self.self_attention_cache),
                            ("cross", self.cross_attention_cache)):
            for i, layer in enumerate(cache.layers):
                self.register_buffer(f"{kind}_attention_key_cache_{i}", layer.keys,
                                     persistent=False)
                self.register_buffer(f"{kind}_attention_value_cache_{i}", layer.values,
                                     persistent=False)
                self.register_buffer(f"{kind}_attention_length_{i}", layer.cumulative_length,
                                     persistent=False)
        self.cache = EncoderDecoderCache(self.self_attention_cache, self.cross_attention_cache)

    forward = wrapper.forward

    def positioned_forward(self, decoder_input_ids, encoder_hidden_states, cache_position):
        # The cache writes at its own running length: start it at this call's position
        # (self-attention) and at 0 (cross-attention, recomputed from the encoder output).
        for layer in self.self_attention_cache.layers:
            layer.cumulative_length.copy_(cache_position[0])
        for layer in self.cross_attention_cache.layers:
            layer.cumulative_length.zero_()
        self.cache.is_updated = dict.fromkeys(self.cache.is_updated, False)
        return forward(self, decoder_input_ids, encoder_hidden_states, cache_position)

    wrapper.__init__, wrapper.forward = init, positioned_forward
