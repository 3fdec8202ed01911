"""Whisper-style log-mel features of a waveform, in numpy: what the audio
encoders of Whisper and Voxtral take, computed the way their feature
extractor does (a centred, reflect-padded STFT with a periodic Hann window,
the power spectrum, a Slaney mel filter bank with Slaney area normalization,
log10 floored at 1e-10, at most 8 decades below the loudest value, then
(x + 4) / 4). No dither: inference features are deterministic.

Audio longer than one chunk is handled as Voxtral's processor does: the
waveform is zero-padded to a whole number of chunks, featurized in one pass
(so the 8-decade floor is the whole recording's and STFT windows straddle
chunk borders), then cut into chunks of `chunk_frames` frames.

The parameters come from the program (`MelFeatureSpec`, written as constant
methods at export). Runtime side: numpy only, no torch, no transformers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

# Whisper's feature extractor always spans its filters from 0 to 8 kHz,
# whatever the sampling rate (filters above Nyquist are then empty).
MAX_HZ = 8000.0
FLOOR = 1e-10
DYNAMIC_RANGE = 8.0  # decades kept below the loudest value

# MelFeatureSpec's fields as the program's constant methods.
_METHOD_OF = {"n_mels": "get_audio_n_mels", "sampling_rate": "get_audio_sampling_rate",
              "n_fft": "get_audio_n_fft", "hop_length": "get_audio_hop_length",
              "chunk_samples": "get_audio_chunk_samples"}
MEL_METHODS = tuple(_METHOD_OF.values())


@dataclass(frozen=True)
class MelFeatureSpec:
    """A Whisper-style feature extractor's parameters: `chunk_samples` of
    audio at `sampling_rate` become `n_mels` x `chunk_frames` features."""

    sampling_rate: int
    n_fft: int
    hop_length: int
    n_mels: int
    chunk_samples: int

    def __post_init__(self):
        for name in ("sampling_rate", "n_fft", "hop_length", "n_mels", "chunk_samples"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"feature extractor {name}={value!r}: give a positive integer")
        if self.n_fft < 2:
            raise ValueError(f"feature extractor n_fft={self.n_fft}: give 2 or more")
        if self.chunk_samples % self.hop_length:
            raise ValueError(
                f"feature extractor chunk of {self.chunk_samples} samples is not a whole number "
                f"of hops of {self.hop_length}: its features cannot be cut into chunks")

    @property
    def chunk_frames(self) -> int:
        return self.chunk_samples // self.hop_length

    @property
    def chunk_seconds(self) -> float:
        return self.chunk_samples / self.sampling_rate

    def constant_methods(self) -> dict[str, int]:
        return {method: getattr(self, field) for field, method in _METHOD_OF.items()}

    @classmethod
    def from_methods(cls, value_of: Callable[[str], int]) -> MelFeatureSpec:
        """From a program's constant methods (`value_of(name)` reads one)."""
        return cls(**{field: value_of(method) for field, method in _METHOD_OF.items()})

    @classmethod
    def from_config(cls, config: Mapping) -> MelFeatureSpec:
        """From a WhisperFeatureExtractor's preprocessor_config.json keys
        (feature_size, sampling_rate, hop_length, n_fft, chunk_length in
        seconds or n_samples); absent keys take that extractor's defaults."""
        kind = config.get("feature_extractor_type", "WhisperFeatureExtractor")
        if kind != "WhisperFeatureExtractor":
            raise ValueError(f"feature extractor {kind!r}: only WhisperFeatureExtractor's "
                             "log-mel features are computed from a .wav")
        rate = int(config.get("sampling_rate", 16000))
        samples = config.get("n_samples")
        if samples is None:  # chunk_length is in seconds
            samples = round(float(config.get("chunk_length", 30)) * rate)
        return cls(rate, int(config.get("n_fft", 400)), int(config.get("hop_length", 160)),
                   int(config.get("feature_size", 80)), int(samples))


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's scale: linear (3 mels per 200 Hz) below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, np.float64)
    return np.where(hz < 1000.0, 3.0 * hz / 200.0,
                    15.0 + np.log(np.maximum(hz, 1e-12) / 1000.0) * (27.0 / np.log(6.4)))


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    return np.where(mel < 15.0, 200.0 * mel / 3.0,
                    1000.0 * np.exp((mel - 15.0) * (np.log(6.4) / 27.0)))


def mel_filter_bank(spec: MelFeatureSpec) -> np.ndarray:
    """[n_fft // 2 + 1, n_mels]: triangles between mel-spaced edges from 0 Hz
    to MAX_HZ, each scaled by 2 / its width in Hz (equal area)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(MAX_HZ), spec.n_mels + 2))
    bins = np.linspace(0, spec.sampling_rate // 2, spec.n_fft // 2 + 1)[:, None]
    low, centre, high = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins - low) / (centre - low)
    falling = (high - bins) / (high - centre)
    return np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (high - low))


def _power_spectrogram(samples: np.ndarray, spec: MelFeatureSpec) -> np.ndarray:
    """[frames, n_fft // 2 + 1] for a centred STFT: 1 + len // hop frames."""
    half = spec.n_fft // 2
    padded = np.pad(samples, half, mode="reflect")
    window = np.hanning(spec.n_fft + 1)[:-1]  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(padded, spec.n_fft)[::spec.hop_length]
    spectrum = np.fft.rfft(frames * window, axis=-1)
    return spectrum.real ** 2 + spectrum.imag ** 2


def chunks_needed(samples: int, spec: MelFeatureSpec) -> int:
    """Chunks a waveform of `samples` fills (at least one)."""
    return max(1, -(-samples // spec.chunk_samples))


def log_mel_features(samples: np.ndarray, spec: MelFeatureSpec) -> np.ndarray:
    """float32 [chunks, n_mels, chunk_frames] for mono `samples` in [-1, 1]
    at `spec.sampling_rate` (the caller checks rate and length)."""
    samples = np.asarray(samples, np.float64).reshape(-1)
    chunks = chunks_needed(samples.size, spec)
    padded = np.zeros(chunks * spec.chunk_samples)
    padded[:samples.size] = samples
    # The extractor drops the STFT's last frame: a chunk is exactly chunk_frames.
    power = _power_spectrogram(padded, spec)[:-1]
    mel = np.log10(np.maximum(power @ mel_filter_bank(spec), FLOOR))
    mel = (np.maximum(mel, mel.max() - DYNAMIC_RANGE) + 4.0) / 4.0
    by_chunk = mel.T.reshape(spec.n_mels, chunks, spec.chunk_frames)
    return np.ascontiguousarray(by_chunk.transpose(1, 0, 2), dtype=np.float32)


__all__ = ["MelFeatureSpec", "MEL_METHODS", "chunks_needed", "log_mel_features",
           "mel_filter_bank"]
