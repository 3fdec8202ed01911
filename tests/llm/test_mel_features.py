"""`llm.mel_features` (numpy only) makes the log-mel features transformers'
WhisperFeatureExtractor makes, the way Voxtral's processor calls it: audio
padded to whole chunks, featurized in one pass, cut into chunks of
`nb_max_frames`. Random audio, Whisper's own parameters with 80 and 128 mel
bins, one chunk and several; and the tiny extractor of the Voxtral tests."""
from __future__ import annotations

import numpy as np
import pytest
import transformers

from executorch_tensorrt.llm.mel_features import MEL_METHODS, MelFeatureSpec, log_mel_features


def processor_features(extractor, samples: np.ndarray) -> np.ndarray:
    """[chunks, n_mels, frames] as VoxtralProcessor gets them from the extractor."""
    out = extractor(samples, sampling_rate=extractor.sampling_rate, padding=True,
                    truncation=False, pad_to_multiple_of=extractor.n_samples,
                    return_tensors="np")["input_features"]
    return out.reshape(extractor.feature_size, -1, extractor.nb_max_frames).transpose(1, 0, 2)


@pytest.mark.parametrize("settings, seconds, chunks", [
    ({"feature_size": 80}, 7.3, 1),
    ({"feature_size": 128}, 61.0, 3),
    ({"feature_size": 8, "sampling_rate": 1600, "hop_length": 50, "chunk_length": 1,
      "n_fft": 100}, 2.5, 3),
])
def test_features_are_the_whisper_feature_extractors(settings, seconds, chunks):
    extractor = transformers.WhisperFeatureExtractor(**settings)
    spec = MelFeatureSpec.from_config(extractor.to_dict())
    assert spec.chunk_frames == extractor.nb_max_frames
    rng = np.random.default_rng(chunks)
    # Speech-like levels with a loud burst: the 8-decade floor is the whole recording's.
    samples = (rng.standard_normal(int(seconds * extractor.sampling_rate)) * 0.05)
    samples[:spec.n_fft] *= 10
    samples = samples.astype(np.float32)
    got = log_mel_features(samples, spec)
    want = processor_features(extractor, samples)
    assert got.dtype == np.float32 and got.shape == want.shape == (
        chunks, spec.n_mels, spec.chunk_frames)
    # transformers' own numpy and torch paths differ by up to 1.5e-5 on these.
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-5)
    assert got.std() > 0.1  # not a constant that would match anything


def test_the_spec_round_trips_through_constant_methods_and_refuses_odd_values():
    spec = MelFeatureSpec(16000, 400, 160, 128, 480000)
    methods = spec.constant_methods()
    assert tuple(methods) == MEL_METHODS and methods["get_audio_chunk_samples"] == 480000
    assert MelFeatureSpec.from_methods(methods.__getitem__) == spec
    assert MelFeatureSpec.from_config({}) == MelFeatureSpec(16000, 400, 160, 80, 480000)
    with pytest.raises(ValueError, match="not a whole number of hops of 160"):
        MelFeatureSpec(16000, 400, 160, 80, 1000)
    with pytest.raises(ValueError, match="'Wav2Vec2FeatureExtractor'.*only "
                                         "WhisperFeatureExtractor"):
        MelFeatureSpec.from_config({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})


def test_the_wav_path_imports_numpy_and_the_standard_library_only():
    """Runner-side modules: no torch, no transformers, nothing of the AOT side."""
    import ast
    import importlib

    for name in ("mel_features", "audio_files"):
        module = importlib.import_module(f"executorch_tensorrt.llm.{name}")
        tree = ast.parse(open(module.__file__).read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.level == 0}
        relative = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.level > 0}
        assert imported <= {"__future__", "dataclasses", "pathlib", "typing", "wave",
                            "numpy"}, (name, imported)
        assert relative <= {"mel_features"}, (name, relative)
